//! Policies that order the jobs by one key and grant GPUs in that order: FIFO, SJF and SRTF.
//!
//! They are heterogeneity-agnostic: a job gets the first GPU type, in the order the cluster lists its
//! types, that has room for its whole gang. A job that runs keeps its type where it can, so that it is
//! not migrated needlessly.

use std::collections::BTreeSet;

use super::effective::best_rate;
use super::{
    Grant, Intent, JobView, PerJob, Policy, PolicyConfig, PolicyEntry, Registry, RegistryError,
    RoundInput,
};
use crate::cluster::GpuTypeId;
use crate::job::JobId;

/// Orders jobs by `key` (lowest first) and grants in that order.
pub struct Ordered {
    key: fn(&JobView<'_>) -> f64,
    /// Every active job in key order, kept between rounds.
    queue: Queue,
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
            queue: Queue::default(),
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
            queue: Queue::default(),
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
            queue: Queue::default(),
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
        self.queue.update(input, |v| (key(v), 0.0));
        self.queue.grant(
            input,
            &GrantRules {
                preemptive: self.preemptive,
                head_of_line_blocking: self.head_of_line_blocking,
                consolidate: self.consolidate,
                fastest: self.fastest,
            },
        )
    }

    /// Arrival order and total work never change; remaining work only shrinks for running jobs, which
    /// can only move them up: between events, every round decides as the last one did.
    fn changes_with_time(&self) -> bool {
        false
    }

    /// A waiting job's key (arrival, work, remaining work) stays as it is until it runs.
    fn keeps_queue(&self) -> bool {
        true
    }

    fn queue_order(&self, limit: usize) -> Option<Vec<JobId>> {
        Some(self.queue.first(limit))
    }
}

/// `x` as an unsigned key that orders as `f64::total_cmp` orders.
fn ascending_key(x: f64) -> u64 {
    let bits = x.to_bits() as i64;
    // What `total_cmp` compares, as a signed integer; flipping the sign bit keeps its order unsigned.
    let ordered = bits ^ (((bits >> 63) as u64) >> 1) as i64;
    (ordered as u64) ^ (1 << 63)
}

/// A place in a [`Queue`]: the key's two parts, then the order the job was first seen in.
type Place = (u64, u64, u64);

/// Every active job a policy has seen, ordered by the policy's key (lowest first; equal keys in arrival
/// order), kept between rounds for a policy that keeps its own queue ([`Policy::keeps_queue`]). Each
/// round it re-keys only the jobs its input shows (running or changed), and [`Queue::grant`] walks it
/// only until the GPUs are gone: a round costs what it can start and what runs, not the backlog. A
/// waiting job's key must stay as it is until the job shows up in the input again, or the policy
/// [`Queue::rekey`]s it.
#[derive(Default)]
pub(super) struct Queue {
    /// Each job in order, with its slot (to find what the queue holds of it).
    order: BTreeSet<(Place, JobId, usize)>,
    places: PerJob<Held>,
    /// The next job's place in arrival order.
    seen: u64,
    /// Rounds seen (by [`Queue::update`]): a job whose `shown_in` is this one is in this round's
    /// `RoundInput::jobs`, at `index` (counted from 1: a job not shown yet has `shown_in` 0).
    round: u64,
}

/// What a [`Queue`] holds of a job: its place (and slot, its entry's key in the order), and where
/// this round's input shows it (one lookup finds both, in a round that visits every running job
/// twice).
#[derive(Clone, Copy)]
struct Held {
    place: Place,
    slot: usize,
    shown_in: u64,
    index: usize,
    /// The round in which the queue was last rebuilt with it in (see [`Queue::rebuild`]).
    rebuilt_in: u64,
    /// The GPUs its gang takes, and the type it ran on (where it can run) when last shown: what
    /// the grant walk needs of a running job the engine leaves out until its policy looks again
    /// ([`Policy::look_again_at`]).
    gpus: u32,
    ran_on: Option<GpuTypeId>,
}

impl Queue {
    /// Brings the queue up to this round's input: drops the jobs that left and (re)keys the jobs shown
    /// with `key`. Without a backlog (every active job shown), or when it lost track of the backlog, it
    /// is rebuilt from every job, and returns the jobs it held that are no longer active (with a
    /// backlog, those are [`Backlog::left`](super::Backlog::left)).
    pub fn update(
        &mut self,
        input: &RoundInput<'_>,
        mut key: impl FnMut(&JobView<'_>) -> (f64, f64),
    ) -> Vec<JobId> {
        self.round += 1;
        let Some(backlog) = input.backlog else {
            return self.rebuild(input.jobs, true, key);
        };
        for id in backlog.left() {
            if let Some(held) = self.places.remove(*id) {
                self.order.remove(&(held.place, *id, held.slot));
            }
        }
        let round = self.round;
        for (k, view) in input.jobs.iter().enumerate() {
            let place = key(view);
            self.keyed(view, place).mark_shown(round, k);
        }
        if self.places.len() != backlog.len() {
            // A queue that lost track (a policy moved to another engine) starts again from scratch.
            let gone = self.rebuild(&backlog.views(), false, key);
            self.show(input.jobs);
            return gone;
        }
        Vec::new()
    }

    /// Notes where this round's input shows each of `jobs` (after a rebuild).
    fn show(&mut self, jobs: &[JobView<'_>]) {
        for (k, view) in jobs.iter().enumerate() {
            if let Some(held) = self.places.get_at_mut(view.id(), view.slot) {
                held.mark_shown(self.round, k);
            }
        }
    }

    /// Rebuilds the queue from `jobs` (every active job, in arrival order); returns the jobs it held
    /// that are no longer there. The entries stay where they are (a policy shown every job rebuilds
    /// every round), placed afresh in input order. `shown`: `jobs` is this round's input, whose
    /// places are noted as it goes.
    fn rebuild(
        &mut self,
        jobs: &[JobView<'_>],
        shown: bool,
        mut key: impl FnMut(&JobView<'_>) -> (f64, f64),
    ) -> Vec<JobId> {
        self.order.clear();
        self.seen = 0;
        let round = self.round;
        for (index, view) in jobs.iter().enumerate() {
            let k = key(view);
            let place = (ascending_key(k.0), ascending_key(k.1), self.seen + 1);
            let held = self.places.entry(view, || Held::new(place, view.slot));
            let held = if held.rebuilt_in == round {
                // Listed twice: the second is a new key for the first.
                self.keyed(view, k)
            } else {
                self.seen += 1;
                held.place = place;
                held.rebuilt_in = round;
                held.saw(view);
                self.order.insert((place, view.id(), held.slot));
                held
            };
            if shown {
                held.mark_shown(round, index);
            }
        }
        let mut gone = Vec::new();
        self.places.retain(|id, held| {
            let kept = held.rebuilt_in == round;
            if !kept {
                gone.push(id);
            }
            kept
        });
        gone.sort_unstable();
        gone
    }

    /// Gives the job `view` shows a new key, adding it if new (last among equal keys).
    pub fn rekey(&mut self, view: &JobView<'_>, key: (f64, f64)) {
        self.keyed(view, key);
    }

    /// [`Queue::rekey`], and what the queue holds of the job.
    fn keyed(&mut self, view: &JobView<'_>, (a, b): (f64, f64)) -> &mut Held {
        let (a, b) = (ascending_key(a), ascending_key(b));
        let (id, next) = (view.id(), self.seen + 1);
        let held = self
            .places
            .entry(view, || Held::new((a, b, next), view.slot));
        held.saw(view);
        let old = held.place;
        if old.2 == next {
            // New: last in arrival order.
            self.seen = next;
            self.order.insert((old, id, held.slot));
        } else if (old.0, old.1) != (a, b) {
            // Most running jobs keep their key from round to round (FIFO's never changes).
            self.order.remove(&(old, id, held.slot));
            held.place = (a, b, old.2);
            self.order.insert((held.place, id, held.slot));
        }
        held
    }

    /// Grants GPUs in queue order: a running job keeps its GPUs unless `rules` make it compete, and
    /// each other job gets the type it runs on when that still has room, else the first type in cluster
    /// order (or the fastest, by its rates, with `rules.fastest`) with room for its whole gang. Walks
    /// the queue only as long as some GPU is left.
    ///
    /// A running job the engine left out of the input until its policy looks at it again
    /// ([`Policy::look_again_at`]) keeps its type, as it last showed it, where that has room; only
    /// otherwise is its view asked of the backlog. Rules without preemption need every running job
    /// shown (they set the running jobs' GPUs aside before the walk).
    pub fn grant(&self, input: &RoundInput<'_>, rules: &GrantRules) -> Vec<Grant> {
        let mut granter = Granter::new(input, rules);
        for &(_, id, slot) in &self.order {
            let held = self.places.get_at(id, slot);
            let shown = held.filter(|h| h.shown_in == self.round);
            let quiet = held
                .filter(|h| h.shown_in != self.round)
                .and_then(|h| Some((h.ran_on?, h.gpus)));
            debug_assert!(
                quiet.is_none() || rules.preemptive,
                "job {id} left out while it runs, under rules that need every running job shown"
            );
            if let Some((gpu_type, gpus)) = quiet.filter(|_| !rules.fastest)
                && let Some(more) = granter.offer_where_it_runs(id, gpu_type, gpus)
            {
                if !more {
                    break;
                }
                continue;
            }
            // A shown job's view is borrowed, not copied: most of the order is shown every round.
            let asked;
            let view = match shown {
                Some(held) => &input.jobs[held.index],
                None => match input.backlog.and_then(|b| b.view(id)) {
                    Some(view) => {
                        asked = view;
                        &asked
                    }
                    None => continue,
                },
            };
            if granter.kept(view) {
                continue;
            }
            if !granter.offer(view) {
                break;
            }
        }
        granter.grants
    }

    /// The first `limit` jobs in its order.
    pub fn first(&self, limit: usize) -> Vec<JobId> {
        self.order
            .iter()
            .take(limit)
            .map(|&(_, id, _)| id)
            .collect()
    }

    /// How many jobs it holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.places.len()
    }
}

impl Held {
    fn new(place: Place, slot: usize) -> Self {
        Held {
            place,
            slot,
            shown_in: 0,
            index: 0,
            rebuilt_in: 0,
            gpus: 0,
            ran_on: None,
        }
    }

    /// Notes what the grant walk needs of the job as `view` shows it.
    fn saw(&mut self, view: &JobView<'_>) {
        self.gpus = view.job.gpus;
        self.ran_on = (view.running)
            .map(|r| r.gpu_type)
            .filter(|t| view.rates[t.0 as usize] > 0.0);
    }

    fn mark_shown(&mut self, round: u64, index: usize) {
        self.shown_in = round;
        self.index = index;
    }
}

/// How [`Queue::grant`] treats running jobs, blocked jobs and placement.
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

/// One round's grants in order, as jobs are offered GPUs one by one.
struct Granter<'r> {
    rules: &'r GrantRules,
    /// GPUs of each type not yet granted.
    free: Vec<u32>,
    grants: Vec<Grant>,
}

impl<'r> Granter<'r> {
    /// Starts from the capacity; without preemption, running jobs keep their GPUs first, in input
    /// order (under such rules every running job is in `input.jobs`: none of this module's
    /// policies without preemption leaves one out, [`Policy::look_again_at`]).
    fn new(input: &RoundInput<'_>, rules: &'r GrantRules) -> Self {
        let mut granter = Granter {
            rules,
            free: input.capacity.to_vec(),
            grants: Vec::new(),
        };
        if !rules.preemptive {
            for view in input.jobs {
                if let Some(run) = view.running {
                    let gpus = run.gpus.len() as u32;
                    let t = run.gpu_type.0 as usize;
                    granter.free[t] = granter.free[t].saturating_sub(gpus);
                    let grant = Grant::new(view.id(), run.gpu_type, gpus).with(rules.intent());
                    granter.grants.push(grant);
                }
            }
        }
        granter
    }

    /// Whether `view` is a running job that keeps its GPUs whatever the order (no preemption).
    fn kept(&self, view: &JobView<'_>) -> bool {
        view.running.is_some() && !self.rules.preemptive
    }

    /// Offers running job `id` its `gpus` GPUs of `gpu_type`, where it runs (and can run), without
    /// its view: `None` when they are not free (it is then offered others by its view, as
    /// [`Granter::offer`] would); else whether later jobs may still get GPUs.
    fn offer_where_it_runs(&mut self, id: JobId, gpu_type: GpuTypeId, gpus: u32) -> Option<bool> {
        if self.free[gpu_type.0 as usize] < gpus {
            return None;
        }
        self.grant_on(id, gpu_type, gpus);
        Some(self.any_left())
    }

    /// Grants job `id` `gpus` GPUs of `gpu_type`, which are free.
    fn grant_on(&mut self, id: JobId, gpu_type: GpuTypeId, gpus: u32) {
        self.free[gpu_type.0 as usize] -= gpus;
        let grant = Grant::new(id, gpu_type, gpus).with(self.rules.intent());
        self.grants.push(grant);
    }

    /// Whether some GPU is still free (a grant takes at least one).
    fn any_left(&self) -> bool {
        self.free.iter().any(|&f| f > 0)
    }

    /// Offers `view` the GPUs left; returns whether later jobs may still get some: not when a job that
    /// does not fit blocks the rest, nor when no GPU is left (a grant takes at least one).
    fn offer(&mut self, view: &JobView<'_>) -> bool {
        let rules = self.rules;
        let free = &mut self.free;
        let gpus = view.job.gpus;
        let fits = |free: &[u32], t: usize| free[t] >= gpus && view.rates[t] > 0.0;
        // A running job keeps its type where it can, unless the fastest free type is the rule.
        let current = view
            .running
            .map(|r| r.gpu_type.0 as usize)
            .filter(|&t| fits(free, t) && !rules.fastest);
        let fresh = || {
            let mut candidates = (0..free.len()).filter(|&t| fits(free, t));
            if rules.fastest {
                candidates.max_by(|&a, &b| view.rates[a].total_cmp(&view.rates[b]).then(b.cmp(&a)))
            } else {
                candidates.next()
            }
        };
        match current.or_else(fresh) {
            Some(t) => self.grant_on(view.id(), GpuTypeId(t as u16), gpus),
            None if rules.head_of_line_blocking => return false,
            None => {}
        }
        self.any_left()
    }
}

/// Enters this module's policies (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("fifo_perf", |_: &PolicyConfig| {
            Box::new(Ordered::fifo_perf())
        })
        .summary(
            "FIFO over the fastest GPU types: each round, jobs in arrival order take the \
             fastest type with room (Gavel's `fifo_perf`)",
        ),
    )?;
    registry.register(
        PolicyEntry::new("fifo", |_: &PolicyConfig| Box::new(Ordered::fifo())).summary(
            "first come, first served; no preemption; the head of the queue blocks \
             (Gavel's `fifo`)",
        ),
    )?;
    registry.register(
        PolicyEntry::new("yarn_cs", |_: &PolicyConfig| Box::new(Ordered::yarn_cs())).summary(
            "FIFO with strict consolidation: a gang waits until one server can hold it \
             (Tiresias' baseline)",
        ),
    )?;
    registry.register(
        PolicyEntry::new("sjf", |_: &PolicyConfig| Box::new(Ordered::sjf())).summary(
            "shortest job first by total work (oracle); no preemption; small jobs backfill",
        ),
    )?;
    registry.register(
        PolicyEntry::new("srtf", |_: &PolicyConfig| Box::new(Ordered::srtf()))
            .summary("shortest remaining time first (oracle); preempts at round boundaries"),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::job::Job;
    use crate::policy::Backlog;
    use crate::throughput::DurationModel;

    fn job(id: u32, arrival: f64) -> Job {
        Job::new(JobId(id), arrival, 1, 10.0)
    }

    /// A backlog that says it holds `len` jobs, of which it can show `jobs`.
    struct Fake<'a> {
        len: usize,
        jobs: &'a [JobView<'a>],
        left: Vec<JobId>,
    }

    impl Backlog for Fake<'_> {
        fn len(&self) -> usize {
            self.len
        }
        fn left(&self) -> &[JobId] {
            &self.left
        }
        fn view(&self, id: JobId) -> Option<JobView<'_>> {
            self.jobs.iter().find(|v| v.id() == id).cloned()
        }
        fn views(&self) -> Vec<JobView<'_>> {
            self.jobs.to_vec()
        }
    }

    /// A round at 0 s on `cluster`, showing `jobs`, with `backlog` for the rest.
    fn round<'a>(
        cluster: &'a Cluster,
        model: &'a DurationModel,
        probe: &'a crate::placement::PackingProbe<'a>,
        jobs: &'a [JobView<'a>],
        backlog: Option<&'a dyn Backlog>,
    ) -> RoundInput<'a> {
        RoundInput {
            now: 0.0,
            round_length: 360.0,
            cluster,
            capacity: cluster.capacity(),
            jobs,
            backlog,
            placement: probe,
            jobs_changed: true,
            type_order: &[GpuTypeId(0)],
            model,
            usage: &[],
            paused: &[],
        }
    }

    fn granted(queue: &Queue, input: &RoundInput<'_>) -> Vec<u32> {
        let rules = GrantRules {
            preemptive: true,
            head_of_line_blocking: false,
            consolidate: false,
            fastest: false,
        };
        queue.grant(input, &rules).iter().map(|g| g.job.0).collect()
    }

    #[test]
    fn a_queue_follows_what_changed_and_rebuilds_when_it_lost_track() {
        let cluster = Cluster::parse_spec("v100=2", 1).unwrap();
        let model = DurationModel::uniform(1);
        // Jobs 0..4 arrive at 4, 3, 2, 1 and 0 s; jobs 5 and 6 at the same time as job 4.
        let jobs: Vec<Job> = [4.0, 3.0, 2.0, 1.0, 0.0, 0.0, 0.0]
            .iter()
            .enumerate()
            .map(|(k, &a)| job(k as u32, a))
            .collect();
        let rates = [1.0];
        let views: Vec<JobView<'_>> = jobs.iter().map(|j| JobView::arrived(j, &rates)).collect();
        let probe = crate::placement::PackingProbe::new(&cluster);
        let input = |jobs, backlog| round(&cluster, &model, &probe, jobs, backlog);
        let by_arrival = |v: &JobView<'_>| (v.job.arrival, 0.0);
        let mut queue = Queue::default();
        // Shown every job: the earliest arrivals, equal ones in input order, until the GPUs are gone.
        let all = input(&views[..5], None);
        assert!(queue.update(&all, by_arrival).is_empty());
        assert_eq!((queue.len(), granted(&queue, &all)), (5, vec![4, 3]));
        // Shown only what changed: job 4 left, jobs 5 and 6 arrived (last among equal keys).
        let fake = Fake {
            len: 6,
            jobs: &views[..],
            left: vec![JobId(4)],
        };
        let changed = input(&views[5..], Some(&fake));
        assert!(queue.update(&changed, by_arrival).is_empty());
        assert_eq!((queue.len(), granted(&queue, &changed)), (6, vec![5, 6]));
        let ids = |ids: &[u32]| ids.iter().map(|&i| JobId(i)).collect::<Vec<_>>();
        assert_eq!(
            queue.first(10),
            ids(&[5, 6, 3, 2, 1, 0]),
            "its order, for people"
        );
        assert_eq!(queue.first(2), ids(&[5, 6]));
        // A policy on the queue shows that order as its own.
        let mut fifo = Ordered::fifo();
        assert_eq!(fifo.queue_order(3), Some(Vec::new()), "nothing seen yet");
        fifo.allocate(&all);
        assert_eq!(fifo.queue_order(3), Some(ids(&[4, 3, 2])));
        // A backlog that holds more than the queue knows: rebuilt from every job, in input order.
        let fake = Fake {
            len: 7,
            jobs: &views[..],
            left: Vec::new(),
        };
        let lost = input(&views[..0], Some(&fake));
        assert!(queue.update(&lost, by_arrival).is_empty());
        assert_eq!((queue.len(), granted(&queue, &lost)), (7, vec![4, 5]));
    }

    #[test]
    fn a_slot_given_to_a_new_job_in_the_round_its_holder_left_is_the_new_jobs() {
        let cluster = Cluster::parse_spec("v100=2", 1).unwrap();
        let model = DurationModel::uniform(1);
        let probe = crate::placement::PackingProbe::new(&cluster);
        let rates = [1.0];
        // Jobs 0, 1 and 2 at slots 0, 1 and 2; job 9, arriving last, gets slot 0 once job 0 left.
        let jobs: Vec<Job> = [(0, 0.0), (1, 1.0), (2, 2.0), (9, 9.0)]
            .iter()
            .map(|&(id, arrival)| job(id, arrival))
            .collect();
        let views: Vec<JobView<'_>> = jobs
            .iter()
            .zip([0, 1, 2, 0])
            .map(|(j, slot)| JobView {
                slot,
                ..JobView::arrived(j, &rates)
            })
            .collect();
        let input = |jobs, backlog| round(&cluster, &model, &probe, jobs, backlog);
        let by_arrival = |v: &JobView<'_>| (v.job.arrival, 0.0);
        let mut queue = Queue::default();
        let first = Fake {
            len: 3,
            jobs: &views[..3],
            left: Vec::new(),
        };
        queue.update(&input(&views[..3], Some(&first)), by_arrival);
        // Job 0 leaves and job 9 arrives at its slot, in one round: the slot is job 9's.
        let second = Fake {
            len: 3,
            jobs: &views[1..],
            left: vec![JobId(0)],
        };
        let round = input(&views[3..], Some(&second));
        assert!(queue.update(&round, by_arrival).is_empty());
        let ids = |ids: &[u32]| ids.iter().map(|&i| JobId(i)).collect::<Vec<_>>();
        assert_eq!((queue.len(), queue.first(10)), (3, ids(&[1, 2, 9])));
        assert_eq!(granted(&queue, &round), vec![1, 2]);
        assert!(queue.places.get_at(JobId(9), 0).is_some());
        assert!(queue.places.get_at(JobId(0), 0).is_none());
        // Job 1 leaves: job 9, not shown this round, is granted from the backlog's view.
        let third = Fake {
            len: 2,
            jobs: &views[2..],
            left: vec![JobId(1)],
        };
        let round = input(&views[2..3], Some(&third));
        assert!(queue.update(&round, by_arrival).is_empty());
        assert_eq!(granted(&queue, &round), vec![2, 9]);
    }
}
