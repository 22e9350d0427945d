//! Scheduling policies and the one input they all share.
//!
//! # Design note: one input, one answer
//!
//! Every policy implements [`Policy::allocate`], which takes a [`RoundInput`]: the time, the round length,
//! the cluster's capacity per GPU type, every active job as a [`JobView`] (its attained service, steps done
//! and remaining, throughput on each GPU type, where it runs now, its queueing history), and what ran
//! since the last pass ([`Usage`]). Nothing else reaches a policy, and no code branches on a policy's
//! name: the simulator and the live control plane only ever see the trait. A policy that keeps its own
//! queue between rounds ([`Policy::keeps_queue`]) is shown only the running jobs and those that changed,
//! and asks the [`Backlog`] for the rest, so that a round under a long backlog costs what it can start.
//!
//! A policy answers with [`Grant`]s, in priority order: "job j gets n GPUs of type t next round", each
//! with an [`Intent`] every placer understands (anywhere, one server, packed with a partner) and,
//! optionally, a [`crate::placement::PlacementStep`] of the policy's own (across GPU types,
//! defragmenting, most free first). The engine keeps running jobs on their GPUs where the grant is
//! unchanged, preempts the rest, and places new grants in order, skipping any that no longer fit.
//!
//! Policies are built by name from a [`Registry`], which every built-in policy enters through the
//! same public call as a user's ([`Registry::register`]); see [`registry`].
//!
//! Policies that think in Gavel's time shares (a fraction of time X\[j\]\[t\] per job and GPU type)
//! implement [`TimeSharePolicy`] instead, and are wrapped in [`Realize`], Gavel's round mechanism, which
//! turns shares into each round's grants. [`Cadenced`] re-solves such a policy only on Gavel's cadence.
//!
//! Where each policy's logic lives: in its module here, its placement step included. Gandiva is
//! `gandiva/` (pairing, grow-shrink, and its defragmenting step); Hadar is `hadar/` (prices, and its
//! step across GPU types); Optimus is `optimus/` (greedy gains, and its most-free step); Gavel's
//! mechanism is `mechanism.rs` and `cadence.rs`.

pub mod allox;
pub mod cadence;
pub mod effective;
pub mod fair_share;
pub mod finish_time;
pub mod fit;
pub mod gandiva;
pub mod hadar;
pub mod hetero;
pub mod measured;
pub mod mechanism;
pub mod optimus;
pub mod ordered;
pub mod per_job;
pub mod pick;
pub mod pollux;
pub mod ramp;
pub mod registry;
pub mod resourced;
pub mod sia;
pub mod themis;
pub mod tiresias;

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, GpuId, GpuTypeId};
use crate::job::{IdSet, Job, JobId};
use crate::placement::{PlacementProbe, PlacementStep, Step};
use crate::resources::Allotment;
use crate::throughput::{BatchPlan, ThroughputModel};

pub use cadence::{Cadence, Cadenced};
pub use mechanism::{
    ClassCount, ClassSharePolicy, ClassShares, JobClass, Realize, TimeSharePolicy, TimeShares,
    TypePreference, Unit, shares_per_job,
};
pub use per_job::PerJob;
pub use registry::{
    BuildError, Capabilities, Factory, Needs, PolicyEntry, PolicySpec, Registry, RegistryError,
    Resolved, builtin,
};

/// A scheduling policy. Implementations keep whatever state they need between rounds.
pub trait Policy: Send {
    /// Decides who runs in the next round: grants in priority order.
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant>;

    /// Whether time passing alone could change its answer: with no arrival, completion or change of
    /// capacity, would a later round decide differently? Policies that order jobs by something time
    /// does not reorder (arrival, size) answer `false`, and the simulator then skips the rounds between
    /// events. The default, `true`, asks every round.
    fn changes_with_time(&self) -> bool {
        true
    }

    /// Whether it keeps its own queue of the jobs it has seen, and so needs to hear each round only of
    /// what changed. When it answers `true`, the engine fills [`RoundInput::jobs`] with the running
    /// jobs (but those it is to look at later, [`Policy::look_again_at`]) and those whose view changed
    /// since its last call (arrived, stopped, put back in the queue), and [`RoundInput::backlog`]
    /// answers for the rest: a round then costs what it can start and what runs, not the whole
    /// backlog. A wrapper around a policy answers `false` unless it passes every input through
    /// unchanged. The default, `false`: every active job in `jobs`, every round.
    fn keeps_queue(&self) -> bool {
        false
    }

    /// For a policy that keeps its own queue: when it next needs to be shown running job `view`
    /// (shown to it at `now` in the pass it just answered), if nothing of its run changes before.
    /// Until then the engine leaves the job out of [`RoundInput::jobs`] (the
    /// [`RoundInput::backlog`] still answers for it), so that a round costs what changed rather
    /// than every running job. A running job left out keeps the view last shown but for what
    /// accrues as it runs: its steps done and remaining (as it runs, and as its workers report), its
    /// attained service (at most its GPUs' count in GPU-seconds, and one second, per second) and
    /// whether it is still restarting. A job whose run starts, stops, moves or changes pace is
    /// shown at the next pass whatever this says. Answer early rather than late: a late answer
    /// changes decisions, an early one costs a look. The default, `f64::NEG_INFINITY`: at every
    /// pass. A wrapper passes its inner policy's on only if it passes [`Policy::keeps_queue`] on
    /// and does not itself read the running jobs from [`RoundInput::jobs`].
    ///
    /// The engine takes these as the answers of the policy object that gave them: a pass with
    /// another (known by its address) shows it every active job as changed; after a pass in which
    /// the policy asks for [`Backlog::views`] (it rebuilds its queue), its next shows it every
    /// running job it did not answer for in that pass, and after one in which it panics, every
    /// running job.
    fn look_again_at(&self, view: &JobView<'_>, now: f64) -> f64 {
        let _ = (view, now);
        f64::NEG_INFINITY
    }

    /// Its active jobs in the order it serves them, the first `limit` (running ones among them), as of
    /// its last round: what a person reads as its queue (the dashboard's). `None`, the default: it
    /// keeps no such order (policies that share time or solve a program each round). A wrapper passes
    /// its inner policy's on.
    fn queue_order(&self, limit: usize) -> Option<Vec<JobId>> {
        let _ = limit;
        None
    }
}

/// The active jobs a policy that keeps its own queue ([`Policy::keeps_queue`]) was not given in
/// [`RoundInput::jobs`] this round: waiting jobs whose view has not changed since its last call,
/// and running jobs it is to look at later ([`Policy::look_again_at`]).
pub trait Backlog {
    /// Active jobs in all, those in [`RoundInput::jobs`] included and those paused
    /// ([`RoundInput::paused`]) not: a policy whose queue holds another number has lost track, and
    /// rebuilds it from [`Backlog::views`].
    fn len(&self) -> usize;

    /// Whether no job is active.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Jobs that ended since the policy's last call.
    fn left(&self) -> &[JobId];

    /// The view of an active job; `None` for a job that is not active, or paused.
    fn view(&self, id: JobId) -> Option<JobView<'_>>;

    /// Every active job but those paused, in arrival order (the whole backlog, for a queue rebuilt
    /// from scratch).
    fn views(&self) -> Vec<JobView<'_>>;
}

/// Everything a policy sees, every round.
pub struct RoundInput<'a> {
    /// Simulated (or wall-clock) seconds since the start.
    pub now: f64,
    /// Length of a round in seconds.
    pub round_length: f64,
    /// The cluster: its nodes and GPU types, every GPU included (`capacity` counts those in
    /// service).
    pub cluster: &'a Cluster,
    /// GPUs of each type that can be allocated (healthy capacity), indexed by `GpuTypeId`.
    pub capacity: &'a [u32],
    /// Active jobs (arrived, not finished), in arrival order: all of them, or, with a
    /// [`RoundInput::backlog`], the running ones (but those the policy is to look at later,
    /// [`Policy::look_again_at`]) and those that changed since the policy's last call; never those
    /// paused ([`RoundInput::paused`]).
    pub jobs: &'a [JobView<'a>],
    /// The other active jobs, for a policy that keeps its own queue ([`Policy::keeps_queue`]); `None`
    /// when `jobs` holds every active job.
    pub backlog: Option<&'a dyn Backlog>,
    /// What-if placements with the engine's placer over the GPUs in service, for a policy that must
    /// know whether its picks fit before it grants them (see [`crate::placement::probe`]).
    pub placement: &'a dyn PlacementProbe,
    /// Whether a job arrived or finished (or capacity changed) since the previous call.
    pub jobs_changed: bool,
    /// The GPU types, fastest first for the jobs seen so far (see [`effective::FastestFirst`]): the order
    /// in which heterogeneity-aware policies have the mechanism offer them.
    pub type_order: &'a [GpuTypeId],
    /// The throughput model, for what `JobView::rates` does not hold: rates at other gang sizes, and
    /// the rates of two jobs packed together.
    pub model: &'a dyn ThroughputModel,
    /// What ran where since the previous call, slice by slice (the mechanism charges time shares by it).
    pub usage: &'a [Usage],
    /// Active jobs left out of `jobs` (and of the backlog) for a while, by id, sorted: their starts
    /// failed, and they pause before the next (`Engine::defer`). They have not ended: a policy that
    /// forgets the jobs it is no longer shown, or learns from those that end, keeps what it knows of
    /// these ([`RoundInput::is_paused`]). A policy that keeps a queue heard of each as of a job
    /// that left, and hears of it again as of a new one.
    pub paused: &'a [JobId],
}

impl RoundInput<'_> {
    /// Whether job `id` is paused ([`RoundInput::paused`]): active, though not shown.
    pub fn is_paused(&self, id: JobId) -> bool {
        self.paused.binary_search(&id).is_ok()
    }

    /// The jobs that have not ended, for a policy shown every job (without a backlog): those in
    /// `jobs` and those paused. What such a policy keeps of any other job, it may forget.
    pub fn not_ended(&self) -> IdSet<JobId> {
        (self.jobs.iter().map(JobView::id))
            .chain(self.paused.iter().copied())
            .collect()
    }
}

/// One stretch of running: `job` (with `partner`, when packed) held GPUs of `gpu_type` for `seconds`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usage {
    /// The job that ran.
    pub job: JobId,
    /// The job packed with it on the same GPUs, if any (whose own slice names this one).
    pub partner: Option<JobId>,
    /// The type of the GPUs it held.
    pub gpu_type: GpuTypeId,
    /// Seconds it held them (simulated, or wall-clock in the live plane): time, not GPU-seconds.
    pub seconds: f64,
}

/// One active job, as policies see it.
#[derive(Clone, Debug)]
pub struct JobView<'a> {
    /// The job as submitted.
    pub job: &'a Job,
    /// Steps per second alone at the requested gang size, per GPU type; 0 where it cannot run.
    pub rates: &'a [f64],
    /// Work done so far, in its trace's work unit.
    pub steps_done: f64,
    /// Remaining steps. Only oracle policies (SRTF, SJF) should look at this.
    pub remaining_steps: f64,
    /// GPU-seconds received so far (Tiresias' 2D attained service).
    pub attained_gpu_seconds: f64,
    /// Seconds run so far (1-D LAS).
    pub attained_seconds: f64,
    /// Where it runs now, if it runs.
    pub running: Option<Running<'a>>,
    /// When it last started or was queued, whichever is later (for starvation checks).
    pub queued_since: f64,
    /// Length of its most recent uninterrupted run, in seconds.
    pub last_run_seconds: f64,
    /// Times it has lost its GPUs so far.
    pub preemptions: u32,
    /// Where the engine keeps it: a number below the count of jobs the engine holds, unique among
    /// them, the job's while it is active (a later job may get it once this one has left and been
    /// forgotten). A fresh engine gives slots in arrival order; a live one reuses those of jobs
    /// that left. A policy that keeps state per job between rounds finds it by slot in a
    /// [`PerJob`] rather than by id in a map. Views built by hand ([`JobView::arrived`]) are all at
    /// slot 0.
    pub slot: usize,
}

/// The GPUs a job holds now.
#[derive(Clone, Copy, Debug)]
pub struct Running<'a> {
    /// The type of its GPUs (for a gang across types, the one that sets its pace).
    pub gpu_type: GpuTypeId,
    /// The GPUs it holds, the whole gang.
    pub gpus: &'a [GpuId],
    /// The batch plan it runs with, when a policy chose one.
    pub batch: Option<BatchPlan>,
    /// It is still paying its restart (or restore, or migration) cost.
    pub restarting: bool,
}

impl<'a> JobView<'a> {
    /// A job that has just arrived: nothing done, never run, with `rates` per GPU type (for benchmarks,
    /// tests and tools that ask a policy about a queue).
    pub fn arrived(job: &'a Job, rates: &'a [f64]) -> Self {
        JobView {
            job,
            rates,
            steps_done: 0.0,
            remaining_steps: job.total_steps,
            attained_gpu_seconds: 0.0,
            attained_seconds: 0.0,
            running: None,
            queued_since: 0.0,
            last_run_seconds: 0.0,
            preemptions: 0,
            slot: 0,
        }
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.job.id
    }
}

/// A concrete decision: `job` runs on `gpus` GPUs of `gpu_type` next round, placed as `intent` says
/// and, when it names one, through its policy's own placement `step`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    /// The job granted.
    pub job: JobId,
    /// The type of the GPUs it gets.
    pub gpu_type: GpuTypeId,
    /// How many GPUs it gets, all at once; a policy that keeps a job's size grants it
    /// [`Job::gpus`].
    pub gpus: u32,
    /// What it asks of the placer: anywhere, on one server, or packed with another job.
    #[serde(default)]
    pub intent: Intent,
    /// A placement rule of its policy's own (Gandiva's defragmentation, Hadar's gangs across types,
    /// Optimus' most-free order): see [`crate::placement::PlacementStep`]. Not serialized.
    #[serde(skip)]
    pub step: Option<Step>,
    /// The batch plan the job should run with (goodput-aware policies); `None`: its own. A grant that
    /// only changes a running job's batch keeps it where it runs, without a restart.
    #[serde(default)]
    pub batch: Option<BatchPlan>,
    /// CPUs and memory per GPU (Synergy's mechanisms, [`resourced`]); `None`: its servers'
    /// GPU-proportional share.
    #[serde(default)]
    pub allotment: Option<Allotment>,
}

/// What a grant asks of every placer (see `crate::placement`); a policy's own rules go in a
/// [`crate::placement::PlacementStep`] instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Intent {
    /// Wherever the placer prefers.
    #[default]
    Anywhere,
    /// On one server when one could hold the gang: the placer waits rather than spread it (YARN-CS).
    Consolidated,
    /// On the same GPUs as this job (space sharing); the partner's grant names this job
    /// (`placement::packed`).
    PackedWith(JobId),
}

impl Grant {
    /// `job` alone on `gpus` GPUs of `gpu_type`, placed wherever the placer prefers.
    pub fn new(job: JobId, gpu_type: GpuTypeId, gpus: u32) -> Self {
        Grant {
            job,
            gpu_type,
            gpus,
            intent: Intent::Anywhere,
            step: None,
            batch: None,
            allotment: None,
        }
    }

    /// The same grant placed through its policy's own `step` (a `static` the policy keeps).
    pub fn placed_by(self, step: &'static dyn PlacementStep) -> Self {
        Grant {
            step: Some(Step(step)),
            ..self
        }
    }

    /// Whether its gang may span GPU types (its step's say).
    pub fn spans_types(&self) -> bool {
        self.step.is_some_and(|s| s.spans_types())
    }

    /// The same grant with CPUs and memory per GPU.
    pub fn with_allotment(self, allotment: Allotment) -> Self {
        Grant {
            allotment: Some(allotment),
            ..self
        }
    }

    /// The same grant with a batch plan.
    pub fn with_batch(self, batch: BatchPlan) -> Self {
        Grant {
            batch: Some(batch),
            ..self
        }
    }

    /// The same grant with another intent.
    pub fn with(self, intent: Intent) -> Self {
        Grant { intent, ..self }
    }

    /// The job it is packed with, if any.
    pub fn partner(&self) -> Option<JobId> {
        match self.intent {
            Intent::PackedWith(p) => Some(p),
            _ => None,
        }
    }
}

/// Knobs a policy may read when it is built.
#[derive(Clone, Debug, Default)]
pub struct PolicyConfig {
    /// Seeds the policy's random choices, so that a run repeats exactly.
    pub seed: u64,
    /// A distribution of job service (GPU-seconds), for policies that price jobs by it (Tiresias'
    /// Gittins index). `None`: such policies learn it from the jobs that finish.
    pub service_distribution: Option<std::sync::Arc<Vec<f64>>>,
    /// Knob values from the policy's spec (`themis:f=0.5`); [`build`] fills in the declared defaults.
    pub knobs: KnobValues,
    /// Dollars per GPU-hour by GPU type name, for cost-aware policies; types not listed cost
    /// [`DEFAULT_GPU_PRICES`] or, failing that, 1.
    pub gpu_prices: Vec<(String, f64)>,
    /// What the run offers (a goodput model, a resource model, an LP solver), as the [`Registry`]
    /// that builds the policy checked it: a factory may choose how the policy runs by it (`ramp`
    /// runs one program on elastic workloads and another on rigid ones). Nothing, in a config no
    /// registry filled in.
    pub capabilities: Capabilities,
}

/// On-demand cloud prices per GPU-hour, in dollars, in 2020 (one-GPU instances: AWS p3.2xlarge for the
/// V100, AWS p2.xlarge for the K80, GCP for the P100), as a default for cost-aware policies.
pub const DEFAULT_GPU_PRICES: &[(&str, f64)] = &[("v100", 3.06), ("p100", 1.46), ("k80", 0.90)];

impl PolicyConfig {
    /// A config with `seed` and nothing else: no service distribution, no knobs (building through a
    /// [`Registry`] fills in their defaults), and the default GPU prices.
    pub fn seeded(seed: u64) -> Self {
        PolicyConfig {
            seed,
            ..PolicyConfig::default()
        }
    }

    /// The price per GPU-hour of each of the cluster's GPU types.
    pub fn prices(&self, cluster: &Cluster) -> Vec<f64> {
        cluster
            .gpu_types()
            .iter()
            .map(|name| {
                let given = self.gpu_prices.iter().find(|(n, _)| n == name).map(|p| p.1);
                let default = DEFAULT_GPU_PRICES
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|p| p.1);
                given.or(default).unwrap_or(1.0)
            })
            .collect()
    }

    /// The value of a knob the policy declared. Panics on an undeclared one: that is a bug in the policy.
    pub fn knob(&self, name: &str) -> f64 {
        self.knobs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| {
                panic!("knob `{name}` is not declared in the policy's registry entry")
            })
    }
}

/// Every declared knob of a policy with its value, by name.
pub type KnobValues = Vec<(&'static str, f64)>;

/// A number a policy can be tuned by, from its spec: `name:knob=value:knob=value`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Knob {
    /// What a spec calls it: `f` in `themis:f=0.5`.
    pub name: &'static str,
    /// Its value when a spec does not set it; within `range`.
    pub default: f64,
    /// The values that mean something; a spec outside it is refused.
    pub range: KnobRange,
    /// One line for listings: what it tunes, and its unit.
    pub help: &'static str,
}

/// Longest interval a knob in seconds may take (about 31 years): longer than any trace, and finite.
pub const MAX_KNOB_SECONDS: f64 = 1e9;

/// The values a knob accepts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KnobRange {
    /// 0 (off) or 1 (on).
    Flag,
    /// From `min` to `max`, both included.
    Between(f64, f64),
}

impl KnobRange {
    /// Seconds, from 0 to [`MAX_KNOB_SECONDS`].
    pub const SECONDS: KnobRange = KnobRange::Between(0.0, MAX_KNOB_SECONDS);

    /// Whether the knob accepts `value` (NaN never).
    pub fn contains(self, value: f64) -> bool {
        match self {
            KnobRange::Flag => value == 0.0 || value == 1.0,
            KnobRange::Between(min, max) => (min..=max).contains(&value),
        }
    }
}

impl std::fmt::Display for KnobRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KnobRange::Flag => f.write_str("0 or 1"),
            KnobRange::Between(min, max) if max.is_infinite() => write!(f, "at least {min}"),
            KnobRange::Between(min, max) => write!(f, "{min} to {max}"),
        }
    }
}

/// Enters every built-in policy, in the order listings show them, through [`Registry::register`]:
/// the same call a user's policy is entered by.
pub(crate) fn register_builtins(registry: &mut Registry) -> Result<(), RegistryError> {
    ordered::register(registry)?;
    fair_share::register(registry)?;
    finish_time::register(registry)?;
    tiresias::register(registry)?;
    gandiva::register(registry)?;
    themis::register(registry)?;
    hetero::register(registry)?;
    allox::register(registry)?;
    hadar::register(registry)?;
    optimus::register(registry)?;
    sia::register(registry)?;
    ramp::register(registry)?;
    pollux::register(registry)?;
    Ok(())
}

/// What a policy answers when the throughput model lacks what it needs: a registry refuses to build
/// it so ([`Needs`]); one built by hand gets here, says so (once, through `said`) and starts nothing,
/// keeping running jobs where they are, rather than act as another policy under its name.
pub(crate) fn unmet(
    policy: &'static str,
    needs: Needs,
    said: &mut bool,
    input: &RoundInput<'_>,
) -> Vec<Grant> {
    if !std::mem::replace(said, true) {
        tracing::error!(
            policy,
            "the policy needs {needs}, which the throughput model lacks: it starts no job"
        );
    }
    keep_running(input)
}

/// Every running job keeps the GPUs and batch it has: what a policy answers when its own decision
/// failed, rather than stopping everything.
pub(crate) fn keep_running(input: &RoundInput<'_>) -> Vec<Grant> {
    input
        .jobs
        .iter()
        .filter_map(|v| {
            let run = v.running?;
            let grant = Grant::new(v.id(), run.gpu_type, run.gpus.len() as u32);
            Some(match run.batch {
                Some(plan) => grant.with_batch(plan),
                None => grant,
            })
        })
        .collect()
}

/// Builds the built-in policy a spec names (`name`, or an alias, with knobs: `themis:f=0.5:lease=600`,
/// and optionally `+MECHANISM`, one of Synergy's, `srtf+tune`) for a run with `model`: an error if it
/// needs what `model` (or this build) lacks. See [`Registry`] for a user's own policies.
pub fn build(
    spec: &str,
    config: &PolicyConfig,
    model: &dyn ThroughputModel,
) -> Result<Box<dyn Policy>, BuildError> {
    builtin().build(spec, config, &Capabilities::of(model))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throughput::DurationModel;

    #[test]
    fn every_built_in_policy_is_registered_once_with_its_knobs_in_range() {
        // `with_builtins` registers through the public call, which refuses a name twice and a
        // default outside its range: building it is the check.
        let registry = Registry::with_builtins();
        assert_eq!(registry.entries().count(), 32);
        assert!(
            registry
                .get("las")
                .is_some_and(|p| p.name() == "max_min_fairness")
        );
    }

    #[test]
    fn knobs_take_defaults_and_reject_typos() {
        let resolved = builtin().resolve("themis:f=0.5").unwrap();
        assert_eq!(resolved.entry.name(), "themis");
        let knobs = &resolved.knobs;
        assert!(
            knobs.contains(&("f", 0.5)) && knobs.contains(&("lease", 300.0)),
            "{knobs:?}"
        );
        for (spec, says) in [
            ("themis:g=1", "unknown knob; themis has f, lease"),
            ("themis:f=x", "`x` is not a number"),
            ("themis:f", "expected knob=value"),
            ("fifo:f=1", "fifo has no knobs"),
            (
                "srtf+tuned",
                "unknown resource mechanism `tuned`; known: proportional, tune, opt",
            ),
        ] {
            let err = builtin().resolve(spec).err().unwrap().to_string();
            assert!(err.contains(says), "{spec}: {err}");
        }
    }

    #[test]
    fn knobs_are_range_checked_and_given_once() {
        for (spec, says) in [
            ("themis:f=2", "2 is out of range (0 to 1)"),
            ("themis:f=-1", "-1 is out of range (0 to 1)"),
            ("themis:lease=-5", "-5 is out of range (0 to 1000000000)"),
            ("gandiva:grow=2", "2 is out of range (0 or 1)"),
            ("gandiva:grow=0.5", "0.5 is out of range (0 or 1)"),
            ("tiresias:promote=-1", "-1 is out of range (at least 0)"),
            (
                "las_perf:realloc=-1",
                "-1 is out of range (0 to 1000000000)",
            ),
            (
                "las_perf:realloc=1e300",
                "1e300 is out of range (0 to 1000000000)",
            ),
            ("themis:f=0.5:f=0.7", "knob `f=0.7`: `f` is given twice"),
        ] {
            let err = builtin().resolve(spec).expect_err(spec).to_string();
            assert!(err.contains(says), "{spec}: {err}");
        }
        let knobs = builtin().resolve("themis:f=1:lease=0").unwrap().knobs;
        assert!(knobs.contains(&("f", 1.0)) && knobs.contains(&("lease", 0.0)));
        assert!(builtin().resolve("gandiva:grow=1").is_ok());
        // A spec made in code is the same spec.
        let spec = PolicySpec::new("themis").knob("f", 0.5).mechanism("tune");
        assert_eq!(spec.to_string(), "themis:f=0.5+tune");
        assert!(builtin().resolve(&spec.to_string()).is_ok());
    }

    #[test]
    fn unknown_policy_lists_the_known_ones() {
        let err = build("nope", &PolicyConfig::seeded(0), &DurationModel::uniform(1))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("unknown policy `nope`") && err.contains("fifo"),
            "{err}"
        );
    }

    #[test]
    fn a_policy_built_where_what_it_needs_is_missing_is_an_error_naming_both() {
        let config = PolicyConfig::seeded(0);
        for (spec, says) in [
            ("sia", "policy `sia` needs a goodput model"),
            ("pollux", "policy `pollux` needs a goodput model"),
            ("optimus", "policy `optimus` needs a goodput model"),
            ("srtf+tune", "policy `srtf+tune` needs resource profiles"),
            ("las+opt", "needs resource profiles"),
        ] {
            let err = build(spec, &config, &DurationModel::uniform(1))
                .err()
                .expect(spec);
            assert!(matches!(err, BuildError::Unmet { .. }), "{spec}: {err}");
            assert!(err.to_string().contains(says), "{spec}: {err}");
        }
        let no_lp = Capabilities {
            lp_solver: false,
            ..Capabilities::ALL
        };
        let err = builtin().build("las_perf", &config, &no_lp).err().unwrap();
        assert!(err.to_string().contains("needs an LP solver"), "{err}");
        assert!(
            builtin()
                .build(
                    "srtf+proportional",
                    &config,
                    &Capabilities::of(&DurationModel::uniform(1))
                )
                .is_ok()
        );
        assert!(build("tiresias", &config, &DurationModel::uniform(1)).is_ok());
    }

    #[test]
    fn a_users_policy_joins_as_the_built_ins_do_and_names_are_registered_once() {
        let mut registry = Registry::with_builtins();
        let fifo = |c: &PolicyConfig| builtin().build("fifo", c, &Capabilities::ALL).unwrap();
        registry
            .register(
                PolicyEntry::new("mine", fifo)
                    .alias("my_fifo")
                    .summary("fifo, by another name")
                    .knob(Knob {
                        name: "k",
                        default: 1.0,
                        range: KnobRange::Between(0.0, 2.0),
                        help: "unused",
                    })
                    .needs(Needs::GOODPUT),
            )
            .unwrap();
        assert_eq!(registry.entries().last().unwrap().name(), "mine");
        assert_eq!(
            registry.resolve("my_fifo:k=2").unwrap().knobs,
            vec![("k", 2.0)]
        );
        let err = registry
            .build(
                "mine",
                &PolicyConfig::default(),
                &Capabilities::of(&DurationModel::uniform(1)),
            )
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .contains("policy `mine` needs a goodput model"),
            "{err}"
        );
        for (entry, says) in [
            (
                PolicyEntry::new("fifo", fifo),
                "`fifo` is already registered (as fifo)",
            ),
            (
                PolicyEntry::new("x", fifo).alias("las"),
                "`las` is already registered (as max_min_fairness)",
            ),
            (
                PolicyEntry::new("y", fifo).alias("y"),
                "`y` is already registered (as y)",
            ),
            (PolicyEntry::new("a:b", fifo), "cannot be a policy's name"),
            (
                PolicyEntry::new("z", fifo).knob(Knob {
                    name: "k",
                    default: 5.0,
                    range: KnobRange::Flag,
                    help: "",
                }),
                "knob `k`: the default 5 is outside its range (0 or 1)",
            ),
        ] {
            let err = registry.register(entry).err().unwrap().to_string();
            assert!(err.contains(says), "{err}");
        }
        // A refused entry left nothing behind.
        assert!(registry.get("x").is_none() && registry.get("z").is_none());
    }
}
