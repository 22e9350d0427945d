//! Jobs as a trace describes them: what arrives, when, how much work it carries, and how many GPUs it needs.

use serde::{Deserialize, Serialize};

use crate::cluster::GpuTypeId;
use crate::error::{InputError, Source};
use crate::limits;

pub use gangway_protocol::ids::JobId;

/// A hash map keyed by what a client of a live control plane may choose (job ids, what a submission
/// makes of a job: its class, its tenant's name) or by GPU ids, with a seed drawn per map: ids
/// crafted to fall in one bucket under a fixed hash do not under a seed they cannot know. (foldhash:
/// fast, and no cryptographic key; a client that could observe the maps' timing at length might
/// still learn enough.) Iteration order differs from map to map and run to run: nothing whose
/// outcome matters may depend on it (sort first).
pub type IdMap<K, V> = foldhash::HashMap<K, V>;

/// A set of ids; see [`IdMap`].
pub type IdSet<K> = foldhash::HashSet<K>;

/// Index of a job type (a model and batch size, such as `ResNet-18 (batch size 64)`) in [`Names`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobTypeId(pub u32);

/// Index of a user or tenant (Philly's virtual cluster) in [`Names`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TenantId(pub u32);

/// What a job's `total_steps` counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkUnit {
    /// Training steps (iterations); a throughput model says how fast each GPU type runs them.
    Steps,
    /// Seconds of running time at the job's requested GPU count, for traces that give only durations.
    Seconds,
    /// Training progress, in iterations at each application's initial batch size (Pollux's and Sia's
    /// workloads): a goodput model over the applications' profiles says how fast a run makes it.
    Progress,
}

/// The latest arrival a trace may give, in seconds (about 31,700 years). Simulated time must stay where an
/// f64 still resolves fractions of a second: a later arrival is a unit or rate mistake, refused where it
/// is read.
pub const MAX_ARRIVAL_SECONDS: f64 = 1e12;

/// One training job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Its id, unique within its trace: the engine, the journal and reports know the job by it.
    pub id: JobId,
    /// Seconds since the start of the trace.
    pub arrival: f64,
    /// Its model and batch size, by which a throughput table gives its rates.
    pub job_type: JobTypeId,
    /// GPUs the job needs, all at once (a gang; Gavel's "scale factor").
    pub gpus: u32,
    /// Work to do, in the trace's [`WorkUnit`].
    pub total_steps: f64,
    /// Priority weight (1 by default).
    pub weight: f64,
    /// The user or tenant it belongs to: hierarchical policies share the cluster between tenants
    /// first, then among each tenant's jobs.
    pub tenant: TenantId,
    /// The global batch size the job was tuned for, when its trace gives one (Pollux's and Sia's
    /// workloads): what policies that keep a job's size run it with, and the bound a goodput model
    /// tunes within.
    #[serde(default)]
    pub batch: Option<u32>,
    /// Set when the job adapts its batch (a submission's `--batch MIN:MAX`): its least global batch,
    /// `batch` being its largest. Goodput policies choose its batch within that range, and its workers
    /// run at their choice. `None`: the job keeps its batch (or, in the peers' workloads, its
    /// application's range stands).
    #[serde(default)]
    pub min_batch: Option<u32>,
    /// The sizes policies that resize jobs (Pollux, Sia) may give it; `None`: any size they choose
    /// (the peers' workloads, whose jobs are all elastic). Other policies give it `gpus`.
    #[serde(default)]
    pub sizes: Option<Sizes>,
    /// Where a hybrid-parallel job's group (its `tp x pp` GPUs, one data-parallel replica) differs by
    /// GPU type, the group on each, indexed by [`GpuTypeId`] (0, or no entry: `sizes.multiple`). A
    /// large model's pipeline spans more small GPUs than large ones: Sia's per-type scale unit.
    #[serde(default)]
    pub group_by_type: Vec<u32>,
}

/// The GPU counts a job can run on: from `min` to `max`, in multiples of `multiple` (a hybrid-parallel
/// job's tensor x pipeline group). A rigid job has `min == max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sizes {
    /// Fewest GPUs, at least 1 in effect (rounded up to a multiple of the job's group).
    pub min: u32,
    /// Most GPUs.
    pub max: u32,
    /// GPU counts are multiples of it: 1 for a data-parallel job, the `tp x pp` group of a
    /// hybrid-parallel one (0 reads as 1). [`Job::group_by_type`] overrides it per GPU type.
    pub multiple: u32,
}

impl Sizes {
    /// Exactly `gpus`.
    pub fn rigid(gpus: u32) -> Sizes {
        Sizes {
            min: gpus,
            max: gpus,
            multiple: 1,
        }
    }
}

impl Job {
    /// A job of type 0 and tenant 0 ([`Names`]' first), weight 1, keeping its GPUs and batch: `gpus`
    /// GPUs at once from `arrival` (seconds), `work` in its trace's [`WorkUnit`]. The `with_*` methods
    /// set the rest.
    pub fn new(id: JobId, arrival: f64, gpus: u32, work: f64) -> Job {
        Job {
            id,
            arrival,
            job_type: JobTypeId(0),
            gpus,
            total_steps: work,
            weight: 1.0,
            tenant: TenantId(0),
            batch: None,
            min_batch: None,
            sizes: None,
            group_by_type: Vec::new(),
        }
    }

    /// The same job, of type `job_type`.
    pub fn with_type(self, job_type: JobTypeId) -> Job {
        Job { job_type, ..self }
    }

    /// The same job, with priority weight `weight`.
    pub fn with_weight(self, weight: f64) -> Job {
        Job { weight, ..self }
    }

    /// The same job, of tenant `tenant`.
    pub fn with_tenant(self, tenant: TenantId) -> Job {
        Job { tenant, ..self }
    }

    /// The same job, tuned for the global batch `batch` (see [`Job::batch`]).
    pub fn with_batch(self, batch: u32) -> Job {
        Job {
            batch: Some(batch),
            ..self
        }
    }

    /// The same job, adapting its batch down to `min_batch` (see [`Job::min_batch`]).
    pub fn with_min_batch(self, min_batch: u32) -> Job {
        Job {
            min_batch: Some(min_batch),
            ..self
        }
    }

    /// The same job, on the sizes `sizes` when a policy resizes it (see [`Job::sizes`]).
    pub fn with_sizes(self, sizes: Sizes) -> Job {
        Job {
            sizes: Some(sizes),
            ..self
        }
    }

    /// The same job, with a replica of `group_by_type[t]` GPUs on GPU type `t` (see
    /// [`Job::group_by_type`]).
    pub fn with_groups(self, group_by_type: Vec<u32>) -> Job {
        Job {
            group_by_type,
            ..self
        }
    }

    /// The GPUs of one of its data-parallel replicas on `gpu_type`: its `tp x pp` group there (1 for
    /// a data-parallel job).
    pub fn group_on(&self, gpu_type: GpuTypeId) -> u32 {
        match self.group_by_type.get(usize::from(gpu_type.0)) {
            Some(&group) if group > 0 => group,
            _ => self.sizes.map_or(1, |s| s.multiple.max(1)),
        }
    }

    /// Its data-parallel replicas on `gpus` GPUs of `gpu_type` (what its batch is split across).
    pub fn replicas_on(&self, gpu_type: GpuTypeId, gpus: u32) -> u32 {
        (gpus / self.group_on(gpu_type)).max(1)
    }

    /// Whether policies that resize jobs may run it on `gpus` GPUs of `gpu_type`.
    pub fn can_run_on(&self, gpu_type: GpuTypeId, gpus: u32) -> bool {
        self.sizes.is_none_or(|s| {
            (s.min..=s.max).contains(&gpus) && gpus.is_multiple_of(self.group_on(gpu_type))
        })
    }

    /// The fewest GPUs it runs on of `gpu_type` (1 when any size is allowed; 0 when none is).
    pub fn fewest_gpus_on(&self, gpu_type: GpuTypeId) -> u32 {
        self.sizes.map_or(1, |s| {
            let m = self.group_on(gpu_type);
            let fewest = s.min.max(1).div_ceil(m) * m;
            if fewest <= s.max { fewest } else { 0 }
        })
    }

    /// The sizes a resizing policy offers it on `gpu_type`, with `room` GPUs, from the policy's usual
    /// sizes there, `offered` (ascending), up to `most`: those it can run on, and, for a job with
    /// [`Sizes`], its fewest GPUs where they are not among them (a rigid 3-GPU job on 4-GPU servers,
    /// which Sia sizes 1, 2, 4, runs on 3), even above `most`: growing limits start from them.
    pub fn sizes_within(
        &self,
        gpu_type: GpuTypeId,
        offered: impl IntoIterator<Item = u32>,
        most: u32,
        room: u32,
    ) -> Vec<u32> {
        let mut sizes: Vec<u32> = offered
            .into_iter()
            .filter(|&g| g <= most.min(room) && self.can_run_on(gpu_type, g))
            .collect();
        let fewest = self.fewest_gpus_on(gpu_type);
        if self.sizes.is_some() && fewest > 0 && fewest <= room && !sizes.contains(&fewest) {
            let at = sizes.partition_point(|&g| g < fewest);
            sizes.insert(at, fewest);
        }
        sizes
    }
}

/// The names that job-type and tenant ids refer to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Names {
    /// Job type names (model and batch size), indexed by [`JobTypeId`].
    pub job_types: Vec<String>,
    /// Tenant names, indexed by [`TenantId`].
    pub tenants: Vec<String>,
}

impl Names {
    /// The name of job type `t`. Panics on an id that was never interned.
    pub fn job_type(&self, t: JobTypeId) -> &str {
        &self.job_types[t.0 as usize]
    }

    /// The name of tenant `t`. Panics on an id that was never interned.
    pub fn tenant(&self, t: TenantId) -> &str {
        &self.tenants[t.0 as usize]
    }

    /// The id of a job type, added if new.
    pub fn intern_job_type(&mut self, name: &str) -> JobTypeId {
        JobTypeId(intern(&mut self.job_types, name))
    }

    /// The id of a tenant, added if new.
    pub fn intern_tenant(&mut self, name: &str) -> TenantId {
        TenantId(intern(&mut self.tenants, name))
    }
}

/// A list of jobs in arrival order, with the names their ids refer to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// Where it came from (a path, `embedded:...` or `synthetic:...`).
    pub source: String,
    /// What its jobs' `total_steps` count; `None` (a default trace, or one serialized without it)
    /// reads as [`WorkUnit::Steps`].
    pub work_unit: Option<WorkUnit>,
    /// Its jobs, in arrival order once read or built (see [`Trace::sort_by_arrival`]).
    pub jobs: Vec<Job>,
    /// The job type and tenant names its jobs' ids refer to.
    pub names: Names,
    /// Where the profiles of its applications are, for traces counted in [`WorkUnit::Progress`]; for
    /// Synergy's traces (in [`WorkUnit::Seconds`]), its CPU and memory sensitivity profiles.
    #[serde(skip)]
    pub profiles: Option<std::path::PathBuf>,
    /// Where each job was read, when the trace came from a file: for errors found once the cluster
    /// is known (a job that can never run there), which name its line.
    #[serde(skip)]
    pub rows: Option<crate::trace::Rows>,
}

impl Trace {
    /// Compresses arrivals by `factor` (2 = twice the load: every arrival time halved).
    pub fn scale_load(&mut self, factor: f64) {
        debug_assert!(factor.is_finite() && factor > 0.0);
        for job in &mut self.jobs {
            job.arrival /= factor;
        }
    }

    /// An empty trace from `source` (a path, `embedded:...` or `synthetic:...`), its work counted
    /// in `work_unit`.
    pub fn new(source: impl Into<String>, work_unit: WorkUnit) -> Self {
        Trace {
            source: source.into(),
            work_unit: Some(work_unit),
            ..Trace::default()
        }
    }

    /// What its jobs' `total_steps` count: [`WorkUnit::Steps`] when the trace does not say.
    pub fn work_unit(&self) -> WorkUnit {
        self.work_unit.unwrap_or(WorkUnit::Steps)
    }

    /// The name of job type `t`, such as `ResNet-18 (batch size 64)`.
    pub fn job_type_name(&self, t: JobTypeId) -> &str {
        self.names.job_type(t)
    }

    /// The name of tenant `t`.
    pub fn tenant_name(&self, t: TenantId) -> &str {
        self.names.tenant(t)
    }

    /// The id of a job type, added if new.
    pub fn intern_job_type(&mut self, name: &str) -> JobTypeId {
        self.names.intern_job_type(name)
    }

    /// The id of a tenant, added if new.
    pub fn intern_tenant(&mut self, name: &str) -> TenantId {
        self.names.intern_tenant(name)
    }

    /// Sorts jobs by arrival (stable, so equal arrivals keep file order).
    pub fn sort_by_arrival(&mut self) {
        self.jobs.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
    }

    /// Renumbers jobs 0.. in their current order (for traces whose rows carry no id).
    pub fn renumber(&mut self) {
        for (i, job) in self.jobs.iter_mut().enumerate() {
            job.id = JobId(i as u32);
        }
    }
}

impl Trace {
    /// Starts a trace of jobs made in code, their work counted in `work_unit`.
    pub fn builder(work_unit: WorkUnit) -> TraceBuilder {
        TraceBuilder::new(work_unit)
    }
}

/// Builds a [`Trace`] from jobs made in code. Names are interned as jobs name them; [`build`] sorts
/// the jobs by arrival (stably), numbers them 0.. in that order, and checks every number against
/// [`crate::limits`] as a trace file's are checked.
///
/// [`build`]: TraceBuilder::build
///
/// ```
/// use gangway_core::job::{Trace, WorkUnit};
///
/// let trace = Trace::builder(WorkUnit::Seconds)
///     .job("resnet50", 60.0, 4, 3600.0)
///     .tenant("team-b")
///     .job_with("bert", 0.0, 2, 1800.0, |job| job.with_weight(2.0))
///     .build()
///     .unwrap();
/// // Numbered in arrival order.
/// assert_eq!(trace.job_type_name(trace.jobs[0].job_type), "bert");
/// assert_eq!(trace.tenant_name(trace.jobs[0].tenant), "team-b");
/// assert_eq!((trace.jobs[0].id.0, trace.jobs[1].id.0), (0, 1));
/// ```
#[derive(Clone, Debug)]
pub struct TraceBuilder {
    trace: Trace,
    /// The tenant of the jobs added next.
    tenant: TenantId,
}

/// The source a trace made in code names in its errors, unless [`TraceBuilder::source`] says another.
pub const CODE_SOURCE: &str = "code";

impl TraceBuilder {
    /// An empty trace counting work in `work_unit`; its jobs are tenant `default`'s until
    /// [`TraceBuilder::tenant`] names another.
    pub fn new(work_unit: WorkUnit) -> Self {
        let mut trace = Trace::new(CODE_SOURCE, work_unit);
        let tenant = trace.intern_tenant("default");
        TraceBuilder { trace, tenant }
    }

    /// Names where the jobs came from, for messages (default [`CODE_SOURCE`]).
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.trace.source = source.into();
        self
    }

    /// The tenant of the jobs added after this call.
    pub fn tenant(mut self, name: &str) -> Self {
        self.tenant = self.trace.intern_tenant(name);
        self
    }

    /// Adds a job of type `job_type` that arrives at `arrival` seconds and needs `gpus` GPUs at once
    /// for `work` (in the trace's [`WorkUnit`]).
    pub fn job(self, job_type: &str, arrival: f64, gpus: u32, work: f64) -> Self {
        self.job_with(job_type, arrival, gpus, work, |job| job)
    }

    /// [`TraceBuilder::job`], with the job passed through `edit` (to set its weight, sizes or batch
    /// with [`Job`]'s `with_*` methods).
    pub fn job_with(
        mut self,
        job_type: &str,
        arrival: f64,
        gpus: u32,
        work: f64,
        edit: impl FnOnce(Job) -> Job,
    ) -> Self {
        let job_type = self.trace.intern_job_type(job_type);
        let id = JobId(self.trace.jobs.len() as u32);
        let job = Job::new(id, arrival, gpus, work)
            .with_type(job_type)
            .with_tenant(self.tenant);
        self.trace.jobs.push(edit(job));
        self
    }

    /// The trace, its jobs in arrival order and numbered so. A number out of its range is an error
    /// at `SOURCE:N: field `...``, `N` being the job's place in the order it was added, from 1.
    pub fn build(self) -> Result<Trace, InputError> {
        let mut trace = self.trace;
        let source = Source(trace.source.clone());
        let work = match trace.work_unit() {
            WorkUnit::Steps => limits::STEPS,
            WorkUnit::Seconds => limits::WORK_SECONDS,
            WorkUnit::Progress => limits::PROGRESS,
        };
        for (k, job) in trace.jobs.iter().enumerate() {
            let place = k as u64 + 1;
            let field = |name: &str, range: &limits::Range, value: f64| {
                range
                    .check(value)
                    .map(drop)
                    .map_err(|why| InputError::field(&source, place, name, why))
            };
            field("arrival", &limits::ARRIVAL_SECONDS, job.arrival)?;
            field("gpus", &limits::JOB_GPUS, f64::from(job.gpus))?;
            field("work", &work, job.total_steps)?;
            field("weight", &limits::WEIGHT, job.weight)?;
            for batch in [job.batch, job.min_batch].into_iter().flatten() {
                field("batch", &limits::BATCH, f64::from(batch))?;
            }
        }
        // Where each job was added, by the id it gets: errors found once the cluster is known
        // (`trace::check_runnable`) name its place.
        let mut added: Vec<(u64, Job)> = (1..).zip(trace.jobs.drain(..)).collect();
        added.sort_by(|a, b| a.1.arrival.total_cmp(&b.1.arrival));
        let mut lines = std::collections::HashMap::with_capacity(added.len());
        for (id, (place, mut job)) in added.into_iter().enumerate() {
            job.id = JobId(id as u32);
            lines.insert(job.id, place);
            trace.jobs.push(job);
        }
        trace.rows = Some(crate::trace::Rows {
            lines,
            columns: crate::trace::JobColumns {
                gpus: "gpus",
                work: "work",
                job_type: "job_type",
            },
        });
        Ok(trace)
    }
}

fn intern(names: &mut Vec<String>, name: &str) -> u32 {
    // Traces have tens of job types and at most a few hundred tenants, so a linear scan is cheapest.
    match names.iter().position(|n| n == name) {
        Some(i) => i as u32,
        None => {
            names.push(name.to_owned());
            (names.len() - 1) as u32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: GpuTypeId = GpuTypeId(0);

    fn job(sizes: Option<Sizes>) -> Job {
        Job {
            sizes,
            ..Job::new(JobId(0), 0.0, 4, 1.0)
        }
    }

    /// Maps keyed by ids a client picks hash them with a seed of their own: two maps of the same
    /// ids lay them out differently, so ids crafted to collide in one collide in no other (with a
    /// fixed hash, as before, both would list them alike).
    #[test]
    fn id_maps_are_seeded_each_its_own_way() {
        let ids = || (0..1_000).map(JobId);
        let one: IdSet<JobId> = ids().collect();
        let other: IdSet<JobId> = ids().collect();
        assert_eq!(one, other);
        let order = |set: &IdSet<JobId>| set.iter().copied().collect::<Vec<_>>();
        assert_ne!(order(&one), order(&other));
    }

    #[test]
    fn a_trace_made_in_code_is_numbered_in_arrival_order_and_its_numbers_are_checked() {
        let trace = Trace::builder(WorkUnit::Steps)
            .job("a", 30.0, 2, 100.0)
            .tenant("b-team")
            .job_with("b", 10.0, 1, 50.0, |j| {
                j.with_weight(2.0).with_sizes(Sizes::rigid(1))
            })
            .job("a", 30.0, 4, 10.0)
            .build()
            .unwrap();
        let seen: Vec<(u32, f64, &str, &str, u32)> = trace
            .jobs
            .iter()
            .map(|j| {
                (
                    j.id.0,
                    j.arrival,
                    trace.job_type_name(j.job_type),
                    trace.tenant_name(j.tenant),
                    j.gpus,
                )
            })
            .collect();
        // Equal arrivals keep the order they were added in.
        assert_eq!(
            seen,
            [
                (0, 10.0, "b", "b-team", 1),
                (1, 30.0, "a", "default", 2),
                (2, 30.0, "a", "b-team", 4)
            ]
        );
        assert_eq!(trace.jobs[0].weight, 2.0);
        assert_eq!(trace.jobs[0].sizes, Some(Sizes::rigid(1)));
        // Later errors name the place a job was added at.
        let rows = trace.rows.as_ref().unwrap();
        assert_eq!(rows.line_of(JobId(0)), Some(2));
        assert_eq!(rows.line_of(JobId(2)), Some(3));

        let err = Trace::builder(WorkUnit::Seconds)
            .source("mine")
            .job("a", 0.0, 1, 60.0)
            .job("a", 0.0, 0, 60.0)
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("mine:2: field `gpus`: 0 is out of range"),
            "{err}"
        );
        let err = Trace::builder(WorkUnit::Seconds)
            .job("a", f64::NAN, 1, 60.0)
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("code:1: field `arrival`:"), "{err}");
        let err = Trace::builder(WorkUnit::Seconds)
            .job_with("a", 0.0, 1, 60.0, |j| j.with_weight(0.0))
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("code:1: field `weight`:"), "{err}");
    }

    #[test]
    fn a_job_is_offered_only_the_sizes_it_runs_on_and_always_its_fewest() {
        let offered = [1, 2, 4, 8, 16];
        // A trace job takes whatever the policy offers, within its limit and the room.
        assert_eq!(job(None).sizes_within(T0, offered, 8, 16), [1, 2, 4, 8]);
        assert_eq!(job(None).sizes_within(T0, offered, 8, 0), Vec::<u32>::new());
        // A rigid 3-GPU job runs on 3, though the policy never offers 3, and above its limit.
        assert_eq!(
            job(Some(Sizes::rigid(3))).sizes_within(T0, offered, 1, 16),
            [3]
        );
        // ... but not where there is no room for it.
        assert_eq!(
            job(Some(Sizes::rigid(3))).sizes_within(T0, offered, 8, 2),
            Vec::<u32>::new()
        );
        // A tp=2 job from 1 to 8 GPUs: even sizes only, its fewest being 2.
        let tp2 = Sizes {
            min: 1,
            max: 8,
            multiple: 2,
        };
        assert_eq!(job(Some(tp2)).fewest_gpus_on(T0), 2);
        assert_eq!(job(Some(tp2)).sizes_within(T0, offered, 1, 16), [2]);
        assert_eq!(job(Some(tp2)).sizes_within(T0, offered, 16, 16), [2, 4, 8]);
        // Sizes that hold no multiple run nowhere.
        let none = Sizes {
            min: 3,
            max: 3,
            multiple: 2,
        };
        assert_eq!(job(Some(none)).fewest_gpus_on(T0), 0);
        assert_eq!(
            job(Some(none)).sizes_within(T0, offered, 16, 16),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn a_pipeline_that_spans_more_small_gpus_than_large_ones_scales_by_whole_replicas_on_each_type()
    {
        // Sia's gpt_pmp: 8 stages on RTX 2080Ti (type 1), 2 on A100 (type 2); type 0 keeps `pp`.
        let mut gpt = job(Some(Sizes {
            min: 1,
            max: 16,
            multiple: 1,
        }));
        gpt.group_by_type = vec![0, 8, 2];
        let (rtx, a100) = (GpuTypeId(1), GpuTypeId(2));
        assert_eq!(
            [gpt.group_on(T0), gpt.group_on(rtx), gpt.group_on(a100)],
            [1, 8, 2]
        );
        assert_eq!(
            gpt.group_on(GpuTypeId(7)),
            1,
            "a type it names no group for"
        );
        assert_eq!(gpt.fewest_gpus_on(rtx), 8);
        assert_eq!(gpt.fewest_gpus_on(a100), 2);
        let offered = [1, 2, 4, 8, 16];
        assert_eq!(gpt.sizes_within(rtx, offered, 16, 16), [8, 16]);
        assert_eq!(gpt.sizes_within(a100, offered, 16, 16), [2, 4, 8, 16]);
        // A new job (limit 1) is offered one replica on each type.
        assert_eq!(gpt.sizes_within(rtx, offered, 1, 16), [8]);
        assert_eq!(gpt.sizes_within(a100, offered, 1, 16), [2]);
        // 16 GPUs are 2 replicas on RTX, 8 on A100.
        assert_eq!(gpt.replicas_on(rtx, 16), 2);
        assert_eq!(gpt.replicas_on(a100, 16), 8);
        assert!(!gpt.can_run_on(rtx, 12));
        assert!(gpt.can_run_on(a100, 12));
        // A named type's group replaces the default one, not adds to it: pp 8 by default, 2 on A100.
        gpt.sizes = Some(Sizes {
            min: 1,
            max: 16,
            multiple: 8,
        });
        gpt.group_by_type = vec![0, 0, 2];
        assert_eq!(gpt.sizes_within(T0, offered, 16, 16), [8, 16]);
        assert_eq!(gpt.sizes_within(a100, offered, 16, 16), [2, 4, 8, 16]);
    }
}
