//! Policies written in Python: an object with `allocate(round) -> list[Grant]`, entered into the
//! core [`Registry`] under a name through [`PolicyEntry::new`], the call every built-in policy is
//! entered by, so that it runs wherever a built-in runs.
//!
//! Each round the policy is shown a [`Round`] (the time, the GPUs in service per type, every
//! active job as a [`JobView`]) and answers with [`Grant`]s in priority order. An exception in it
//! (or in its factory) is kept with its traceback; from then on the policy grants nothing and
//! asks to be called every round, so the run ends at once by the engine's stall rule (no job
//! progresses), and `gangway.simulate` raises `PolicyFailed` with the traceback.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyList;

use gangway::core::cluster::GpuTypeId;
use gangway::core::job::JobId;
use gangway::core::policy::{self, Policy, PolicyEntry, RoundInput};

/// What an active job looks like to a Python policy (read-only).
#[pyclass(module = "gangway", frozen, get_all)]
pub struct JobView {
    /// The job's id in its trace.
    id: u32,
    /// When it arrived, in seconds.
    arrival: f64,
    /// GPUs it asked for (its gang size).
    gpus: u32,
    /// Its job type, as an index (jobs of the same model share it).
    job_type: u32,
    /// Its weight (priority), 1 by default.
    weight: f64,
    /// Its rate (work per second) alone at its gang size on each GPU type, in the order of
    /// `Round.gpu_types`; 0 where it cannot run.
    rates: Vec<f64>,
    /// Work done so far, in its trace's unit.
    steps_done: f64,
    /// Work left (only oracle policies should look).
    remaining_steps: f64,
    /// GPU-seconds received so far (Tiresias' attained service).
    attained_gpu_seconds: f64,
    /// Seconds run so far.
    attained_seconds: f64,
    /// The index of the GPU type it runs on now; None when it waits.
    running_on: Option<u16>,
    /// How many GPUs it holds now (0 when it waits).
    running_gpus: u32,
    /// When it last started or was queued, whichever is later, in seconds.
    queued_since: f64,
    /// Times it lost its GPUs so far.
    preemptions: u32,
}

/// What a Python policy is shown every round (read-only).
#[pyclass(module = "gangway", frozen, get_all)]
pub struct Round {
    /// Seconds since the start.
    now: f64,
    /// The round's length in seconds.
    round_length: f64,
    /// The GPU types' names; a grant names a type by its index here, or by name.
    gpu_types: Vec<String>,
    /// GPUs of each type in service, by index.
    capacity: Vec<u32>,
    /// The GPU types' indices, fastest first for the jobs seen so far.
    type_order: Vec<u16>,
    /// Whether a job arrived or finished since the previous call.
    jobs_changed: bool,
    /// Every active job (arrived, not finished), in arrival order, but those paused.
    jobs: Py<PyList>,
    /// The ids of active jobs left out of `jobs` for a while, sorted: their starts failed, and they
    /// pause before the next. They have not ended: a policy that keeps something of each job keeps
    /// theirs.
    paused: Vec<u32>,
}

/// A decision: `job` runs on `gpus` GPUs of `gpu_type` (an index into `Round.gpu_types`, or a
/// name) next round.
#[pyclass(module = "gangway", frozen, get_all)]

pub struct Grant {
    /// The job's id.
    job: u32,
    /// The GPU type: its index, or its name.
    gpu_type: Py<PyAny>,
    /// How many GPUs, all at once.
    gpus: u32,
}

#[pymethods]
impl Grant {
    #[new]
    fn new(job: u32, gpu_type: Py<PyAny>, gpus: u32) -> Self {
        Grant {
            job,
            gpu_type,
            gpus,
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Grant(job={}, gpu_type={}, gpus={})",
            self.job,
            self.gpu_type.bind(py).repr()?,
            self.gpus
        ))
    }
}

/// The first failure of a run's Python policies: the policy's name and the error.
pub type Failures = Arc<Mutex<Vec<(String, PyErr)>>>;

/// `err` with its Python traceback, as Python prints it.
pub fn traceback(py: Python<'_>, err: &PyErr) -> String {
    let formatted = py.import("traceback").and_then(|tb| {
        tb.call_method1(
            "format_exception",
            (err.get_type(py), err.value(py), err.traceback(py)),
        )?
        .extract::<Vec<String>>()
    });
    formatted.map_or_else(|_| err.to_string(), |lines| lines.concat())
}

/// What a Python policy's exception does.
#[derive(Clone)]
pub enum OnError {
    /// In a simulation: the policy stops answering (the run then ends as stalled) and the error is
    /// kept, for the call to raise.
    Stop(Failures),
    /// In a control plane: the round fails (a panic, which the control plane catches: running jobs
    /// keep their GPUs, the failure is counted and shown with the traceback) and the next round asks
    /// again.
    FailRound,
}

/// A policy object, called with the GIL held once per round.
struct PythonPolicy {
    name: String,
    object: Option<Py<PyAny>>,
    /// What the object's `changes_with_time` said when it was made (default true).
    changes_with_time: bool,
    on_error: OnError,
    /// Why the object could not be made (in a control plane, said every round).
    unmade: Option<String>,
}

impl PythonPolicy {
    fn fail(&mut self, err: PyErr) {
        match &self.on_error {
            OnError::Stop(failures) => {
                self.object = None;
                failures
                    .lock()
                    .expect("not poisoned")
                    .push((self.name.clone(), err));
            }
            OnError::FailRound => {
                let traceback = Python::attach(|py| traceback(py, &err));
                panic!("policy `{}` raised an exception:\n{traceback}", self.name)
            }
        }
    }

    fn round<'py>(&self, py: Python<'py>, input: &RoundInput<'_>) -> PyResult<Bound<'py, Round>> {
        let jobs = PyList::empty(py);
        for view in input.jobs {
            let running = view.running.as_ref();
            let job = JobView {
                id: view.id().0,
                arrival: view.job.arrival,
                gpus: view.job.gpus,
                job_type: view.job.job_type.0,
                weight: view.job.weight,
                rates: view.rates.to_vec(),
                steps_done: view.steps_done,
                remaining_steps: view.remaining_steps,
                attained_gpu_seconds: view.attained_gpu_seconds,
                attained_seconds: view.attained_seconds,
                running_on: running.map(|r| r.gpu_type.0),
                running_gpus: running.map_or(0, |r| r.gpus.len() as u32),
                queued_since: view.queued_since,
                preemptions: view.preemptions,
            };
            jobs.append(Bound::new(py, job)?)?;
        }
        Bound::new(
            py,
            Round {
                now: input.now,
                round_length: input.round_length,
                gpu_types: input.cluster.gpu_types().to_vec(),
                capacity: input.capacity.to_vec(),
                type_order: input.type_order.iter().map(|t| t.0).collect(),
                jobs_changed: input.jobs_changed,
                jobs: jobs.unbind(),
                paused: input.paused.iter().map(|j| j.0).collect(),
            },
        )
    }

    fn grants(
        &self,
        py: Python<'_>,
        object: &Py<PyAny>,
        input: &RoundInput<'_>,
    ) -> PyResult<Vec<policy::Grant>> {
        let round = self.round(py, input)?;
        let answer = object.bind(py).call_method1("allocate", (round,))?;
        let types = input.cluster.gpu_types();
        let mut grants = Vec::new();
        for item in answer.try_iter()? {
            let grant = item?.cast_into::<Grant>().map_err(PyErr::from)?;
            let grant = grant.get();
            let gpu_type = grant.gpu_type.bind(py);
            let index = match gpu_type.extract::<usize>() {
                Ok(index) if index < types.len() => index,
                Ok(index) => {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "Grant(job={}): GPU type {index} is not one of the cluster's {} types",
                        grant.job,
                        types.len()
                    )));
                }
                Err(_) => {
                    let name: String = gpu_type.extract()?;
                    types.iter().position(|t| *t == name).ok_or_else(|| {
                        pyo3::exceptions::PyValueError::new_err(format!(
                            "Grant(job={}): no GPU type `{name}` in the cluster ({})",
                            grant.job,
                            types.join(", ")
                        ))
                    })?
                }
            };
            grants.push(policy::Grant::new(
                JobId(grant.job),
                GpuTypeId(index as u16),
                grant.gpus,
            ));
        }
        Ok(grants)
    }
}

impl Policy for PythonPolicy {
    fn changes_with_time(&self) -> bool {
        // A failed policy is called every round, so that the stall rule ends its run at once.
        self.object.is_none() || self.changes_with_time
    }

    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<policy::Grant> {
        let Some(object) = self.object.as_ref() else {
            if let (OnError::FailRound, Some(why)) = (&self.on_error, &self.unmade) {
                panic!("policy `{}` could not be made:\n{why}", self.name);
            }
            return Vec::new();
        };
        let answer = Python::attach(|py| self.grants(py, object, input));
        match answer {
            Ok(grants) => grants,
            Err(err) => {
                self.fail(err);
                Vec::new()
            }
        }
    }
}

/// A Python policy registered under a name: its factory (a class or any callable that makes a
/// fresh policy object for each run) and its summary.
pub struct Registered {
    /// Its name in policy specs.
    pub name: String,
    /// What `builtin_policies()` and listings say of it.
    pub summary: String,
    /// Makes a fresh policy object for each run.
    pub factory: Py<PyAny>,
}

/// The core registry's entry for `policy`: each run calls its factory (with the GIL) and wraps
/// the object made; an exception does what `on_error` says.
pub fn entry(py: Python<'_>, policy: &Registered, on_error: &OnError) -> PolicyEntry {
    let factory = policy.factory.clone_ref(py);
    let (name, on_error) = (policy.name.clone(), on_error.clone());
    PolicyEntry::new(policy.name.clone(), move |_config| {
        let made = Python::attach(|py| {
            let object = factory.bind(py).call0()?;
            let steady = match object.getattr_opt("changes_with_time")? {
                Some(value) if value.is_callable() => value.call0()?.is_truthy()?,
                Some(value) => value.is_truthy()?,
                None => true,
            };
            Ok::<_, PyErr>((object.unbind(), steady))
        });
        let mut policy = PythonPolicy {
            name: name.clone(),
            object: None,
            changes_with_time: true,
            on_error: on_error.clone(),
            unmade: None,
        };
        match made {
            Ok((object, changes)) => {
                policy.object = Some(object);
                policy.changes_with_time = changes;
            }
            // In a control plane the policy is made as it starts: its rounds then fail, saying why.
            Err(err) => match &on_error {
                OnError::Stop(_) => policy.fail(err),
                OnError::FailRound => {
                    policy.unmade = Some(Python::attach(|py| traceback(py, &err)));
                }
            },
        }
        Box::new(policy)
    })
    .summary(policy.summary.clone())
}
