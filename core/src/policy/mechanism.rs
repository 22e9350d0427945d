//! Gavel's round mechanism (Narayanan et al., OSDI'20, section 4.2): [`Realize`] turns a time-share
//! policy's answer into each round's grants.
//!
//! A policy such as LAS answers with X\[j\]\[t\], the fraction of time job j should spend on GPU type t
//! ([`TimeShares`]). Each round, a job's priority on type t is X\[j\]\[t\] divided by the share of type-t
//! time it has received since the allocation last changed. Types are visited in the policy's preferred
//! order (or a fresh random order for heterogeneity-agnostic policies); each type takes the jobs with the
//! highest priority on it that are not yet placed, while its GPUs last.
//!
//! Bookkeeping follows Gavel's simulator: every job starts a period with half a round of credit on every
//! type (so that shares are never 0/0), and a cumulative deficit (share owed minus time received)
//! breaks ties. What a unit received comes from the engine's [`Usage`] report, so the mechanism is an
//! ordinary [`Policy`]: the engine knows nothing of time shares.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use rustc_hash::FxHashMap;

use super::{Grant, Intent, Policy, RoundInput, Usage};
use crate::cluster::GpuTypeId;
use crate::job::JobId;

/// A policy that answers in Gavel's form: a time share per job and GPU type. Wrap it in [`Realize`] to
/// run it.
pub trait TimeSharePolicy: Send {
    /// Sees every round, before [`TimeSharePolicy::shares`], even when a wrapper such as
    /// [`super::Cadenced`] reuses the last answer (for state that advances with time).
    fn observe(&mut self, _input: &RoundInput<'_>) {}

    /// The shares for this round.
    fn shares(&mut self, input: &RoundInput<'_>) -> TimeShares;
}

/// What a row of a [`TimeShares`] matrix schedules: one job, or two jobs packed on the same GPUs
/// (space sharing, each at its rate from the throughput model's pair entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    Job(JobId),
    Pair(JobId, JobId),
}

impl Unit {
    /// The jobs it runs.
    pub fn members(self) -> impl Iterator<Item = JobId> {
        let (a, b) = match self {
            Unit::Job(a) => (a, None),
            Unit::Pair(a, b) => (a, Some(b)),
        };
        std::iter::once(a).chain(b)
    }

    pub fn contains(self, job: JobId) -> bool {
        self.members().any(|m| m == job)
    }
}

/// Gavel's allocation: X\[u\]\[t\], the fraction of time unit u (a job, or a packed pair) should spend on GPU
/// type t. A job's shares, over its own row and every pair it is in, sum to at most 1. Stored as one
/// row-major matrix, one row per unit, one column per GPU type.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeShares {
    pub units: Vec<Unit>,
    pub num_types: usize,
    /// `x[k * num_types + t]` is unit `units[k]`'s share of type t.
    pub x: Vec<f64>,
    pub type_preference: TypePreference,
    /// Units with no share of a type may still run on its GPUs that would otherwise idle, after every
    /// unit with a share (Gavel's mechanism does this for every policy but FIFO; an LP's vertex solution
    /// leaves many zero shares).
    pub fill_idle: bool,
}

impl TimeShares {
    pub fn new(num_types: usize, type_preference: TypePreference) -> Self {
        TimeShares {
            units: Vec::new(),
            num_types,
            x: Vec::new(),
            type_preference,
            fill_idle: false,
        }
    }

    /// Makes room for `units` more rows.
    pub fn reserve(&mut self, units: usize) {
        self.units.reserve(units);
        self.x.reserve(units * self.num_types);
    }

    /// Adds a job's row.
    pub fn push(&mut self, job: JobId, row: impl IntoIterator<Item = f64>) {
        self.push_unit(Unit::Job(job), row);
    }

    /// Adds the row of `a` and `b` packed together.
    pub fn push_pair(&mut self, a: JobId, b: JobId, row: impl IntoIterator<Item = f64>) {
        self.push_unit(Unit::Pair(a, b), row);
    }

    fn push_unit(&mut self, unit: Unit, row: impl IntoIterator<Item = f64>) {
        self.units.push(unit);
        let before = self.x.len();
        self.x.extend(row);
        debug_assert_eq!(self.x.len() - before, self.num_types);
    }

    /// Unit `k`'s row.
    pub fn row(&self, k: usize) -> &[f64] {
        &self.x[k * self.num_types..(k + 1) * self.num_types]
    }

    /// Rows as (unit, shares).
    pub fn rows(&self) -> impl Iterator<Item = (Unit, &[f64])> {
        self.units
            .iter()
            .enumerate()
            .map(|(k, u)| (*u, self.row(k)))
    }
}

/// The order in which the mechanism offers GPU types to jobs each round.
#[derive(Clone, Debug, PartialEq)]
pub enum TypePreference {
    /// The policy cannot tell types apart (heterogeneity-agnostic): a fresh random order every round.
    Interchangeable,
    /// Most preferred first.
    Ordered(Vec<GpuTypeId>),
}

/// A time-share policy run through Gavel's round mechanism: a [`Policy`].
pub struct Realize<P> {
    policy: P,
    seed: u64,
    /// Built on the first round, when the number of GPU types is known.
    mechanism: Option<Mechanism>,
}

impl<P: TimeSharePolicy> Realize<P> {
    /// `seed` drives the random type order of heterogeneity-agnostic policies.
    pub fn new(policy: P, seed: u64) -> Self {
        Realize {
            policy,
            seed,
            mechanism: None,
        }
    }

    /// The wrapped policy.
    pub fn inner(&self) -> &P {
        &self.policy
    }
}

impl<P: TimeSharePolicy> Policy for Realize<P> {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let seed = self.seed;
        let mechanism = self
            .mechanism
            .get_or_insert_with(|| Mechanism::new(input.capacity.len(), seed));
        mechanism.account(input);
        self.policy.observe(input);
        let shares = self.policy.shares(input);
        mechanism.grants(&shares, input)
    }
}

/// A unit's time on each type.
#[derive(Clone, Debug, Default)]
struct Account {
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
    account: &'a Account,
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

/// A unit's place in one type's queue: its priority and deficit as keys that order as
/// `f64::total_cmp` does, highest first, and its row. Sorting these small keys instead of whole
/// entries keeps a round's sorts cheap; ties on both keys fall back to the row's share and unit.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    priority: u64,
    deficit: u64,
    row: u32,
}

/// `x` as an unsigned key that orders as `f64::total_cmp` orders, reversed (the highest `x` first).
fn descending_key(x: f64) -> u64 {
    let bits = x.to_bits() as i64;
    // What `total_cmp` compares, as a signed integer; flipping the sign bit keeps its order unsigned.
    let ordered = bits ^ (((bits >> 63) as u64) >> 1) as i64;
    !((ordered as u64) ^ (1 << 63))
}

/// The mechanism's state between rounds.
#[derive(Clone, Debug)]
struct Mechanism {
    accounts: FxHashMap<Unit, Account>,
    /// Seconds of type-t time handed out this period, across units.
    type_time: Vec<f64>,
    /// The shares in force (index by unit), and when they came into force.
    current: Option<TimeShares>,
    current_row: FxHashMap<Unit, usize>,
    period_start: f64,
    rng: ChaCha8Rng,
    /// Each active job's position in this round's `RoundInput::jobs`, rebuilt every round in its
    /// kept buffer.
    index: FxHashMap<JobId, usize>,
    /// One type's queue, kept between rounds for its buffer.
    candidates: Vec<Candidate>,
}

impl Mechanism {
    fn new(num_types: usize, seed: u64) -> Self {
        Mechanism {
            accounts: FxHashMap::default(),
            type_time: vec![0.0; num_types],
            current: None,
            current_row: FxHashMap::default(),
            period_start: 0.0,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x6761_6e67_7761_7921),
            index: FxHashMap::default(),
            candidates: Vec::new(),
        }
    }

    /// Indexes this round's active jobs, charges what ran since the last round, then drops the units
    /// of jobs that left.
    fn account(&mut self, input: &RoundInput<'_>) {
        self.index.clear();
        self.index
            .extend(input.jobs.iter().enumerate().map(|(k, v)| (v.id(), k)));
        for usage in input.usage {
            self.charge(usage);
        }
        if self.accounts.is_empty() {
            return;
        }
        let active = &self.index;
        self.accounts
            .retain(|unit, _| unit.members().all(|m| active.contains_key(&m)));
    }

    /// A pair is charged once, under the unit its shares named (`Pair(first, second)`), through the
    /// slice of its first member; the second member's slice names no unit with an account.
    fn charge(&mut self, usage: &Usage) {
        let unit = match usage.partner {
            None => Unit::Job(usage.job),
            Some(partner) => Unit::Pair(usage.job, partner),
        };
        if let Some(account) = self.accounts.get_mut(&unit) {
            let t = usage.gpu_type.0 as usize;
            account.received[t] += usage.seconds;
            self.type_time[t] += usage.seconds;
        }
    }

    /// Starts a new period with new shares: settles deficits and reseeds everyone's received time.
    fn reset(&mut self, shares: &TimeShares, now: f64, seed_credit: f64) {
        let elapsed = now - self.period_start;
        let types = self.type_time.len();
        if let Some(old) = &self.current {
            for (unit, account) in &mut self.accounts {
                let owed = self.current_row.get(unit).map(|&k| old.row(k));
                for t in 0..types {
                    let should = owed.map_or(0.0, |x| x[t]) * elapsed;
                    account.deficit[t] += should - (account.received[t] - seed_credit);
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
            self.accounts.entry(*unit).or_insert_with(|| Account {
                received: vec![0.0; types],
                deficit: vec![0.0; types],
            });
        }
        for account in self.accounts.values_mut() {
            account.received.iter_mut().for_each(|r| *r = seed_credit);
        }
        let credit = seed_credit * self.accounts.len() as f64;
        self.type_time.iter_mut().for_each(|w| *w = credit);
        self.period_start = now;
    }

    /// Turns shares into this round's grants. A pair becomes two grants, each naming the other as partner.
    /// Runs after [`Mechanism::account`], which indexes the round's jobs.
    fn grants(&mut self, shares: &TimeShares, input: &RoundInput<'_>) -> Vec<Grant> {
        let capacity = input.capacity;
        let changed = self
            .current
            .as_ref()
            .is_none_or(|c| c.units != shares.units || c.x != shares.x);
        if changed {
            self.reset(shares, input.now, input.round_length / 2.0);
        }
        // Indexed by `account`, which runs first every round.
        let index = &self.index;
        let member = |job: JobId| index.get(&job).copied();
        // Resolve each unit once; a pair runs only when both members are active and share a gang size.
        let mut rows: Vec<Row<'_>> = Vec::with_capacity(shares.units.len());
        rows.extend(shares.rows().filter_map(|(unit, x)| {
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
                account: self.accounts.get(&unit)?,
            })
        }));
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
        // A grant takes at least one GPU, a pair's two grants share theirs.
        let most = 2 * capacity.iter().sum::<u32>() as usize;
        let mut grants = Vec::with_capacity(rows.len().min(most));
        let mut candidates = std::mem::take(&mut self.candidates);
        for t in order {
            let ti = t.0 as usize;
            let share_of = |row: &Row<'_>| row.shares.get(ti).copied().unwrap_or(0.0);
            candidates.clear();
            for (k, row) in rows.iter().enumerate() {
                let share = share_of(row);
                if (share <= 0.0 && !shares.fill_idle) || !row.runs_on(t, input) {
                    continue;
                }
                let account = row.account;
                let fraction = if self.type_time[ti] > 0.0 {
                    account.received[ti] / self.type_time[ti]
                } else {
                    0.0
                };
                let priority = if fraction > 0.0 {
                    share / fraction
                } else {
                    share * 1e9
                };
                candidates.push(Candidate {
                    priority: descending_key(priority),
                    deficit: descending_key(account.deficit[ti]),
                    row: k as u32,
                });
            }
            // Highest priority first, then deficit, then share; equal keys keep ascending unit order.
            // Ordered even when every candidate fits by count: a placer may still refuse a grant
            // (strict consolidation), and then the order decides who runs.
            let order = |a: &Candidate, b: &Candidate| {
                (a.priority, a.deficit)
                    .cmp(&(b.priority, b.deficit))
                    .then_with(|| {
                        let (ra, rb) = (&rows[a.row as usize], &rows[b.row as usize]);
                        share_of(rb)
                            .total_cmp(&share_of(ra))
                            .then(ra.unit.cmp(&rb.unit))
                    })
            };
            // Only the head of a long queue is walked before the type's GPUs are gone: order that
            // head, and the rest only if the walk gets there (the order is total, so the result is
            // the full sort's).
            let mut sorted = 0;
            for k in 0..candidates.len() {
                if left[ti] == 0 {
                    break;
                }
                if k == sorted {
                    let rest = &mut candidates[k..];
                    let head = rest.len().min(2 * left[ti] as usize + 16);
                    if head < rest.len() {
                        rest.select_nth_unstable_by(head, order);
                    }
                    rest[..head].sort_unstable_by(order);
                    sorted = k + head;
                }
                let candidate = &candidates[k];
                let row = &rows[candidate.row as usize];
                let members = row.members.iter().flatten();
                if row.gpus > left[ti] || members.clone().any(|&m| placed[m]) {
                    continue;
                }
                left[ti] -= row.gpus;
                members.for_each(|&m| placed[m] = true);
                match row.unit {
                    Unit::Job(job) => grants.push(Grant::new(job, t, row.gpus)),
                    Unit::Pair(a, b) => grants.extend([
                        Grant::new(a, t, row.gpus).with(Intent::PackedWith(b)),
                        Grant::new(b, t, row.gpus).with(Intent::PackedWith(a)),
                    ]),
                }
            }
        }
        self.candidates = candidates;
        grants
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descending_keys_order_as_total_cmp_reversed() {
        let values = [
            f64::NEG_INFINITY,
            -1e300,
            -1.5,
            -f64::MIN_POSITIVE,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            0.25,
            1.0,
            1e9,
            f64::INFINITY,
            f64::NAN,
            -f64::NAN,
        ];
        for a in values {
            for b in values {
                assert_eq!(
                    descending_key(a).cmp(&descending_key(b)),
                    b.total_cmp(&a),
                    "{a} vs {b}"
                );
            }
        }
    }
}
