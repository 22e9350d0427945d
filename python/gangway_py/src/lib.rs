//! The native half of gangway's Python package, `gangway._native`: the simulator, assembled as
//! `gangway simulate` assembles it ([`gangway::simulate::SimulateRequest`]), run with the GIL
//! released, its errors raised as the package's exceptions. The Python half (`gangway/__init__.py`)
//! takes traces as paths, lists of dicts or DataFrames and turns the results into Python objects;
//! it is what users call, and its docstrings are the package's documentation.

mod policy;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use gangway::actors::api::Listen;
use gangway::actors::plane::ControlPlane;
use gangway::core::error::{InputError, SimError};
use gangway::core::metrics::Window;
use gangway::core::policy::{BuildError, Registry};
use gangway::core::sim::builder::{Report, SimulationError};
use gangway::core::solver::SolveError;
use gangway::plane::{ApiOptions, ControlPlaneBuilder};
use gangway::scenario::ScenarioArgs;
use gangway::simulate::{SimulateRequest, TraceInput};

create_exception!(
    gangway,
    GangwayError,
    PyException,
    "The base of every error gangway raises: catch it to catch them all."
);
create_exception!(
    gangway,
    BadInput,
    GangwayError,
    "A trace, cluster, table, profile or option is wrong or cannot be read. The message says where \
     (file:line: field `name`: what); for a value in a row, `source`, `line` and `field` hold the \
     same, and are None otherwise."
);
create_exception!(
    gangway,
    BadPolicy,
    GangwayError,
    "A policy spec names no policy, sets a knob it lacks or outside its range, or needs what the run \
     lacks (a goodput model, an LP solver)."
);
create_exception!(
    gangway,
    SolverError,
    GangwayError,
    "The LP/MILP solver failed or is missing from this build."
);

create_exception!(
    gangway,
    PolicyFailed,
    GangwayError,
    "A policy written in Python raised an exception: the message holds its traceback and \
     `__cause__` the exception itself. Its run stopped there."
);

/// The policies written in Python, registered by `gangway.register_policy`, in order.
static PYTHON_POLICIES: Mutex<Vec<policy::Registered>> = Mutex::new(Vec::new());

/// The built-in policies and those registered from Python, their exceptions handled as
/// `on_error` says.
fn registry(py: Python<'_>, on_error: &policy::OnError) -> PyResult<Registry> {
    let mut registry = Registry::with_builtins();
    for p in PYTHON_POLICIES.lock().expect("not poisoned").iter() {
        registry
            .register(policy::entry(py, p, on_error))
            .map_err(|e| BadPolicy::new_err(e.to_string()))?;
    }
    Ok(registry)
}

/// Which of the package's exceptions an error is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Input,
    Policy,
    Solver,
}

/// What kind of error `err` is, from the typed errors along its chain: a policy that cannot be
/// built, a solver's failure, and everything else (the trace, the cluster, a file, an option) bad
/// input.
fn kind(err: &anyhow::Error) -> Kind {
    for cause in err.chain() {
        if cause.downcast_ref::<BuildError>().is_some() {
            return Kind::Policy;
        }
        if cause.downcast_ref::<SolveError>().is_some() {
            return Kind::Solver;
        }
        // Transparent wrappers pass `source` through, so the policy's error is not a link of the
        // chain of its own: look inside.
        if let Some(SimError::Policy(_)) = cause.downcast_ref::<SimError>() {
            return Kind::Policy;
        }
        if let Some(SimulationError::Config(SimError::Policy(_))) =
            cause.downcast_ref::<SimulationError>()
        {
            return Kind::Policy;
        }
    }
    Kind::Input
}

/// The row-level input error along `err`'s chain, if any: (source, line, field).
fn field_of(err: &anyhow::Error) -> Option<(String, u64, Option<String>)> {
    let input = |e: &InputError| match e {
        InputError::Field {
            input, line, field, ..
        } => Some((input.0.clone(), *line, Some(field.clone()))),
        InputError::Row { input, line, .. } => Some((input.0.clone(), *line, None)),
        _ => None,
    };
    err.chain().find_map(|cause| {
        if let Some(e) = cause.downcast_ref::<InputError>() {
            return input(e);
        }
        match cause.downcast_ref::<SimulationError>() {
            Some(SimulationError::Input(e) | SimulationError::Config(SimError::Input(e))) => {
                input(e)
            }
            _ => match cause.downcast_ref::<SimError>() {
                Some(SimError::Input(e)) => input(e),
                _ => None,
            },
        }
    })
}

/// `err` as the package's exception, its message the whole chain as the command line prints it.
fn to_py(py: Python<'_>, err: &anyhow::Error) -> PyErr {
    let message = format!("{err:#}");
    let py_err = match kind(err) {
        Kind::Policy => BadPolicy::new_err(message),
        Kind::Solver => SolverError::new_err(message),
        Kind::Input => BadInput::new_err(message),
    };
    if kind(err) == Kind::Input {
        let value = py_err.value(py);
        let (source, line, field) = match field_of(err) {
            Some((s, l, f)) => (Some(s), Some(l), f),
            None => (None, None, None),
        };
        // Setting attributes on a fresh exception cannot fail; if it did, the message still holds all.
        let _ = value.setattr("source", source);
        let _ = value.setattr("line", line);
        let _ = value.setattr("field", field);
    }
    py_err
}

/// One run as JSON: the policy's spec, its summary (as `gangway simulate --format json` prints it),
/// the cluster's GPU types, every job's record and the jobs left unfinished or never runnable.
fn run_json(run: &gangway::core::sim::builder::PolicyRun) -> serde_json::Value {
    serde_json::json!({
        "policy": run.spec,
        "summary": run.summary,
        "gpu_types": run.result.gpu_types,
        "jobs": run.result.records,
        "unfinished": run.unfinished(),
        "unschedulable": run.result.unschedulable,
        "rounds": run.result.rounds,
    })
}

/// Runs `request` with the built-in policies and answers as JSON (the Python half reads it into
/// objects): `{"notes": [...], "runs": [...]}`.
fn run(
    request: &SimulateRequest,
    registry: &Registry,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<String> {
    let mut notes = Vec::new();
    let prepared = request.prepare(registry, &mut |note| notes.push(note))?;
    let report: Report = prepared.builder(registry).stop_when(stop).run()?;
    let runs: Vec<serde_json::Value> = report.runs.iter().map(run_json).collect();
    Ok(serde_json::to_string(
        &serde_json::json!({ "notes": notes, "runs": runs }),
    )?)
}

/// Runs the simulator: see `gangway.simulate`, which calls this with the trace already told apart
/// (`trace_kind`: `bundled`, `spec` for a path or `synthetic:...`, `text` for CSV text named
/// `trace_source`). Returns the results as JSON. The GIL is released while the runs go.
#[pyfunction]
#[pyo3(signature = (
    *, trace_kind, trace, trace_source, policies, cluster=None, cluster_file=None, topology=None,
    gpus_per_node=1, rate=None, round=None, window=None, profiles=None, throughputs=None,
    trace_format=None, load_factor=1.0, seed=0, placement=None, preempt_cost=0.0,
    restore_cost=0.0, migrate_cost=0.0, even_gangs=false, gittins_distribution=None,
    schedule_on_arrival=false, schedule_on_completion=false, fairness=true
))]
#[allow(clippy::too_many_arguments)]
fn simulate(
    py: Python<'_>,
    trace_kind: &str,
    trace: Option<String>,
    trace_source: Option<String>,
    policies: Vec<String>,
    cluster: Option<String>,
    cluster_file: Option<PathBuf>,
    topology: Option<PathBuf>,
    gpus_per_node: u32,
    rate: Option<f64>,
    round: Option<f64>,
    window: Option<String>,
    profiles: Option<PathBuf>,
    throughputs: Option<PathBuf>,
    trace_format: Option<String>,
    load_factor: f64,
    seed: u64,
    placement: Option<String>,
    preempt_cost: f64,
    restore_cost: f64,
    migrate_cost: f64,
    even_gangs: bool,
    gittins_distribution: Option<PathBuf>,
    schedule_on_arrival: bool,
    schedule_on_completion: bool,
    fairness: bool,
) -> PyResult<String> {
    let bad = |message: String| BadInput::new_err(message);
    let trace = match (trace_kind, trace) {
        ("bundled", _) => TraceInput::Bundled,
        ("spec", Some(spec)) => TraceInput::Spec(spec),
        ("text", Some(text)) => TraceInput::Text {
            source: trace_source.unwrap_or_else(|| "records".into()),
            text,
        },
        (kind, _) => return Err(bad(format!("trace: unknown kind `{kind}` or no trace"))),
    };
    let window = match window {
        Some(w) => Some(Window::parse(&w).map_err(bad)?),
        None => None,
    };
    let trace_format = match trace_format {
        Some(f) => Some(f.parse().map_err(bad)?),
        None => None,
    };
    let request = SimulateRequest {
        trace,
        trace_format,
        rate,
        cluster,
        cluster_file,
        topology,
        load_factor,
        gpus_per_node,
        policies,
        round,
        window,
        schedule_on_arrival,
        schedule_on_completion,
        fairness,
        log_changes: false,
        profiles,
        scenario: ScenarioArgs {
            throughputs,
            placement: placement.unwrap_or_else(|| "packing".into()),
            preempt_cost,
            restore_cost,
            migrate_cost,
            even_gangs,
            seed,
            gittins_distribution,
        },
    };
    let failures = policy::Failures::default();
    let registry = registry(py, &policy::OnError::Stop(Arc::clone(&failures)))?;
    // The runs go on a thread of their own while this one, holding the GIL only between naps, looks
    // at Python's signals: Ctrl-C stops them at their next event and raises KeyboardInterrupt.
    let stop = Arc::new(AtomicBool::new(false));
    let (answer, interrupted) = std::thread::scope(|scope| {
        let worker = scope.spawn(|| run(&request, &registry, Arc::clone(&stop)));
        let mut interrupted = None;
        while !worker.is_finished() {
            py.detach(|| std::thread::sleep(Duration::from_millis(50)));
            if let Err(signal) = py.check_signals() {
                stop.store(true, Ordering::Relaxed);
                interrupted = Some(signal);
                break;
            }
        }
        let answer = py.detach(|| worker.join());
        (answer, interrupted)
    });
    if let Some(signal) = interrupted {
        return Err(signal);
    }
    let answer = answer.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    // A policy's exception first: whatever the run then made of its empty answers is its doing.
    if let Some((name, err)) = failures.lock().expect("not poisoned").drain(..).next() {
        let traceback = policy::traceback(py, &err);
        let failed = PolicyFailed::new_err(format!(
            "policy `{name}` raised an exception, which stopped its run:\n{traceback}"
        ));
        failed.set_cause(py, Some(err));
        return Err(failed);
    }
    answer.map_err(|err| to_py(py, &err))
}

/// Registers a policy written in Python under `name`: `factory()` (a class, or any callable)
/// makes a fresh policy object for each run, whose `allocate(round)` returns grants. A name a
/// policy has already is refused (`BadPolicy`).
#[pyfunction]
#[pyo3(signature = (name, factory, summary=None))]
fn register_policy(
    py: Python<'_>,
    name: String,
    factory: Py<PyAny>,
    summary: Option<String>,
) -> PyResult<()> {
    if !factory.bind(py).is_callable() {
        return Err(BadPolicy::new_err(format!(
            "policy `{name}`: its factory must be callable (a class, or a function that makes the policy)"
        )));
    }
    let registered = policy::Registered {
        name,
        summary: summary.unwrap_or_else(|| "a policy written in Python".into()),
        factory,
    };
    // Checked against every name there is now, built-in or registered.
    let stop = policy::OnError::Stop(Arc::default());
    let mut check = registry(py, &stop)?;
    check
        .register(policy::entry(py, &registered, &stop))
        .map_err(|e| BadPolicy::new_err(e.to_string()))?;
    PYTHON_POLICIES
        .lock()
        .expect("not poisoned")
        .push(registered);
    Ok(())
}

/// A control plane started from Python (`gangway.serve`): the daemon `gangway serve` runs, in this
/// process, on simulated workers, with the policies registered from Python beside the built-in ones.
#[pyclass(module = "gangway._native")]
struct Daemon {
    plane: Mutex<Option<ControlPlane>>,
    address: String,
    token_file: Option<String>,
}

#[pymethods]
impl Daemon {
    /// Where its API listens: `HOST:PORT` or `unix:PATH` (what `gangway.Client` takes).
    #[getter]
    fn address(&self) -> String {
        self.address.clone()
    }

    /// The file its API token is in (TCP), for `gangway.Client(token_file=...)`.
    #[getter]
    fn token_file(&self) -> Option<String> {
        self.token_file.clone()
    }

    /// Stops it: running jobs stop where they are (the journal keeps them for a restart).
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let plane = self.plane.lock().expect("not poisoned").take();
        if let Some(plane) = plane {
            py.detach(|| plane.shutdown())
                .map_err(|e| GangwayError::new_err(e.to_string()))?;
        }
        Ok(())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: Py<PyAny>,
        _value: Py<PyAny>,
        _traceback: Py<PyAny>,
    ) -> PyResult<bool> {
        self.stop(py)?;
        Ok(false)
    }
}

/// Starts the control plane in this process: see `gangway.serve`.
#[pyfunction]
#[pyo3(signature = (*, policy, cluster, listen, journal, round=60.0, time_scale=1.0))]
fn serve(
    py: Python<'_>,
    policy: String,
    cluster: String,
    listen: String,
    journal: PathBuf,
    round: f64,
    time_scale: f64,
) -> PyResult<Daemon> {
    let listen: Listen = listen
        .parse()
        .map_err(|e: String| BadInput::new_err(format!("listen: {e}")))?;
    let token_file =
        (matches!(listen, Listen::Tcp(_))).then(|| journal.join("api-token").display().to_string());
    let registry = registry(py, &policy::OnError::FailRound)?;
    let builder = ControlPlaneBuilder::new()
        .cluster_spec(cluster)
        .policy(policy)
        .registry(registry)
        .simulated_workers()
        .round(round)
        .time_scale(time_scale)
        .journal(journal)
        .listen(ApiOptions::new(listen.clone()));
    // Starting makes the policy, which may be Python's: the GIL must be free for it.
    let plane = py
        .detach(|| builder.start())
        .map_err(|e| to_py(py, &anyhow::Error::new(e)))?;
    Ok(Daemon {
        plane: Mutex::new(Some(plane)),
        address: listen.to_string(),
        token_file,
    })
}

/// The names of the built-in policies with their one-line summaries, as `--policy help` lists
/// them (without the knobs).
#[pyfunction]
fn policies(py: Python<'_>) -> PyResult<Vec<(String, String)>> {
    Ok(registry(py, &policy::OnError::Stop(Arc::default()))?
        .entries()
        .map(|p| (p.name().to_owned(), p.summary_line().to_owned()))
        .collect())
}

/// The module `gangway._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(policies, m)?)?;
    m.add_function(wrap_pyfunction!(register_policy, m)?)?;
    m.add_function(wrap_pyfunction!(serve, m)?)?;
    m.add_class::<Daemon>()?;
    m.add_class::<policy::Grant>()?;
    m.add_class::<policy::Round>()?;
    m.add_class::<policy::JobView>()?;
    m.add("PolicyFailed", py.get_type::<PolicyFailed>())?;
    m.add("DEFAULT_POLICIES", gangway::scenario::DEFAULT_POLICIES)?;
    m.add("GangwayError", py.get_type::<GangwayError>())?;
    m.add("BadInput", py.get_type::<BadInput>())?;
    m.add("BadPolicy", py.get_type::<BadPolicy>())?;
    m.add("SolverError", py.get_type::<SolverError>())?;
    Ok(())
}
