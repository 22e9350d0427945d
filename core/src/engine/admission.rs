//! Admission: taking jobs in, interning their names, caching their rates per GPU type, and the order in
//! which GPU types are offered (fastest first for the jobs admitted so far).

use std::collections::HashMap;
use std::sync::Arc;

use super::{Engine, JobState};
use crate::cluster::{GpuSet, GpuTypeId};
use crate::job::{Job, JobId, JobTypeId, Names, TenantId};
use crate::throughput::locality::default_sensitivity;

use super::accounting::new_record;
use super::live::{Rejected, Unrunnable};

/// The longest a job may take at its fastest: about 30 years. Longer work is a unit mistake (or a
/// rate of 1e-300), and would only make a run spin through rounds.
pub const MAX_JOB_SECONDS: f64 = 1e9;

/// Job-type and tenant ids by name (the first id of a name a trace lists twice, as
/// [`Names::intern_job_type`] finds it). Hashed with a key drawn per map, as names come from clients.
#[derive(Default)]
pub(super) struct NameIds {
    job_types: HashMap<String, u32>,
    tenants: HashMap<String, u32>,
}

impl NameIds {
    pub(super) fn of(names: &Names) -> Self {
        let index = |list: &[String]| {
            let mut ids = HashMap::with_capacity(list.len());
            for (i, name) in list.iter().enumerate() {
                ids.entry(name.clone()).or_insert(i as u32);
            }
            ids
        };
        NameIds {
            job_types: index(&names.job_types),
            tenants: index(&names.tenants),
        }
    }
}

/// `name`'s id in `list` (indexed by `ids`), added at its end if new.
fn intern(list: &mut Vec<String>, ids: &mut HashMap<String, u32>, name: &str) -> u32 {
    if let Some(&id) = ids.get(name) {
        return id;
    }
    let id = list.len() as u32;
    list.push(name.to_owned());
    ids.insert(name.to_owned(), id);
    id
}

impl Engine<'_> {
    /// The id of a job type by name, added if new.
    pub fn intern_job_type(&mut self, name: &str) -> JobTypeId {
        let id = intern(
            &mut self.names.job_types,
            &mut self.name_ids.job_types,
            name,
        );
        if self.sensitivity.len() < self.names.job_types.len() {
            self.sensitivity.push(default_sensitivity(name));
            self.type_names.push(Arc::from(name));
        }
        JobTypeId(id)
    }

    /// The id of a job type by name, if it has one.
    pub fn job_type_id(&self, name: &str) -> Option<JobTypeId> {
        self.name_ids.job_types.get(name).map(|&id| JobTypeId(id))
    }

    /// The id of a tenant by name, if it has one.
    pub fn tenant_id(&self, name: &str) -> Option<TenantId> {
        self.name_ids.tenants.get(name).map(|&id| TenantId(id))
    }

    /// A job type's name, shared by its jobs' records.
    fn type_name(&self, t: JobTypeId) -> Arc<str> {
        Arc::clone(&self.type_names[t.0 as usize])
    }

    /// The job a submission would become, without interning its names: its job type's id, or the id
    /// the type would get; no tenant (what can run depends on the model, which reads the job type,
    /// never the tenant). For checking a submission before anything is stored.
    pub fn candidate(&self, id: JobId, job_type: &str, gpus: u32, total_steps: f64) -> Job {
        let job_type = self
            .job_type_id(job_type)
            .unwrap_or(JobTypeId(self.names.job_types.len() as u32));
        Job::new(id, 0.0, gpus, total_steps).with_type(job_type)
    }

    /// The names job-type and tenant ids refer to.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// The id of a tenant by name, added if new.
    pub fn intern_tenant(&mut self, name: &str) -> TenantId {
        TenantId(intern(
            &mut self.names.tenants,
            &mut self.name_ids.tenants,
            name,
        ))
    }

    /// Takes a job that arrives at `now`. A job that can never run is kept (its record stays
    /// unfinished) but never scheduled.
    pub fn submit(&mut self, job: Job, now: f64) -> Result<(), Rejected> {
        if self.index_of.contains(job.id) {
            return Err(Rejected::Duplicate(job.id));
        }
        let i = self.push(job);
        if let Err(why) = self.check(&self.jobs[i]) {
            return Err(Rejected::Unrunnable(self.jobs[i].id, why));
        }
        self.admit(i, now);
        Ok(())
    }

    /// Whether `job` could run here at all: some GPU type has room for its gang and a rate for it, at
    /// which it finishes within [`MAX_JOB_SECONDS`].
    pub fn check(&self, job: &Job) -> Result<(), Unrunnable> {
        let capacity = self.cluster.capacity();
        let largest = capacity.iter().copied().max().unwrap_or(0);
        // A job with sizes must fit at its fewest GPUs of some type (policies that resize it go no
        // further than the cluster); others at the GPUs they ask for.
        let gpus_on = |t: usize| match job.sizes {
            Some(_) => job.fewest_gpus_on(GpuTypeId(t as u16)),
            None => job.gpus,
        };
        let fits = |t: &usize| (1..=capacity[*t]).contains(&gpus_on(*t));
        if !(0..self.types()).any(|t| fits(&t)) {
            let least = (0..self.types()).map(gpus_on).filter(|&g| g > 0).min();
            let gpus = least.unwrap_or(0);
            return Err(Unrunnable::GangTooLarge { gpus, largest });
        }
        let best = (0..self.types())
            .filter(fits)
            .filter_map(|t| {
                self.model
                    .steps_per_second(job, GpuTypeId(t as u16), gpus_on(t))
            })
            .filter(|r| r.is_finite() && *r > 0.0)
            .fold(0.0, f64::max);
        let gpus = (0..self.types())
            .filter(fits)
            .map(gpus_on)
            .min()
            .unwrap_or(job.gpus);
        if best <= 0.0 {
            return Err(Unrunnable::NoRate { gpus });
        }
        let seconds = job.total_steps / best;
        // NaN (0 work at a zero rate) is as meaningless as too long.
        if seconds.is_nan() || seconds > MAX_JOB_SECONDS {
            return Err(Unrunnable::TooLong {
                seconds,
                limit: MAX_JOB_SECONDS,
            });
        }
        Ok(())
    }

    /// The GPU types in the order heterogeneity-aware policies are offered them.
    pub fn type_order(&self) -> &[GpuTypeId] {
        self.type_order.order()
    }

    /// Counts a job that ran before a restart, and has ended, toward the GPU type order, as its
    /// admission did: a recovered control plane then offers the types in the order it did before.
    pub fn remember_ended(&mut self, job: &Job) {
        let rates: Vec<f64> = self.rates_of(job).collect();
        self.type_order.observe(&rates);
    }

    /// Steps/s of `job` alone on its gang of each type (0 where it cannot run).
    fn rates_of<'a>(&'a self, job: &'a Job) -> impl Iterator<Item = f64> + 'a {
        (0..self.types()).map(move |t| {
            self.model
                .steps_per_second(job, GpuTypeId(t as u16), job.gpus)
                .filter(|r| r.is_finite() && *r > 0.0)
                .unwrap_or(0.0)
        })
    }

    /// Adds a job's state without admitting it, in a forgotten job's slot if there is one.
    fn push(&mut self, job: Job) -> usize {
        let rates: Vec<f64> = self.rates_of(&job).collect();
        let state = JobState {
            steps_done: 0.0,
            attained_gpu_seconds: 0.0,
            attained_seconds: 0.0,
            run: None,
            last_gpus: GpuSet::new(),
            overhead_due: 0.0,
            progressed: false,
            queued_since: job.arrival,
            last_run_seconds: 0.0,
            finish_at: f64::INFINITY,
            completion: None,
            displaced: false,
            waiting: None,
            order: 0,
            active: false,
            touched: false,
            held: false,
            deferred_until: None,
            grant: None,
        };
        let record = new_record(&job, self.type_name(job.job_type), self.types());
        let i = match self.vacant.pop() {
            Some(i) => {
                let t = self.types();
                self.rates[i * t..(i + 1) * t].copy_from_slice(&rates);
                self.states[i] = state;
                self.records[i] = record;
                self.jobs[i] = job;
                i
            }
            None => {
                self.rates.extend(rates);
                self.states.push(state);
                self.records.push(record);
                self.jobs.push(job);
                self.jobs.len() - 1
            }
        };
        self.index_of.insert(self.jobs[i].id, i);
        i
    }

    fn admit(&mut self, i: usize, now: f64) {
        let t = self.types();
        self.type_order.observe(&self.rates[i * t..(i + 1) * t]);
        let order = self.admissions;
        self.admissions += 1;
        let state = &mut self.states[i];
        state.queued_since = now;
        state.order = order;
        state.active = true;
        self.active.insert((order, i));
        self.unexplained.push(i);
        self.touch(i);
        self.jobs_changed = true;
    }

    /// Job `i`'s rates alone at its requested gang size, per GPU type.
    pub(super) fn job_rates(&self, i: usize) -> &[f64] {
        let t = self.types();
        &self.rates[i * t..(i + 1) * t]
    }

    /// Job `i`'s rate alone on `gpus` GPUs of `gpu_type`: cached at the size it asked for, from the model
    /// at any other size (a policy that resizes jobs); 0 where it cannot run so.
    pub(super) fn rate_at(&self, i: usize, gpu_type: GpuTypeId, gpus: u32) -> f64 {
        let job = &self.jobs[i];
        if gpus == job.gpus {
            return self.job_rates(i)[gpu_type.0 as usize];
        }
        self.model
            .steps_per_second(job, gpu_type, gpus)
            .filter(|r| r.is_finite() && *r > 0.0)
            .unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::cluster::{Cluster, GpuTypeId};
    use crate::engine::{Engine, EngineConfig};
    use crate::job::{Job, JobId, JobTypeId, Names};
    use crate::throughput::ThroughputModel;

    /// Job type 0 runs 3x faster on GPU type 1; job type 1 twice as fast on GPU type 0.
    struct TwoKinds;

    impl ThroughputModel for TwoKinds {
        fn steps_per_second(&self, job: &Job, gpu_type: GpuTypeId, _gpus: u32) -> Option<f64> {
            let rates = [[1.0, 3.0], [2.0, 1.0]];
            Some(rates[job.job_type.0 as usize][gpu_type.0 as usize])
        }
    }

    fn engine() -> Engine<'static> {
        let cluster = Arc::new(Cluster::parse_spec("a=2,b=2", 1).unwrap());
        let mut engine = Engine::new(
            cluster,
            Arc::new(TwoKinds),
            EngineConfig::default(),
            Names::default(),
            0.0,
        );
        for name in ["fast-on-b", "fast-on-a"] {
            engine.intern_job_type(name);
        }
        engine
    }

    fn job(id: u32, job_type: u32) -> Job {
        Job::new(JobId(id), 0.0, 1, 100.0).with_type(JobTypeId(job_type))
    }

    #[test]
    fn ended_jobs_remembered_at_recovery_give_the_type_order_their_admission_gave() {
        // Before the restart: two jobs that prefer type 1 (both ended), then one that prefers type 0.
        let mut before = engine();
        for (id, kind) in [(0, 0), (1, 0), (2, 1)] {
            before.submit(job(id, kind), 0.0).unwrap();
        }
        assert_eq!(before.type_order(), [GpuTypeId(1), GpuTypeId(0)]);
        // After it, only job 2 is submitted again: without the ended ones the order would flip.
        let mut recovered = engine();
        recovered.submit(job(2, 1), 0.0).unwrap();
        assert_eq!(recovered.type_order(), [GpuTypeId(0), GpuTypeId(1)]);
        let mut remembered = engine();
        for id in [0, 1] {
            remembered.remember_ended(&job(id, 0));
        }
        remembered.submit(job(2, 1), 0.0).unwrap();
        assert_eq!(remembered.type_order(), before.type_order());
    }

    #[test]
    fn names_keep_their_ids_whether_listed_at_the_start_or_interned_later() {
        // A trace's names, one listed twice (the first id is the name's, as a trace finds it).
        let names = Names {
            job_types: vec!["a".into(), "b".into(), "a".into()],
            tenants: vec!["team".into()],
        };
        let cluster = Arc::new(Cluster::parse_spec("a=2,b=2", 1).unwrap());
        let mut engine = Engine::new(
            cluster,
            Arc::new(TwoKinds),
            EngineConfig::default(),
            names,
            0.0,
        );
        assert_eq!(engine.job_type_id("a"), Some(JobTypeId(0)));
        assert_eq!(engine.intern_job_type("b"), JobTypeId(1));
        assert_eq!(engine.job_type_id("c"), None);
        assert_eq!(
            engine.candidate(JobId(1), "c", 1, 1.0).job_type,
            JobTypeId(3)
        );
        assert_eq!(engine.intern_job_type("c"), JobTypeId(3));
        assert_eq!(
            engine.candidate(JobId(1), "c", 1, 1.0).job_type,
            JobTypeId(3)
        );
        // Many names: each keeps the id it was given, and the names list them by id.
        let ids: Vec<_> = (0..5000)
            .map(|k| engine.intern_tenant(&format!("tenant-{k}")))
            .collect();
        assert_eq!(engine.tenant_id("team").map(|t| t.0), Some(0));
        for (k, id) in ids.iter().enumerate() {
            let name = format!("tenant-{k}");
            assert_eq!(id.0 as usize, k + 1);
            assert_eq!(engine.intern_tenant(&name), *id);
            assert_eq!(engine.tenant_id(&name), Some(*id));
            assert_eq!(engine.names().tenant(*id), name);
        }
        assert_eq!(engine.names().tenants.len(), 5001);
        assert_eq!(engine.names().job_type(JobTypeId(3)), "c");
    }
}
