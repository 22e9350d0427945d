//! A control plane in-process, with simulated workers: `cargo run --example embed_control_plane`.
//!
//! Starts Tiresias on 16 simulated V100s (4 servers of 4 GPUs), running an hour of work every wall
//! second, submits 10 jobs, waits for them, prints their JCTs and shuts down.

use gangway::ControlPlaneBuilder;
use gangway::actors::cluster::JobRequest;
use gangway::core::cluster::Cluster;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let plane = ControlPlaneBuilder::new()
        .cluster(Cluster::parse_spec("v100=4x4", 4)?)
        .policy("tiresias")
        .simulated_workers()
        .time_scale(3600.0)
        .start()?;
    let mut ids = Vec::new();
    for k in 0..10 {
        // 1 to 4 GPUs each, half an hour to an hour and a half of work.
        let request = JobRequest::new("toy", 1 + k % 4, 1800.0 * f64::from(1 + k % 3));
        ids.push(plane.submit(request)?);
    }
    for job in plane.wait(&ids)? {
        let jct = job.finished.unwrap_or(f64::NAN) - job.submitted;
        println!(
            "job {} on {} GPUs: JCT {:.2} h",
            job.id,
            job.gpus,
            jct / 3600.0
        );
    }
    plane.shutdown()?;
    Ok(())
}
