//! What a submission may say, checked in full before anything is stored, journaled or interned.
//!
//! - [`JobRequest`] is the body of `POST /jobs`. [`parse_job_request`] reads it strictly: a body that is
//!   not JSON, or that names a field no request has (a typo would otherwise do nothing), is a 400
//!   naming the field; a value of the wrong type or out of range is a 422 naming the field.
//! - [`validate`] bounds every number ([`limits`]) and refuses names with control characters; the
//!   cluster actor runs it too, for callers that submit without the API.
//! - [`RunPolicy`] checks a real job's command against who submitted it: its directory and log
//!   (absolute, existing, owned by the submitter when the daemon runs as root), its environment (no
//!   variable that changes how a shell or the dynamic loader starts, see [`startup_variable`], but
//!   `LD_LIBRARY_PATH` with its directories checked), and
//!   whatever the executor knows about its arguments ([`ArgsCheck`]).

use std::cell::Cell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cluster::Refusal;
use crate::executor::{RunAs, RunCommand};
use crate::ledger::{JobSpec, Shape};
use gangway_core::job::Sizes;
use gangway_protocol::command::{LIBRARY_PATH_VAR, check_library_path, env_allowed_by};

pub use gangway_protocol::api::JobRequest;
pub use gangway_protocol::command::{Invalid, Refused, Submitter, check_program, invalid};

/// The bounds on a submission. Each is far beyond any real job, and keeps a typo (or an attack) from
/// making a job that never ends or a request that fills memory.
pub mod limits {
    /// GPUs one job may ask for.
    pub const MAX_GPUS: u32 = 65_536;
    /// A job's global batch (samples per optimizer step).
    pub const MAX_BATCH: u32 = 1 << 24;
    /// Work, in the model's units: 10^9 seconds (about 31 years) for the duration model.
    pub const MAX_WORK: f64 = 1e9;
    /// Smallest weight.
    pub const MIN_WEIGHT: f64 = 1e-6;
    /// Largest weight.
    pub const MAX_WEIGHT: f64 = 1e6;
    /// Characters in a job type or tenant name.
    pub const MAX_NAME_CHARS: usize = 200;
    /// GPU types one job may name (its pipeline stages on each).
    pub const MAX_GPU_TYPES: usize = 64;
    /// Arguments of a command.
    pub const MAX_ARGS: usize = 4_096;
    /// Bytes in one argument.
    pub const MAX_ARG_BYTES: usize = 128 * 1024;
    /// Variables in a command's environment.
    pub const MAX_ENV_VARS: usize = 4_096;
    /// Bytes in one variable's name or value.
    pub const MAX_ENV_BYTES: usize = 128 * 1024;
    /// Bytes in a path.
    pub const MAX_PATH_BYTES: usize = 4_096;
    /// Bytes in a whole command: its arguments, environment and paths (kept for as long as its job
    /// lives, in memory and in the journal).
    pub const MAX_COMMAND_BYTES: usize = 256 * 1024;
    /// Bytes in an `Idempotency-Key`.
    pub const MAX_KEY_BYTES: usize = 255;
}

/// The fields of [`JobRequest`] and of its [`RunCommand`], as a body names them (a unit test keeps
/// these lists equal to what serde reads).
const REQUEST_FIELDS: &[&str] = &[
    "id",
    "job_type",
    "tenant",
    "gpus",
    "min_gpus",
    "tp",
    "pp",
    "pp_by_type",
    "batch",
    "min_batch",
    "work",
    "weight",
    "run",
];
const RUN_FIELDS: &[&str] = &["args", "cwd", "env", "log", "user"];

impl From<Invalid> for Refusal {
    fn from(i: Invalid) -> Self {
        Refusal::Invalid {
            field: i.field,
            problem: i.problem,
        }
    }
}

/// Why a request body could not be read as a [`JobRequest`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// Not JSON, not an object, or naming fields no request has: a 400.
    #[error("{0}")]
    Malformed(String),
    /// JSON of the right shape with a value of the wrong type, or a field missing: a 422.
    #[error("{0}")]
    Unprocessable(String),
}

/// Reads a `POST /jobs` body strictly: unknown fields (at the top and in `run`) are named, all of
/// them; a wrong value names its field's path (`run.env.X: invalid type ...`).
pub fn parse_job_request(body: &[u8]) -> Result<JobRequest, BodyError> {
    let value = unique_keys(body)?;
    let Some(object) = value.as_object() else {
        return Err(BodyError::Malformed(
            "the body must be a JSON object (a job request)".into(),
        ));
    };
    let mut unknown: Vec<String> = object
        .keys()
        .filter(|k| !REQUEST_FIELDS.contains(&k.as_str()))
        .map(|k| format!("`{}`", escape(k)))
        .collect();
    if let Some(run) = object.get("run").and_then(|r| r.as_object()) {
        unknown.extend(
            run.keys()
                .filter(|k| !RUN_FIELDS.contains(&k.as_str()))
                .map(|k| format!("`run.{}`", escape(k))),
        );
    }
    if !unknown.is_empty() {
        return Err(BodyError::Malformed(format!(
            "unknown field{} {} (a job request has {}; `run` has {})",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", "),
            REQUEST_FIELDS.join(", "),
            RUN_FIELDS[..RUN_FIELDS.len() - 1].join(", "),
        )));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        BodyError::Unprocessable(if path == "." {
            inner
        } else {
            format!("{path}: {inner}")
        })
    })
}

/// Reads `body` as JSON whose objects name each key once: serde keeps the last of a repeated key,
/// so `"env": {"A": "1", "A": "2"}` would silently drop a variable. A repeated key is a 422 naming
/// it and the object's path, as is a body of more than [`MAX_JSON_VALUES`] values; a body that is
/// not JSON a 400.
fn unique_keys(body: &[u8]) -> Result<serde_json::Value, BodyError> {
    use serde::de::DeserializeSeed;
    let mut json = serde_json::Deserializer::from_slice(body);
    let mut track = serde_path_to_error::Track::new();
    let values = Cell::new(0);
    let read = Unique { values: &values }
        .deserialize(serde_path_to_error::Deserializer::new(
            &mut json, &mut track,
        ))
        .map_err(|inner| {
            let path = track.path().to_string();
            if inner.is_data() {
                let at = if path == "." { "the body" } else { &path };
                BodyError::Unprocessable(format!("{at}: {inner}"))
            } else {
                BodyError::Malformed(format!("the body is not JSON: {inner}"))
            }
        })
        .and_then(|value| {
            json.end()
                .map(|()| value)
                .map_err(|e| BodyError::Malformed(format!("the body is not JSON: {e}")))
        })?;
    Ok(read)
}

/// The most values (numbers, strings, arrays, objects...) a request body may hold: a job request's
/// arguments and variables, at their limits, and its other fields. Each costs 32 bytes or more
/// once read, so 1 MiB of `[0,0,...]` would take 16-32 MiB before a field was checked.
pub const MAX_JSON_VALUES: usize = limits::MAX_ARGS + limits::MAX_ENV_VARS + 1_024;

/// Reads a JSON value whose objects have no repeated key, counting the values read in `values`.
#[derive(Clone, Copy)]
struct Unique<'a> {
    values: &'a Cell<usize>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Unique<'_> {
    type Value = serde_json::Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, json: D) -> Result<Self::Value, D::Error> {
        self.values.set(self.values.get() + 1);
        if self.values.get() > MAX_JSON_VALUES {
            return Err(serde::de::Error::custom(format_args!(
                "the body holds more than {MAX_JSON_VALUES} JSON values (a job request has at \
                 most {} arguments and {} variables)",
                limits::MAX_ARGS,
                limits::MAX_ENV_VARS
            )));
        }
        json.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Unique<'_> {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(items.into())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "`{}` is given twice (a JSON object names each key once)",
                    escape(&key)
                )));
            }
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(object.into())
    }
}

/// Checks everything about a request that needs no cluster: numbers in range, names printable,
/// a command's sizes. Nothing is interned or stored before this passes.
pub fn validate(request: &JobRequest) -> Result<(), Invalid> {
    use limits::*;
    if request.gpus == 0 {
        return invalid("gpus", "must be at least 1");
    }
    if request.gpus > MAX_GPUS {
        return invalid(
            "gpus",
            format!("{} is above the limit of {MAX_GPUS}", request.gpus),
        );
    }
    if let Some(min) = request.min_gpus
        && !(1..=request.gpus).contains(&min)
    {
        return invalid(
            "min_gpus",
            format!("{min} is not from 1 to gpus ({})", request.gpus),
        );
    }
    for (field, degree) in [("tp", request.tp), ("pp", request.pp)] {
        if degree == 0 || degree > MAX_GPUS {
            return invalid(field, format!("{degree} is not from 1 to {MAX_GPUS}"));
        }
    }
    let group = u64::from(request.tp) * u64::from(request.pp);
    if !u64::from(request.gpus).is_multiple_of(group) {
        return invalid(
            "gpus",
            format!(
                "{} is not a multiple of tp x pp = {group}: a hybrid-parallel job runs on whole groups",
                request.gpus
            ),
        );
    }
    check_pp_by_type(request)?;
    if let Some(batch) = request.batch
        && !(1..=MAX_BATCH).contains(&batch)
    {
        return invalid("batch", format!("{batch} is not from 1 to {MAX_BATCH}"));
    }
    if let Some(min_batch) = request.min_batch {
        let Some(batch) = request.batch else {
            return invalid(
                "min_batch",
                "needs batch, the largest global batch the job adapts to",
            );
        };
        if !(1..=batch).contains(&min_batch) {
            return invalid(
                "min_batch",
                format!("{min_batch} is not from 1 to batch ({batch})"),
            );
        }
    }
    if !request.work.is_finite() || request.work <= 0.0 {
        return invalid(
            "work",
            format!("must be a positive number, not {}", request.work),
        );
    }
    if request.work > MAX_WORK {
        return invalid(
            "work",
            format!(
                "{:e} is above the limit of {MAX_WORK:e} (seconds at the requested GPUs)",
                request.work
            ),
        );
    }
    if !request.weight.is_finite() || !(MIN_WEIGHT..=MAX_WEIGHT).contains(&request.weight) {
        return invalid(
            "weight",
            format!(
                "must be a number from {MIN_WEIGHT:e} to {MAX_WEIGHT:e}, not {}",
                request.weight
            ),
        );
    }
    check_name("job_type", &request.job_type)?;
    check_name("tenant", &request.tenant)?;
    if let Some(run) = &request.run {
        check_run_shape(run)?;
    }
    Ok(())
}

/// A hybrid-parallel job's stages by GPU type: a bounded list of printable names (the cluster checks
/// that they are its types), each with a group of `tp x pp` GPUs that `gpus` is a whole number of
/// (as it must be of `tp x pp`: policies that do not resize jobs run it on `gpus`).
fn check_pp_by_type(request: &JobRequest) -> Result<(), Invalid> {
    use limits::*;
    if request.pp_by_type.len() > MAX_GPU_TYPES {
        return invalid(
            "pp_by_type",
            format!(
                "names {} GPU types, above the limit of {MAX_GPU_TYPES}",
                request.pp_by_type.len()
            ),
        );
    }
    for (name, &pp) in &request.pp_by_type {
        check_name("pp_by_type", name)?;
        let group = u64::from(request.tp) * u64::from(pp);
        if pp == 0 || group > u64::from(MAX_GPUS) {
            return invalid(
                "pp_by_type",
                format!(
                    "{}: tp x pp = {} x {pp} is not from 1 to {MAX_GPUS}",
                    escape(name),
                    request.tp
                ),
            );
        }
        if !u64::from(request.gpus).is_multiple_of(group) {
            return invalid(
                "pp_by_type",
                format!(
                    "{}: gpus ({}) is not a multiple of tp x pp = {group}",
                    escape(name),
                    request.gpus
                ),
            );
        }
    }
    Ok(())
}

/// A name shown in tables and logs: 1 to [`limits::MAX_NAME_CHARS`] characters, none of them a
/// control character (which could rewrite a terminal, or forge a line of output).
pub fn check_name(field: &'static str, name: &str) -> Result<(), Invalid> {
    let chars = name.chars().count();
    if chars == 0 || chars > limits::MAX_NAME_CHARS {
        return invalid(
            field,
            format!(
                "must be 1 to {} characters (got {chars})",
                limits::MAX_NAME_CHARS
            ),
        );
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return invalid(
            field,
            format!(
                "must not contain control characters (found U+{:04X} in \"{}\")",
                c as u32,
                escape(name)
            ),
        );
    }
    Ok(())
}

/// `text` with control characters escaped (`\n`, `\u{1b}`), for printing what a client sent.
pub fn escape(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Sizes and bytes of a command: no NUL anywhere (a process cannot be given one), nothing huge.
fn check_run_shape(run: &RunCommand) -> Result<(), Invalid> {
    use limits::*;
    if run.args.is_empty() {
        return invalid("run.args", "must name at least the script to run");
    }
    if run.args.len() > MAX_ARGS {
        return invalid(
            "run.args",
            format!(
                "{} arguments is above the limit of {MAX_ARGS}",
                run.args.len()
            ),
        );
    }
    for (k, arg) in run.args.iter().enumerate() {
        if arg.len() > MAX_ARG_BYTES {
            return invalid(
                "run.args",
                format!("argument {k} is above the limit of {MAX_ARG_BYTES} bytes"),
            );
        }
        if arg.contains('\0') {
            return invalid("run.args", format!("argument {k} contains a NUL byte"));
        }
    }
    if run.env.len() > MAX_ENV_VARS {
        return invalid(
            "run.env",
            format!(
                "{} variables is above the limit of {MAX_ENV_VARS}",
                run.env.len()
            ),
        );
    }
    for (name, value) in &run.env {
        if name.is_empty() || name.contains(['=', '\0']) {
            return invalid(
                "run.env",
                format!(
                    "`{}` is not a variable name (empty, or with `=` or NUL)",
                    escape(name)
                ),
            );
        }
        if value.contains('\0') {
            return invalid(
                "run.env",
                format!("the value of {} contains a NUL byte", escape(name)),
            );
        }
        if name.len() + value.len() > MAX_ENV_BYTES {
            return invalid(
                "run.env",
                format!(
                    "{} is above the limit of {MAX_ENV_BYTES} bytes",
                    escape(name)
                ),
            );
        }
    }
    if run.bytes() > MAX_COMMAND_BYTES {
        return invalid(
            "run",
            format!(
                "its arguments, environment and paths come to {} bytes, above the limit of \
                 {MAX_COMMAND_BYTES}",
                run.bytes()
            ),
        );
    }
    for (field, path) in [("run.cwd", Some(&run.cwd)), ("run.log", run.log.as_ref())] {
        if let Some(path) = path {
            let bytes = path.as_os_str().len();
            if bytes > MAX_PATH_BYTES {
                return invalid(
                    field,
                    format!("{bytes} bytes is above the limit of {MAX_PATH_BYTES}"),
                );
            }
            if path.as_os_str().as_encoded_bytes().contains(&0) {
                return invalid(field, "contains a NUL byte");
            }
        }
    }
    Ok(())
}

/// What a (valid) request asks of policies that resize jobs.
pub fn shape(request: &JobRequest) -> Shape {
    Shape {
        sizes: sizes(request),
        batch: request.batch,
        min_batch: request.min_batch.filter(|&min| Some(min) < request.batch),
        // Only stages by type need it (1 otherwise, as shapes journaled before it read).
        tp: if request.pp_by_type.is_empty() {
            1
        } else {
            request.tp
        },
        pp_by_type: request.pp_by_type.clone(),
    }
}

/// The sizes a (valid) request runs on under policies that resize jobs. A rigid hybrid-parallel job
/// keeps its `tp x pp` groups too, for placers that must not split them across servers.
pub fn sizes(request: &JobRequest) -> Sizes {
    Sizes {
        min: request
            .min_gpus
            .filter(|&min| min < request.gpus)
            .unwrap_or(request.gpus),
        max: request.gpus,
        multiple: request.tp.saturating_mul(request.pp),
    }
}

/// Whether a retried submission asks for exactly what `spec` was submitted with (its arrival aside).
pub(crate) fn same_request(spec: &JobSpec, request: &JobRequest) -> bool {
    spec.job_type == request.job_type
        && spec.tenant == request.tenant
        && spec.gpus == request.gpus
        && spec.total_steps == request.work
        && spec.weight == request.weight
        && spec.same_command(request.run.as_ref())
}

/// Whether `name` changes how a shell, the dynamic loader or the C library starts a program, before
/// the program itself runs. Such a variable would let a submission run code that is not its command
/// (the `BASH_ENV` attack), so [`RunPolicy`] refuses it unless the operator allows it by name
/// (`LD_LIBRARY_PATH` excepted: its directories are checked instead, see
/// [`gangway_protocol::command::check_library_path`]):
///
/// - every `LD_*` (the dynamic loader: `LD_PRELOAD`, `LD_LIBRARY_PATH`, `LD_AUDIT`, ...);
/// - the others glibc ignores for set-user-ID programs (its `UNSECURE_ENVVARS`: `GCONV_PATH`,
///   `GLIBC_TUNABLES`, `HOSTALIASES`, `LOCALDOMAIN`, `LOCPATH`, `MALLOC_TRACE`, `NIS_PATH`, `NLSPATH`,
///   `RESOLV_HOST_CONF`, `RES_OPTIONS`, `TZDIR`, `GETCONF_DIR`), except `TMPDIR`, which moves scratch
///   files but runs nothing;
/// - shell start-up: `BASH_ENV` and `ENV` (files sourced by non-interactive shells), `BASH_FUNC_*`
///   (exported functions), `SHELLOPTS` and `BASHOPTS`, `PS4` (expanded, with command substitution,
///   under `set -x`), and `PROMPT_COMMAND`.
///
/// Variables read by an interpreter once it runs the job's own script (`PYTHONPATH`) are left alone:
/// the script is the submitter's code already.
pub fn startup_variable(name: &str) -> bool {
    const NAMES: &[&str] = &[
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PROMPT_COMMAND",
        "GCONV_PATH",
        "GETCONF_DIR",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "LOCPATH",
        "MALLOC_TRACE",
        "NIS_PATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "RES_OPTIONS",
        "TZDIR",
    ];
    name.starts_with("LD_") || name.starts_with("BASH_FUNC_") || NAMES.contains(&name)
}

/// Executor-specific checks of a command's arguments (the launcher parses `elastic-run`'s command
/// line, and checks the interpreter it names), made with the rights of the user the command runs
/// as (its submitter on a root daemon, else the daemon's own user). Its refusal says whether the
/// file system did not answer ([`Refused::unanswered`]).
pub type ArgsCheck = Arc<dyn Fn(&RunCommand, &Submitter) -> Result<(), Refused> + Send + Sync>;

/// Why a command may not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunRefusal {
    /// The command is wrong (a 422).
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// This submitter may not run commands here (a 403).
    #[error("{0}")]
    Forbidden(String),
    /// A file system the command's paths are on did not answer its checks: the same submission may
    /// pass later (a 503).
    #[error("{0}")]
    Unanswered(String),
}

impl From<Refused> for RunRefusal {
    fn from(refused: Refused) -> RunRefusal {
        if refused.unanswered {
            let once = if refused.host {
                "this machine can check it (it was short of descriptors or threads, or could not \
                 take the submitter's rights)"
            } else {
                "its file system answers"
            };
            RunRefusal::Unanswered(format!("{}; submit it again once {once}", refused.invalid))
        } else {
            RunRefusal::Invalid(refused.invalid)
        }
    }
}

/// What a daemon lets a submitted command do.
#[derive(Clone)]
pub struct RunPolicy {
    /// The daemon's user: commands run as this user, or, when it is root, as their submitter.
    pub daemon: Submitter,
    /// Start-up variables ([`startup_variable`]) the operator allows: exact names, or `PREFIX*`.
    pub allowed_env: Vec<String>,
    /// The executor's own check of a command's arguments, if it has one.
    pub args: Option<ArgsCheck>,
    /// Whether every job must bring a command: process workers run nothing else, and a job without
    /// one would be placed (preempting others) only to fail at its launch.
    pub command_required: bool,
}

impl fmt::Debug for RunPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunPolicy")
            .field("daemon", &self.daemon)
            .field("allowed_env", &self.allowed_env)
            .field("args", &self.args.as_ref().map(|_| ".."))
            .field("command_required", &self.command_required)
            .finish()
    }
}

impl RunPolicy {
    /// A policy for a daemon running as `daemon`: no start-up variable allowed, no argument check.
    pub fn new(daemon: Submitter) -> Self {
        RunPolicy {
            daemon,
            allowed_env: Vec::new(),
            args: None,
            command_required: false,
        }
    }

    /// Whether the operator allows the start-up variable `name` ([`RunPolicy::allowed_env`]), so
    /// that it is neither refused nor checked.
    pub fn operator_allows(&self, name: &str) -> bool {
        env_allowed_by(&self.allowed_env, name)
    }

    /// Checks `run` as `submitter` sent it, and says whom it runs as: a daemon that runs as root runs
    /// each command as its submitter (and checks that the directory and log are theirs); any other
    /// daemon runs commands as itself, so only its own user (or root) may submit them.
    pub fn check(&self, run: &mut RunCommand, submitter: &Submitter) -> Result<(), RunRefusal> {
        if run.user.is_some() {
            return Err(Invalid {
                field: "run.user",
                problem: "the daemon sets it from who submits the job; leave it out".into(),
            }
            .into());
        }
        check_run_shape(run)?;
        let as_root = self.daemon.uid == 0;
        if !as_root && submitter.uid != self.daemon.uid && submitter.uid != 0 {
            return Err(RunRefusal::Forbidden(format!(
                "this daemon runs commands as uid {}, and uid {} may not run commands as another user; \
                 run your own `gangway serve`, or ask its operator to run it as root",
                self.daemon.uid, submitter.uid
            )));
        }
        // Root may name any path (it could write there anyway); another submitter only their own.
        let owner = (as_root && submitter.uid != 0).then_some(submitter);
        // What the job reads at its launches is checked with the rights of whom it runs as: on a
        // daemon that is not root, the daemon's own user, whoever submitted it (root included).
        let runs_as = if as_root { submitter } else { &self.daemon };
        check_dir("run.cwd", &run.cwd, owner)?;
        if let Some(log) = &run.log {
            check_log(log, owner)?;
        }
        // The loader's search path is checked instead of refused: CUDA's images set it.
        let refused = |name: &&String| {
            startup_variable(name) && *name != LIBRARY_PATH_VAR && !self.operator_allows(name)
        };
        if let Some(name) = run.env.keys().find(refused) {
            return Err(Invalid {
                field: "run.env",
                problem: format!(
                    "{} changes how a shell or the dynamic loader starts programs; the daemon refuses it \
                     unless started with --allow-env {}",
                    escape(name),
                    escape(name)
                ),
            }
            .into());
        }
        if let Some(value) = run.env.get(LIBRARY_PATH_VAR)
            && !self.operator_allows(LIBRARY_PATH_VAR)
        {
            check_library_path(value, runs_as).map_err(|mut refused| {
                if !refused.unanswered {
                    refused.invalid.problem += &format!(
                        "; fix it or unset it (`elastic-run --daemon` sends the environment it \
                         runs in), or the operator may start the daemon with --allow-env \
                         {LIBRARY_PATH_VAR}"
                    );
                }
                RunRefusal::from(refused)
            })?;
        }
        if let Some(args) = &self.args {
            args(run, runs_as)?;
        }
        run.user = owner.map(|owner| RunAs {
            uid: owner.uid,
            gid: owner.gid,
        });
        Ok(())
    }
}

/// `path` is absolute, exists, is a directory (not a link to one), and belongs to `owner` if given,
/// who may reach it (nothing else is said of a path they could not look up themselves).
///
/// The kernel follows a link whose name ends a path with `/`, `/.` or `//` (`link/` is the directory
/// it points to), so the check is of `path` as it resolves: without `.` components and extra
/// slashes, ending in a name, looked up without following it.
fn check_dir(field: &'static str, path: &Path, owner: Option<&Submitter>) -> Result<(), Refused> {
    let shown = path.display();
    if !path.is_absolute() {
        return refuse(field, format!("{shown} is not an absolute path"));
    }
    let named: PathBuf = path.components().collect();
    let Some(meta) = look_up(field, &named, owner)? else {
        return refuse(field, format!("{shown} does not exist"));
    };
    if meta.is_link() {
        return refuse(
            field,
            format!("{shown} is a symbolic link; name the directory itself"),
        );
    }
    if !meta.is_dir() {
        return refuse(field, format!("{shown} is not a directory"));
    }
    check_owner(field, path, meta, owner)
}

/// A log: an absolute path in an existing directory (the submitter's, if `owner`); if it exists, a
/// regular file (not a link, a device or a pipe), the submitter's too.
fn check_log(path: &Path, owner: Option<&Submitter>) -> Result<(), Refused> {
    const FIELD: &str = "run.log";
    let shown = path.display();
    if !path.is_absolute() {
        return refuse(FIELD, format!("{shown} is not an absolute path"));
    }
    // `x.log/` or `x.log/.` would name a directory (and make the kernel follow a link).
    let ends_in_name = path.file_name().is_some_and(|name| {
        path.as_os_str()
            .as_encoded_bytes()
            .ends_with(name.as_encoded_bytes())
    });
    let Some(parent) = path.parent().filter(|_| ends_in_name) else {
        return refuse(FIELD, format!("{shown} is not a file path"));
    };
    check_dir(FIELD, parent, owner)?;
    match look_up(FIELD, path, owner)? {
        Some(meta) if !meta.is_file() => refuse(
            FIELD,
            format!("{shown} exists and is not a regular file (a link, a device or a pipe)"),
        ),
        Some(meta) => check_owner(FIELD, path, meta, owner),
        None => Ok(()),
    }
}

/// What `path`'s last name is (a link itself, not what it points to), looked up name by name with
/// `owner`'s rights where a root daemon checks another user's path
/// ([`gangway_protocol::command::look_up`]), so that nothing is said of a path they could not look
/// up themselves; the operator's with the daemon's.
fn look_up(
    field: &'static str,
    path: &Path,
    owner: Option<&Submitter>,
) -> Result<Option<gangway_protocol::command::Entry>, Refused> {
    let owner = owner.copied().unwrap_or_else(Submitter::this_process);
    gangway_protocol::command::look_up(field, path, &owner)
}

/// `field`'s path refused for what is there (a 422).
fn refuse<T>(field: &'static str, problem: impl Into<String>) -> Result<T, Refused> {
    invalid(field, problem).map_err(Refused::from)
}

fn check_owner(
    field: &'static str,
    path: &Path,
    meta: gangway_protocol::command::Entry,
    owner: Option<&Submitter>,
) -> Result<(), Refused> {
    match owner {
        Some(owner) if meta.uid() != owner.uid => refuse(
            field,
            format!(
                "{} belongs to uid {}, not to the submitter (uid {})",
                path.display(),
                meta.uid(),
                owner.uid
            ),
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_core::job::JobId;
    use std::os::unix::fs::PermissionsExt;

    type Env = std::collections::BTreeMap<String, String>;

    fn body(text: &str) -> Result<JobRequest, BodyError> {
        parse_job_request(text.as_bytes())
    }

    #[test]
    fn the_field_lists_match_what_serde_reads() {
        let request = JobRequest {
            id: Some(JobId(1)),
            job_type: "t".into(),
            tenant: "a".into(),
            gpus: 1,
            // Not the defaults, which are not written.
            min_gpus: Some(1),
            tp: 2,
            pp: 3,
            pp_by_type: [("rtx".to_owned(), 4)].into(),
            batch: Some(64),
            min_batch: Some(16),
            work: 1.0,
            weight: 1.0,
            run: Some(RunCommand {
                args: vec!["x".into()],
                cwd: "/".into(),
                env: Env::new(),
                log: None,
                user: None,
            }),
        };
        let value = serde_json::to_value(&request).unwrap();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = REQUEST_FIELDS.to_vec();
        expected.sort_unstable();
        assert_eq!(keys, expected);
        let keys: Vec<&str> = value["run"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = RUN_FIELDS.to_vec();
        expected.sort_unstable();
        assert_eq!(keys, expected);
    }

    #[test]
    fn unknown_fields_are_malformed_and_named_wrong_values_name_their_path() {
        let err = body(
            r#"{"gpus": 1, "work": 5, "wieght": 2, "run": {"args": ["a"], "cwd": "/", "evn": {}}}"#,
        )
        .unwrap_err();
        let BodyError::Malformed(message) = err else {
            panic!("{err:?}")
        };
        assert!(
            message.contains("`wieght`") && message.contains("`run.evn`"),
            "{message}"
        );
        assert_eq!(
            body(r#"{"gpus": "two", "work": 5}"#),
            Err(BodyError::Unprocessable(
                "gpus: invalid type: string \"two\", expected u32".into()
            ))
        );
        assert!(matches!(
            body(r#"{"gpus": 1"#),
            Err(BodyError::Malformed(_))
        ));
        assert!(matches!(body("[1]"), Err(BodyError::Malformed(_))));
        assert!(matches!(
            body(r#"{"gpus": 1}"#),
            Err(BodyError::Unprocessable(m)) if m.contains("missing field `work`")
        ));
    }

    /// A body of many small values (1 MiB of `[0,0,...]`) is refused as it is read, before it
    /// takes 16-32 MiB; a request with as many arguments and variables as a command may have
    /// is read whole.
    #[test]
    fn a_body_of_more_values_than_a_request_can_hold_is_refused_as_it_is_read() {
        let zeros = format!("[{}0]", "0,".repeat(500_000));
        let Err(BodyError::Unprocessable(message)) = body(&zeros) else {
            panic!("read whole")
        };
        assert!(
            message.contains(&format!("more than {MAX_JSON_VALUES} JSON values")),
            "{message}"
        );
        let args: Vec<String> = (0..limits::MAX_ARGS).map(|i| format!("a{i}")).collect();
        let env: serde_json::Map<String, serde_json::Value> = (0..limits::MAX_ENV_VARS)
            .map(|i| (format!("V{i}"), "x".into()))
            .collect();
        let full = serde_json::json!({
            "gpus": 1, "work": 5, "run": {"args": args, "cwd": "/", "env": env}
        });
        let request = body(&full.to_string()).unwrap();
        assert_eq!(request.run.unwrap().args.len(), limits::MAX_ARGS);
    }

    #[test]
    fn a_key_given_twice_is_refused_naming_it_and_its_object() {
        let refused = |text: &str| match body(text) {
            Err(BodyError::Unprocessable(message)) => message,
            other => panic!("{text}: {other:?}"),
        };
        let message = refused(
            r#"{"gpus": 1, "work": 5, "run": {"args": ["a"], "cwd": "/", "env": {"PATH": "/bin", "PATH": "/tmp"}}}"#,
        );
        assert!(
            message.starts_with("run.env: `PATH` is given twice"),
            "{message}"
        );
        let message = refused(r#"{"gpus": 1, "work": 5, "gpus": 64}"#);
        assert!(
            message.starts_with("the body: `gpus` is given twice"),
            "{message}"
        );
        let message =
            refused(r#"{"gpus": 1, "work": 5, "pp_by_type": {"a\u0007": 1, "a\u0007": 2}}"#);
        assert!(message.contains("`a\\u{7}`"), "{message}");
        // Equal keys in different objects are not repeats; what is not JSON is still a 400.
        let fine = body(
            r#"{"gpus": 1, "work": 5.5, "run": {"args": ["a"], "cwd": "/", "env": {"gpus": "1"}}}"#,
        )
        .unwrap();
        assert_eq!(fine.work, 5.5);
        assert_eq!(fine.run.unwrap().env["gpus"], "1");
        assert!(matches!(
            body(r#"{"gpus": 1, "work": 5} x"#),
            Err(BodyError::Malformed(m)) if m.contains("trailing characters")
        ));
    }

    #[test]
    fn numbers_are_bounded_and_the_limit_is_named() {
        let request = |gpus: u32, work: f64, weight: f64| JobRequest {
            tenant: "a".into(),
            weight,
            ..JobRequest::new("t", gpus, work)
        };
        assert!(validate(&request(1, 60.0, 1.0)).is_ok());
        for (r, field, says) in [
            (request(0, 60.0, 1.0), "gpus", "at least 1"),
            (request(70_000, 60.0, 1.0), "gpus", "limit of 65536"),
            (request(1, 1e308, 1.0), "work", "limit of 1e9"),
            (request(1, f64::NAN, 1.0), "work", "positive"),
            (request(1, 60.0, 1e300), "weight", "1e6"),
            (request(1, 60.0, 0.0), "weight", "1e-6"),
        ] {
            let e = validate(&r).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.problem.contains(says), "{e}");
        }
    }

    #[test]
    fn elastic_sizes_are_bounded_and_whole_groups() {
        let request = |gpus: u32, min_gpus: Option<u32>, tp: u32, pp: u32| JobRequest {
            min_gpus,
            tp,
            pp,
            ..JobRequest::new("t", gpus, 60.0)
        };
        let staged = |gpus: u32, min_gpus: Option<u32>, stages: &[(&str, u32)]| JobRequest {
            pp_by_type: stages.iter().map(|&(t, pp)| (t.to_owned(), pp)).collect(),
            ..request(gpus, min_gpus, 2, 1)
        };
        // Pipelines of 8 stages on rtx and 2 on a100, in tensor pairs: 16 and 4 GPUs a replica.
        let pipelines = staged(32, Some(1), &[("rtx", 8), ("a100", 2)]);
        assert!(validate(&pipelines).is_ok());
        let asked = shape(&pipelines);
        assert_eq!(
            (asked.tp, asked.stages_on("rtx"), asked.stages_on("t4")),
            (2, Some(8), None)
        );
        assert_eq!(asked.group_by_type(&["t4".into(), "rtx".into()]), [0, 16]);
        assert_eq!(asked.replicas_on(Some("rtx"), 32), 2);
        assert_eq!(asked.replicas_on(Some("a100"), 32), 8);
        assert_eq!(asked.replicas_on(Some("t4"), 32), 16, "tp pairs elsewhere");
        let elastic = request(8, Some(2), 2, 1);
        assert!(validate(&elastic).is_ok());
        assert_eq!(
            sizes(&elastic),
            Sizes {
                min: 2,
                max: 8,
                multiple: 2
            }
        );
        // A range of one size is rigid, in whole groups (which placers keep on one server).
        let rigid_in_fours = Sizes {
            multiple: 4,
            ..Sizes::rigid(4)
        };
        assert_eq!(sizes(&request(4, Some(4), 2, 2)), rigid_in_fours);
        assert_eq!(sizes(&request(4, None, 2, 2)), rigid_in_fours);
        assert_eq!(sizes(&request(4, None, 1, 1)), Sizes::rigid(4));
        for (r, field, says) in [
            (
                request(8, Some(0), 1, 1),
                "min_gpus",
                "not from 1 to gpus (8)",
            ),
            (
                request(8, Some(9), 1, 1),
                "min_gpus",
                "not from 1 to gpus (8)",
            ),
            (request(8, None, 0, 1), "tp", "not from 1 to 65536"),
            (request(8, None, 1, 70_000), "pp", "not from 1 to 65536"),
            (
                request(6, Some(2), 4, 1),
                "gpus",
                "not a multiple of tp x pp = 4",
            ),
            // No overflow: 65536 x 65536 is a group of 2^32.
            (request(8, None, 65_536, 65_536), "gpus", "= 4294967296"),
            (
                JobRequest {
                    batch: Some(0),
                    min_batch: None,
                    ..request(8, None, 1, 1)
                },
                "batch",
                "not from 1 to 16777216",
            ),
            (
                JobRequest {
                    min_batch: Some(16),
                    ..request(8, None, 1, 1)
                },
                "min_batch",
                "needs batch",
            ),
            (
                JobRequest {
                    batch: Some(64),
                    min_batch: Some(128),
                    ..request(8, None, 1, 1)
                },
                "min_batch",
                "128 is not from 1 to batch (64)",
            ),
            (
                staged(8, Some(2), &[("rtx", 8)]),
                "pp_by_type",
                "rtx: gpus (8) is not a multiple of tp x pp = 16",
            ),
            (
                staged(24, None, &[("a100", 3), ("rtx", 8)]),
                "pp_by_type",
                "rtx: gpus (24) is not a multiple of tp x pp = 16",
            ),
            (
                staged(8, None, &[("rtx", 0)]),
                "pp_by_type",
                "rtx: tp x pp = 2 x 0",
            ),
            (
                staged(8, None, &[("rtx", 40_000)]),
                "pp_by_type",
                "is not from 1 to 65536",
            ),
            (
                staged(8, None, &[("", 1)]),
                "pp_by_type",
                "must be 1 to 200",
            ),
            (
                staged(8, None, &[("r\ntx", 1)]),
                "pp_by_type",
                "control characters",
            ),
            (
                JobRequest {
                    pp_by_type: (0..65).map(|t| (format!("t{t}"), 1)).collect(),
                    ..request(8, None, 1, 1)
                },
                "pp_by_type",
                "names 65 GPU types, above the limit of 64",
            ),
        ] {
            let e = validate(&r).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.problem.contains(says), "{e}");
        }
    }

    #[test]
    fn control_characters_in_names_are_refused_and_escaped_when_shown() {
        let e = check_name("tenant", "a\u{0}b\n\u{1b}[31m").unwrap_err();
        assert_eq!(e.field, "tenant");
        assert!(!e.problem.chars().any(char::is_control), "{e}");
        assert!(e.problem.contains("U+0000"), "{e}");
        assert_eq!(escape("a\n\u{1b}[31m"), "a\\n\\u{1b}[31m");
        assert!(check_name("tenant", "équipe-α").is_ok());
    }

    fn command(dir: &Path) -> RunCommand {
        RunCommand {
            args: vec!["train.py".into()],
            cwd: dir.to_path_buf(),
            env: Env::from([("PATH".into(), "/usr/bin:/bin".into())]),
            log: Some(dir.join("job.log")),
            user: None,
        }
    }

    #[test]
    fn startup_variables_are_refused_unless_the_operator_allows_them() {
        let dir = tempfile::tempdir().unwrap();
        let me = Submitter::this_process();
        let mut policy = RunPolicy::new(me);
        for name in [
            "BASH_ENV",
            "ENV",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "BASH_FUNC_x%%",
            "PS4",
        ] {
            let mut run = command(dir.path());
            run.env.insert(name.into(), "$(id > /tmp/x)".into());
            let refused = policy.check(&mut run, &me).unwrap_err();
            assert!(
                matches!(&refused, RunRefusal::Invalid(i) if i.field == "run.env" && i.problem.contains(name)),
                "{name}: {refused:?}"
            );
        }
        for name in ["TMPDIR", "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "HOME"] {
            let mut run = command(dir.path());
            run.env.insert(name.into(), "x".into());
            policy.check(&mut run, &me).unwrap();
        }
        policy.allowed_env = vec!["LD_LIBRARY_PATH".into(), "BASH_FUNC_*".into()];
        let mut run = command(dir.path());
        run.env
            .insert("LD_LIBRARY_PATH".into(), "/opt/cuda/lib64".into());
        run.env
            .insert("BASH_FUNC_module%%".into(), "() { :; }".into());
        policy.check(&mut run, &me).unwrap();
        run.env.insert("LD_PRELOAD".into(), "/tmp/x.so".into());
        assert!(policy.check(&mut run, &me).is_err());
    }

    #[test]
    fn a_library_path_is_checked_and_the_operator_may_let_it_through_unchecked() {
        let dir = tempfile::tempdir().unwrap();
        let me = Submitter::this_process();
        let mut policy = RunPolicy::new(me);
        let lib = dir.path().join("lib");
        std::fs::create_dir(&lib).unwrap();
        let with = |value: String| {
            let mut run = command(dir.path());
            run.env.insert("LD_LIBRARY_PATH".into(), value);
            run
        };
        // CUDA's images: one of the two is there, root's; the other is not, and only root could
        // make it.
        policy
            .check(&mut with("/usr/lib:/usr/local/nvidia/lib64".into()), &me)
            .unwrap();
        policy
            .check(&mut with(lib.display().to_string()), &me)
            .unwrap();
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let refused = policy
            .check(&mut with(format!("/usr/lib:{}", lib.display())), &me)
            .unwrap_err();
        let RunRefusal::Invalid(refused) = refused else {
            panic!("{refused:?}")
        };
        assert_eq!(refused.field, "run.env");
        for says in [
            format!("LD_LIBRARY_PATH entry \"{}\" is refused", lib.display()),
            "writable by everyone".into(),
            "--allow-env LD_LIBRARY_PATH".into(),
        ] {
            assert!(refused.problem.contains(&says), "{refused}");
        }
        policy.allowed_env = vec!["LD_*".into()];
        policy
            .check(&mut with(lib.display().to_string()), &me)
            .unwrap();
    }

    /// A check whose file system did not answer puts the submission off (a 503, "submit it again"),
    /// rather than refuse it as wrong (a 422, "fix it").
    #[test]
    fn a_check_that_was_not_answered_puts_the_submission_off() {
        let dir = tempfile::tempdir().unwrap();
        let me = Submitter::this_process();
        let mut policy = RunPolicy::new(me);
        policy.args = Some(Arc::new(|_, _| {
            Err(Refused {
                invalid: Invalid {
                    field: "run.args",
                    problem: "/mnt/nfs/python: Input/output error".into(),
                },
                unanswered: true,
                host: false,
            })
        }));
        let refused = policy.check(&mut command(dir.path()), &me).unwrap_err();
        let RunRefusal::Unanswered(why) = refused else {
            panic!("{refused:?}")
        };
        assert_eq!(
            why,
            "run.args: /mnt/nfs/python: Input/output error; submit it again once its file system \
             answers"
        );
        // Found wanting: refused, as before.
        policy.args = Some(Arc::new(|_, _| {
            Err(Refused::from(Invalid {
                field: "run.args",
                problem: "no such interpreter".into(),
            }))
        }));
        let refused = policy.check(&mut command(dir.path()), &me).unwrap_err();
        assert!(matches!(refused, RunRefusal::Invalid(_)), "{refused:?}");
    }

    #[test]
    fn directories_and_logs_are_absolute_existing_and_not_links_or_devices() {
        let dir = tempfile::tempdir().unwrap();
        let me = Submitter::this_process();
        let policy = RunPolicy::new(me);
        let refused = |change: &dyn Fn(&mut RunCommand)| {
            let mut run = command(dir.path());
            change(&mut run);
            match policy.check(&mut run, &me) {
                Err(RunRefusal::Invalid(i)) => i.to_string(),
                other => panic!("{other:?}"),
            }
        };
        assert!(refused(&|r| r.cwd = "relative".into()).starts_with("run.cwd:"));
        assert!(refused(&|r| r.cwd = dir.path().join("missing")).contains("does not exist"));
        assert!(refused(&|r| r.log = Some("job.log".into())).contains("absolute"));
        assert!(refused(&|r| r.log = Some("/dev/null".into())).contains("not a regular file"));
        assert!(
            refused(&|r| r.log = Some(dir.path().join("no/such/dir/log")))
                .contains("does not exist")
        );
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link.log")).unwrap();
        assert!(
            refused(&|r| r.log = Some(dir.path().join("link.log"))).contains("not a regular file")
        );
        // A link to a directory, however the path ends: the kernel follows `link/` and `link/.`.
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let link = dir.path().join("link").display().to_string();
        for cwd in [
            format!("{link}/"),
            format!("{link}//"),
            format!("{link}/."),
            format!("{link}/./"),
            format!("{}/./link/", dir.path().display()),
            link.clone(),
        ] {
            let why = refused(&|r| r.cwd = cwd.clone().into());
            assert!(
                why.starts_with("run.cwd:") && why.contains("is a symbolic link"),
                "{cwd}: {why}"
            );
        }
        for cwd in [
            format!("{link}/.."),
            format!("{}/real/", dir.path().display()),
        ] {
            let mut run = command(dir.path());
            run.cwd = cwd.clone().into();
            policy
                .check(&mut run, &me)
                .unwrap_or_else(|e| panic!("{cwd}: {e:?}"));
        }
        let why = refused(&|r| r.log = Some(format!("{link}/job.log").into()));
        assert!(why.contains("is a symbolic link"), "{why}");
        for log in ["job.log/", "job.log/."] {
            let why = refused(&|r| r.log = Some(dir.path().join(log)));
            assert!(why.contains("is not a file path"), "{log}: {why}");
        }
        assert!(refused(&|r| r.args.push("\0".into())).starts_with("run.args:"));
        // Each variable within its limit, the whole command past its own.
        let whole = refused(&|r| {
            for k in 0..3 {
                r.env.insert(format!("BIG{k}"), "x".repeat(100_000));
            }
        });
        assert!(
            whole.starts_with("run: its arguments, environment and paths come to")
                && whole.contains("above the limit of 262144"),
            "{whole}"
        );
        assert!(refused(&|r| r.user = Some(RunAs { uid: 0, gid: 0 })).starts_with("run.user:"));
        let mut run = command(dir.path());
        policy.check(&mut run, &me).unwrap();
        assert_eq!(run.user, None, "a command runs as the daemon's own user");
    }

    #[test]
    fn under_a_root_daemon_paths_must_be_the_submitters_and_the_job_runs_as_them() {
        let dir = tempfile::tempdir().unwrap();
        let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(dir.path()).unwrap());
        let policy = RunPolicy::new(Submitter { uid: 0, gid: 0 });
        let stranger = Submitter {
            uid: owner.wrapping_add(4242),
            gid: 777,
        };
        let mut run = command(dir.path());
        let refused = policy.check(&mut run, &stranger).unwrap_err();
        assert!(
            matches!(&refused, RunRefusal::Invalid(i) if i.field == "run.cwd" && i.problem.contains("not to the submitter")),
            "{refused:?}"
        );
        let owner_submits = Submitter {
            uid: owner,
            gid: 777,
        };
        let mut run = command(dir.path());
        policy.check(&mut run, &owner_submits).unwrap();
        let expected = (owner != 0).then_some(RunAs {
            uid: owner,
            gid: 777,
        });
        assert_eq!(
            run.user, expected,
            "a root daemon runs the command as its submitter"
        );
        // A daemon that is not root runs commands as itself: only its user may send them.
        let policy = RunPolicy::new(Submitter {
            uid: 1000,
            gid: 1000,
        });
        let refused = policy
            .check(
                &mut command(dir.path()),
                &Submitter {
                    uid: 1001,
                    gid: 1001,
                },
            )
            .unwrap_err();
        assert!(matches!(refused, RunRefusal::Forbidden(_)), "{refused:?}");
        // Root may, and what the command will read is checked as whom it runs as: the daemon's
        // user, not root (whose rights would pass a program the job cannot read).
        let checked_as = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut policy = policy;
        policy.args = Some(Arc::new({
            let checked_as = checked_as.clone();
            move |_, as_whom: &Submitter| {
                checked_as.lock().unwrap().push(as_whom.uid);
                Ok(())
            }
        }));
        let mut run = command(dir.path());
        policy
            .check(&mut run, &Submitter { uid: 0, gid: 0 })
            .unwrap();
        assert_eq!(run.user, None, "it runs as the daemon");
        assert_eq!(*checked_as.lock().unwrap(), [1000]);
    }

    /// A root daemon looks paths up as root: of a path another user names in a directory they may
    /// not enter, it says only that (not whether it exists, is a directory, or whose it is). Only
    /// root can make such a tree for another user; CI runs as root.
    #[test]
    fn a_root_daemon_says_nothing_of_paths_the_submitter_could_not_reach() {
        let dir = tempfile::tempdir().unwrap();
        if Submitter::this_process().uid != 0 {
            return;
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::create_dir(dir.path().join("there")).unwrap();
        std::fs::write(dir.path().join("file"), "").unwrap();
        let policy = RunPolicy::new(Submitter { uid: 0, gid: 0 });
        let nobody = Submitter {
            uid: 65534,
            gid: 65534,
        };
        for name in ["there", "file", "absent"] {
            let mut run = command(&dir.path().join(name));
            let refused = policy.check(&mut run, &nobody).unwrap_err();
            let RunRefusal::Invalid(i) = refused else {
                panic!("{name}: {refused:?}")
            };
            assert_eq!(
                i.problem,
                format!(
                    "{}: uid 65534 may not enter the directory {}",
                    dir.path().join(name).display(),
                    dir.path().display()
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn a_program_must_be_executable_and_not_replaceable_by_others() {
        let dir = tempfile::tempdir().unwrap();
        let me = Submitter::this_process();
        let run = command(dir.path());
        assert!(check_program("run.args", Path::new("sh"), &run, &me).is_ok());
        let mut no_path = run.clone();
        no_path.env.clear();
        assert!(
            check_program("run.args", Path::new("sh"), &no_path, &me).is_ok(),
            "the C library's default PATH"
        );
        let script = dir.path().join("python");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_program("run.args", &script, &run, &me).unwrap_err();
        assert!(e.problem.contains("writable by everyone"), "{e}");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = check_program("run.args", &script, &run, &me).unwrap_err();
        assert!(e.problem.contains("not an executable"), "{e}");
        let e = check_program("run.args", Path::new("no-such-python"), &run, &me).unwrap_err();
        assert!(e.problem.contains("not on the submitted PATH"), "{e}");
    }

    #[test]
    fn refused_submissions_intern_no_names() {
        use crate::clock::VirtualClock;
        use crate::cluster::{ClusterActor, InternedIds, Parts, Settings, Submit, TimeSource};
        use crate::executor::SimExecutor;
        use gangway_core::engine::EngineConfig;
        use gangway_core::job::Names;
        use gangway_core::{cluster::Cluster, placement, policy, throughput::DurationModel};

        actix::System::new().block_on(async {
            let parts = Parts {
                cluster: std::sync::Arc::new(Cluster::parse_spec("v100=4", 4).unwrap()),
                model: std::sync::Arc::new(DurationModel::uniform(1)),
                names: Names::default(),
                policy: policy::builtin()
                    .build("fifo", &Default::default(), &policy::Capabilities::ALL)
                    .unwrap(),
                placer: Box::new(placement::PackingPlacer),
                executor: Box::new(SimExecutor::default()),
                probes: Vec::new(),
                health_every: std::time::Duration::from_secs(60),
            };
            let clock = std::sync::Arc::new(VirtualClock::new(0.0));
            let settings = Settings::new(EngineConfig::default(), TimeSource::Virtual(clock));
            let cluster = ClusterActor::start(parts, settings).unwrap();
            let request = |gpus: u32, name: String| JobRequest {
                tenant: name.clone(),
                ..JobRequest::new(name, gpus, 60.0)
            };
            // Refused by the cluster (8 GPUs on 4), each with new names.
            for k in 0..50 {
                let refused = cluster
                    .send(Submit {
                        request: request(8, format!("refused-{k}")),
                        at: None,
                        key: None,
                    })
                    .await
                    .unwrap();
                assert!(refused.is_err());
            }
            let id = cluster
                .send(Submit {
                    request: request(2, "accepted".into()),
                    at: None,
                    key: None,
                })
                .await
                .unwrap()
                .unwrap();
            let ids = cluster.send(InternedIds(id)).await.unwrap();
            assert_eq!(
                ids,
                Some((0, 0)),
                "the first accepted names get the first ids: the refused ones were never interned"
            );
        });
    }
}
