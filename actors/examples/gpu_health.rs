//! What the GPU actors' health probes see on this machine: `cargo run -p gangway-actors --example
//! gpu_health [ROUNDS]`. Prints, per GPU and round, NVML's utilization, memory in use, and whether the
//! GPU is healthy (no uncorrected ECC errors, no critical XID event, answering queries).

use gangway_actors::health::{HealthProbe, NvmlProbe};
use gangway_core::cluster::GpuId;

fn main() {
    let rounds: u32 = std::env::args()
        .nth(1)
        .map_or(3, |n| n.parse().expect("ROUNDS is a number"));
    let Some(mut probes) = NvmlProbe::for_all_gpus() else {
        eprintln!("no NVML here: the control plane would use fake or simulated GPUs");
        std::process::exit(1);
    };
    println!("{} GPUs", probes.len());
    for round in 0..rounds {
        for (index, probe) in probes.iter_mut().enumerate() {
            let health = probe.check(GpuId(index as u32));
            println!(
                "round {round} gpu {index}: healthy={} utilization={:?}% memory_used={:?} MiB reason={:?}",
                health.healthy,
                health.utilization_pct,
                health.memory_used_bytes.map(|b| b >> 20),
                health.reason
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}
