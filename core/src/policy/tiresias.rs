//! Tiresias (Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI'19).
//!
//! - **2DAS** (`tiresias`): a job's attained service is GPUs x time. Services are discretized into K
//!   queues by thresholds (default 3,250 / 7,200 / 18,000 GPU-seconds, as in Tiresias' simulator). A lower
//!   queue always goes first; inside a queue jobs go in arrival order. It preempts at round boundaries.
//!   `tiresias:queue_scale=X` multiplies the thresholds, for clusters whose jobs are much shorter or
//!   longer than Microsoft's (Tiresias tunes them per cluster).
//! - **Starvation promotion**: a job that has waited longer than `promote_knob` x its last run goes back
//!   to the top queue (its service is counted afresh from then). Default knob: 10 (`tiresias:promote=N`).
//! - **Gittins index** (`tiresias_gittins`): the same queues; inside a queue, jobs are ordered by their
//!   Gittins index over the GPU-time distribution, with the quantum set by the distance to the next
//!   queue threshold. The distribution
//!   is given (`PolicyConfig::service_distribution`, e.g. Tiresias' `yarn-gput*.csv`), or learned online
//!   from the jobs that have finished; until 10 have, 2DAS order is used.
//! - **1-D LAS** (`dlas`): the same, with service counted in time only, for comparison.
//! - **As Pollux's simulator runs it** (`tiresias_pollux`, Pollux's baseline "Tiresias+TunedJobs",
//!   Qiao et al., OSDI'21): two queues split at 16 GPU-hours, no starvation promotion, and a job enters
//!   the back of its new queue when it is demoted; jobs keep the GPU count and batch size their workload
//!   tuned them to.
//!
//! Placement is the placer's job: Tiresias consolidates only placement-sensitive models, which is
//! `--placement sensitive`. Preemption costs are the simulator's checkpoint and restore costs.

use std::collections::BTreeSet;

use super::ordered::{GrantRules, Queue};
use super::{
    Grant, JobView, Knob, PerJob, Policy, PolicyConfig, PolicyEntry, Registry, RegistryError,
    RoundInput,
};
use crate::job::{IdMap, JobId};

/// What counts as attained service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// GPUs x seconds (Tiresias' two-dimensional service).
    GpuTime,
    /// Seconds only (1-D LAS).
    Time,
}

/// Tiresias' queue thresholds in its simulator, in service units (GPU-seconds).
pub const DEFAULT_THRESHOLDS: [f64; 3] = [3250.0, 7200.0, 18000.0];
/// The one queue threshold of Pollux's Tiresias: 16 GPU-hours.
pub const POLLUX_THRESHOLD: f64 = 16.0 * 3600.0;
/// Finished jobs needed before the Gittins index replaces 2DAS order.
const MIN_SAMPLES: usize = 10;

/// Tiresias' discretized LAS: queues by attained service, starvation promotion, and optionally the
/// Gittins index within a queue (see the module docs).
pub struct Tiresias {
    service: Service,
    thresholds: Vec<f64>,
    promote_knob: f64,
    gittins: bool,
    /// What it keeps of each job it was shown: its promotion, its queue entry, its starvation watch.
    tracked: PerJob<Tracked>,
    /// Last seen service of each active job, to learn the service of jobs that leave.
    last_seen: IdMap<JobId, f64>,
    /// Sorted services of finished jobs (or of a given distribution), and their prefix sums.
    samples: Vec<f64>,
    prefix: Vec<f64>,
    /// The services learned, oldest first: the most recent [`LEARNED_SAMPLES`] make the distribution.
    learned: std::collections::VecDeque<f64>,
    /// The distribution was given: do not learn it.
    fixed: bool,
    /// Inside a queue, order jobs by when they entered it (Pollux's variant), not by arrival.
    by_queue_entry: bool,
    /// Every active job in the order it goes in, kept between rounds.
    queue: Queue,
    /// Waiting jobs that ran before, by when they become starved (see [`Starving`]): only those due
    /// are looked at, not the whole backlog.
    starving: BTreeSet<(u64, JobId)>,
}

/// What Tiresias keeps of a job between rounds, in one entry: a round looks each job it is shown up
/// once (thousands of running jobs, every round).
#[derive(Clone, Copy, Debug, Default)]
struct Tracked {
    /// Service at its last promotion: its queue counts service from there (0: never promoted).
    promoted_at: f64,
    /// Its queue, and when it entered it (Pollux's variant, which orders a queue by entry).
    entered: Option<(usize, f64)>,
    /// Waiting after a run: what its last view showed, to tell when it starves.
    waiting: Option<Starving>,
}

/// A waiting job that ran before, as its last view showed it: it is promoted once it has waited longer
/// than the promotion knob times its last run.
#[derive(Clone, Copy, Debug)]
struct Starving {
    queued_since: f64,
    last_run_seconds: f64,
    service: f64,
    /// Its place in `Tiresias::starving`: about when it becomes starved.
    due: u64,
}

impl Starving {
    /// Whether it has waited longer than `knob` times its last run at `now`.
    fn starved(&self, knob: f64, now: f64) -> bool {
        now - self.queued_since > knob * self.last_run_seconds
    }
}

/// Finished jobs whose service the learned Gittins distribution remembers: the most recent ones, so
/// that a control plane that runs for months keeps a bounded, current distribution.
const LEARNED_SAMPLES: usize = 10_000;

impl Tiresias {
    /// Tiresias counting `service`, with its simulator's thresholds ([`DEFAULT_THRESHOLDS`]) and
    /// promotion knob 10; with `gittins`, ordered by the Gittins index within a queue once 10 jobs
    /// have finished (or at once, given a distribution by [`Tiresias::with_distribution`]).
    pub fn new(service: Service, gittins: bool) -> Self {
        Tiresias {
            service,
            thresholds: DEFAULT_THRESHOLDS.to_vec(),
            promote_knob: 10.0,
            gittins,
            tracked: PerJob::new(),
            last_seen: IdMap::default(),
            samples: Vec::new(),
            prefix: Vec::new(),
            learned: std::collections::VecDeque::new(),
            fixed: false,
            by_queue_entry: false,
            queue: Queue::default(),
            starving: BTreeSet::new(),
        }
    }

    /// Whether the Gittins distribution is learned from finished jobs (and so changes every waiting
    /// job's place whenever one finishes).
    fn learns(&self) -> bool {
        self.gittins && !self.fixed
    }

    /// Prices jobs with a given service distribution (GPU-seconds) instead of learning one.
    pub fn with_distribution(mut self, samples: &[f64]) -> Self {
        self.samples = samples.to_vec();
        self.fixed = true;
        self.index_samples();
        self
    }

    fn index_samples(&mut self) {
        self.samples.sort_by(f64::total_cmp);
        self.prefix.clear();
        let mut sum = 0.0;
        for &s in &self.samples {
            sum += s;
            self.prefix.push(sum);
        }
    }

    fn service_of(&self, view: &JobView<'_>) -> f64 {
        match self.service {
            Service::GpuTime => view.attained_gpu_seconds,
            Service::Time => view.attained_seconds,
        }
    }

    /// The queue (0 = highest priority) for a service.
    pub fn queue_of(&self, service: f64) -> usize {
        queue_for(&self.thresholds, service)
    }

    /// Records the services of jobs that left since the last round (ended: a paused job has not).
    fn learn(&mut self, input: &RoundInput<'_>) {
        let active = input.not_ended();
        let mut gone: Vec<JobId> = self
            .last_seen
            .keys()
            .filter(|j| !active.contains(j))
            .copied()
            .collect();
        // In id order: the services learned are a bounded window, and which leave it first decides
        // the queues' thresholds (the map's order differs from run to run).
        gone.sort_unstable();
        let mut added = false;
        for job in gone {
            if let Some(s) = self.last_seen.remove(&job)
                && !self.fixed
            {
                if self.learned.len() == LEARNED_SAMPLES {
                    self.learned.pop_front();
                }
                self.learned.push_back(s);
                added = true;
            }
        }
        if added {
            self.samples.clear();
            self.samples.extend(&self.learned);
            self.index_samples();
        }
        for v in input.jobs {
            self.last_seen.insert(v.id(), self.service_of(v));
        }
    }

    /// Gittins index of a job with attained service `a` over the quantum `delta`:
    /// P(a < S <= a + delta) / E[min(S, a + delta) - a; S > a], over the learned distribution.
    pub fn gittins_index(&self, a: f64, delta: f64) -> f64 {
        let n = self.samples.len();
        if n == 0 {
            return 0.0;
        }
        let b = a + delta;
        let above_a = self.samples.partition_point(|&s| s <= a);
        let upto_b = self.samples.partition_point(|&s| s <= b);
        let finishing = (upto_b - above_a) as f64;
        // Sum over samples above a of (min(s, b) - a).
        let sum_between = self
            .prefix
            .get(upto_b.wrapping_sub(1))
            .copied()
            .unwrap_or(0.0)
            - if above_a > 0 {
                self.prefix[above_a - 1]
            } else {
                0.0
            };
        let work = (sum_between - finishing * a) + (n - upto_b) as f64 * delta;
        if work <= 0.0 { 0.0 } else { finishing / work }
    }
}

impl Policy for Tiresias {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        // Only a learned Gittins distribution needs the services of jobs that left.
        if self.learns() {
            self.learn(input);
        }
        let now = input.now;
        if let Some(backlog) = input.backlog {
            for &id in backlog.left() {
                self.forget(id);
            }
        }
        let use_gittins = self.gittins && (self.fixed || self.samples.len() >= MIN_SAMPLES);
        let rules = GrantRules {
            preemptive: true,
            head_of_line_blocking: false,
            consolidate: false,
            fastest: false,
        };
        let mut queue = std::mem::take(&mut self.queue);
        // Each job shown is watched for starvation (and promoted if it starved) as it is keyed.
        let gone = queue.update(input, |v| self.key(v, use_gittins, now));
        for id in gone {
            self.forget(id);
        }
        // The waiting jobs not shown that starved by now: their queue changed while they wait.
        let promoted = self.promote_due(now);
        if let Some(backlog) = input.backlog {
            for id in promoted {
                if let Some(v) = backlog.view(id) {
                    let key = self.key(&v, use_gittins, now);
                    queue.rekey(&v, key);
                }
            }
        }
        let grants = queue.grant(input, &rules);
        self.queue = queue;
        grants
    }

    /// Jobs wait in key order, which only a run, a promotion or a learned distribution changes: with a
    /// given (or no) Gittins distribution, a round needs to hear only of running and changed jobs.
    fn keeps_queue(&self) -> bool {
        !self.learns()
    }

    /// A running job's place changes only when its service reaches its queue's threshold (under the
    /// Gittins index, with every bit of service): it need not be shown before then.
    fn look_again_at(&self, view: &JobView<'_>, now: f64) -> f64 {
        let (Some(run), false) = (view.running, self.gittins) else {
            return f64::NEG_INFINITY;
        };
        let promoted_at = self.tracked.get(view).map_or(0.0, |t| t.promoted_at);
        let service = self.service_of(view) - promoted_at;
        let Some(&next) = self.thresholds.get(self.queue_of(service)) else {
            // In the last queue: there to stay while it runs.
            return f64::INFINITY;
        };
        // Service accrues at most this fast (a packed pair's GPUs count half for each).
        let pace = match self.service {
            Service::GpuTime => run.gpus.len() as f64,
            Service::Time => 1.0,
        };
        let wait = (next - service) / pace;
        // The engine's sums of service, settled pass by pass, may reach the threshold a little
        // before the exact time: look a little earlier (and again at each pass until it does).
        let margin = 1e-3 + wait.abs() * 1e-6 + (next.abs() + service.abs()) * 1e-9 / pace;
        now + wait - margin
    }

    fn queue_order(&self, limit: usize) -> Option<Vec<JobId>> {
        Some(self.queue.first(limit))
    }
}

impl Tiresias {
    /// Promotes the watched jobs that have starved by `now`; returns them.
    fn promote_due(&mut self, now: f64) -> Vec<JobId> {
        // `due` is the sum the starvation test compares, rounded: look a little past `now`, and let
        // the exact test decide.
        let horizon = (now + now.abs() * 1e-12 + 1e-9).max(0.0).to_bits();
        let due: Vec<(u64, JobId)> = self
            .starving
            .range(..=(horizon, JobId(u32::MAX)))
            .copied()
            .collect();
        let knob = self.promote_knob;
        let mut promoted = Vec::new();
        for (due, id) in due {
            let Some(tracked) = self.tracked.find_mut(id) else {
                // Watched only while tracked, and forgotten together: never here.
                debug_assert!(false, "job {id} watched but not tracked");
                self.starving.remove(&(due, id));
                continue;
            };
            let Some(w) = tracked.waiting.filter(|w| w.starved(knob, now)) else {
                continue;
            };
            tracked.waiting = None;
            tracked.promoted_at = w.service;
            self.starving.remove(&(due, id));
            promoted.push(id);
        }
        promoted
    }

    /// Drops what it keeps about job `id`, which left.
    fn forget(&mut self, id: JobId) {
        if let Some(w) = self.tracked.remove(id).and_then(|t| t.waiting) {
            self.starving.remove(&(w.due, id));
        }
    }

    /// A job's place in line: its queue, then its order inside the queue. On the way, promotes `v`
    /// if it has starved, and otherwise, when it waits after a run, watches for when it will have
    /// (for a policy shown only what changed, so that waiting jobs need not be looked at every
    /// round).
    fn key(&mut self, v: &JobView<'_>, use_gittins: bool, now: f64) -> (f64, f64) {
        let id = v.id();
        let attained = self.service_of(v);
        let knob = self.promote_knob;
        let tracked = self.tracked.entry(v, Tracked::default);
        if let Some(w) = tracked.waiting.take() {
            self.starving.remove(&(w.due, id));
        }
        if v.running.is_none() && v.last_run_seconds > 0.0 {
            let due = v.queued_since + knob * v.last_run_seconds;
            let w = Starving {
                queued_since: v.queued_since,
                last_run_seconds: v.last_run_seconds,
                service: attained,
                due: due.max(0.0).to_bits(),
            };
            if w.starved(knob, now) {
                tracked.promoted_at = attained;
            } else if due.is_finite() {
                // A job that never starves (no promotion) needs no watching.
                tracked.waiting = Some(w);
                self.starving.insert((w.due, id));
            }
        }
        let service = attained - tracked.promoted_at;
        let queue = queue_for(&self.thresholds, service);
        if self.by_queue_entry {
            let entry = tracked.entered.get_or_insert((queue, v.job.arrival));
            if entry.0 != queue {
                *entry = (queue, now);
            }
        }
        let entered = tracked.entered;
        if use_gittins {
            // Discretized: the queue first, then the Gittins index (higher first) inside it, both
            // from the service counted since the job's last promotion.
            let next = self.thresholds.get(queue).copied().unwrap_or(f64::INFINITY);
            let delta = if next.is_finite() {
                next - service
            } else {
                service.max(1.0)
            };
            (queue as f64, -self.gittins_index(service, delta))
        } else if let Some((_, since)) = entered {
            (queue as f64, since)
        } else {
            (queue as f64, v.job.arrival)
        }
    }
}

/// The queue (0 = highest priority) for a service, given the queues' thresholds.
fn queue_for(thresholds: &[f64], service: f64) -> usize {
    thresholds.iter().take_while(|&&t| service >= t).count()
}

/// Enters this module's policies (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("tiresias", |config| build(config, Service::GpuTime, false))
            .alias("tiresias_las")
            .alias("2das")
            .summary(
                "Tiresias' discretized 2D-LAS: queues by GPU-seconds attained, FIFO inside, \
                 starvation promotion",
            )
            .knob(PROMOTE)
            .knob(QUEUE_SCALE),
    )?;
    registry.register(
        PolicyEntry::new("tiresias_gittins", |config| {
            build(config, Service::GpuTime, true)
        })
        .summary(
            "Tiresias' discretized 2D-Gittins index over a GPU-time distribution learned \
             from finished jobs",
        )
        .knob(PROMOTE)
        .knob(QUEUE_SCALE),
    )?;
    registry.register(
        PolicyEntry::new("tiresias_pollux", |_| {
            let mut policy = Tiresias::new(Service::GpuTime, false);
            policy.thresholds = vec![POLLUX_THRESHOLD];
            policy.promote_knob = f64::INFINITY;
            policy.by_queue_entry = true;
            Box::new(policy)
        })
        .summary(
            "Tiresias as Pollux's simulator runs it: 2 queues split at 16 GPU-hours, no \
             promotion, the workload's tuned size and batch",
        ),
    )?;
    registry.register(
        PolicyEntry::new("dlas", |config| build(config, Service::Time, false))
            .summary("discretized 1-D LAS over time only (Tiresias' comparison point)")
            .knob(PROMOTE)
            .knob(QUEUE_SCALE),
    )?;
    Ok(())
}

const PROMOTE: Knob = Knob {
    name: "promote",
    default: 10.0,
    range: super::KnobRange::Between(0.0, f64::INFINITY),
    help: "a job waiting longer than this many times its last run goes back to the top queue",
};

const QUEUE_SCALE: Knob = Knob {
    name: "queue_scale",
    default: 1.0,
    range: super::KnobRange::Between(1e-6, 1e6),
    help: "multiplies the queue thresholds (3,250 / 7,200 / 18,000 GPU-seconds)",
};

fn build(config: &PolicyConfig, service: Service, gittins: bool) -> Box<dyn Policy> {
    Box::new(configured(config, service, gittins))
}

fn configured(config: &PolicyConfig, service: Service, gittins: bool) -> Tiresias {
    let mut policy = Tiresias::new(service, gittins);
    policy.promote_knob = config.knob("promote");
    let scale = config.knob("queue_scale");
    for threshold in &mut policy.thresholds {
        *threshold *= scale;
    }
    if let (true, Some(d)) = (gittins, &config.service_distribution) {
        policy = policy.with_distribution(d);
    }
    policy
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{GpuId, GpuTypeId};
    use crate::job::Job;
    use crate::policy::Running;

    #[test]
    fn a_running_job_is_looked_at_again_just_before_its_service_can_reach_the_next_queue() {
        let job = Job::new(JobId(1), 0.0, 2, 1e6);
        let rates = [1.0];
        let gpus = [GpuId(0), GpuId(1)];
        let running = Running {
            gpu_type: GpuTypeId(0),
            gpus: &gpus,
            batch: None,
            restarting: false,
        };
        let view = |gpu_seconds: f64, seconds: f64| JobView {
            attained_gpu_seconds: gpu_seconds,
            attained_seconds: seconds,
            running: Some(running),
            ..JobView::arrived(&job, &rates)
        };
        let now = 1000.0;
        let tiresias = Tiresias::new(Service::GpuTime, false);
        // 250 GPU-seconds short of 3,250 on 2 GPUs: 125 s on, a little before.
        let at = tiresias.look_again_at(&view(3000.0, 1500.0), now);
        assert!(at < now + 125.0 && at > now + 124.99, "{at}");
        // Past the last threshold it stays in the last queue while it runs.
        let at = tiresias.look_again_at(&view(20_000.0, 10_000.0), now);
        assert_eq!(at, f64::INFINITY);
        // 1-D LAS counts seconds, one a second: 3,250 - 3,000 s.
        let dlas = Tiresias::new(Service::Time, false);
        let at = dlas.look_again_at(&view(6000.0, 3000.0), now);
        assert!(at < now + 250.0 && at > now + 249.99, "{at}");
        // The Gittins index moves with every bit of service; a waiting job is no business of it.
        let gittins = Tiresias::new(Service::GpuTime, true).with_distribution(&[100.0, 200.0]);
        let at = gittins.look_again_at(&view(3000.0, 1500.0), now);
        assert_eq!(at, f64::NEG_INFINITY);
        let waiting = JobView::arrived(&job, &rates);
        assert_eq!(tiresias.look_again_at(&waiting, now), f64::NEG_INFINITY);
    }

    #[test]
    fn queues_follow_the_thresholds() {
        let t = Tiresias::new(Service::GpuTime, false);
        assert_eq!(t.queue_of(0.0), 0);
        assert_eq!(t.queue_of(3249.0), 0);
        assert_eq!(t.queue_of(3250.0), 1);
        assert_eq!(t.queue_of(20000.0), 3);
    }

    #[test]
    fn queue_scale_multiplies_the_thresholds() {
        let knobs = super::super::builtin()
            .resolve("tiresias:queue_scale=0.01")
            .unwrap()
            .knobs;
        let config = PolicyConfig {
            knobs,
            ..PolicyConfig::default()
        };
        let t = configured(&config, Service::GpuTime, false);
        assert_eq!(t.queue_of(32.0), 0);
        assert_eq!(t.queue_of(32.5), 1);
        assert_eq!(t.queue_of(100.0), 2);
        assert_eq!(t.queue_of(180.0), 3);
        assert!(
            super::super::builtin()
                .resolve("tiresias:queue_scale=0")
                .is_err()
        );
    }

    #[test]
    fn a_given_distribution_is_used_at_once_and_not_relearned() {
        let t = Tiresias::new(Service::GpuTime, true).with_distribution(&[300.0, 100.0, 200.0]);
        assert_eq!(t.samples, vec![100.0, 200.0, 300.0]);
        assert_eq!(t.prefix, vec![100.0, 300.0, 600.0]);
        // Over (0, 150]: one of three finishes; expected work (100 + 150 + 150) / 3.
        assert!((t.gittins_index(0.0, 150.0) - (1.0 / 3.0) / (400.0 / 3.0)).abs() < 1e-12);
    }

    #[test]
    fn gittins_index_prefers_jobs_likely_to_finish_soon() {
        let mut t = Tiresias::new(Service::GpuTime, true);
        // Most jobs are short (100), a few are long (10,000).
        t.samples = [100.0; 8].into_iter().chain([10_000.0; 2]).collect();
        t.prefix = t
            .samples
            .iter()
            .scan(0.0, |s, x| {
                *s += x;
                Some(*s)
            })
            .collect();
        let fresh = t.gittins_index(0.0, 200.0);
        let past_the_short_ones = t.gittins_index(150.0, 200.0);
        assert!(
            fresh > past_the_short_ones,
            "{fresh} vs {past_the_short_ones}"
        );
        // Exactly: from 0 over 200, 8 of 10 finish, expected work = (8*100 + 2*200)/10 -> 0.8 / 120.
        assert!((fresh - 0.8 / 120.0).abs() < 1e-12, "{fresh}");
        assert_eq!(t.gittins_index(20_000.0, 100.0), 0.0);
    }

    /// A paused job (its starts failed) is not shown for a while, but has not ended: the learned
    /// distribution does not take its service as a finished job's.
    #[test]
    fn a_paused_job_is_not_learned_as_finished() {
        use crate::engine::{Engine, EngineConfig};
        use crate::job::{Job, Names};
        let cluster = crate::cluster::Cluster::parse_spec("v100=1x4", 4).unwrap();
        let model = std::sync::Arc::new(crate::throughput::DurationModel::uniform(1));
        let config = EngineConfig::default();
        let mut engine = Engine::new(cluster.into(), model, config, Names::default(), 0.0);
        let toy = engine.intern_job_type("toy");
        for id in [1, 2] {
            engine
                .submit(Job::new(JobId(id), 0.0, 2, 100.0).with_type(toy), 0.0)
                .unwrap();
        }
        let mut policy = Tiresias::new(Service::GpuTime, true);
        let mut placer = crate::placement::PackingPlacer;
        engine.schedule(&mut policy, &mut placer, 0.0);
        engine.defer(JobId(1), 10.0, 100.0).unwrap();
        engine.schedule(&mut policy, &mut placer, 20.0);
        assert!(policy.learned.is_empty(), "{:?}", policy.learned);
        assert!(policy.last_seen.contains_key(&JobId(1)), "still known");
        // A job that ends is learned.
        engine.cancel(JobId(2), 30.0).unwrap();
        engine.schedule(&mut policy, &mut placer, 40.0);
        assert_eq!(policy.learned.len(), 1);
    }
}
