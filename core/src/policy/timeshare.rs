//! Realizes time-share allocations round by round, as Gavel's mechanism does (Narayanan et al., OSDI'20,
//! section 4.2).
//!
//! A policy such as LAS answers with X\[j\]\[t\], the fraction of time job j should spend on GPU type t.
//! Each round, a job's priority on type t is X\[j\]\[t\] divided by the share of type-t time it has
//! received since the allocation last changed. Types are visited in the policy's preferred order (or a
//! fresh random order for heterogeneity-agnostic policies); each type takes the jobs with the highest
//! priority on it that are not yet placed, while its GPUs last.
//!
//! Bookkeeping follows Gavel's simulator: every job starts a period with half a round of credit on every
//! type (so that shares are never 0/0), and a cumulative deficit (share owed minus time received)
//! breaks ties.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use rustc_hash::FxHashMap;

use super::{Grant, JobView, TimeShares, TypePreference};
use crate::cluster::GpuTypeId;
use crate::job::JobId;

#[derive(Clone, Debug, Default)]
struct Ledger {
    /// Seconds received on each type this period (seeded with half a round).
    received: Vec<f64>,
    /// Cumulative (owed - received) per type, over the job's life.
    deficit: Vec<f64>,
}

/// One job's inputs to a round, resolved once.
struct Row<'a> {
    job: JobId,
    gpus: u32,
    rates: &'a [f64],
    shares: &'a [f64],
    ledger: &'a Ledger,
}

/// The mechanism's state between rounds.
#[derive(Clone, Debug)]
pub struct Mechanism {
    ledgers: FxHashMap<JobId, Ledger>,
    /// Seconds of type-t time handed out this period, across jobs.
    type_time: Vec<f64>,
    /// The shares in force (index by job), and when they came into force.
    current: Option<TimeShares>,
    current_row: FxHashMap<JobId, usize>,
    period_start: f64,
    rng: ChaCha8Rng,
}

impl Mechanism {
    pub fn new(num_types: usize, seed: u64) -> Self {
        Mechanism {
            ledgers: FxHashMap::default(),
            type_time: vec![0.0; num_types],
            current: None,
            current_row: FxHashMap::default(),
            period_start: 0.0,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x6761_6e67_7761_7921),
        }
    }

    /// Records that `job` ran `seconds` on `gpu_type`.
    pub fn charge(&mut self, job: JobId, gpu_type: GpuTypeId, seconds: f64) {
        if let Some(ledger) = self.ledgers.get_mut(&job) {
            ledger.received[gpu_type.0 as usize] += seconds;
            self.type_time[gpu_type.0 as usize] += seconds;
        }
    }

    /// Drops a finished job.
    pub fn forget(&mut self, job: JobId) {
        self.ledgers.remove(&job);
    }

    /// Starts a new period with new shares: settles deficits and reseeds everyone's received time.
    fn reset(&mut self, shares: &TimeShares, now: f64, seed_credit: f64) {
        let elapsed = now - self.period_start;
        let types = self.type_time.len();
        if let Some(old) = &self.current {
            for (job, ledger) in &mut self.ledgers {
                let owed = self.current_row.get(job).map(|&k| old.row(k));
                for t in 0..types {
                    let should = owed.map_or(0.0, |x| x[t]) * elapsed;
                    ledger.deficit[t] += should - (ledger.received[t] - seed_credit);
                }
            }
        }
        self.current_row = shares
            .jobs
            .iter()
            .enumerate()
            .map(|(k, j)| (*j, k))
            .collect();
        self.current = Some(shares.clone());
        for job in &shares.jobs {
            self.ledgers.entry(*job).or_insert_with(|| Ledger {
                received: vec![0.0; types],
                deficit: vec![0.0; types],
            });
        }
        for ledger in self.ledgers.values_mut() {
            ledger.received.iter_mut().for_each(|r| *r = seed_credit);
        }
        let credit = seed_credit * self.ledgers.len() as f64;
        self.type_time.iter_mut().for_each(|w| *w = credit);
        self.period_start = now;
    }

    /// Turns shares into this round's grants. `jobs` gives gang sizes and rates; `capacity` the GPUs per type.
    pub fn grants(
        &mut self,
        shares: &TimeShares,
        jobs: &[JobView<'_>],
        capacity: &[u32],
        now: f64,
        round_length: f64,
    ) -> Vec<Grant> {
        let changed = self
            .current
            .as_ref()
            .is_none_or(|c| c.jobs != shares.jobs || c.x != shares.x);
        if changed {
            self.reset(shares, now, round_length / 2.0);
        }
        let views: FxHashMap<JobId, &JobView<'_>> = jobs.iter().map(|v| (v.id(), v)).collect();
        // Resolve each job once.
        let rows: Vec<Row<'_>> = shares
            .rows()
            .filter_map(|(job, x)| {
                let view = views.get(&job)?;
                Some(Row {
                    job,
                    gpus: view.job.gpus,
                    rates: view.rates,
                    shares: x,
                    ledger: self.ledgers.get(&job)?,
                })
            })
            .collect();
        let mut order: Vec<GpuTypeId> = match &shares.type_preference {
            TypePreference::Ordered(order) => order.clone(),
            TypePreference::Interchangeable => {
                let mut all: Vec<GpuTypeId> = (0..capacity.len() as u16).map(GpuTypeId).collect();
                // Fisher-Yates with our seeded stream: agnostic policies see types as interchangeable.
                for i in (1..all.len()).rev() {
                    let j = (self.rng.next_u64() % (i as u64 + 1)) as usize;
                    all.swap(i, j);
                }
                all
            }
        };
        order.retain(|t| (t.0 as usize) < capacity.len());
        let mut left: Vec<u32> = capacity.to_vec();
        let mut placed = vec![false; rows.len()];
        let mut grants = Vec::new();
        // (priority, deficit, share, job id, row index)
        let mut entries: Vec<(f64, f64, f64, JobId, usize)> = Vec::with_capacity(rows.len());
        for t in order {
            let ti = t.0 as usize;
            entries.clear();
            for (k, row) in rows.iter().enumerate() {
                let share = row.shares.get(ti).copied().unwrap_or(0.0);
                if placed[k] || share <= 0.0 || row.rates.get(ti).is_none_or(|r| *r <= 0.0) {
                    continue;
                }
                let ledger = row.ledger;
                let fraction = if self.type_time[ti] > 0.0 {
                    ledger.received[ti] / self.type_time[ti]
                } else {
                    0.0
                };
                let priority = if fraction > 0.0 {
                    share / fraction
                } else {
                    share * 1e9
                };
                entries.push((priority, ledger.deficit[ti], share, row.job, k));
            }
            // Highest priority first, then deficit, then share; equal keys keep ascending job id. Sorted
            // even when every candidate fits by count: a placer may still refuse a grant (strict
            // consolidation), and then the order decides who runs.
            entries.sort_unstable_by(|a, b| {
                b.0.total_cmp(&a.0)
                    .then(b.1.total_cmp(&a.1))
                    .then(b.2.total_cmp(&a.2))
                    .then(a.3.cmp(&b.3))
            });
            for &(_, _, _, job, k) in &entries {
                if left[ti] == 0 {
                    break;
                }
                let gpus = rows[k].gpus;
                if gpus > left[ti] {
                    continue;
                }
                left[ti] -= gpus;
                placed[k] = true;
                grants.push(Grant {
                    job,
                    gpu_type: t,
                    gpus,
                    consolidate: false,
                });
            }
        }
        grants
    }
}
