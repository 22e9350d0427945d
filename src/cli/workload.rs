//! `gangway workload`: a goodput workload of any size, resampled from Pollux's or Sia's.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::core::cluster::Cluster;
use crate::core::trace::resample::{Reference, write_csv};
use crate::core::trace::{self, TraceOptions};

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("size").args(["jobs", "hours"]).required(true)))]
pub(super) struct WorkloadArgs {
    /// Reference workloads (Pollux's or Sia's CSVs): each job is drawn from their rows, at their
    /// load per GPU.
    #[arg(long, required = true, num_args = 1.., value_name = "CSV")]
    like: Vec<PathBuf>,
    /// GPUs of the cluster the references were made for. Default: their own cluster's (Sia's 64
    /// heterogeneous GPUs, Pollux's 64 T4s).
    #[arg(long, value_name = "N")]
    like_gpus: Option<u32>,
    /// GPUs of the cluster the new workload is for: arrivals scale with them.
    #[arg(long, value_name = "N")]
    gpus: u32,
    /// How many jobs.
    #[arg(long, value_name = "N")]
    jobs: Option<u32>,
    /// Or as many jobs as arrive in this many hours.
    #[arg(long, value_name = "H")]
    hours: Option<f64>,
    /// Seeds the draws: one seed, one workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the CSV here (default: stdout).
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
}

pub(super) fn workload(args: WorkloadArgs) -> Result<()> {
    let first = &args.like[0];
    let native = trace::native_setup(first, &TraceOptions::default());
    let like_gpus = match (args.like_gpus, native) {
        (Some(gpus), _) => gpus,
        (None, Some(native)) => Cluster::parse_spec(native.cluster, 1)?.num_gpus(),
        (None, None) => bail!(
            "{}: not a Pollux or Sia workload beside its profiles; say the GPUs it was made for \
             with --like-gpus",
            first.display()
        ),
    };
    if args.gpus == 0 {
        bail!("--gpus must be at least 1");
    }
    let paths: Vec<&Path> = args.like.iter().map(PathBuf::as_path).collect();
    let reference = Reference::read(&paths, like_gpus)?;
    let jobs = match (args.jobs, args.hours) {
        (Some(jobs), _) => jobs,
        (None, Some(hours)) if hours.is_finite() && hours > 0.0 => {
            let expected = reference.jobs_per_gpu_hour() * f64::from(args.gpus) * hours;
            expected
                .round()
                .clamp(1.0, f64::from(trace::synthetic::MAX_SYNTHETIC_JOBS)) as u32
        }
        _ => bail!("--hours must be a positive number"),
    };
    if !(1..=trace::synthetic::MAX_SYNTHETIC_JOBS).contains(&jobs) {
        bail!(
            "--jobs must be from 1 to {}",
            trace::synthetic::MAX_SYNTHETIC_JOBS
        );
    }
    let drawn = reference.resample(jobs, args.gpus, args.seed);
    match &args.out {
        Some(path) => write_csv(
            &drawn,
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )
        .with_context(|| format!("writing {}", path.display()))?,
        None => write_csv(&drawn, std::io::stdout().lock()).context("writing the workload")?,
    }
    let hours = drawn.last().map_or(0.0, |j| j.time / 3600.0);
    eprintln!(
        "gangway: {jobs} jobs over {hours:.1} h, {:.1} an hour for {} GPUs ({:.3} per GPU-hour, as in \
         the {} reference workload(s))",
        reference.jobs_per_gpu_hour() * f64::from(args.gpus),
        args.gpus,
        reference.jobs_per_gpu_hour(),
        args.like.len(),
    );
    let profiles = trace::profiles_beside(first);
    let cluster = native.and_then(|n| scaled(n.cluster, args.gpus, like_gpus));
    if let (Some(out), Some(profiles)) = (&args.out, profiles) {
        eprintln!(
            "gangway: simulate it with: gangway simulate --trace {} --profiles {}{}",
            out.display(),
            profiles.display(),
            cluster.map_or(String::new(), |c| format!(" --cluster {c}"))
        );
    }
    Ok(())
}

/// `spec` (`TYPE=NxG,...`) with every node count times `gpus / like_gpus`, where that is whole.
fn scaled(spec: &str, gpus: u32, like_gpus: u32) -> Option<String> {
    if like_gpus == 0 || !gpus.is_multiple_of(like_gpus) {
        return None;
    }
    let factor = gpus / like_gpus;
    spec.split(',')
        .map(|item| {
            let (name, size) = item.split_once('=')?;
            let (nodes, per_node) = size.split_once('x')?;
            let nodes: u32 = nodes.parse().ok()?;
            Some(format!("{name}={}x{per_node}", nodes.checked_mul(factor)?))
        })
        .collect::<Option<Vec<_>>>()
        .map(|items| items.join(","))
}

#[cfg(test)]
mod tests {
    use super::scaled;

    #[test]
    fn a_native_cluster_scales_by_whole_multiples() {
        assert_eq!(
            scaled("aws=6x4,rtx=3x8,dgx-ext=2x8", 2048, 64).as_deref(),
            Some("aws=192x4,rtx=96x8,dgx-ext=64x8")
        );
        assert_eq!(scaled("t4=16x4", 100, 64), None);
    }
}
