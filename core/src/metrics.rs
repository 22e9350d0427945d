//! Metrics over a job-id window: JCT, queueing delay, makespan, finish-time fairness, utilization.

use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::job::JobId;

/// GPU-seconds per GPU type, inline for clusters of up to four types (a record per job of a long
/// trace: no allocation each).
pub type PerGpuType = SmallVec<[f64; 4]>;

/// What the simulator records for each job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job's id in its trace.
    pub id: JobId,
    /// Its job type's name, shared by the records of that type.
    pub job_type: Arc<str>,
    /// GPUs it asked for (its gang size in the trace; a resizing policy may have run it on others).
    pub gpus: u32,
    /// When it arrived, in seconds since the start of the trace.
    pub arrival: f64,
    /// When it first started running, in seconds; `None` if it never ran.
    pub first_start: Option<f64>,
    /// When it finished, in seconds; `None` if it had not when the run ended.
    pub finish: Option<f64>,
    /// GPU-seconds held, per GPU type of the cluster (same order as the cluster's types).
    pub gpu_seconds: PerGpuType,
    /// Times it lost its GPUs while unfinished: not granted again at a round, or a GPU it held
    /// failed.
    pub preemptions: u32,
    /// Times it started on GPUs other than those it held the round before.
    pub migrations: u32,
}

impl JobRecord {
    /// Its job completion time in seconds, from arrival to finish; `None` while unfinished.
    pub fn jct(&self) -> Option<f64> {
        self.finish.map(|f| f - self.arrival)
    }

    /// Seconds from arrival to first start; `None` if it never ran.
    pub fn queueing_delay(&self) -> Option<f64> {
        self.first_start.map(|s| s - self.arrival)
    }
}

/// A half-open range of job ids to measure (`4000..5000`), or all jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window(pub Option<Range<u32>>);

impl Window {
    /// Whether the window measures job `id` (every job, for the whole-trace window).
    pub fn contains(&self, id: JobId) -> bool {
        self.0.as_ref().is_none_or(|r| r.contains(&id.0))
    }

    /// Reads `START..END` (job ids, `START` below `END`), as `--window` gives it.
    pub fn parse(text: &str) -> Result<Window, String> {
        let (a, b) = text
            .split_once("..")
            .ok_or_else(|| format!("window `{text}` is not of the form START..END"))?;
        let parse = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("window `{text}`: `{s}` is not a job id"))
        };
        let (a, b) = (parse(a)?, parse(b)?);
        if a >= b {
            return Err(format!(
                "window `{text}` is empty (START must be below END)"
            ));
        }
        Ok(Window(Some(a..b)))
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(r) => write!(f, "{}..{}", r.start, r.end),
            None => f.write_str("all"),
        }
    }
}

/// The summary of one simulation. Times are in hours.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The policy the run used, as its spec names it.
    pub policy: String,
    /// Jobs in the trace.
    pub jobs: usize,
    /// Jobs in the window that finished (these are what the JCT figures cover).
    pub measured_jobs: usize,
    /// Jobs in the window that had not finished when the simulation stopped.
    pub unfinished_jobs: usize,
    /// Mean job completion time of the measured jobs, in hours.
    pub avg_jct_h: f64,
    /// Median job completion time, in hours (interpolated between ranks, as numpy's).
    pub p50_jct_h: f64,
    /// 95th percentile job completion time, in hours.
    pub p95_jct_h: f64,
    /// 99th percentile job completion time, in hours.
    pub p99_jct_h: f64,
    /// From the first arrival to the last finish among the measured jobs.
    pub makespan_h: f64,
    /// Mean time from arrival to first start of the measured jobs, in hours.
    pub avg_queue_h: f64,
    /// Finish-time fairness rho = JCT / JCT under the `isolated` reference; `null` when not computed.
    pub avg_ftf: Option<f64>,
    /// The worst finish-time fairness rho among the measured jobs; `null` when not computed.
    pub max_ftf: Option<f64>,
    /// Share of measured jobs with rho > 1.
    pub ftf_over_1: Option<f64>,
    /// Jain's fairness index over rho.
    pub jain_ftf: Option<f64>,
    /// Busy GPU-time over capacity x simulated span, for the whole run.
    pub utilization: f64,
    /// CPU-time allotted to no run, over capacity x simulated span (whole run); 0 to 1.
    #[serde(default)]
    pub idle_cpus: f64,
    /// GB-time of memory allotted to no run, over capacity x simulated span (whole run); 0 to 1.
    #[serde(default)]
    pub idle_memory: f64,
    /// GPU-hours held by the measured jobs.
    pub gpu_hours: f64,
    /// Preemptions of the jobs in the window, finished or not.
    pub preemptions: u64,
    /// Migrations of the jobs in the window, finished or not.
    pub migrations: u64,
    /// Wall-clock seconds the simulation took.
    pub wall_s: f64,
}

/// Inputs to [`summarize`] that come from the run as a whole rather than from job records.
pub struct RunTotals {
    /// GPU-seconds for which GPUs were held by runs, over the whole run (a packed pair's GPUs count
    /// once).
    pub busy_gpu_seconds: f64,
    /// CPU-seconds and GB-seconds of memory allotted to runs.
    pub allotted_seconds: (f64, f64),
    /// The cluster's CPUs and GB of memory, all nodes together.
    pub capacity_resources: (f64, f64),
    /// The cluster's GPUs, of every type.
    pub capacity_gpus: u32,
    /// Simulated seconds from the first arrival to the last event: the span utilization is over.
    pub span_seconds: f64,
    /// Wall-clock seconds the run took.
    pub wall_seconds: f64,
}

/// Summarizes `records` over `window`. `isolated_jct`, when given, holds each job's JCT under the
/// `isolated` reference (indexed like `records`) and enables the finish-time-fairness figures.
pub fn summarize(
    policy: &str,
    records: &[JobRecord],
    window: &Window,
    isolated_jct: Option<&[Option<f64>]>,
    totals: &RunTotals,
) -> Summary {
    let in_window: Vec<usize> = (0..records.len())
        .filter(|&i| window.contains(records[i].id))
        .collect();
    let finished: Vec<usize> = in_window
        .iter()
        .copied()
        .filter(|&i| records[i].finish.is_some())
        .collect();
    let mut jct: Vec<f64> = finished.iter().filter_map(|&i| records[i].jct()).collect();
    jct.sort_by(f64::total_cmp);
    let queue: Vec<f64> = finished
        .iter()
        .filter_map(|&i| records[i].queueing_delay())
        .collect();
    let first_arrival = finished
        .iter()
        .map(|&i| records[i].arrival)
        .fold(f64::INFINITY, f64::min);
    let last_finish = finished
        .iter()
        .filter_map(|&i| records[i].finish)
        .fold(f64::NEG_INFINITY, f64::max);
    let rho: Vec<f64> = match isolated_jct {
        Some(iso) => finished
            .iter()
            .filter_map(|&i| Some(records[i].jct()? / iso.get(i).copied().flatten()?))
            .filter(|r| r.is_finite())
            .collect(),
        None => Vec::new(),
    };
    let has_rho = !rho.is_empty();
    let hours = |s: f64| s / 3600.0;
    let idle = |allotted: f64, capacity: f64| {
        if totals.span_seconds > 0.0 && capacity > 0.0 {
            (1.0 - allotted / (capacity * totals.span_seconds)).max(0.0)
        } else {
            0.0
        }
    };
    Summary {
        policy: policy.to_owned(),
        jobs: records.len(),
        measured_jobs: finished.len(),
        unfinished_jobs: in_window.len() - finished.len(),
        avg_jct_h: hours(mean(&jct)),
        p50_jct_h: hours(percentile(&jct, 50.0)),
        p95_jct_h: hours(percentile(&jct, 95.0)),
        p99_jct_h: hours(percentile(&jct, 99.0)),
        makespan_h: if finished.is_empty() {
            0.0
        } else {
            hours(last_finish - first_arrival)
        },
        avg_queue_h: hours(mean(&queue)),
        avg_ftf: has_rho.then(|| mean(&rho)),
        max_ftf: has_rho.then(|| rho.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        ftf_over_1: has_rho
            .then(|| rho.iter().filter(|&&r| r > 1.0).count() as f64 / rho.len() as f64),
        jain_ftf: has_rho.then(|| jain_index(&rho)),
        utilization: if totals.span_seconds > 0.0 && totals.capacity_gpus > 0 {
            totals.busy_gpu_seconds / (f64::from(totals.capacity_gpus) * totals.span_seconds)
        } else {
            0.0
        },
        idle_cpus: idle(totals.allotted_seconds.0, totals.capacity_resources.0),
        idle_memory: idle(totals.allotted_seconds.1, totals.capacity_resources.1),
        gpu_hours: hours(
            finished
                .iter()
                .map(|&i| records[i].gpu_seconds.iter().sum::<f64>())
                .sum(),
        ),
        preemptions: in_window
            .iter()
            .map(|&i| u64::from(records[i].preemptions))
            .sum(),
        migrations: in_window
            .iter()
            .map(|&i| u64::from(records[i].migrations))
            .sum(),
        wall_s: totals.wall_seconds,
    }
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Percentile of sorted values, interpolating linearly between ranks (numpy's default).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let rank = p / 100.0 * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = rank.ceil() as usize;
            sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
        }
    }
}

/// Jain's fairness index: (sum x)^2 / (n sum x^2); 1 when all are equal.
pub fn jain_index(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let sum_sq: f64 = xs.iter().map(|x| x * x).sum();
    if sum_sq == 0.0 {
        1.0
    } else {
        sum * sum / (xs.len() as f64 * sum_sq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: u32, arrival: f64, start: f64, finish: Option<f64>) -> JobRecord {
        JobRecord {
            id: JobId(id),
            job_type: "t".into(),
            gpus: 1,
            arrival,
            first_start: Some(start),
            finish,
            gpu_seconds: smallvec::smallvec![finish.map_or(0.0, |f| f - start)],
            preemptions: id,
            migrations: 0,
        }
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&xs, 50.0), 2.5);
        assert_eq!(percentile(&xs, 100.0), 4.0);
        assert!((percentile(&xs, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(jain_index(&[2.0, 2.0]), 1.0);
        assert_eq!(jain_index(&[1.0, 0.0]), 0.5);
    }

    #[test]
    fn window_selects_jobs_and_counts_unfinished() {
        let records = vec![
            record(0, 0.0, 0.0, Some(3600.0)),
            record(1, 0.0, 3600.0, Some(3.0 * 3600.0)),
            record(2, 0.0, 0.0, None),
            record(3, 0.0, 0.0, Some(100.0 * 3600.0)),
        ];
        let totals = RunTotals {
            busy_gpu_seconds: 3600.0,
            allotted_seconds: (3.0 * 3600.0, 0.0),
            capacity_resources: (12.0, 0.0),
            capacity_gpus: 2,
            span_seconds: 3600.0,
            wall_seconds: 0.5,
        };
        let iso = vec![Some(3600.0), Some(3600.0), Some(1.0), Some(1.0)];
        let s = summarize(
            "p",
            &records,
            &Window::parse("0..3").unwrap(),
            Some(&iso),
            &totals,
        );
        assert_eq!((s.jobs, s.measured_jobs, s.unfinished_jobs), (4, 2, 1));
        assert_eq!(s.avg_jct_h, 2.0);
        assert_eq!(s.avg_queue_h, 0.5);
        assert_eq!(s.makespan_h, 3.0);
        assert_eq!(
            (s.avg_ftf, s.max_ftf, s.ftf_over_1),
            (Some(2.0), Some(3.0), Some(0.5))
        );
        assert_eq!(s.utilization, 0.5);
        assert_eq!((s.idle_cpus, s.idle_memory), (0.75, 0.0));
        assert_eq!(s.preemptions, 3);
        assert_eq!(s.gpu_hours, 3.0);
        let all = summarize("p", &records, &Window::default(), None, &totals);
        assert_eq!(all.measured_jobs, 3);
        assert_eq!(all.avg_ftf, None);
    }

    #[test]
    fn window_parse_errors() {
        assert!(Window::parse("5..5").is_err());
        assert!(Window::parse("a..5").is_err());
        assert!(Window::parse("5").is_err());
        assert_eq!(
            Window::parse("4000..5000").unwrap().to_string(),
            "4000..5000"
        );
    }
}
