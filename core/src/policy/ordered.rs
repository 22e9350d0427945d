//! Policies that order the jobs by one key and grant GPUs in that order: FIFO, SJF and SRTF.
//!
//! They are heterogeneity-agnostic: a job gets the first GPU type, in the order the cluster lists its
//! types, that has room for its whole gang. A job that runs keeps its type where it can, so that it is
//! not migrated needlessly.

use super::effective::best_rate;
use super::{Grant, Intent, JobView, Policy, PolicyConfig, PolicyInfo, RoundInput};
use crate::cluster::GpuTypeId;

/// Orders jobs by `key` (lowest first) and grants in that order.
pub struct Ordered {
    key: fn(&JobView<'_>) -> f64,
    /// Running jobs may lose their GPUs to jobs with a lower key.
    preemptive: bool,
    /// A job that does not fit blocks every job behind it (strict FIFO), instead of being skipped.
    head_of_line_blocking: bool,
    /// Keep every gang on one server where it fits in one (YARN-CS).
    consolidate: bool,
    /// Pick the fastest type with room rather than the first (heterogeneity-aware, Gavel's `fifo_perf`).
    fastest: bool,
}

/// Seconds a job would take at its fastest, from `steps` of work.
fn seconds_at_best(view: &JobView<'_>, steps: f64) -> f64 {
    let best = best_rate(view.rates);
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
            consolidate: false,
            fastest: false,
        }
    }

    /// Gavel's `fifo_perf`: every round, the jobs in arrival order each take the fastest GPU type that
    /// still has room, running or not. A job that started on a slow type moves up as older jobs finish;
    /// only a newer job can lose its GPUs, to an older one (Gavel rebuilds its FIFO allocation from
    /// scratch on every recompute).
    pub fn fifo_perf() -> Self {
        Ordered {
            preemptive: true,
            fastest: true,
            ..Ordered::fifo()
        }
    }

    /// YARN-CS, the production baseline of the Tiresias paper: FIFO whose gangs wait for one server.
    pub fn yarn_cs() -> Self {
        Ordered {
            consolidate: true,
            ..Ordered::fifo()
        }
    }

    /// Shortest job first (by total work at its fastest type, an oracle); never preempts.
    pub fn sjf() -> Self {
        Ordered {
            key: |v| seconds_at_best(v, v.job.total_steps),
            preemptive: false,
            head_of_line_blocking: false,
            consolidate: false,
            fastest: false,
        }
    }

    /// Shortest remaining time first (an oracle); preempts at round boundaries.
    pub fn srtf() -> Self {
        Ordered {
            key: |v| seconds_at_best(v, v.remaining_steps),
            preemptive: true,
            head_of_line_blocking: false,
            consolidate: false,
            fastest: false,
        }
    }
}

impl Policy for Ordered {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let key = self.key;
        grant_in_order(
            input,
            &GrantRules {
                preemptive: self.preemptive,
                head_of_line_blocking: self.head_of_line_blocking,
                consolidate: self.consolidate,
                fastest: self.fastest,
            },
            |v| (key(v), 0.0),
        )
    }

    /// Arrival order and total work never change; remaining work only shrinks for running jobs, which
    /// can only move them up: between events, every round decides as the last one did.
    fn changes_with_time(&self) -> bool {
        false
    }
}

/// How [`grant_in_order`] treats running jobs, blocked jobs and placement.
pub(super) struct GrantRules {
    /// Running jobs compete with waiting ones; otherwise they keep their GPUs.
    pub preemptive: bool,
    /// A job that does not fit stops the queue (strict FIFO) instead of being skipped.
    pub head_of_line_blocking: bool,
    /// Ask the placer to keep each gang on one server (YARN-CS).
    pub consolidate: bool,
    /// Every job gets the fastest type with room, not the first in cluster order, and a running job
    /// moves to a faster type when one has room.
    pub fastest: bool,
}

impl GrantRules {
    fn intent(&self) -> Intent {
        if self.consolidate {
            Intent::Consolidated
        } else {
            Intent::Anywhere
        }
    }
}

/// Every job the GPUs it asked for, first come first served, never preempting and skipping a job that
/// does not fit: what goodput policies fall back to when the model has no goodput to size jobs by.
pub(super) fn requested_in_arrival_order(input: &RoundInput<'_>) -> Vec<Grant> {
    let rules = GrantRules {
        preemptive: false,
        head_of_line_blocking: false,
        consolidate: false,
        fastest: false,
    };
    grant_in_order(input, &rules, |v| (v.job.arrival, 0.0))
}

/// Grants GPUs to jobs in ascending `key` order (ties keep arrival order). A job gets the type it runs
/// on when that still has room, else the first type, in cluster order (or the fastest, by its rates, when
/// `rules.fastest`), with room for its whole gang.
pub(super) fn grant_in_order(
    input: &RoundInput<'_>,
    rules: &GrantRules,
    mut key: impl FnMut(&JobView<'_>) -> (f64, f64),
) -> Vec<Grant> {
    let mut free: Vec<u32> = input.capacity.to_vec();
    let mut grants = Vec::new();
    let mut queue: Vec<((f64, f64), &JobView<'_>)> = Vec::with_capacity(input.jobs.len());
    for view in input.jobs {
        match view.running {
            Some(run) if !rules.preemptive => {
                let gpus = run.gpus.len() as u32;
                let t = run.gpu_type.0 as usize;
                free[t] = free[t].saturating_sub(gpus);
                grants.push(Grant::new(view.id(), run.gpu_type, gpus).with(rules.intent()));
            }
            _ => queue.push((key(view), view)),
        }
    }
    // Stable sort: equal keys keep arrival order.
    queue.sort_by(|a, b| a.0.0.total_cmp(&b.0.0).then(a.0.1.total_cmp(&b.0.1)));
    for (_, view) in queue {
        let gpus = view.job.gpus;
        let fits = |t: usize| free[t] >= gpus && view.rates[t] > 0.0;
        // A running job keeps its type where it can, unless the fastest free type is the rule.
        let current = view
            .running
            .map(|r| r.gpu_type.0 as usize)
            .filter(|&t| fits(t) && !rules.fastest);
        let fresh = || {
            let mut candidates = (0..free.len()).filter(|&t| fits(t));
            if rules.fastest {
                candidates.max_by(|&a, &b| view.rates[a].total_cmp(&view.rates[b]).then(b.cmp(&a)))
            } else {
                candidates.next()
            }
        };
        match current.or_else(fresh) {
            Some(t) => {
                free[t] -= gpus;
                grants.push(Grant::new(view.id(), GpuTypeId(t as u16), gpus).with(rules.intent()));
            }
            None if rules.head_of_line_blocking => break,
            None => {}
        }
    }
    grants
}

pub(super) static POLICIES: &[PolicyInfo] = &[
    PolicyInfo {
        name: "fifo_perf",
        aliases: &[],
        summary: "FIFO over the fastest GPU types: each round, jobs in arrival order take the fastest type with room (Gavel's `fifo_perf`)",
        knobs: &[],
        build: |_: &PolicyConfig| Box::new(Ordered::fifo_perf()),
    },
    PolicyInfo {
        name: "fifo",
        aliases: &[],
        summary: "first come, first served; no preemption; the head of the queue blocks (Gavel's `fifo`)",
        knobs: &[],
        build: |_: &PolicyConfig| Box::new(Ordered::fifo()),
    },
    PolicyInfo {
        name: "yarn_cs",
        aliases: &[],
        summary: "FIFO with strict consolidation: a gang waits until one server can hold it (Tiresias' baseline)",
        knobs: &[],
        build: |_: &PolicyConfig| Box::new(Ordered::yarn_cs()),
    },
    PolicyInfo {
        name: "sjf",
        aliases: &[],
        summary: "shortest job first by total work (oracle); no preemption; small jobs backfill",
        knobs: &[],
        build: |_: &PolicyConfig| Box::new(Ordered::sjf()),
    },
    PolicyInfo {
        name: "srtf",
        aliases: &[],
        summary: "shortest remaining time first (oracle); preempts at round boundaries",
        knobs: &[],
        build: |_: &PolicyConfig| Box::new(Ordered::srtf()),
    },
];
