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
//!
//! # Policies that answer by class
//!
//! Answered per job, a round costs the whole backlog: the shares have a row per job, and under a
//! growing backlog they change every round (1/N changes), so every job's deficit is settled and every
//! job is ranked on every type. A policy whose shares depend only on a job's [`JobClass`] (its gang
//! size, weight and the types it can run on) and on how many jobs each class has answers by class
//! instead ([`TimeSharePolicy::by_class`]). The mechanism then keeps the jobs of a class that share one
//! history in one group, with one account, and the engine shows it only the running jobs and those that
//! changed ([`Policy::keeps_queue`]); a round costs what it can start, what runs and what changed, plus
//! one visit per group. Decisions are exactly those of the per-job form, float for float:
//!
//! - A job's account changes only by its own usage (received time) and by settling at the start of a
//!   period: `deficit += owed * elapsed - (received - credit)`, where `owed` is its class's row. Jobs of
//!   one class that joined in the same period and have not run since start from the same account and
//!   are then given the same operations on the same floats, so their accounts stay bit for bit equal:
//!   one account per group is the per-job bookkeeping, not an approximation of it. A job that runs
//!   leaves its group for one of its own before its time is added.
//! - The per-job form ranks a type's candidates by (priority, deficit, share, unit), each compared as
//!   `f64::total_cmp` does. Within a group the first three are equal (priority and deficit come from the
//!   shared account, share from the shared row), so the group's jobs come in unit order; across groups,
//!   a merge of the groups' heads on the same four keys visits the jobs in exactly the per-job order.
//!   Groups are never assumed to stay apart or in some order: every comparison is made on exact values.
//!   Where the per-job walk skips a job whose gang no longer fits, the group's walk drops the group:
//!   its jobs all have that gang, and what is left of a type only shrinks during its walk.
//! - A new period begins exactly when the per-job form's would: when its rows would differ, that is
//!   when a job joined or left, or a class with jobs got another row.
//!
//! So a round visits each group once per type and at a period's start. Waiting jobs that never ran
//! form at most one group per class and period in which they joined (with rounds of 360 s, a trace
//! that arrives over 278 rounds has at most 278 per class, however many jobs each holds); a job that
//! ran and waits again keeps a group of its own, as its account is its own.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::ops::Bound::{Excluded, Unbounded};

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use smallvec::SmallVec;

use super::{Grant, Intent, JobView, Policy, RoundInput, Usage};
use crate::cluster::GpuTypeId;
use crate::job::{IdMap, IdSet, JobId};

/// A policy that answers in Gavel's form: a time share per job and GPU type. Wrap it in [`Realize`] to
/// run it.
pub trait TimeSharePolicy: Send {
    /// Sees every round, before [`TimeSharePolicy::shares`], even when a wrapper such as
    /// [`super::Cadenced`] reuses the last answer (for state that advances with time).
    fn observe(&mut self, _input: &RoundInput<'_>) {}

    /// The shares for this round.
    fn shares(&mut self, input: &RoundInput<'_>) -> TimeShares;

    /// The same policy answering by class, when every job of a [`JobClass`] always gets the same row:
    /// [`Realize`] then keeps jobs by class and asks [`ClassSharePolicy::class_shares`] instead of
    /// [`TimeSharePolicy::shares`], and a round costs what it can start, not the backlog. Must answer
    /// the same (`Some` or `None`) on every call. The default, `None`: shares per job.
    fn by_class(&mut self) -> Option<&mut dyn ClassSharePolicy> {
        None
    }
}

/// A time-share policy whose shares depend only on a job's [`JobClass`] and on how many active jobs
/// each class has: every job of a class gets its class's row. See [`TimeSharePolicy::by_class`].
pub trait ClassSharePolicy {
    /// This round's shares: one row per class of `classes`, in that order; each class appears once
    /// (a class may have no jobs left: its row is then never used, and its place may hold another
    /// class in a later call, so keep nothing by a class's position from one call to the next).
    /// `input.jobs` may hold only the running jobs and those that changed since the last call
    /// ([`Policy::keeps_queue`]); `classes` counts every active job.
    fn class_shares(&mut self, input: &RoundInput<'_>, classes: &[ClassCount]) -> ClassShares;
}

/// Jobs alike for a policy that answers by class: the same gang size, the same weight and the same
/// GPU types it can run on (a positive rate alone at its gang size).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JobClass {
    /// GPUs per gang.
    pub gpus: u32,
    /// The weight's bits (so that the class can be hashed).
    weight: u64,
    runs_on: Box<[bool]>,
}

impl JobClass {
    /// A job's class.
    pub fn of(view: &JobView<'_>) -> Self {
        JobClass {
            gpus: view.job.gpus,
            weight: view.job.weight.to_bits(),
            runs_on: view.rates.iter().map(|r| *r > 0.0).collect(),
        }
    }

    /// Its jobs' weight.
    pub fn weight(&self) -> f64 {
        f64::from_bits(self.weight)
    }

    /// Whether its jobs make progress on GPU type `t`.
    pub fn runs_on(&self, t: usize) -> bool {
        self.runs_on.get(t).copied().unwrap_or(false)
    }
}

/// A class and how many active jobs it has.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassCount {
    /// The class: gang size, weight and the GPU types its jobs run on.
    pub class: JobClass,
    /// Its active jobs (0 once they have all left; the slot may then be given to a new class).
    pub jobs: usize,
}

/// A policy's answer by class: X\[c\]\[t\], the fraction of time each job of class c should spend on
/// GPU type t. As [`TimeShares`], with one row per class instead of per unit.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassShares {
    /// Columns per row: the cluster's GPU types.
    pub num_types: usize,
    /// `x[c * num_types + t]`: class c's share of type t.
    pub x: Vec<f64>,
    /// The order the mechanism offers the types in, as [`TimeShares::type_preference`].
    pub type_preference: TypePreference,
    /// As [`TimeShares::fill_idle`].
    pub fill_idle: bool,
}

impl ClassShares {
    /// No rows yet, over `num_types` GPU types.
    pub fn new(num_types: usize, type_preference: TypePreference) -> Self {
        ClassShares {
            num_types,
            x: Vec::new(),
            type_preference,
            fill_idle: false,
        }
    }

    /// Adds the next class's row.
    pub fn push(&mut self, row: impl IntoIterator<Item = f64>) {
        let before = self.x.len();
        self.x.extend(row);
        debug_assert_eq!(self.x.len() - before, self.num_types);
    }

    /// Class `c`'s row (empty past the last row).
    pub fn row(&self, c: usize) -> &[f64] {
        self.x
            .get(c * self.num_types..(c + 1) * self.num_types)
            .unwrap_or(&[])
    }
}

/// A policy that answers by class, asked for a row per job of `input.jobs` (every job gets its class's
/// row): for wrappers that work on rows per job, such as [`super::Cadenced`], and to check one form
/// against the other.
pub fn shares_per_job(policy: &mut dyn ClassSharePolicy, input: &RoundInput<'_>) -> TimeShares {
    let mut classes: Vec<ClassCount> = Vec::new();
    let mut index: IdMap<JobClass, usize> = IdMap::default();
    let of_job: Vec<usize> = input
        .jobs
        .iter()
        .map(|view| {
            let class = JobClass::of(view);
            let k = *index.entry(class.clone()).or_insert_with(|| {
                classes.push(ClassCount { class, jobs: 0 });
                classes.len() - 1
            });
            classes[k].jobs += 1;
            k
        })
        .collect();
    let answer = policy.class_shares(input, &classes);
    let mut out = TimeShares::new(answer.num_types, answer.type_preference.clone());
    out.fill_idle = answer.fill_idle;
    out.reserve(input.jobs.len());
    for (view, k) in input.jobs.iter().zip(of_job) {
        out.push(view.id(), answer.row(k).iter().copied());
    }
    out
}

/// What a row of a [`TimeShares`] matrix schedules: one job, or two jobs packed on the same GPUs
/// (space sharing, each at its rate from the throughput model's pair entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// One job alone on its GPUs.
    Job(JobId),
    /// Two jobs of the same gang size packed on the same GPUs, each at its packed rate.
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

    /// Whether `job` is one of the jobs it runs.
    pub fn contains(self, job: JobId) -> bool {
        self.members().any(|m| m == job)
    }
}

/// Gavel's allocation: X\[u\]\[t\], the fraction of time unit u (a job, or a packed pair) should spend on GPU
/// type t. A job's shares, over its own row and every pair it is in, sum to at most 1. Stored as one
/// row-major matrix, one row per unit, one column per GPU type.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeShares {
    /// The rows' units, in row order: jobs alone, and packed pairs.
    pub units: Vec<Unit>,
    /// Columns per row: the cluster's GPU types.
    pub num_types: usize,
    /// `x[k * num_types + t]` is unit `units[k]`'s share of type t.
    pub x: Vec<f64>,
    /// The order in which the mechanism offers the GPU types to units.
    pub type_preference: TypePreference,
    /// Units with no share of a type may still run on its GPUs that would otherwise idle, after every
    /// unit with a share (Gavel's mechanism does this for every policy but FIFO; an LP's vertex solution
    /// leaves many zero shares).
    pub fill_idle: bool,
}

impl TimeShares {
    /// No rows yet, over `num_types` GPU types, offered in `type_preference`'s order; `fill_idle`
    /// off.
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
    /// The policy answers by class ([`TimeSharePolicy::by_class`]).
    by_class: bool,
    /// Built on the first round, when the number of GPU types is known.
    mechanism: Option<Mechanism>,
}

impl<P: TimeSharePolicy> Realize<P> {
    /// `seed` drives the random type order of heterogeneity-agnostic policies.
    pub fn new(mut policy: P, seed: u64) -> Self {
        let by_class = policy.by_class().is_some();
        Realize {
            policy,
            seed,
            by_class,
            mechanism: None,
        }
    }

    /// The wrapped policy.
    pub fn inner(&self) -> &P {
        &self.policy
    }

    /// Units, groups and usage slices the last call visited: what its round cost.
    #[cfg(test)]
    fn work(&self) -> u64 {
        self.mechanism.as_ref().map_or(0, |m| m.clock.work)
    }
}

impl<P: TimeSharePolicy> Policy for Realize<P> {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let seed = self.seed;
        let by_class = self.by_class;
        let Mechanism { clock, book } = self.mechanism.get_or_insert_with(|| Mechanism {
            clock: Clock::new(input.capacity.len(), seed),
            book: if by_class {
                Book::ByClass(ClassBook::default())
            } else {
                Book::PerUnit(UnitBook::default())
            },
        });
        clock.work = 0;
        match book {
            Book::PerUnit(book) => {
                book.account(input, clock);
                self.policy.observe(input);
                let shares = self.policy.shares(input);
                book.grants(&shares, input, clock)
            }
            Book::ByClass(book) => {
                book.follow(input, clock);
                self.policy.observe(input);
                let Some(policy) = self.policy.by_class() else {
                    // A policy that stopped answering by class cannot be answered per job from a
                    // partial input: the running jobs keep their GPUs.
                    tracing::warn!("a time-share policy stopped answering by class");
                    return super::keep_running(input);
                };
                let answer = policy.class_shares(input, &book.counts);
                book.grants(&answer, input, clock)
            }
        }
    }

    /// A policy that answers by class keeps its jobs in the mechanism's groups, and needs to hear
    /// only of the running jobs and those that changed.
    fn keeps_queue(&self) -> bool {
        self.by_class
    }
}

/// A unit's time on each type.
#[derive(Clone, Debug, Default)]
struct Account {
    /// Seconds received on each type this period (seeded with half a round).
    received: PerType,
    /// Cumulative (owed - received) per type, over the unit's life.
    deficit: PerType,
}

/// A value per GPU type, inline for clusters of up to four types: a round ranks every account on
/// every type, and reading them where the account is spares a cache miss each.
type PerType = SmallVec<[f64; 4]>;

impl Account {
    fn new(types: usize) -> Self {
        Account {
            received: smallvec::smallvec![0.0; types],
            deficit: smallvec::smallvec![0.0; types],
        }
    }

    /// Ends a period of `elapsed` seconds in which the unit was owed `owed` (its row; `None`: it had
    /// none): `deficit += owed * elapsed - (received - credit)` on each type.
    fn settle(&mut self, owed: Option<&[f64]>, elapsed: f64, credit: f64) {
        for (t, (deficit, received)) in self.deficit.iter_mut().zip(&self.received).enumerate() {
            let should = owed.map_or(0.0, |x| x.get(t).copied().unwrap_or(0.0)) * elapsed;
            *deficit += should - (received - credit);
        }
    }

    /// `usage` ran for this unit: its time, and the type's, grow by it.
    fn charge(&mut self, usage: &Usage, type_time: &mut [f64]) {
        let t = usage.gpu_type.0 as usize;
        if let (Some(received), Some(total)) = (self.received.get_mut(t), type_time.get_mut(t)) {
            *received += usage.seconds;
            *total += usage.seconds;
        }
    }

    /// Where the unit ranks on type `t` with share `share` of it, as [`rank`] keys.
    fn rank(&self, t: usize, share: f64, type_time: &[f64]) -> Rank {
        let received = self.received.get(t).copied().unwrap_or(0.0);
        let total = type_time.get(t).copied().unwrap_or(0.0);
        let fraction = if total > 0.0 { received / total } else { 0.0 };
        let priority = if fraction > 0.0 {
            share / fraction
        } else {
            share * 1e9
        };
        rank(priority, self.deficit.get(t).copied().unwrap_or(0.0), share)
    }
}

/// A candidate's place in a type's queue: its priority, deficit and share, as keys that order as
/// `f64::total_cmp` does, highest first. Equal ranks fall back to unit order.
type Rank = (u64, u64, u64);

fn rank(priority: f64, deficit: f64, share: f64) -> Rank {
    (
        descending_key(priority),
        descending_key(deficit),
        descending_key(share),
    )
}

/// `x` as an unsigned key that orders as `f64::total_cmp` orders, reversed (the highest `x` first).
fn descending_key(x: f64) -> u64 {
    let bits = x.to_bits() as i64;
    // What `total_cmp` compares, as a signed integer; flipping the sign bit keeps its order unsigned.
    let ordered = bits ^ (((bits >> 63) as u64) >> 1) as i64;
    !((ordered as u64) ^ (1 << 63))
}

/// The order in which this round offers the types: the policy's, or a fresh shuffle of them all for
/// a heterogeneity-agnostic one; types the cluster does not have are left out.
fn type_order(preference: &TypePreference, types: usize, rng: &mut ChaCha8Rng) -> Vec<GpuTypeId> {
    let mut order: Vec<GpuTypeId> = match preference {
        TypePreference::Ordered(order) => order.clone(),
        TypePreference::Interchangeable => {
            let mut all: Vec<GpuTypeId> = (0..types as u16).map(GpuTypeId).collect();
            // Fisher-Yates with our seeded stream: agnostic policies see types as interchangeable.
            for i in (1..all.len()).rev() {
                let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                all.swap(i, j);
            }
            all
        }
    };
    order.retain(|t| (t.0 as usize) < types);
    order
}

/// The mechanism's state between rounds.
struct Mechanism {
    clock: Clock,
    book: Book,
}

/// What both kinds of bookkeeping share: the period, the time handed out in it, the types' order.
struct Clock {
    /// Seconds of type-t time handed out this period, across units.
    type_time: Vec<f64>,
    /// When the shares in force came into force (`None` before the first).
    period_start: Option<f64>,
    rng: ChaCha8Rng,
    /// Units, groups and usage slices visited by the current call: what its round costs.
    work: u64,
}

impl Clock {
    fn new(num_types: usize, seed: u64) -> Self {
        Clock {
            type_time: vec![0.0; num_types],
            period_start: None,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x6761_6e67_7761_7921),
            work: 0,
        }
    }

    /// Seconds since the period began, if one has.
    fn elapsed(&self, now: f64) -> Option<f64> {
        self.period_start.map(|start| now - start)
    }

    /// Begins a period at `now` with `accounts` accounts, each seeded with `credit` seconds.
    fn begin(&mut self, now: f64, credit: f64, accounts: usize) {
        let seeded = credit * accounts as f64;
        self.type_time.iter_mut().for_each(|w| *w = seeded);
        self.period_start = Some(now);
    }
}

/// Accounts per unit, or per group of alike jobs.
enum Book {
    PerUnit(UnitBook),
    ByClass(ClassBook),
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

/// A unit's place in one type's queue: its rank and its row. Sorting these small keys instead of
/// whole entries keeps a round's sorts cheap.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    rank: Rank,
    row: u32,
}

/// The bookkeeping of a policy that answers per unit: an account per unit, every unit every round.
#[derive(Default)]
struct UnitBook {
    accounts: IdMap<Unit, Account>,
    /// The shares in force (index by unit).
    current: Option<TimeShares>,
    current_row: IdMap<Unit, usize>,
    /// Each active job's position in this round's `RoundInput::jobs`, rebuilt every round in its
    /// kept buffer.
    index: IdMap<JobId, usize>,
    /// One type's queue, kept between rounds for its buffer.
    candidates: Vec<Candidate>,
}

impl UnitBook {
    /// Indexes this round's active jobs, charges what ran since the last round, then drops the units
    /// of jobs that left.
    fn account(&mut self, input: &RoundInput<'_>, clock: &mut Clock) {
        self.index.clear();
        self.index
            .extend(input.jobs.iter().enumerate().map(|(k, v)| (v.id(), k)));
        clock.work += (input.jobs.len() + input.usage.len()) as u64;
        for usage in input.usage {
            // A pair is charged once, under the unit its shares named (`Pair(first, second)`),
            // through the slice of its first member; the second member's slice names no unit with
            // an account.
            let unit = match usage.partner {
                None => Unit::Job(usage.job),
                Some(partner) => Unit::Pair(usage.job, partner),
            };
            if let Some(account) = self.accounts.get_mut(&unit) {
                account.charge(usage, &mut clock.type_time);
            }
        }
        if self.accounts.is_empty() {
            return;
        }
        clock.work += self.accounts.len() as u64;
        let active = &self.index;
        self.accounts
            .retain(|unit, _| unit.members().all(|m| active.contains_key(&m)));
    }

    /// Starts a new period with new shares: settles deficits and reseeds everyone's received time.
    fn reset(&mut self, shares: &TimeShares, now: f64, credit: f64, clock: &mut Clock) {
        if let (Some(old), Some(elapsed)) = (&self.current, clock.elapsed(now)) {
            for (unit, account) in &mut self.accounts {
                let owed = self.current_row.get(unit).map(|&k| old.row(k));
                account.settle(owed, elapsed, credit);
            }
        }
        self.current_row = shares
            .units
            .iter()
            .enumerate()
            .map(|(k, u)| (*u, k))
            .collect();
        self.current = Some(shares.clone());
        let types = clock.type_time.len();
        for unit in &shares.units {
            self.accounts
                .entry(*unit)
                .or_insert_with(|| Account::new(types));
        }
        for account in self.accounts.values_mut() {
            account.received.iter_mut().for_each(|r| *r = credit);
        }
        clock.work += (self.accounts.len() + shares.units.len()) as u64;
        clock.begin(now, credit, self.accounts.len());
    }

    /// Turns shares into this round's grants. A pair becomes two grants, each naming the other as partner.
    /// Runs after [`UnitBook::account`], which indexes the round's jobs.
    fn grants(
        &mut self,
        shares: &TimeShares,
        input: &RoundInput<'_>,
        clock: &mut Clock,
    ) -> Vec<Grant> {
        let capacity = input.capacity;
        let changed = self
            .current
            .as_ref()
            .is_none_or(|c| c.units != shares.units || c.x != shares.x);
        if changed {
            self.reset(shares, input.now, input.round_length / 2.0, clock);
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
        let order = type_order(&shares.type_preference, capacity.len(), &mut clock.rng);
        let mut left: Vec<u32> = capacity.to_vec();
        // A job runs at most once per round, alone or in one pair.
        let mut placed = vec![false; input.jobs.len()];
        // A grant takes at least one GPU, a pair's two grants share theirs.
        let most = 2 * capacity.iter().sum::<u32>() as usize;
        let mut grants = Vec::with_capacity(rows.len().min(most));
        let mut candidates = std::mem::take(&mut self.candidates);
        for t in order {
            let ti = t.0 as usize;
            candidates.clear();
            clock.work += rows.len() as u64;
            for (k, row) in rows.iter().enumerate() {
                let share = row.shares.get(ti).copied().unwrap_or(0.0);
                if (share <= 0.0 && !shares.fill_idle) || !row.runs_on(t, input) {
                    continue;
                }
                candidates.push(Candidate {
                    rank: row.account.rank(ti, share, &clock.type_time),
                    row: k as u32,
                });
            }
            // Highest priority first, then deficit, then share; equal ranks keep ascending unit order.
            // Ordered even when every candidate fits by count: a placer may still refuse a grant
            // (strict consolidation), and then the order decides who runs.
            let order = |a: &Candidate, b: &Candidate| {
                a.rank
                    .cmp(&b.rank)
                    .then_with(|| rows[a.row as usize].unit.cmp(&rows[b.row as usize].unit))
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

/// Jobs of one class that share one account: they joined in the same period and none has run since
/// (a job that runs leaves for a group of its own). Its jobs rank equal on every type, so they are
/// offered in unit order.
#[derive(Clone, Debug, Default)]
struct Group {
    class: u32,
    account: Account,
    /// Empty for a slot that is free.
    members: Members,
}

/// A group's jobs in unit order, with the first kept beside them: a round visits every group on
/// every type, and most groups hold one job (every job that has run has a group of its own), which
/// is then found without a visit to the set's node.
#[derive(Clone, Debug, Default)]
struct Members {
    set: BTreeSet<JobId>,
    first: Option<JobId>,
}

impl Members {
    fn one(job: JobId) -> Self {
        Members {
            set: BTreeSet::from([job]),
            first: Some(job),
        }
    }

    fn insert(&mut self, job: JobId) {
        self.set.insert(job);
        if self.first.is_none_or(|first| job < first) {
            self.first = Some(job);
        }
    }

    fn remove(&mut self, job: JobId) {
        if self.set.remove(&job) && self.first == Some(job) {
            self.first = self.set.first().copied();
        }
    }

    fn len(&self) -> usize {
        self.set.len()
    }

    fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The first job not in `passed`.
    fn first_not_in(&self, passed: &IdSet<JobId>) -> Option<JobId> {
        let first = self.first?;
        if !passed.contains(&first) {
            return Some(first);
        }
        self.after(first, passed)
    }

    /// The first job after `job` not in `passed`.
    fn after(&self, job: JobId, passed: &IdSet<JobId>) -> Option<JobId> {
        if self.set.len() <= 1 {
            return None;
        }
        let mut rest = self.set.range((Excluded(job), Unbounded));
        rest.find(|j| !passed.contains(j)).copied()
    }
}

/// An active job of a policy that answers by class.
#[derive(Clone, Copy, Debug)]
struct Member {
    class: u32,
    /// Its group; `None` until the next period begins (it joined in this one, and has no account).
    group: Option<u32>,
}

/// A group's next job in one type's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Head {
    rank: Rank,
    job: JobId,
    group: u32,
}

/// The bookkeeping of a policy that answers by class: every active job in a group of its class that
/// shares one account, so that a round visits the groups, the jobs that changed and the jobs it
/// offers GPUs to, not every job (see the module's notes for why decisions are the per-unit form's).
#[derive(Default)]
struct ClassBook {
    /// The classes of the active jobs, and how many each has: what the policy is asked about. A
    /// class whose jobs have all left keeps its slot (with no jobs), and gets it back if it returns,
    /// until a new class takes it: each class is in one slot at most.
    counts: Vec<ClassCount>,
    /// Every slot's class, to its slot.
    class_index: IdMap<JobClass, u32>,
    /// Slots of classes with no jobs left, for the next new class (a client that submits jobs of
    /// ever new classes, any weight it likes, makes as many slots as the most classes it has at
    /// once, not one per class it ever had); a slot whose class has come back since is passed over.
    /// `listed` marks the slots listed.
    free_classes: Vec<u32>,
    listed: Vec<bool>,
    jobs: IdMap<JobId, Member>,
    /// Groups by slot; free slots are empty and listed in `free`.
    groups: Vec<Group>,
    free: Vec<u32>,
    /// Jobs that joined since the period began.
    joined: Vec<JobId>,
    /// A job joined or left since the period began: the shares' units changed.
    moved: bool,
    /// The shares in force.
    current: Option<ClassShares>,
    /// Buffers kept between rounds.
    heads: Vec<Reverse<Head>>,
    placed: IdSet<JobId>,
    cohorts: Vec<Option<u32>>,
}

impl ClassBook {
    /// Charges what ran since the last call, then follows the jobs that left and joined: from the
    /// backlog's report, or, shown every active job, from the whole list.
    fn follow(&mut self, input: &RoundInput<'_>, clock: &mut Clock) {
        // Charged before the jobs that ended leave, as the per-unit form does.
        clock.work += input.usage.len() as u64;
        for usage in input.usage {
            self.charge(usage, clock);
        }
        match input.backlog {
            Some(backlog) => {
                for &id in backlog.left() {
                    self.leave(id, clock);
                }
                for view in input.jobs {
                    self.join(view, clock);
                }
                if self.jobs.len() != backlog.len() {
                    // Lost track (moved to another engine): follow the whole list once.
                    self.sync(&backlog.views(), clock);
                }
            }
            None => self.sync(input.jobs, clock),
        }
    }

    /// Makes the active jobs exactly `views`.
    fn sync(&mut self, views: &[JobView<'_>], clock: &mut Clock) {
        let active: IdSet<JobId> = views.iter().map(JobView::id).collect();
        let mut gone: Vec<JobId> = self
            .jobs
            .keys()
            .filter(|id| !active.contains(id))
            .copied()
            .collect();
        // In id order, so that the groups' slots are freed (and reused) the same in every run.
        gone.sort_unstable();
        clock.work += (views.len() + self.jobs.len()) as u64;
        for id in gone {
            self.leave(id, clock);
        }
        for view in views {
            self.join(view, clock);
        }
    }

    /// Adds a job not yet followed, without an account until the next period begins.
    fn join(&mut self, view: &JobView<'_>, clock: &mut Clock) {
        let id = view.id();
        if self.jobs.contains_key(&id) {
            return;
        }
        clock.work += 1;
        let class = JobClass::of(view);
        let c = match self.class_index.get(&class) {
            Some(&c) => c,
            None => self.new_class(class),
        };
        self.counts[c as usize].jobs += 1;
        self.jobs.insert(
            id,
            Member {
                class: c,
                group: None,
            },
        );
        self.joined.push(id);
        self.moved = true;
    }

    /// Drops a job that ended, and its account.
    fn leave(&mut self, id: JobId, clock: &mut Clock) {
        let Some(member) = self.jobs.remove(&id) else {
            return;
        };
        clock.work += 1;
        let c = member.class as usize;
        self.counts[c].jobs -= 1;
        // Its groups are empty (and free): only a job of its class will refer to the slot again.
        if self.counts[c].jobs == 0 && !self.listed[c] {
            self.listed[c] = true;
            self.free_classes.push(member.class);
        }
        if let Some(g) = member.group {
            let group = &mut self.groups[g as usize];
            group.members.remove(id);
            if group.members.is_empty() {
                self.free.push(g);
            }
        }
        self.moved = true;
    }

    /// A slot for `class`, which has none: one whose class has no jobs left, or a new one.
    fn new_class(&mut self, class: JobClass) -> u32 {
        let count = ClassCount { class, jobs: 0 };
        while let Some(c) = self.free_classes.pop() {
            self.listed[c as usize] = false;
            if self.counts[c as usize].jobs == 0 {
                let old = std::mem::replace(&mut self.counts[c as usize], count);
                self.class_index.remove(&old.class);
                self.class_index
                    .insert(self.counts[c as usize].class.clone(), c);
                return c;
            }
        }
        let c = self.counts.len() as u32;
        self.class_index.insert(count.class.clone(), c);
        self.counts.push(count);
        self.listed.push(false);
        c
    }

    /// A group slot for `group`.
    fn add_group(&mut self, group: Group) -> u32 {
        match self.free.pop() {
            Some(g) => {
                self.groups[g as usize] = group;
                g
            }
            None => {
                self.groups.push(group);
                (self.groups.len() - 1) as u32
            }
        }
    }

    /// Charges a slice of running to its job's account, after moving the job to a group of its own:
    /// its account is no longer its group's. (A pair's slice names no account here: a policy that
    /// answers by class does not pack.)
    fn charge(&mut self, usage: &Usage, clock: &mut Clock) {
        if usage.partner.is_some() {
            return;
        }
        let Some(&Member {
            class,
            group: Some(g),
        }) = self.jobs.get(&usage.job)
        else {
            return;
        };
        let mut g = g;
        if self.groups[g as usize].members.len() > 1 {
            self.groups[g as usize].members.remove(usage.job);
            let account = self.groups[g as usize].account.clone();
            g = self.add_group(Group {
                class,
                account,
                members: Members::one(usage.job),
            });
            self.jobs.insert(
                usage.job,
                Member {
                    class,
                    group: Some(g),
                },
            );
        }
        self.groups[g as usize]
            .account
            .charge(usage, &mut clock.type_time);
    }

    /// Starts a new period with new shares, as [`UnitBook::reset`] does: settles every group's
    /// account under its class's row in force, gives the jobs that joined a group per class, and
    /// reseeds every account's received time.
    fn reset(&mut self, answer: &ClassShares, now: f64, credit: f64, clock: &mut Clock) {
        let live = |group: &&mut Group| !group.members.is_empty();
        if let (Some(old), Some(elapsed)) = (&self.current, clock.elapsed(now)) {
            for group in self.groups.iter_mut().filter(live) {
                group
                    .account
                    .settle(Some(old.row(group.class as usize)), elapsed, credit);
            }
        }
        // One new group per class for the jobs that joined: they start from the same account.
        self.cohorts.clear();
        self.cohorts.resize(self.counts.len(), None);
        let types = clock.type_time.len();
        for id in std::mem::take(&mut self.joined) {
            let Some(&Member { class, group: None }) = self.jobs.get(&id) else {
                continue;
            };
            let g = match self.cohorts[class as usize] {
                Some(g) => g,
                None => {
                    let g = self.add_group(Group {
                        class,
                        account: Account::new(types),
                        members: Members::default(),
                    });
                    self.cohorts[class as usize] = Some(g);
                    g
                }
            };
            self.groups[g as usize].members.insert(id);
            self.jobs.insert(
                id,
                Member {
                    class,
                    group: Some(g),
                },
            );
        }
        for group in self.groups.iter_mut().filter(live) {
            group.account.received.iter_mut().for_each(|r| *r = credit);
        }
        clock.work += self.groups.len() as u64;
        self.current = Some(answer.clone());
        self.moved = false;
        clock.begin(now, credit, self.jobs.len());
    }

    /// Turns the classes' shares into this round's grants, visiting per type each group once and then
    /// only the jobs its GPUs reach. Runs after [`ClassBook::follow`].
    fn grants(
        &mut self,
        answer: &ClassShares,
        input: &RoundInput<'_>,
        clock: &mut Clock,
    ) -> Vec<Grant> {
        // The per-unit form compares every unit's row: with the same jobs, a class's jobs all
        // compare as its row does.
        let changed = self.moved
            || self.current.as_ref().is_none_or(|old| {
                old.num_types != answer.num_types
                    || self
                        .counts
                        .iter()
                        .enumerate()
                        .any(|(c, count)| count.jobs > 0 && old.row(c) != answer.row(c))
            });
        if changed {
            self.reset(answer, input.now, input.round_length / 2.0, clock);
        }
        let capacity = input.capacity;
        let order = type_order(&answer.type_preference, capacity.len(), &mut clock.rng);
        let mut left: Vec<u32> = capacity.to_vec();
        // A job runs at most once per round.
        self.placed.clear();
        let mut grants = Vec::new();
        let mut heads = std::mem::take(&mut self.heads);
        for t in order {
            let ti = t.0 as usize;
            heads.clear();
            clock.work += self.groups.len() as u64;
            // A job placed on an earlier type is passed over, as the per-unit walk skips it: here
            // before it is queued, so that the queue holds only jobs it may grant.
            let placed = &mut self.placed;
            for (g, group) in self.groups.iter().enumerate() {
                let Some(job) = group.members.first_not_in(placed) else {
                    continue;
                };
                let class = &self.counts[group.class as usize].class;
                let share = answer
                    .row(group.class as usize)
                    .get(ti)
                    .copied()
                    .unwrap_or(0.0);
                // A group too large for what is left now never fits later in this walk.
                if (share <= 0.0 && !answer.fill_idle)
                    || !class.runs_on(ti)
                    || class.gpus > left[ti]
                {
                    continue;
                }
                heads.push(Reverse(Head {
                    rank: group.account.rank(ti, share, &clock.type_time),
                    job,
                    group: g as u32,
                }));
            }
            // The groups' heads, merged: the jobs come in the per-unit form's order (rank, then unit).
            let mut queue = BinaryHeap::from(heads);
            while left[ti] > 0 {
                let Some(Reverse(head)) = queue.pop() else {
                    break;
                };
                clock.work += 1;
                let group = &self.groups[head.group as usize];
                let gpus = self.counts[group.class as usize].class.gpus;
                if gpus > left[ti] {
                    continue;
                }
                placed.insert(head.job);
                left[ti] -= gpus;
                grants.push(Grant::new(head.job, t, gpus));
                if let Some(job) = group.members.after(head.job, placed) {
                    queue.push(Reverse(Head { job, ..head }));
                }
            }
            heads = queue.into_vec();
        }
        self.heads = heads;
        grants
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::engine::EngineConfig;
    use crate::job::{Job, Trace, WorkUnit};
    use crate::placement::PackingPlacer;
    use crate::policy::fair_share::{Isolated, MaxMinFairness};
    use crate::sim::{SimConfig, SimResult, Simulation};
    use crate::throughput::ThroughputModel;

    /// A policy that answers by class, made to answer per job: the mechanism's per-unit form.
    struct AnsweredPerJob<P>(P);

    impl<P: ClassSharePolicy + Send> TimeSharePolicy for AnsweredPerJob<P> {
        fn shares(&mut self, input: &RoundInput<'_>) -> TimeShares {
            shares_per_job(&mut self.0, input)
        }
    }

    /// Types run at different speeds; every fifth job cannot run on the last type.
    struct Mixed;

    impl ThroughputModel for Mixed {
        fn steps_per_second(&self, job: &Job, gpu_type: GpuTypeId, gpus: u32) -> Option<f64> {
            let t = gpu_type.0;
            (gpus == job.gpus && !(job.id.0.is_multiple_of(5) && t == 2))
                .then(|| [1.0, 0.7, 0.4][t as usize])
        }
    }

    /// `jobs` jobs, one every `every` seconds: gangs of `gpus(k)` GPUs, `seconds(k)` of work, weights
    /// 1 and 2.
    fn trace(
        jobs: u32,
        every: f64,
        gpus: impl Fn(u32) -> u32,
        seconds: impl Fn(u32) -> f64,
    ) -> Trace {
        let mut trace = Trace::new("mechanism", WorkUnit::Seconds);
        let job_type = trace.intern_job_type("toy");
        let tenant = trace.intern_tenant("default");
        for k in 0..jobs {
            trace.jobs.push(Job {
                id: JobId(k),
                arrival: f64::from(k) * every,
                job_type,
                gpus: gpus(k),
                total_steps: seconds(k),
                weight: f64::from(1 + k % 2),
                tenant,
                batch: None,
                sizes: None,
                min_batch: None,
                group_by_type: Vec::new(),
            });
        }
        trace
    }

    /// Runs `policy` on 8 V100s, 4 P100s and 4 K80s (4 GPUs a server).
    fn run(policy: &mut dyn Policy, trace: &Trace, engine: EngineConfig) -> SimResult {
        let cluster = Cluster::parse_spec("v100=8,p100=4,k80=4", 4).unwrap();
        let mut sim = Simulation::new(trace, &cluster, &Mixed);
        sim.config = SimConfig {
            engine: EngineConfig {
                audit: true,
                ..engine
            },
            log_changes: true,
            ..SimConfig::default()
        };
        sim.run(policy, &mut PackingPlacer, &mut |_, _| {})
    }

    #[test]
    fn answered_by_class_the_mechanism_decides_as_per_unit() {
        // A backlog of gangs of 1 to 8 GPUs, runs of one to many rounds (preempted, resumed, some
        // finishing between rounds), jobs that cannot use a type, two weights; rounds only, and
        // passes on every arrival and completion too (periods of every length), with costs.
        let gpus = |k: u32| [1, 2, 1, 4, 1, 8, 2, 1][k as usize % 8];
        let seconds = |k: u32| f64::from(30 + (k * 7919) % 3000);
        let trace = trace(300, 40.0, gpus, seconds);
        let between_rounds = EngineConfig {
            schedule_on_arrival: true,
            schedule_on_completion: true,
            preempt_cost: 5.0,
            restore_cost: 7.0,
            ..EngineConfig::default()
        };
        for engine in [EngineConfig::default(), between_rounds] {
            compare(Isolated, AnsweredPerJob(Isolated), &trace, &engine);
            compare(
                MaxMinFairness,
                AnsweredPerJob(MaxMinFairness),
                &trace,
                &engine,
            );
        }
    }

    /// Runs a policy that answers by class both ways, and asserts that they decide alike.
    fn compare(
        by_class: impl TimeSharePolicy,
        per_unit: impl TimeSharePolicy,
        trace: &Trace,
        engine: &EngineConfig,
    ) {
        let by_class = run(&mut Realize::new(by_class, 7), trace, engine.clone());
        let per_unit = run(&mut Realize::new(per_unit, 7), trace, engine.clone());
        assert!(
            by_class.records.iter().all(|r| r.finish.is_some()),
            "every job finishes"
        );
        assert!(
            by_class.records.iter().any(|r| r.preemptions > 0),
            "some job was preempted"
        );
        same("start or stop", &by_class.changes, &per_unit.changes);
        same("record", &by_class.records, &per_unit.records);
    }

    /// Asserts that two lists agree, naming the first place they differ.
    fn same<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], expected: &[T]) {
        let differs = (0..got.len().max(expected.len())).find(|&k| got.get(k) != expected.get(k));
        if let Some(k) = differs {
            panic!(
                "{what} {k} differs: {:?} by class, {:?} per unit",
                got.get(k),
                expected.get(k)
            );
        }
    }

    /// What one call cost, and what it was given.
    #[derive(Clone, Copy, Debug)]
    struct Call {
        work: u64,
        /// Active jobs in all.
        active: usize,
        /// Jobs that arrived and left since the last call, jobs running, usage slices, and grants.
        arrived: usize,
        left: usize,
        running: usize,
        usage: usize,
        grants: usize,
    }

    /// Records each call's [`Call`].
    struct Counted<P> {
        realize: Realize<P>,
        calls: Vec<Call>,
        /// Every job seen so far.
        seen: IdSet<JobId>,
        active: usize,
    }

    impl<P: TimeSharePolicy> Policy for Counted<P> {
        fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
            let grants = self.realize.allocate(input);
            let active = input.backlog.map_or(input.jobs.len(), |b| b.len());
            let arrived = input
                .jobs
                .iter()
                .filter(|v| self.seen.insert(v.id()))
                .count();
            self.calls.push(Call {
                work: self.realize.work(),
                active,
                arrived,
                left: self.active + arrived - active,
                running: input.jobs.iter().filter(|v| v.running.is_some()).count(),
                usage: input.usage.len(),
                grants: grants.len(),
            });
            self.active = active;
            grants
        }

        fn keeps_queue(&self) -> bool {
            self.realize.keeps_queue()
        }
    }

    /// Runs `policy` on a backlog that grows for 50 rounds (120 one-GPU jobs of 1 to 5 s arrive a
    /// round, 16 GPUs start at most 16) and then drains; checks that no call's work follows the
    /// backlog.
    fn a_growing_backlog_costs_what_a_round_starts(policy: impl TimeSharePolicy) {
        let trace = trace(6000, 3.0, |_| 1, |k| f64::from(1 + k % 5));
        let mut counted = Counted {
            realize: Realize::new(policy, 3),
            calls: Vec::new(),
            seen: IdSet::default(),
            active: 0,
        };
        let result = run(&mut counted, &trace, EngineConfig::default());
        assert!(result.records.iter().all(|r| r.finish.is_some()));
        let deepest = counted.calls.iter().map(|c| c.active).max().unwrap();
        assert!(deepest > 5000, "the backlog reached only {deepest}");
        // Jobs arrive in the first 50 rounds, in 4 classes (2 weights; every fifth job cannot use a
        // type): the jobs of a class that arrived in one round and have not run share one group, so
        // at most 200 such groups wait, beside a group per job that ran.
        let waiting_groups = 50 * 4;
        let types = 3;
        for (k, c) in counted.calls.iter().enumerate() {
            // Each job that arrived, left, runs or ran and each grant is visited a few times
            // (joining, leaving, charging, a type's queue); each group once at the period's start
            // and once per type.
            let changed = (c.arrived + c.left + c.running + c.usage) as u64;
            let bound = 4 * (changed + c.grants as u64) + (types + 1) * (waiting_groups + changed);
            assert!(
                c.work <= bound,
                "call {k} visited {} with {} jobs active ({c:?}), more than {bound}",
                c.work,
                c.active
            );
        }
    }

    #[test]
    fn isolated_under_a_growing_backlog_visits_what_runs_starts_and_changed() {
        a_growing_backlog_costs_what_a_round_starts(Isolated);
    }

    #[test]
    fn max_min_fairness_under_a_growing_backlog_visits_what_runs_starts_and_changed() {
        a_growing_backlog_costs_what_a_round_starts(MaxMinFairness);
    }

    #[test]
    fn classes_whose_jobs_all_left_give_their_slots_to_new_classes() {
        // Every job a class of its own (weights 1, 2, 3, ...): the mechanism keeps as many class
        // slots as classes live at once, not one per job ever seen, and decides as per unit.
        let gpus = |k: u32| [1, 2, 1, 4][k as usize % 4];
        let mut trace = trace(400, 200.0, gpus, |k| f64::from(30 + (k * 7919) % 3000));
        for job in &mut trace.jobs {
            job.weight = f64::from(1 + job.id.0);
        }
        compare(
            MaxMinFairness,
            AnsweredPerJob(MaxMinFairness),
            &trace,
            &EngineConfig::default(),
        );
        let mut counted = Counted {
            realize: Realize::new(MaxMinFairness, 7),
            calls: Vec::new(),
            seen: IdSet::default(),
            active: 0,
        };
        run(&mut counted, &trace, EngineConfig::default());
        let deepest = counted.calls.iter().map(|c| c.active).max().unwrap();
        let Some(Mechanism {
            book: Book::ByClass(book),
            ..
        }) = &counted.realize.mechanism
        else {
            panic!("max_min_fairness answers by class");
        };
        assert!(deepest < 200, "{deepest} jobs were active at once");
        assert!(
            book.counts.len() <= deepest,
            "{} class slots for at most {deepest} jobs at once",
            book.counts.len()
        );
        assert_class_slots(book);
    }

    /// The book's class slots hang together: the index names every slot's class at its slot, and
    /// the free list holds each slot at most once, exactly the slots marked listed, among them every
    /// slot with no jobs.
    fn assert_class_slots(book: &ClassBook) {
        assert_eq!(book.class_index.len(), book.counts.len());
        for (c, count) in book.counts.iter().enumerate() {
            assert_eq!(book.class_index.get(&count.class), Some(&(c as u32)));
            let listed = book
                .free_classes
                .iter()
                .filter(|&&f| f as usize == c)
                .count();
            assert_eq!(
                listed,
                usize::from(book.listed[c]),
                "slot {c} listed {listed} times"
            );
            assert!(
                count.jobs > 0 || book.listed[c],
                "slot {c} is empty but not listed"
            );
        }
    }

    #[test]
    fn a_class_that_comes_back_keeps_its_slot_and_new_ones_take_only_empty_slots() {
        let mut book = ClassBook::default();
        let mut clock = Clock::new(1, 0);
        let rates = [1.0];
        let jobs: Vec<Job> = [1.0, 2.0, 1.0, 3.0, 4.0]
            .iter()
            .zip(0..)
            .map(|(&weight, id)| Job {
                weight,
                ..Job::new(JobId(id), 0.0, 1, 10.0)
            })
            .collect();
        let join = |book: &mut ClassBook, clock: &mut Clock, k: usize| {
            book.join(&JobView::arrived(&jobs[k], &rates), clock);
            book.jobs[&jobs[k].id].class
        };
        // Weight 1 in slot 0, weight 2 in slot 1; both empty out.
        assert_eq!(join(&mut book, &mut clock, 0), 0);
        assert_eq!(join(&mut book, &mut clock, 1), 1);
        book.leave(JobId(0), &mut clock);
        book.leave(JobId(1), &mut clock);
        assert_class_slots(&book);
        // Weight 1 comes back to its own slot; weight 3 takes weight 2's; weight 4 passes over slot
        // 0 (listed, but its class came back) for a new one.
        assert_eq!(join(&mut book, &mut clock, 2), 0);
        assert_eq!(join(&mut book, &mut clock, 3), 1);
        assert_eq!(join(&mut book, &mut clock, 4), 2);
        assert_class_slots(&book);
        assert!(book.free_classes.is_empty());
        let weights: Vec<f64> = book.counts.iter().map(|c| c.class.weight()).collect();
        assert_eq!(weights, [1.0, 3.0, 4.0]);
    }

    #[test]
    fn classes_that_empty_and_come_back_decide_as_per_unit() {
        // Blocks of 20 jobs share a weight (0.5, 1.5, 2.5 in turn: not whole, so max-min answers
        // over every job): a weight's classes empty out between its blocks and come back, in slots
        // given meanwhile to the next weight's.
        let gpus = |k: u32| [1, 2, 1, 4][k as usize % 4];
        let mut trace = trace(360, 200.0, gpus, |k| f64::from(30 + (k * 7919) % 3000));
        for job in &mut trace.jobs {
            job.weight = 0.5 + f64::from((job.id.0 / 20) % 3);
        }
        compare(
            MaxMinFairness,
            AnsweredPerJob(MaxMinFairness),
            &trace,
            &EngineConfig::default(),
        );
    }

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
