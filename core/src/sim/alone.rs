//! Finish-time fairness on goodput workloads, as Sia measures it (Jayaram Subramanya et al., SOSP'23;
//! its artifact's `ftf_simulator_ray.py`): a job's rho is its JCT over the JCT it would have alone on its
//! share of the cluster, under the same policy.
//!
//! - **Share**: the cluster's GPUs over the number of active jobs (arrived, unfinished) averaged over the
//!   job's life. Sia samples that number every round; here it is the time average, which needs no round
//!   alignment (rounds restart after idle spells).
//! - **Alone**: for each GPU type in turn, the job runs by itself on `floor(share)` and on `ceil(share)`
//!   GPUs of that type (whole servers, then part of one), its request capped there, arriving at a round
//!   boundary; its JCT is interpolated between the two counts, and the types are averaged weighted by
//!   their GPUs in the cluster. A share under one GPU stretches the one-GPU JCT by one over the share.
//! - Runs are shared between jobs alike in what they run (application, request, batch, work): Sia's
//!   160-job philly workload-1 on its heterogeneous cluster needs about 220 runs instead of 960.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::cluster::{Cluster, GpuTypeId};
use crate::error::{InputError, SimError};
use crate::job::{Job, JobId, JobTypeId, Trace};
use crate::metrics::JobRecord;
use crate::placement::PackingPlacer;
use crate::policy::Policy;
use crate::throughput::ThroughputModel;
use crate::throughput::goodput::ProfiledWorkload;

use super::{SimConfig, SimResult, Simulation};

/// What a run alone depends on: the job's application, request, batch and work, the GPU type and count.
type Key = (JobTypeId, u32, Option<u32>, u64, GpuTypeId, u32);

/// Makes the policy of each run alone (the policy whose rho is measured, freshly built).
pub type PolicyFactory<'a> = &'a (dyn Fn() -> Result<Box<dyn Policy>, SimError> + Sync);

/// Each record's JCT alone on its share (in `result.records` order; `None` for a job that did not
/// finish, or that runs on no GPU type), running a policy from `policy` for each.
pub fn jcts_alone(
    result: &SimResult,
    trace: &Trace,
    cluster: &Cluster,
    sim: &SimConfig,
    policy: PolicyFactory<'_>,
) -> Result<Vec<Option<f64>>, InputError> {
    let workload = ProfiledWorkload::for_trace(trace, cluster)?;
    let jobs: HashMap<JobId, &Job> = trace.jobs.iter().map(|j| (j.id, j)).collect();
    let shares = shares(&result.records, cluster.num_gpus());
    // Every run any job needs, each once.
    let mut keys: Vec<Key> = Vec::new();
    for (record, share) in result.records.iter().zip(&shares) {
        let (Some(job), Some(share)) = (jobs.get(&record.id), share) else {
            continue;
        };
        for t in 0..cluster.num_gpu_types() as u16 {
            for gpus in counts(*share) {
                keys.push(key(job, GpuTypeId(t), gpus, cluster));
            }
        }
    }
    keys.sort_unstable();
    keys.dedup();
    let alone: HashMap<Key, Option<f64>> = run_all(&keys, |k| {
        run_alone(trace, cluster, &workload, sim, policy, k)
    });
    let weights = cluster.capacity();
    Ok(result
        .records
        .iter()
        .zip(&shares)
        .map(|(record, share)| {
            let (job, share) = (jobs.get(&record.id)?, (*share)?);
            let mut total = (0.0, 0.0);
            for (t, &weight) in weights.iter().enumerate() {
                let jct = |gpus| alone[&key(job, GpuTypeId(t as u16), gpus, cluster)];
                let Some(jct) = interpolate(share, jct) else {
                    continue;
                };
                total.0 += f64::from(weight) * jct;
                total.1 += f64::from(weight);
            }
            (total.1 > 0.0).then(|| total.0 / total.1)
        })
        .collect())
}

/// The GPU counts a share is measured at: its floor and ceiling, at least one.
fn counts(share: f64) -> Vec<u32> {
    let (low, high) = (share.floor().max(1.0) as u32, share.ceil().max(1.0) as u32);
    if low == high {
        vec![low]
    } else {
        vec![low, high]
    }
}

/// The JCT at `share` GPUs from `jct` at whole counts: linear between floor and ceiling, stretched below
/// one. `None` where a count cannot run.
fn interpolate(share: f64, jct: impl Fn(u32) -> Option<f64>) -> Option<f64> {
    if share < 1.0 {
        return Some(jct(1)? / share);
    }
    let low = share.floor();
    let at_low = jct(low as u32)?;
    if share == low {
        return Some(at_low);
    }
    Some(at_low + (jct(share.ceil() as u32)? - at_low) * (share - low))
}

/// Each finished job's share of the cluster's `gpus`: over the time-averaged number of active jobs.
fn shares(records: &[JobRecord], gpus: u32) -> Vec<Option<f64>> {
    // Active jobs change at arrivals (+1) and finishes (-1).
    let mut events: Vec<(f64, i32)> = Vec::new();
    for r in records {
        events.push((r.arrival, 1));
        if let Some(f) = r.finish {
            events.push((f, -1));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    // Prefix integral of active jobs over time, at each event.
    let mut at: Vec<(f64, f64, i32)> = Vec::with_capacity(events.len());
    let (mut area, mut active, mut last) = (0.0, 0, f64::NEG_INFINITY);
    for (time, change) in events {
        if last.is_finite() {
            area += f64::from(active) * (time - last);
        }
        active += change;
        last = time;
        at.push((time, area, active));
    }
    let integral = |t: f64| {
        let k = at.partition_point(|e| e.0 <= t);
        match k.checked_sub(1).map(|k| at[k]) {
            Some((time, area, active)) => area + f64::from(active) * (t - time),
            None => 0.0,
        }
    };
    records
        .iter()
        .map(|r| {
            let finish = r.finish?;
            let contention = if finish > r.arrival {
                (integral(finish) - integral(r.arrival)) / (finish - r.arrival)
            } else {
                1.0
            };
            Some(f64::from(gpus) / contention.max(1.0))
        })
        .collect()
}

fn key(job: &Job, gpu_type: GpuTypeId, gpus: u32, cluster: &Cluster) -> Key {
    let gpus = gpus.min(cluster.capacity()[gpu_type.0 as usize]);
    (
        job.job_type,
        job.gpus.min(gpus),
        job.batch,
        job.total_steps.to_bits(),
        gpu_type,
        gpus,
    )
}

/// Runs `run` on every key, on as many threads as the machine has (at most one per key).
fn run_all(keys: &[Key], run: impl Fn(&Key) -> Option<f64> + Sync) -> HashMap<Key, Option<f64>> {
    let out = Mutex::new(HashMap::with_capacity(keys.len()));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads.min(keys.len()) {
            scope.spawn(|| {
                while let Some(k) =
                    keys.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    let jct = run(k);
                    out.lock().expect("results lock").insert(*k, jct);
                }
            });
        }
    });
    out.into_inner().expect("results lock")
}

/// One job like `key`'s alone on its GPUs of one type (whole servers of the cluster's size for that
/// type, then part of one), arriving at a round boundary: its JCT.
fn run_alone(
    trace: &Trace,
    cluster: &Cluster,
    workload: &ProfiledWorkload,
    sim: &SimConfig,
    policy: PolicyFactory<'_>,
    &(job_type, request, batch, work, gpu_type, gpus): &Key,
) -> Option<f64> {
    let name = &cluster.gpu_types()[gpu_type.0 as usize];
    let server = cluster
        .nodes()
        .iter()
        .filter(|n| n.gpu_type == gpu_type)
        .max_by_key(|n| n.gpus)?;
    let mut nodes = vec![
        (name.as_str(), server.gpus, server.cpus, server.memory_gb);
        (gpus / server.gpus) as usize
    ];
    if gpus % server.gpus > 0 {
        nodes.push((
            name.as_str(),
            gpus % server.gpus,
            server.cpus,
            server.memory_gb,
        ));
    }
    let alone = Cluster::try_from_nodes(nodes).ok()?;
    let mut one = trace.clone();
    one.jobs = vec![Job {
        batch,
        ..Job::new(JobId(0), 0.0, request, f64::from_bits(work))
            .with_type(job_type)
            .with_tenant(trace.jobs.first()?.tenant)
    }];
    let model = workload.on(&one.names, &alone);
    // A type the application was never profiled on runs it not at all.
    model.steps_per_second(&one.jobs[0], GpuTypeId(0), 1)?;
    let mut simulation = Simulation::new(&one, &alone, &model);
    simulation.config = SimConfig {
        log_changes: false,
        ..sim.clone()
    };
    let mut policy = policy().ok()?;
    let result = simulation.run(policy.as_mut(), &mut PackingPlacer, &mut |_, _| {});
    result.records.first()?.jct()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_divide_the_gpus_by_the_average_contention() {
        let record = |id: u32, arrival: f64, finish: f64| JobRecord {
            id: JobId(id),
            job_type: "a".into(),
            gpus: 1,
            arrival,
            first_start: Some(arrival),
            finish: Some(finish),
            gpu_seconds: Default::default(),
            preemptions: 0,
            migrations: 0,
        };
        // Job 0 alone for 10 s, then with job 1 for 10 s: 1.5 on average; job 1 always with job 0.
        let shares = shares(&[record(0, 0.0, 20.0), record(1, 10.0, 20.0)], 12);
        assert_eq!(shares, [Some(8.0), Some(6.0)]);
    }

    #[test]
    fn a_share_is_interpolated_between_whole_counts_and_stretched_below_one() {
        let jct = |gpus: u32| Some(120.0 / f64::from(gpus));
        assert_eq!(interpolate(2.0, jct), Some(60.0));
        assert_eq!(interpolate(2.5, jct), Some(50.0));
        assert_eq!(interpolate(0.5, jct), Some(240.0));
        assert_eq!(counts(2.5), [2, 3]);
        assert_eq!(counts(0.3), [1]);
        assert_eq!(interpolate(2.5, |g| (g < 3).then_some(1.0)), None);
    }
}
