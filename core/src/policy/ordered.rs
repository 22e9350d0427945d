//! Policies that order the jobs by one key and grant GPUs in that order: FIFO, SJF and SRTF.
//!
//! They are heterogeneity-agnostic: a job gets the first GPU type, in the order the cluster lists its
//! types, that has room for its whole gang. A job that runs keeps its type where it can, so that it is
//! not migrated needlessly.

use super::{Allocation, Grant, JobView, Policy, PolicyConfig, PolicyInfo, RoundInput};
use crate::cluster::GpuTypeId;

/// Orders jobs by `key` (lowest first) and grants in that order.
pub struct Ordered {
    key: fn(&JobView<'_>) -> f64,
    /// Running jobs may lose their GPUs to jobs with a lower key.
    preemptive: bool,
    /// A job that does not fit blocks every job behind it (strict FIFO), instead of being skipped.
    head_of_line_blocking: bool,
}

/// Seconds a job would take at its fastest, from `steps` of work.
fn seconds_at_best(view: &JobView<'_>, steps: f64) -> f64 {
    let best = view.rates.iter().copied().fold(0.0, f64::max);
    if best > 0.0 {
        steps / best
    } else {
        f64::INFINITY
    }
}

impl Ordered {
    /// First come, first served; never preempts; the head of the queue blocks the rest.
    pub fn fifo() -> Self {
        Ordered {
            key: |v| v.job.arrival,
            preemptive: false,
            head_of_line_blocking: true,
        }
    }

    /// Shortest job first (by total work at its fastest type, an oracle); never preempts.
    pub fn sjf() -> Self {
        Ordered {
            key: |v| seconds_at_best(v, v.job.total_steps),
            preemptive: false,
            head_of_line_blocking: false,
        }
    }

    /// Shortest remaining time first (an oracle); preempts at round boundaries.
    pub fn srtf() -> Self {
        Ordered {
            key: |v| seconds_at_best(v, v.remaining_steps),
            preemptive: true,
            head_of_line_blocking: false,
        }
    }
}

impl Policy for Ordered {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Allocation {
        let mut free: Vec<u32> = input.capacity.to_vec();
        let mut grants = Vec::new();
        let mut queue: Vec<&JobView<'_>> = Vec::with_capacity(input.jobs.len());
        for view in input.jobs {
            match view.running {
                Some(run) if !self.preemptive => {
                    let gpus = run.gpus.len() as u32;
                    free[run.gpu_type.0 as usize] =
                        free[run.gpu_type.0 as usize].saturating_sub(gpus);
                    grants.push(Grant {
                        job: view.id(),
                        gpu_type: run.gpu_type,
                        gpus,
                    });
                }
                _ => queue.push(view),
            }
        }
        let key = self.key;
        // Stable sort: equal keys keep arrival order.
        queue.sort_by(|a, b| key(a).total_cmp(&key(b)));
        for view in queue {
            let gpus = view.job.gpus;
            let fits = |t: usize| free[t] >= gpus && view.rates[t] > 0.0;
            let current = view
                .running
                .map(|r| r.gpu_type.0 as usize)
                .filter(|&t| fits(t));
            match current.or_else(|| (0..free.len()).find(|&t| fits(t))) {
                Some(t) => {
                    free[t] -= gpus;
                    grants.push(Grant {
                        job: view.id(),
                        gpu_type: GpuTypeId(t as u16),
                        gpus,
                    });
                }
                None if self.head_of_line_blocking => break,
                None => {}
            }
        }
        Allocation::Grants(grants)
    }
}

pub(super) static POLICIES: &[PolicyInfo] = &[
    PolicyInfo {
        name: "fifo",
        aliases: &[],
        summary: "first come, first served; no preemption; the head of the queue blocks (Gavel's `fifo`)",
        build: |_: &PolicyConfig| Box::new(Ordered::fifo()),
    },
    PolicyInfo {
        name: "sjf",
        aliases: &[],
        summary: "shortest job first by total work (oracle); no preemption; small jobs backfill",
        build: |_: &PolicyConfig| Box::new(Ordered::sjf()),
    },
    PolicyInfo {
        name: "srtf",
        aliases: &[],
        summary: "shortest remaining time first (oracle); preempts at round boundaries",
        build: |_: &PolicyConfig| Box::new(Ordered::srtf()),
    },
];
