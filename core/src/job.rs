//! Jobs as a trace describes them: what arrives, when, how much work it carries, and how many GPUs it needs.

use serde::{Deserialize, Serialize};

pub use gangway_protocol::ids::JobId;

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
    pub id: JobId,
    /// Seconds since the start of the trace.
    pub arrival: f64,
    pub job_type: JobTypeId,
    /// GPUs the job needs, all at once (a gang; Gavel's "scale factor").
    pub gpus: u32,
    /// Work to do, in the trace's [`WorkUnit`].
    pub total_steps: f64,
    /// Priority weight (1 by default).
    pub weight: f64,
    pub tenant: TenantId,
    /// The global batch size the job was tuned for, when its trace gives one (Pollux's and Sia's
    /// workloads): what policies that keep a job's size run it with, and the bound a goodput model
    /// tunes within.
    #[serde(default)]
    pub batch: Option<u32>,
}

/// The names that job-type and tenant ids refer to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Names {
    pub job_types: Vec<String>,
    pub tenants: Vec<String>,
}

impl Names {
    pub fn job_type(&self, t: JobTypeId) -> &str {
        &self.job_types[t.0 as usize]
    }

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
    pub work_unit: Option<WorkUnit>,
    pub jobs: Vec<Job>,
    pub names: Names,
    /// Where the profiles of its applications are, for traces counted in [`WorkUnit::Progress`]; for
    /// Synergy's traces (in [`WorkUnit::Seconds`]), its CPU and memory sensitivity profiles.
    #[serde(skip)]
    pub profiles: Option<std::path::PathBuf>,
}

impl Trace {
    /// Compresses arrivals by `factor` (2 = twice the load: every arrival time halved).
    pub fn scale_load(&mut self, factor: f64) {
        debug_assert!(factor.is_finite() && factor > 0.0);
        for job in &mut self.jobs {
            job.arrival /= factor;
        }
    }

    pub fn new(source: impl Into<String>, work_unit: WorkUnit) -> Self {
        Trace {
            source: source.into(),
            work_unit: Some(work_unit),
            ..Trace::default()
        }
    }

    pub fn work_unit(&self) -> WorkUnit {
        self.work_unit.unwrap_or(WorkUnit::Steps)
    }

    pub fn job_type_name(&self, t: JobTypeId) -> &str {
        self.names.job_type(t)
    }

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
