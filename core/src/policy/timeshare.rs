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

use super::{Grant, RoundInput, TimeShares, TypePreference, Unit};
use crate::cluster::GpuTypeId;
use crate::job::JobId;

#[derive(Clone, Debug, Default)]
struct Ledger {
    /// Seconds received on each type this period (seeded with half a round).
    received: Vec<f64>,
    /// Cumulative (owed - received) per type, over the unit's life.
    deficit: Vec<f64>,
}

/// One unit's inputs to a round, resolved once.
struct Row<'a> {
    unit: Unit,
    /// The member jobs' indices in `RoundInput::jobs` (the second only for a pair).
    members: [Option<usize>; 2],
    gpus: u32,
    shares: &'a [f64],
    ledger: &'a Ledger,
}

impl Row<'_> {
    /// Whether every member makes progress on type `t` (a pair: both, at their packed rates).
    fn runs_on(&self, t: GpuTypeId, input: &RoundInput<'_>) -> bool {
        let view = |m: Option<usize>| m.map(|k| &input.jobs[k]);
        match [view(self.members[0]), view(self.members[1])] {
            [Some(a), Some(b)] => input
                .model
                .packed_steps_per_second(a.job, b.job, t, self.gpus)
                .is_some_and(|(ra, rb)| ra > 0.0 && rb > 0.0),
            [Some(a), None] => a.rates.get(t.0 as usize).is_some_and(|r| *r > 0.0),
            _ => false,
        }
    }
}

/// The mechanism's state between rounds.
#[derive(Clone, Debug)]
pub struct Mechanism {
    ledgers: FxHashMap<Unit, Ledger>,
    /// Seconds of type-t time handed out this period, across units.
    type_time: Vec<f64>,
    /// The shares in force (index by unit), and when they came into force.
    current: Option<TimeShares>,
    current_row: FxHashMap<Unit, usize>,
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

    /// Records that `unit` ran `seconds` on `gpu_type`.
    pub fn charge(&mut self, unit: Unit, gpu_type: GpuTypeId, seconds: f64) {
        if let Some(ledger) = self.ledgers.get_mut(&unit) {
            ledger.received[gpu_type.0 as usize] += seconds;
            self.type_time[gpu_type.0 as usize] += seconds;
        }
    }

    /// Drops a finished job, and every pair it was in.
    pub fn forget(&mut self, job: JobId) {
        self.ledgers.retain(|unit, _| !unit.contains(job));
    }

    /// Starts a new period with new shares: settles deficits and reseeds everyone's received time.
    fn reset(&mut self, shares: &TimeShares, now: f64, seed_credit: f64) {
        let elapsed = now - self.period_start;
        let types = self.type_time.len();
        if let Some(old) = &self.current {
            for (unit, ledger) in &mut self.ledgers {
                let owed = self.current_row.get(unit).map(|&k| old.row(k));
                for t in 0..types {
                    let should = owed.map_or(0.0, |x| x[t]) * elapsed;
                    ledger.deficit[t] += should - (ledger.received[t] - seed_credit);
                }
            }
        }
        self.current_row = shares
            .units
            .iter()
            .enumerate()
            .map(|(k, u)| (*u, k))
            .collect();
        self.current = Some(shares.clone());
        for unit in &shares.units {
            self.ledgers.entry(*unit).or_insert_with(|| Ledger {
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

    /// Turns shares into this round's grants. A pair becomes two grants, each naming the other as partner.
    pub fn grants(&mut self, shares: &TimeShares, input: &RoundInput<'_>) -> Vec<Grant> {
        let capacity = input.capacity;
        let changed = self
            .current
            .as_ref()
            .is_none_or(|c| c.units != shares.units || c.x != shares.x);
        if changed {
            self.reset(shares, input.now, input.round_length / 2.0);
        }
        let index: FxHashMap<JobId, usize> = input
            .jobs
            .iter()
            .enumerate()
            .map(|(k, v)| (v.id(), k))
            .collect();
        let member = |job: JobId| index.get(&job).copied();
        // Resolve each unit once; a pair runs only when both members are active and share a gang size.
        let rows: Vec<Row<'_>> = shares
            .rows()
            .filter_map(|(unit, x)| {
                let members = match unit {
                    Unit::Job(a) => [Some(member(a)?), None],
                    Unit::Pair(a, b) => [Some(member(a)?), Some(member(b)?)],
                };
                let gpus = input.jobs[members[0]?].job.gpus;
                if members[1].is_some_and(|b| input.jobs[b].job.gpus != gpus) {
                    return None;
                }
                Some(Row {
                    unit,
                    members,
                    gpus,
                    shares: x,
                    ledger: self.ledgers.get(&unit)?,
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
        // A job runs at most once per round, alone or in one pair.
        let mut placed = vec![false; input.jobs.len()];
        let mut grants = Vec::new();
        // (priority, deficit, share, unit, row index)
        let mut entries: Vec<(f64, f64, f64, Unit, usize)> = Vec::with_capacity(rows.len());
        for t in order {
            let ti = t.0 as usize;
            entries.clear();
            for (k, row) in rows.iter().enumerate() {
                let share = row.shares.get(ti).copied().unwrap_or(0.0);
                if (share <= 0.0 && !shares.fill_idle) || !row.runs_on(t, input) {
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
                entries.push((priority, ledger.deficit[ti], share, row.unit, k));
            }
            // Highest priority first, then deficit, then share; equal keys keep ascending unit order.
            // Sorted even when every candidate fits by count: a placer may still refuse a grant (strict
            // consolidation), and then the order decides who runs.
            entries.sort_unstable_by(|a, b| {
                b.0.total_cmp(&a.0)
                    .then(b.1.total_cmp(&a.1))
                    .then(b.2.total_cmp(&a.2))
                    .then(a.3.cmp(&b.3))
            });
            for &(_, _, _, unit, k) in &entries {
                if left[ti] == 0 {
                    break;
                }
                let row = &rows[k];
                let members = row.members.iter().flatten();
                if row.gpus > left[ti] || members.clone().any(|&m| placed[m]) {
                    continue;
                }
                left[ti] -= row.gpus;
                members.for_each(|&m| placed[m] = true);
                let defragment = shares.defragment && row.gpus > 1;
                let grant = |job, partner| Grant {
                    defragment,
                    partner,
                    ..Grant::new(job, t, row.gpus)
                };
                match unit {
                    Unit::Job(job) => grants.push(grant(job, None)),
                    Unit::Pair(a, b) => grants.extend([grant(a, Some(b)), grant(b, Some(a))]),
                }
            }
        }
        if shares.grow {
            grow(&mut grants, &mut left, input, &index);
        }
        grants
    }
}

/// A job grows only when doubling its gang speeds it up by at least this much.
const GROW_SPEEDUP: f64 = 1.1;

/// Gandiva's introspective grow-shrink: GPUs no grant uses go to granted jobs that run faster on twice as
/// many, doubling while it pays. Jobs already running grown come first, so that growth is stable from
/// round to round; a job whose extra GPUs are needed again shrinks back to its own gang next round.
fn grow(
    grants: &mut [Grant],
    left: &mut [u32],
    input: &RoundInput<'_>,
    index: &FxHashMap<JobId, usize>,
) {
    let view = |g: &Grant| &input.jobs[index[&g.job]];
    let running_size = |g: &Grant| view(g).running.map_or(0, |r| r.gpus.len());
    let mut order: Vec<usize> = (0..grants.len())
        .filter(|&k| grants[k].partner.is_none())
        .collect();
    order.sort_by_key(|&k| std::cmp::Reverse(running_size(&grants[k])));
    for k in order {
        let grant = &mut grants[k];
        let job = view(grant).job;
        let t = grant.gpu_type;
        let mut rate = view(grant).rates[t.0 as usize];
        while left[t.0 as usize] >= grant.gpus {
            let bigger = grant.gpus * 2;
            match input.model.steps_per_second(job, t, bigger) {
                Some(r) if r >= rate * GROW_SPEEDUP => {
                    left[t.0 as usize] -= grant.gpus;
                    grant.gpus = bigger;
                    rate = r;
                }
                _ => break,
            }
        }
    }
}
