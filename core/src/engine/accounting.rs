//! Accounting: what each job has received (service, GPU time by type, progress), how busy the cluster
//! was, and the usage slices a policy sees.

use std::sync::Arc;

use super::Engine;
use crate::job::Job;
use crate::metrics::JobRecord;
use crate::policy::Usage;

/// Busy GPUs over time.
#[derive(Debug)]
pub(super) struct BusyTime {
    pub gpus: u32,
    pub gpu_seconds: f64,
    /// CPUs and GB of memory allotted now, and their integrals over time.
    allotted: (f64, f64),
    pub allotted_seconds: (f64, f64),
    last_change: f64,
    /// (time, busy GPUs) whenever the number of busy GPUs changes.
    pub utilization: Vec<(f64, u32)>,
}

impl BusyTime {
    pub fn new(start: f64) -> Self {
        BusyTime {
            gpus: 0,
            gpu_seconds: 0.0,
            allotted: (0.0, 0.0),
            allotted_seconds: (0.0, 0.0),
            last_change: start,
            utilization: Vec::new(),
        }
    }

    /// Accrues busy time up to `now`.
    pub fn accrue(&mut self, now: f64) {
        let elapsed = (now - self.last_change).max(0.0);
        self.gpu_seconds += f64::from(self.gpus) * elapsed;
        self.allotted_seconds.0 += self.allotted.0 * elapsed;
        self.allotted_seconds.1 += self.allotted.1 * elapsed;
        self.last_change = now;
    }

    /// `cpus` CPUs and `memory_gb` GB are allotted from `now`.
    pub fn allot(&mut self, now: f64, (cpus, memory_gb): (f64, f64)) {
        self.accrue(now);
        self.allotted = (cpus, memory_gb);
    }

    /// `gpus` more GPUs are busy from `now` (fewer, when negative).
    pub fn change(&mut self, now: f64, gpus: i64) {
        self.accrue(now);
        self.gpus = (i64::from(self.gpus) + gpus) as u32;
    }

    /// Records a utilization sample when the number of busy GPUs changed.
    pub fn sample(&mut self, now: f64) {
        if self
            .utilization
            .last()
            .is_none_or(|&(_, busy)| busy != self.gpus)
        {
            self.utilization.push((now, self.gpus));
        }
    }
}

/// What an engine leaves at the end of a run.
pub struct EngineTotals {
    /// Every job's record, in submission order.
    pub records: Vec<JobRecord>,
    /// (time, busy GPUs) whenever the number of busy GPUs changed.
    pub utilization: Vec<(f64, u32)>,
    /// GPU-seconds for which GPUs were held by runs (a packed pair's GPUs count once).
    pub busy_gpu_seconds: f64,
    /// CPU-seconds and GB-seconds of memory allotted to runs.
    pub allotted_seconds: (f64, f64),
}

/// The record of a job that has not run yet.
pub fn new_record(job: &Job, job_type: Arc<str>, gpu_types: usize) -> JobRecord {
    JobRecord {
        id: job.id,
        job_type,
        gpus: job.gpus,
        arrival: job.arrival,
        first_start: None,
        finish: None,
        gpu_seconds: smallvec::smallvec![0.0; gpu_types],
        preemptions: 0,
        migrations: 0,
    }
}

impl Engine<'_> {
    /// Brings a running job's accounting up to `now`.
    pub(super) fn settle(&mut self, i: usize, now: f64) {
        let cluster = &self.cluster;
        let state = &mut self.states[i];
        let Some(run) = state.run.as_mut() else {
            return;
        };
        let from = run.settled_to;
        if now <= from {
            return;
        }
        let held = now - from;
        // Packed partners split the GPUs' time between them, so that GPU-time adds up to busy time.
        let sharers = if run.partner.is_some() { 2.0 } else { 1.0 };
        let gpus = run.gpus.len() as f64 / sharers;
        run.settled_to = now;
        if run.mixed {
            for &g in &run.gpus {
                self.records[i].gpu_seconds[cluster.gpu_type_of(g).0 as usize] += held / sharers;
            }
        } else {
            self.records[i].gpu_seconds[run.gpu_type.0 as usize] += held * gpus;
        }
        // Progress, segment by segment: a model whose rate changes with progress (epochs) is asked again
        // where a segment ends.
        let mut t = run.progress_from.max(from);
        let before = state.steps_done;
        while t < now {
            if run.until <= state.steps_done {
                let segment = super::runs::run_segment(
                    &*self.model,
                    cluster,
                    &self.jobs[i],
                    run,
                    state.steps_done,
                );
                run.rate = segment.rate * run.locality;
                // Past its last segment (at its end, by rounding): the rate holds from here on.
                run.until = if segment.until > state.steps_done {
                    segment.until
                } else {
                    f64::INFINITY
                };
                if run.rate <= 0.0 {
                    break;
                }
            }
            let to_boundary = (run.until - state.steps_done) / run.rate;
            if t + to_boundary >= now || !to_boundary.is_finite() {
                state.steps_done += (now - t) * run.rate;
                break;
            }
            state.steps_done = run.until;
            t += to_boundary;
        }
        if state.steps_done > before {
            self.last_progress = self.last_progress.max(now);
        }
        state.attained_seconds += held;
        state.attained_gpu_seconds += held * gpus;
        self.usage.push(Usage {
            job: self.jobs[i].id,
            partner: run.partner.map(|p| self.jobs[p].id),
            gpu_type: run.gpu_type,
            seconds: held,
        });
    }

    /// Records a utilization sample when the number of busy GPUs changed.
    pub(super) fn note_utilization(&mut self, now: f64) {
        self.busy.sample(now);
    }

    /// The records of every job, in submission order, and the busy-time totals, up to `now`.
    pub fn into_totals(mut self, now: f64) -> EngineTotals {
        self.busy.accrue(now);
        EngineTotals {
            records: self.records,
            utilization: self.busy.utilization,
            busy_gpu_seconds: self.busy.gpu_seconds,
            allotted_seconds: self.busy.allotted_seconds,
        }
    }
}
