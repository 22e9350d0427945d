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
//! with an [`Intent`] that names the placement step it needs (anywhere, one server, packed with a
//! partner, across GPU types, defragmented). The engine keeps running jobs on their GPUs where the grant
//! is unchanged, preempts the rest, and places new grants in order, skipping any that no longer fit.
//!
//! Policies that think in Gavel's time shares (a fraction of time X\[j\]\[t\] per job and GPU type)
//! implement [`TimeSharePolicy`] instead, and are wrapped in [`Realize`], Gavel's round mechanism, which
//! turns shares into each round's grants. [`Cadenced`] re-solves such a policy only on Gavel's cadence.
//!
//! Where each policy's logic lives: in its module here, plus the placement step its grants name
//! (`crate::placement`). Gandiva is `gandiva.rs` (pairing, grow-shrink, defragmenting grants) and
//! `placement/defragment.rs`; Hadar is `hadar.rs` and `placement/mixed.rs`; Gavel's mechanism is
//! `mechanism.rs` and `cadence.rs`.

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
pub mod pick;
pub mod pollux;
pub mod resourced;
pub mod sia;
pub mod themis;
pub mod tiresias;

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, GpuId, GpuTypeId};
use crate::error::SimError;
use crate::job::{Job, JobId};
use crate::resources::Allotment;
use crate::throughput::{BatchPlan, ThroughputModel};

pub use cadence::{Cadence, Cadenced};
pub use mechanism::{
    ClassCount, ClassSharePolicy, ClassShares, JobClass, Realize, TimeSharePolicy, TimeShares,
    TypePreference, Unit, shares_per_job,
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
    /// jobs and those whose view changed since its last call (arrived, stopped, put back in the queue),
    /// and [`RoundInput::backlog`] answers for the rest: a round then costs what it can start and what
    /// runs, not the whole backlog. A wrapper around a policy answers `false` unless it passes every
    /// input through unchanged. The default, `false`: every active job in `jobs`, every round.
    fn keeps_queue(&self) -> bool {
        false
    }
}

/// The active jobs a policy that keeps its own queue ([`Policy::keeps_queue`]) was not given in
/// [`RoundInput::jobs`] this round: waiting jobs whose view has not changed since its last call.
pub trait Backlog {
    /// Active jobs in all, those in [`RoundInput::jobs`] included: a policy whose queue holds another
    /// number has lost track, and rebuilds it from [`Backlog::views`].
    fn len(&self) -> usize;

    /// Whether no job is active.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Jobs that ended since the policy's last call.
    fn left(&self) -> &[JobId];

    /// The view of an active job; `None` for a job that is not active.
    fn view(&self, id: JobId) -> Option<JobView<'_>>;

    /// Every active job, in arrival order (the whole backlog, for a queue rebuilt from scratch).
    fn views(&self) -> Vec<JobView<'_>>;
}

/// Everything a policy sees, every round.
pub struct RoundInput<'a> {
    /// Simulated (or wall-clock) seconds since the start.
    pub now: f64,
    /// Length of a round in seconds.
    pub round_length: f64,
    pub cluster: &'a Cluster,
    /// GPUs of each type that can be allocated (healthy capacity), indexed by `GpuTypeId`.
    pub capacity: &'a [u32],
    /// Active jobs (arrived, not finished), in arrival order: all of them, or, with a
    /// [`RoundInput::backlog`], the running ones and those that changed since the policy's last call.
    pub jobs: &'a [JobView<'a>],
    /// The other active jobs, for a policy that keeps its own queue ([`Policy::keeps_queue`]); `None`
    /// when `jobs` holds every active job.
    pub backlog: Option<&'a dyn Backlog>,
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
}

/// One stretch of running: `job` (with `partner`, when packed) held GPUs of `gpu_type` for `seconds`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usage {
    pub job: JobId,
    pub partner: Option<JobId>,
    pub gpu_type: GpuTypeId,
    pub seconds: f64,
}

/// One active job, as policies see it.
#[derive(Clone, Debug)]
pub struct JobView<'a> {
    pub job: &'a Job,
    /// Steps per second alone at the requested gang size, per GPU type; 0 where it cannot run.
    pub rates: &'a [f64],
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
    pub preemptions: u32,
}

/// The GPUs a job holds now.
#[derive(Clone, Copy, Debug)]
pub struct Running<'a> {
    pub gpu_type: GpuTypeId,
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
        }
    }

    pub fn id(&self) -> JobId {
        self.job.id
    }
}

/// A concrete decision: `job` runs on `gpus` GPUs of `gpu_type` next round, placed as `intent` says.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    pub job: JobId,
    pub gpu_type: GpuTypeId,
    pub gpus: u32,
    #[serde(default)]
    pub intent: Intent,
    /// The batch plan the job should run with (goodput-aware policies); `None`: its own. A grant that
    /// only changes a running job's batch keeps it where it runs, without a restart.
    #[serde(default)]
    pub batch: Option<BatchPlan>,
    /// CPUs and memory per GPU (Synergy's mechanisms, [`resourced`]); `None`: its servers'
    /// GPU-proportional share.
    #[serde(default)]
    pub allotment: Option<Allotment>,
}

/// How a grant wants its GPUs placed; each names one placement step (see `crate::placement`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Intent {
    /// Wherever the placer prefers.
    #[default]
    Anywhere,
    /// On one server when one could hold the gang: the placer waits rather than spread it (YARN-CS).
    Consolidated,
    /// Anywhere now; while it runs spread over servers, moved onto one as soon as a server has room
    /// (Gandiva's defragmenting migration, `placement::defragment`).
    Defragmented,
    /// On the same GPUs as this job (space sharing); the partner's grant names this job
    /// (`placement::packed`).
    PackedWith(JobId),
    /// Across GPU types: the types at least as fast for the job as `gpu_type`, fastest first, with
    /// `gpu_type`, the slowest it may use, setting its pace (Hadar's task-level heterogeneity,
    /// `placement::mixed`).
    MixedTypes,
    /// On the servers with the most free GPUs first, spreading the gang where one server could hold it
    /// (Pollux's simulator places its baselines so: `placement::most_free`).
    MostFree,
}

impl Grant {
    /// `job` alone on `gpus` GPUs of `gpu_type`, placed wherever the placer prefers.
    pub fn new(job: JobId, gpu_type: GpuTypeId, gpus: u32) -> Self {
        Grant {
            job,
            gpu_type,
            gpus,
            intent: Intent::Anywhere,
            batch: None,
            allotment: None,
        }
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
    pub seed: u64,
    /// A distribution of job service (GPU-seconds), for policies that price jobs by it (Tiresias'
    /// Gittins index). `None`: such policies learn it from the jobs that finish.
    pub service_distribution: Option<std::sync::Arc<Vec<f64>>>,
    /// Knob values from the policy's spec (`themis:f=0.5`); [`build`] fills in the declared defaults.
    pub knobs: KnobValues,
    /// Dollars per GPU-hour by GPU type name, for cost-aware policies; types not listed cost
    /// [`DEFAULT_GPU_PRICES`] or, failing that, 1.
    pub gpu_prices: Vec<(String, f64)>,
}

/// On-demand cloud prices per GPU-hour, in dollars, in 2020 (one-GPU instances: AWS p3.2xlarge for the
/// V100, AWS p2.xlarge for the K80, GCP for the P100), as a default for cost-aware policies.
pub const DEFAULT_GPU_PRICES: &[(&str, f64)] = &[("v100", 3.06), ("p100", 1.46), ("k80", 0.90)];

impl PolicyConfig {
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
pub struct Knob {
    pub name: &'static str,
    pub default: f64,
    /// The values that mean something; a spec outside it is refused.
    pub range: KnobRange,
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

/// A policy the registry knows.
pub struct PolicyInfo {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub summary: &'static str,
    pub knobs: &'static [Knob],
    pub build: fn(&PolicyConfig) -> Box<dyn Policy>,
}

/// Every policy, by name.
pub fn registry() -> impl Iterator<Item = &'static PolicyInfo> {
    ordered::POLICIES
        .iter()
        .chain(fair_share::POLICIES)
        .chain(finish_time::POLICIES)
        .chain(tiresias::POLICIES)
        .chain(gandiva::POLICIES)
        .chain(themis::POLICIES)
        .chain(hetero::POLICIES)
        .chain(allox::POLICIES)
        .chain(hadar::POLICIES)
        .chain(optimus::POLICIES)
        .chain(sia::POLICIES)
        .chain(pollux::POLICIES)
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

/// Builds the policy a spec names: `name` (or an alias), optionally with knobs, `themis:f=0.5:lease=600`.
/// A spec may end in `+MECHANISM` (`srtf+tune`): its grants then carry CPUs and memory sized by one of
/// Synergy's mechanisms ([`resourced`]).
pub fn build(spec: &str, config: &PolicyConfig) -> Result<Box<dyn Policy>, SimError> {
    let (_, mechanism) = resourced::split(spec)?;
    let (info, knobs) = parse(spec)?;
    let config = PolicyConfig {
        knobs,
        ..config.clone()
    };
    let policy = (info.build)(&config);
    Ok(match mechanism {
        Some(mechanism) => Box::new(resourced::Resourced::new(policy, mechanism)),
        None => policy,
    })
}

/// The registry entry a spec names.
pub fn find(spec: &str) -> Result<&'static PolicyInfo, SimError> {
    parse(spec).map(|(info, _)| info)
}

/// Resolves a spec to its registry entry and every declared knob's value (given, or the default).
pub fn parse(spec: &str) -> Result<(&'static PolicyInfo, KnobValues), SimError> {
    let (spec, _) = resourced::split(spec)?;
    let mut parts = spec.split(':');
    let name = parts.next().unwrap_or_default();
    let info = registry()
        .find(|p| p.name == name || p.aliases.contains(&name))
        .ok_or_else(|| SimError::UnknownPolicy {
            name: name.to_owned(),
            known: registry()
                .map(|p| match p.aliases {
                    [] => p.name.to_owned(),
                    aliases => format!("{} (alias {})", p.name, aliases.join(", ")),
                })
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let mut knobs: Vec<(&'static str, f64)> =
        info.knobs.iter().map(|k| (k.name, k.default)).collect();
    let mut given: Vec<&str> = Vec::new();
    for part in parts {
        let bad = |why: String| SimError::Config(format!("policy `{spec}`: knob `{part}`: {why}"));
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| bad("expected knob=value".into()))?;
        let slot = knobs.iter_mut().find(|(k, _)| *k == key).ok_or_else(|| {
            let known: Vec<&str> = info.knobs.iter().map(|k| k.name).collect();
            bad(match known.as_slice() {
                [] => format!("{} has no knobs", info.name),
                known => format!("unknown knob; {} has {}", info.name, known.join(", ")),
            })
        })?;
        if given.contains(&key) {
            return Err(bad(format!("`{key}` is given twice")));
        }
        given.push(key);
        let number = value
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| bad(format!("`{value}` is not a number")))?;
        let declared = info
            .knobs
            .iter()
            .find(|k| k.name == key)
            .expect("found above");
        if !declared.range.contains(number) {
            return Err(bad(format!("{value} is out of range ({})", declared.range)));
        }
        slot.1 = number;
    }
    Ok((info, knobs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_names_are_unique() {
        let mut names: Vec<&str> = registry()
            .flat_map(|p| std::iter::once(p.name).chain(p.aliases.iter().copied()))
            .collect();
        let total = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), total, "duplicate policy name or alias");
    }

    #[test]
    fn knobs_take_defaults_and_reject_typos() {
        let (info, knobs) = parse("themis:f=0.5").unwrap();
        assert_eq!(info.name, "themis");
        assert!(
            knobs.contains(&("f", 0.5)) && knobs.contains(&("lease", 300.0)),
            "{knobs:?}"
        );
        for (spec, says) in [
            ("themis:g=1", "unknown knob; themis has f, lease"),
            ("themis:f=x", "`x` is not a number"),
            ("themis:f", "expected knob=value"),
            ("fifo:f=1", "fifo has no knobs"),
        ] {
            let err = parse(spec).err().unwrap().to_string();
            assert!(err.contains(says), "{spec}: {err}");
        }
    }

    #[test]
    fn knobs_are_range_checked_and_given_once() {
        for info in registry() {
            for k in info.knobs {
                assert!(
                    k.range.contains(k.default),
                    "{}:{} default {} is outside {}",
                    info.name,
                    k.name,
                    k.default,
                    k.range
                );
            }
        }
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
            let err = parse(spec).err().expect(spec).to_string();
            assert!(err.contains(says), "{spec}: {err}");
        }
        let (_, knobs) = parse("themis:f=1:lease=0").unwrap();
        assert!(knobs.contains(&("f", 1.0)) && knobs.contains(&("lease", 0.0)));
        assert!(parse("gandiva:grow=1").is_ok());
    }

    #[test]
    fn unknown_policy_lists_the_known_ones() {
        let err = build("nope", &PolicyConfig::seeded(0))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("unknown policy `nope`") && err.contains("fifo"),
            "{err}"
        );
    }
}
