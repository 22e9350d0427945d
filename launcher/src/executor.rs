//! The control plane's [`Executor`] over real processes, so that `gangway serve` runs real jobs.
//!
//! Each start of a job is one `elastic-run` child, on exactly the GPUs the round gave it
//! (`--devices`), with the job's command, working directory and environment as submitted. So a job
//! under the daemon gets everything it gets alone: the worker contract, cooperative preemption,
//! hang detection, and its restart budget.
//!
//! - **Stop** is SIGTERM to that `elastic-run`: the workers save a checkpoint and exit within its
//!   `--grace`. A stop that outlasts that grace plus `stop_margin` kills every process of the attempt.
//! - **Resize and migration** are a stop, then a launch on other GPUs: a new torchrun with a new
//!   rendezvous that resumes from the checkpoint, at the world size the new GPUs allow.
//! - **Endings** come from the exit report `elastic-run` writes: completed, a user error, or a crash
//!   beyond its restart budget. A launch that died without one (killed) is a crash worth retrying.
//! - **Progress** comes from the workers: `elastic-run` copies what they report (the worker helper
//!   writes its step and total steps) to the attempt's progress file, which is read at every poll and
//!   reported as the job's work done; before the first report, and for workers that report no total,
//!   the scheduler's model estimates it.
//! - **Nothing a job can change is opened by the daemon**: the exit report, the progress and a retuned
//!   batch pass through files the daemon makes in its private state directory and hands `elastic-run`
//!   open ([`crate::inherit`]); the program `elastic-run` runs is checked at every launch, every
//!   directory on its path included, and handed over open too (path-only), so that what runs is what
//!   was checked. The check runs on a thread of its own, waited for [`DEFAULT_CHECK_PATIENCE`] at most:
//!   a file system of the submitter's that never answers holds that thread, never the executor.
//! - **CPUs and memory**: each attempt is pinned to whole cores of its own for the CPUs it was
//!   allotted, and put in a memory cgroup with its allotment as the limit where this process may make
//!   one (see [`crate::confine`]); the workers are told both (`GANGWAY_CPUS`, `GANGWAY_CPU_LIST`,
//!   `GANGWAY_MEMORY_GB`), which the worker helper turns into DataLoader worker counts.
//! - **Re-adoption**: the children run in their own process groups and outlive the daemon; every
//!   process of an attempt carries [`ATTEMPT_VAR`] in its environment, and a restarted daemon finds
//!   them by it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gangway_protocol::command::{
    CheckedProgram, Invalid, LIBRARY_PATH_VAR, Refused, Submitter, check_library_path, open_program,
};
use gangway_protocol::ids::{GpuId, JobId};
use gangway_protocol::worker::{
    Executor, ExecutorError, Launch, Measured, Resources, RunCommand, Segment, WorkerEvent,
};
use serde::{Deserialize, Serialize};

use crate::apart::{Apart, NotDone};
use crate::confine::{self, Cgroups, CorePool};
use crate::inherit::{self, AttemptFiles};
use crate::pool;
use crate::process::{
    Owner, Pinned, kill_with_any_env, pinned_with_env, processes_with_env, stat_fields,
};

/// An attempt's processes: those in its cgroup, where it has one (a job cannot leave it); else those
/// that carry its marker, or `None` where their environments did not answer
/// ([`processes_with_env`]).
fn attempt_processes(marker: &str, confinement: &Confinement) -> Option<Vec<i32>> {
    match &confinement.cgroup {
        Some(cgroup) => Some(confine::processes(cgroup)),
        None => processes_with_env(ATTEMPT_VAR, marker, confinement.owner()),
    }
}

/// Marks every process of one attempt: `INSTANCE-JOB.ATTEMPT` (see [`ProcessExecutor::attempt_marker`]).
pub const ATTEMPT_VAR: &str = "GANGWAY_ATTEMPT";
/// Where `elastic-run` writes its [`ExitReport`] before it exits, for a scheduler other than gangway's
/// daemon (which hands it a descriptor instead: [`crate::inherit::EXIT_FD_VAR`]).
pub const EXIT_FILE_VAR: &str = "GANGWAY_EXIT_FILE";
/// Where the workers report their progress: `{"step": N, "total_steps": T, ...}` (see the Python
/// helper's `report_progress`). `elastic-run` sets it for its workers, in the job's checkpoint
/// directory.
pub const PROGRESS_FILE_VAR: &str = "GANGWAY_PROGRESS_FILE";
/// The global batch the daemon's policy chose for this attempt of a job that adapts its batch
/// (`elastic-run --global-batch MIN:MAX`): `elastic-run` runs at it in place of MIN.
pub const POLICY_BATCH_VAR: &str = "GANGWAY_POLICY_BATCH";
/// The pipeline stages this attempt runs with, for a job whose stages differ by GPU type
/// (`elastic-run --pp-by-type`): `elastic-run` plans with it in place of `--pp`.
pub const POLICY_PP_VAR: &str = "GANGWAY_POLICY_PP";
/// What a job's workers last reported (a progress report's bytes): the fraction of its work done and,
/// when they measure it, their training's [`Measured`] figures (`"goodput"`; dropped when they do not
/// check out).
pub fn reported(progress: &[u8]) -> Option<(f64, Option<Measured>)> {
    let mut report: serde_json::Value = serde_json::from_slice(progress).ok()?;
    let step = report["step"].as_f64()?;
    let total = report["total_steps"].as_f64()?;
    let fraction = (step.is_finite() && total.is_finite() && step >= 0.0 && total > 0.0)
        .then(|| (step / total).min(1.0))?;
    let measured = serde_json::from_value::<Measured>(report["goodput"].take())
        .ok()
        .and_then(Measured::checked);
    Some((fraction, measured))
}

/// How an `elastic-run` ended, as it writes it to `$GANGWAY_EXIT_FILE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitReport {
    /// Its exit code: 0 completed, 2 user error, 75 preempted, 1 crashed beyond its budget.
    pub code: i32,
    /// How it ended, in words (the failure's reason, for a job that failed).
    pub why: String,
}

impl ExitReport {
    /// Writes the report atomically.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        write_atomically(
            path,
            &serde_json::to_vec(self).map_err(std::io::Error::other)?,
        )
    }
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`: a reader sees the
/// old file or the new one, never a part. The temporary file is created afresh, never opened
/// through a link someone left at its name (some of these files are in a submitter's directory).
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomically_as(path, bytes, 0o666)
}

/// [`write_atomically`], the file created with `mode` (less the umask) from the start.
fn write_atomically_as(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let _ = std::fs::remove_file(&temp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temp)?;
    file.write_all(bytes)?;
    drop(file);
    std::fs::rename(temp, path)
}

/// How long a poll sweeps what ended attempts left before it leaves the rest to the next sweep.
const LINGERING_SWEEP_BUDGET: Duration = Duration::from_millis(200);

/// How often what ended attempts left is swept again: without a cgroup each sweep is a scan of
/// their user's processes, which the poll waits for and which counts against the user's share.
const LINGERING_SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How long a stop waits for a killed attempt's processes to end before it goes on without them.
const KILL_PATIENCE: Duration = Duration::from_secs(5);

/// How long a killed attempt's stop waits for its user's processes to answer whether anything of it
/// is left (a scan that took long rests their scans for 30 s), before it goes on without knowing.
const UNANSWERED_KILL_PATIENCE: Duration = Duration::from_secs(60);

/// How often an attempt without a cgroup is looked for once its stop's deadline has passed: each
/// look is a scan of its user's processes (milliseconds on a busy machine) that the poll waits
/// for, and that counts against the user's share of scans, while SIGKILLed workers take about as
/// long to go.
const SCANNED_KILL_LOOK_EVERY: Duration = Duration::from_millis(100);

/// How long a batch of stops waits for its workers before those still checkpointing go on in the
/// background ([`ProcessExecutor::stop_patience`]).
pub const DEFAULT_STOP_PATIENCE: Duration = Duration::from_secs(10);

/// The longest `--grace` a job may ask for unless the operator says otherwise
/// ([`ProcessExecutor::max_grace`]).
pub const DEFAULT_MAX_GRACE: Duration = Duration::from_secs(600);

/// How long a launch waits for its program's check ([`checked_command`]) before the job waits for a
/// later round ([`ProcessExecutor::check_patience`]): the check takes well under a millisecond,
/// unless a file system on the program's path does not answer.
pub const DEFAULT_CHECK_PATIENCE: Duration = Duration::from_secs(3);

/// A launch's program check that takes this long or longer (or outlasts the patience) rests its
/// user's launches for [`ProcessExecutor::check_rest`]: a file system that answers just before the
/// patience would otherwise cost the executor that long at each of their launches. The daemon's own
/// user's never rest: their files are the operator's.
pub const SLOW_CHECK: Duration = Duration::from_secs(1);

/// How long a launch this machine could not start (out of processes, memory or disk) is put off:
/// not the job's doing, so it is not counted against it.
pub const HOST_RETRY: Duration = Duration::from_secs(15);

/// How long a user's launches are put off after a slow check of theirs ([`SLOW_CHECK`]): the
/// default of [`ProcessExecutor::check_rest`].
pub const DEFAULT_CHECK_REST: Duration = Duration::from_secs(60);

/// The share of the clock a user's launches' program checks may take for as long as they like:
/// beyond it, checks that add up to [`SLOW_CHECK`] rest their launches as one slow check does.
pub const CHECK_SHARE: f64 = 0.1;

/// Checks a submitted command as the process executor will run it (its GPUs first): `elastic-run`
/// must accept the command line, on this machine's GPUs (no `--backend slurm`), with a `--grace` of
/// at most `max_grace`, and the programs it names to run (the `--python` interpreter, or the script
/// under torchrun's `--no-python`) must be ones the submitter may run: see [`open_program`].
pub fn check_command(
    run: &RunCommand,
    submitter: &Submitter,
    max_grace: Duration,
) -> Result<(), Refused> {
    let grace = checked(run, submitter)?.0.options.grace();
    if grace > max_grace {
        return Err(Refused::from(Invalid {
            field: "run.args",
            problem: format!(
                "--grace {} s is longer than this daemon allows ({} s, gangway serve --max-grace): \
                 a stopped job's GPUs wait for it",
                grace.as_secs_f64(),
                max_grace.as_secs_f64()
            ),
        }));
    }
    Ok(())
}

/// What [`check_command`] found a command runs, held as checked.
#[derive(Debug)]
pub struct CheckedCommand {
    /// The program `elastic-run` runs its workers with (its `--python`), open.
    pub program: CheckedProgram,
    /// Under torchrun's `--no-python`, where the script the workers run was found (absolute): the
    /// workers run this path rather than search their `PATH` again, which as their user could find
    /// another file than the one checked.
    pub script: Option<PathBuf>,
}

/// [`check_command`]'s checks, made again at every launch (what was fine at submission may not be
/// any more), with the directories of the command's `LD_LIBRARY_PATH` if `library_path_checked`
/// ([`check_library_path`]; the control plane checked them at its submission). A refusal says
/// whether the file system did not answer ([`Refused::unanswered`]): the same check may pass later.
pub fn checked_command(
    run: &RunCommand,
    submitter: &Submitter,
    library_path_checked: bool,
) -> Result<CheckedCommand, Refused> {
    if library_path_checked && let Some(value) = run.env.get(LIBRARY_PATH_VAR) {
        check_library_path(value, submitter)?;
    }
    checked(run, submitter).map(|(_, command)| command)
}

/// [`checked_command`], with the command line as `elastic-run` reads it.
fn checked(
    run: &RunCommand,
    submitter: &Submitter,
) -> Result<(crate::cli::Invocation, CheckedCommand), Refused> {
    const FIELD: &str = "run.args";
    let mut args = vec!["--devices".to_owned(), "0".to_owned()];
    args.extend(run.args.iter().cloned());
    let inv = crate::cli::parse(&args).map_err(|e| {
        let text = e.to_string();
        let first = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("")
            .trim_start_matches("error: ")
            .to_owned();
        Invalid {
            field: FIELD,
            problem: format!("elastic-run refuses this command line: {first}"),
        }
    })?;
    let options = &inv.options;
    if options.backend != crate::cli::Backend::Local
        || options.nodes != 1
        || options.nodelist.is_some()
    {
        return Err(Invalid {
            field: FIELD,
            problem: "the daemon places jobs on its own GPUs and nodes: leave out --backend, \
                      --nodes and --nodelist"
                .into(),
        }
        .into());
    }
    if let Some((variable, option)) = (run.env.keys())
        .find_map(|v| crate::cli::hidden_program_option(v).map(|option| (v, option)))
    {
        return Err(Invalid {
            field: "run.env",
            problem: format!(
                "{variable} sets torchrun's {option} where elastic-run cannot see it (it changes \
                 the program that runs, which the daemon checks): give {option} on the command line"
            ),
        }
        .into());
    }
    if run.env.contains_key(crate::cli::WORKER_PROGRAM_VAR) {
        return Err(Invalid {
            field: "run.env",
            problem: format!(
                "{} makes torchrun start its workers with another program than the one the \
                 daemon checks: leave it out, and give the interpreter as --python",
                crate::cli::WORKER_PROGRAM_VAR
            ),
        }
        .into());
    }
    let program = open_program(FIELD, &inv.options.python, run, submitter)?;
    let script = if inv
        .torchrun
        .iter()
        .any(|a| a == "--no-python" || a == "--no_python")
    {
        Some(open_program(FIELD, Path::new(&inv.script), run, submitter)?.path)
    } else {
        None
    };
    Ok((inv, CheckedCommand { program, script }))
}

/// [`checked_command`] for `submitter`, apart ([`Apart`]): a file system of theirs that never
/// answers holds that check's thread, neither the executor nor another user's launch.
fn check_apart(
    checks: &Apart,
    run: &RunCommand,
    submitter: Submitter,
    patience: Duration,
    library_path_checked: bool,
) -> Result<CheckedCommand, SpawnError> {
    let run = run.clone();
    let checked = checks.run(submitter.uid, "gangway-launch-check", patience, move || {
        checked_command(&run, &submitter, library_path_checked)
    });
    match checked {
        // This machine out of descriptors or threads: not the job's doing.
        Ok(Err(e)) if e.host => Err(SpawnError::Host(format!("its program's check: {e}"))),
        // A file system that did not answer says nothing of the program: the job pauses and
        // tries again, where a refusal ends it.
        Ok(Err(e)) if e.unanswered => Err(SpawnError::Failed(format!(
            "its program's check: {e}; it is checked again at its next try"
        ))),
        Ok(checked) => {
            checked.map_err(|e| SpawnError::Refused(format!("its program may not run: {e}")))
        }
        // Every API user reads why a job waits: its user's id is not said.
        Err(e @ NotDone::Resting { left, .. }) => {
            Err(SpawnError::Later(format!("its program's check: {e}"), left))
        }
        Err(e @ NotDone::NoThread(_)) => Err(SpawnError::Host(format!("its program's check: {e}"))),
        Err(e) => Err(SpawnError::Failed(format!(
            "its program's check: {e}; its user's jobs wait until it comes back"
        ))),
    }
}

/// Makes `dir` (and its parents) with only this process's user let in (0700), or makes it so if it
/// is there; refuses one that belongs to another user. It keeps the run files and the attempts'
/// reports, which hold the jobs' environments.
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != inherit::this_user() {
        return Err(std::io::Error::other(format!(
            "{} must be a directory of uid {}'s (it is uid {}'s {:?})",
            dir.display(),
            inherit::this_user(),
            meta.uid(),
            meta.file_type()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::info!(dir = %dir.display(), "made the executor's state directory private (0700)");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// The pools live as long as their daemon's executor: they end with it (each would also see its
/// owner exit), and their cgroup goes. Running attempts are left alone, to be re-adopted.
impl Drop for ProcessExecutor {
    fn drop(&mut self) {
        let Cgroups::Made { root, .. } = &self.cgroups else {
            return;
        };
        let pools = root.join(self.pools_cgroup_name());
        for _ in 0..50 {
            if confine::kill(&pools) && confine::remove(&pools) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Why an attempt did not start.
enum SpawnError {
    /// It never can (no command, no such device, a missing directory or a permission).
    Refused(String),
    /// It could not now, for a reason of its own (its user's file system did not answer, its
    /// GPUs are spread unevenly): the job pauses before its next try.
    Failed(String),
    /// This machine could not start it now (out of processes, memory, file descriptors or disk,
    /// a storage hiccup): not the job's doing, tried again after [`HOST_RETRY`].
    Host(String),
    /// It was not tried, and would not be for this long: its user rests ([`SLOW_CHECK`]).
    Later(String, Duration),
}

impl SpawnError {
    fn from_io(what: String, e: std::io::Error) -> Self {
        use std::io::ErrorKind::{NotFound, PermissionDenied};
        let why = format!("{what}: {e}");
        match e.kind() {
            NotFound | PermissionDenied => SpawnError::Refused(why),
            _ => SpawnError::Host(why),
        }
    }
}

/// What a restarted daemon needs to re-adopt an attempt, kept in its run file.
#[derive(Serialize, Deserialize)]
struct RunRecord {
    pid: i32,
    launched_at: f64,
    stop_timeout: Duration,
    launch: Launch,
    #[serde(default)]
    confinement: Confinement,
    /// Its processes' [`ATTEMPT_VAR`] (absent in run files of before it named the executor).
    #[serde(default)]
    marker: Option<String>,
    /// The files it reports through (absent in run files of before they were the daemon's own).
    #[serde(default)]
    files: Option<AttemptFiles>,
}

/// Writes an attempt's record, which a restarted daemon re-adopts it by (a daemon that cannot write
/// it still runs the attempt, but a restart will not find it). It holds the job's command and
/// environment (tokens, keys), so it is the daemon's alone (0600), as the journal is.
fn write_run_file(path: &Path, record: &RunRecord) {
    if let Err(e) = serde_json::to_vec(record)
        .map_err(std::io::Error::other)
        .and_then(|bytes| write_atomically_as(path, &bytes, 0o600))
    {
        tracing::warn!(error = %e, "writing {}: a restarted daemon cannot re-adopt it", path.display());
    }
}

/// The attempt's `elastic-run` among the processes whose [`ATTEMPT_VAR`] is `marker`: the oldest
/// of those that lead their own group (the daemon starts it in one). Its guardian, torchrun, the
/// workers and a pool's ranks lead groups or sessions of their own too, but all start after it;
/// among those started in the same clock tick, one whose parent carries no marker goes first, then
/// the lowest pid. `Some(None)`: none leads one (its `elastic-run`, and what it started, are gone);
/// `None`: their environments did not answer.
fn marked_leader(marker: &str, confinement: &Confinement) -> Option<Option<i32>> {
    let pids = attempt_processes(marker, confinement)?;
    // A process whose stat cannot be read has ended.
    let age = |pid: i32| {
        let [parent, started] = stat_fields(&pid.to_string(), [4, 22])?;
        let (parent, started): (i32, u64) = (parent.parse().ok()?, started.parse().ok()?);
        Some((started, pids.contains(&parent), pid))
    };
    let leaders = pids.iter().copied().filter(|&pid| {
        // SAFETY: getpgid(2) reads another process's group id; it changes nothing.
        let group = unsafe { libc::getpgid(pid) };
        group == pid
    });
    Some(leaders.filter_map(age).min().map(|(_, _, pid)| pid))
}

/// Where an attempt's CPUs and memory are held.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Confinement {
    /// The cores its processes are pinned to (none: not pinned).
    cores: Vec<usize>,
    /// Its memory cgroup, where limits are enforced.
    cgroup: Option<PathBuf>,
    /// Its cgroup in cgroup v1's pids hierarchy, where its tasks are bounded apart from its memory
    /// (none in run files of before the bound).
    #[serde(default)]
    tasks: Option<PathBuf>,
    /// Whose its processes are: without a cgroup, only theirs are looked for (none in run files of
    /// before it, nor for an attempt whose run file cannot be read: every process is).
    #[serde(default)]
    owner: Option<u32>,
}

impl Confinement {
    /// Whose processes are looked for by its marker.
    fn owner(&self) -> Owner {
        self.owner.map_or(Owner::Any, Owner::User)
    }
}

/// One running attempt.
struct Run {
    attempt: u64,
    /// How long its stop may take: the job's `--grace` and a margin for torchrun's teardown.
    stop_timeout: Duration,
    /// `None` for an attempt re-adopted after a restart (not our child).
    child: Option<Child>,
    pid: i32,
    /// An adopted run's `elastic-run`, pinned once a look at its processes found it the attempt's
    /// ([`Run::live_leader`]): from then on its end and its signals need no look at its user's
    /// processes, which they could make slow, nor at its cgroup.
    leader: Option<Pinned>,
    /// An allotment of CPUs and memory not yet carried out: its processes did not answer.
    allotment_due: Option<Resources>,
    /// The files it reports through.
    files: AttemptFiles,
    run_file: PathBuf,
    launched: Instant,
    launched_at: f64,
    launch: Launch,
    /// The last fraction of its work the workers reported, and whether it was polled since.
    reported: Option<f64>,
    /// Whether its progress file was found unreadable (said once, not at every poll).
    unreadable: bool,
    confinement: Confinement,
    /// What its processes carry in [`ATTEMPT_VAR`].
    marker: String,
}

/// A stop under way.
struct Stopping {
    run: Run,
    /// When it was asked for, in control-plane seconds: the work its workers saved is counted to
    /// then, however long they take to go.
    asked_at: f64,
    /// When its workers are killed if they have not exited.
    deadline: Instant,
    /// When they were killed, once they were.
    killed_at: Option<Instant>,
    /// Whether its `elastic-run` was sent SIGTERM: an adopted run's is sent it only once its
    /// processes answer that it is the attempt's, which may be after the stop was asked.
    signalled: bool,
}

impl Stopping {
    /// Whether its attempt's processes are killed by a scan of its user's at `now`: it has no
    /// cgroup, its `elastic-run` was sent SIGTERM, and its deadline has passed (it may have been
    /// killed already).
    fn kill_scanned(&self, now: Instant) -> bool {
        self.signalled
            && self.run.confinement.cgroup.is_none()
            && (self.killed_at.is_some() || now >= self.deadline)
    }

    /// Notes the SIGTERM sent `at`, after the stop was asked (an adopted run's processes did not
    /// answer until then): the workers get their whole grace from it to save their work.
    fn signalled_at(&mut self, at: Instant) {
        self.signalled = true;
        self.deadline = self.deadline.max(at + self.run.stop_timeout);
    }
}

impl Run {
    /// Work done by control-plane time `now`, as the scheduler counts it: what the workers last
    /// reported; without a report, the model's estimate from the launch.
    fn work_done(&self, now: f64) -> f64 {
        let l = &self.launch;
        // Never all of it: only the workers' own exit finishes a job.
        let most = l.total_steps * 0.999;
        if let Some(fraction) = self.reported {
            return (fraction * l.total_steps).min(most);
        }
        let done_at_launch = l.total_steps - l.remaining_steps;
        let running = (now - self.launched_at - l.startup_seconds).max(0.0);
        (done_at_launch + running * l.steps_per_second).min(most)
    }

    /// A progress event when the workers reported something new since the last poll.
    fn progressed(&mut self) -> Option<WorkerEvent> {
        let bytes = match self.files.progress() {
            Ok(bytes) => bytes?,
            Err(e) => {
                if !std::mem::replace(&mut self.unreadable, true) {
                    tracing::warn!(job = self.launch.job.0, error = %e, "the workers' progress is not readable");
                }
                return None;
            }
        };
        let (fraction, measured) = reported(&bytes)?;
        if self.reported == Some(fraction) {
            return None;
        }
        self.reported = Some(fraction);
        Some(WorkerEvent::Progressed {
            job: self.launch.job,
            attempt: self.attempt,
            steps_done: fraction * self.launch.total_steps,
            measured,
        })
    }

    fn exited(&mut self) -> bool {
        // Taken to be alive while its processes do not answer.
        self.ended() == Some(true)
    }

    /// Whether its `elastic-run` has ended; `None` while an adopted run's processes do not answer.
    fn ended(&mut self) -> Option<bool> {
        match &mut self.child {
            Some(child) => Some(!matches!(child.try_wait(), Ok(None))),
            None => self.leader_gone(),
        }
    }

    /// Whether a run that is not our child (re-adopted) is over: its `elastic-run` is no longer
    /// the process of the attempt its pid names; `None` while its processes do not answer. A run
    /// adopted without its pid (its daemon stopped between writing the record and learning the
    /// pid) looks for it by marker first, and keeps it in its run file once found.
    fn leader_gone(&mut self) -> Option<bool> {
        self.live_leader().map(|leader| leader.is_none())
    }

    /// The `elastic-run` of a run that is not our child, pinned while it runs: `Some(None)` once it
    /// has ended (or, adopted without its pid, where no process of the attempt leads its group);
    /// `None` while its processes do not answer, or where it could not be pinned (tried again
    /// later). Found and checked by one look at its processes, then told apart by its pidfd alone
    /// (where the kernel offers none, looked at again each time).
    fn live_leader(&mut self) -> Option<Option<&Pinned>> {
        match self.leader.as_ref().and_then(Pinned::ended) {
            Some(true) => return Some(None),
            Some(false) => return Some(self.leader.as_ref()),
            None => {}
        }
        if !self.knows_leader()? {
            return Some(None);
        }
        let found = attempt_pinned(self.pid, &self.marker, &self.confinement, |found| found)?;
        self.leader = found
            .inspect_err(|error| {
                tracing::warn!(job = self.launch.job.0, pid = self.pid, %error, "pinning the adopted elastic-run");
            })
            .ok()?;
        Some(self.leader.as_ref())
    }

    /// Whether a run that is not our child knows its `elastic-run`'s pid: one adopted without it
    /// looks for it by marker (the attempt's process that leads its group), and keeps it in its
    /// run file once found. `Some(false)` where none was found (taken for ended); `None` while its
    /// processes do not answer.
    fn knows_leader(&mut self) -> Option<bool> {
        if self.pid != 0 {
            return Some(true);
        }
        let Some(pid) = marked_leader(&self.marker, &self.confinement)? else {
            return Some(false);
        };
        tracing::info!(
            job = self.launch.job.0,
            pid,
            "found the adopted attempt's elastic-run"
        );
        self.pid = pid;
        self.save_record();
        Some(true)
    }

    /// SIGTERM to the `elastic-run` of a run that is not our child, where it is still the
    /// attempt's: through its pidfd once pinned ([`Run::live_leader`]), else checked and signalled
    /// in one look at its processes. `Some(true)` sent; `Some(false)` it has ended (or,
    /// adopted without its pid, no process of the attempt leads its group); `None` while its
    /// processes do not answer, or where it could not be signalled (tried again later).
    fn signal_leader(&mut self) -> Option<bool> {
        let job = self.launch.job.0;
        let warn = move |pid, error: &std::io::Error| {
            tracing::warn!(job, pid, %error, "signalling the adopted elastic-run");
        };
        // Held by its pidfd: the signal reaches it or, once it has ended, nothing.
        if let Some(leader) = &self.leader
            && let Some(ended) = leader.ended()
        {
            if ended {
                return Some(false);
            }
            return (leader.signal(libc::SIGTERM))
                .inspect_err(|error| warn(leader.pid(), error))
                .ok();
        }
        // Otherwise checked and signalled in one look: nothing else holds the pid between the two
        // where the kernel offers no pidfds.
        if !self.knows_leader()? {
            return Some(false);
        }
        let pid = self.pid;
        attempt_pinned(pid, &self.marker, &self.confinement, |found| {
            found?.map_or(Ok(false), |leader| leader.signal(libc::SIGTERM))
        })?
        .inspect_err(|error| warn(pid, error))
        .ok()
    }

    /// Removes the attempt's files once its ending is known.
    fn forget(&self) {
        self.files.remove();
        let _ = std::fs::remove_file(&self.run_file);
    }

    /// Rewrites its run file after a change in place, so that a restarted daemon re-adopts it as
    /// it is now.
    fn save_record(&self) {
        let record = RunRecord {
            pid: self.pid,
            launched_at: self.launched_at,
            stop_timeout: self.stop_timeout,
            launch: self.launch.clone(),
            confinement: self.confinement.clone(),
            marker: Some(self.marker.clone()),
            files: Some(self.files.clone()),
        };
        write_run_file(&self.run_file, &record);
    }
}

/// FNV-1a: a stable hash (the same in every build and run) for names.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The hash an executor's names carry: this machine's id (systemd's `/etc/machine-id`, else its
/// host name) and its state directory's path, so that daemons on two machines with the same
/// journal path never take each other's Slurm steps for their own.
fn instance_hash(state_dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let mut named = std::fs::read("/etc/machine-id")
        .or_else(|_| std::fs::read("/proc/sys/kernel/hostname"))
        .unwrap_or_default();
    named.push(0);
    named.extend(state_dir.as_os_str().as_bytes());
    fnv1a(&named)
}

fn marker(job: JobId, attempt: u64) -> String {
    format!("{}.{attempt}", job.0)
}

/// Process `pid` pinned ([`Pinned`]) where, once pinned, it is a live process of the attempt (its
/// pid may have passed to another process since it was read): in its cgroup, where it has one
/// (read from the cgroup, never from the job's own memory), else carrying its marker; handed to
/// `then` in the same look: `Ok(None)` where it is not (or has ended), `Err` where it could not be
/// pinned. What `then` answers, or `None` where its environment did not answer (see
/// [`processes_with_env`]).
fn attempt_pinned<T: Send + 'static>(
    pid: i32,
    marker: &str,
    confinement: &Confinement,
    then: impl FnOnce(std::io::Result<Option<Pinned>>) -> T + Send + 'static,
) -> Option<T> {
    if pid <= 0 {
        return Some(then(Ok(None)));
    }
    match &confinement.cgroup {
        Some(cgroup) => Some(then(Pinned::checked(pid, || {
            confine::processes(cgroup).contains(&pid)
        }))),
        None => pinned_with_env(pid, ATTEMPT_VAR, marker, confinement.owner(), then),
    }
}

/// SIGKILLs every process of an attempt, in one pass: its cgroup's, or without one those carrying
/// `marker` (its owner's: see [`processes_with_env`]). Whether none was found, and so the attempt
/// is over; `None` while they do not answer. A cgroup lists a process until late in its exit; a
/// marker scan, only until the process has let its memory go.
fn kill_attempt(marker: &str, confinement: &Confinement) -> Option<bool> {
    match &confinement.cgroup {
        Some(cgroup) => Some(confine::kill(cgroup)),
        None => kill_with_any_env(ATTEMPT_VAR, &[marker.to_owned()], confinement.owner())
            .map(|found| found.is_empty()),
    }
}

/// One pass's kills of attempts without a cgroup (stops past their deadline, or what ended attempts
/// left): each user's processes are scanned once for all of that user's attempts whose kill is due
/// in it, rather than once per attempt, so that a wave of kills costs a user one scan a look
/// against their share of scans ([`crate::apart::Apart::resting`]), and the poll one wait per
/// user.
#[derive(Default)]
struct Kills {
    users: HashMap<Owner, UserKills>,
}

/// One user's attempts whose kill is due in a [`Kills`] pass.
#[derive(Default)]
struct UserKills {
    /// Whether their stops past the deadline are looked at in this pass: at most one look each
    /// [`SCANNED_KILL_LOOK_EVERY`] per user. (A sweep's always are.)
    looked: bool,
    markers: Vec<String>,
    scan: UserScan,
}

/// A [`Kills`] pass's scan of one user's processes.
#[derive(Default)]
enum UserScan {
    /// Not made yet: made at the first kill of theirs the pass asks for.
    #[default]
    NotYet,
    /// It did not answer in time.
    Unanswered,
    /// Which of the user's markers had processes (killed).
    Found(Vec<bool>),
}

impl UserScan {
    /// Whether it was made (answered or not).
    fn made(&self) -> bool {
        !matches!(self, UserScan::NotYet)
    }
}

impl Kills {
    /// The kills of `attempts` (by marker and confinement) in one pass, each of whose users is
    /// looked at in it where `looked` says.
    fn of<'a>(
        attempts: impl IntoIterator<Item = (&'a str, &'a Confinement)>,
        looked: impl Fn(Owner) -> bool,
    ) -> Self {
        let mut kills = Kills::default();
        for (marker, confinement) in attempts {
            if confinement.cgroup.is_some() {
                continue;
            }
            let owner = confinement.owner();
            let user = (kills.users.entry(owner)).or_insert_with(|| UserKills {
                looked: looked(owner),
                ..UserKills::default()
            });
            user.markers.push(marker.to_owned());
        }
        kills
    }

    /// The kills due in a pass over `stops` at `now`: users whose processes were looked at for a
    /// kill less than [`SCANNED_KILL_LOOK_EVERY`] before (`looked_at`) are not due.
    fn past_deadline(
        stops: &[Stopping],
        looked_at: &HashMap<Owner, Instant>,
        now: Instant,
    ) -> Self {
        let past_deadline = stops.iter().filter(|s| s.kill_scanned(now));
        Kills::of(
            past_deadline.map(|s| (s.run.marker.as_str(), &s.run.confinement)),
            |owner| (looked_at.get(&owner)).is_none_or(|&at| now >= at + SCANNED_KILL_LOOK_EVERY),
        )
    }

    /// Whether `stop`, past its deadline, is looked at in this pass (one with a cgroup always is).
    fn look_due(&self, stop: &Stopping) -> bool {
        let confinement = &stop.run.confinement;
        confinement.cgroup.is_some()
            || (self.users.get(&confinement.owner())).is_some_and(|user| user.looked)
    }

    /// Its user's kills in this pass, and `marker`'s place among them, where its kill is due in
    /// it.
    fn covering(
        &mut self,
        marker: &str,
        confinement: &Confinement,
    ) -> Option<(&mut UserKills, usize)> {
        if confinement.cgroup.is_some() {
            return None;
        }
        let user = self.users.get_mut(&confinement.owner())?;
        let k = user.markers.iter().position(|m| m == marker)?;
        Some((user, k))
    }

    /// [`kill_attempt`], from its user's one scan in this pass where its kill is due in it.
    fn kill(&mut self, marker: &str, confinement: &Confinement) -> Option<bool> {
        let owner = confinement.owner();
        let Some((user, k)) = self.covering(marker, confinement) else {
            return kill_attempt(marker, confinement);
        };
        if !user.scan.made() {
            user.scan = match kill_with_any_env(ATTEMPT_VAR, &user.markers, owner) {
                Some(found) => {
                    let mut any = vec![false; user.markers.len()];
                    found.into_iter().for_each(|k| any[k] = true);
                    UserScan::Found(any)
                }
                None => UserScan::Unanswered,
            };
        }
        match &user.scan {
            UserScan::Found(any) => Some(!any[k]),
            UserScan::NotYet | UserScan::Unanswered => None,
        }
    }

    /// Whether this pass's scan of its user's processes has looked for `marker` already (a kill of
    /// it then costs no scan).
    fn scanned_for(&mut self, marker: &str, confinement: &Confinement) -> bool {
        (self.covering(marker, confinement)).is_some_and(|(user, _)| user.scan.made())
    }

    /// The users whose processes this pass scanned.
    fn scanned(&self) -> impl Iterator<Item = Owner> + '_ {
        (self.users.iter()).filter_map(|(&owner, user)| user.scan.made().then_some(owner))
    }
}

/// Where the control plane's GPUs are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hosts {
    /// On this machine: the device index of each GPU id.
    Local(Vec<u32>),
    /// On Slurm's nodes: the node of each GPU id. Each start is an `elastic-run --backend slurm` on
    /// the nodes the placer chose, which Slurm launches and binds (`srun --gres`).
    Slurm(Vec<String>),
}

impl Hosts {
    /// `elastic-run`'s options for running on `gpus`.
    fn placement_args(&self, gpus: &[GpuId]) -> Result<Vec<String>, SpawnError> {
        match self {
            Hosts::Local(devices) => {
                let mut listed = Vec::with_capacity(gpus.len());
                for gpu in gpus {
                    let device = devices.get(gpu.0 as usize).ok_or_else(|| {
                        SpawnError::Refused(format!("GPU {} has no device on this machine", gpu.0))
                    })?;
                    listed.push(device.to_string());
                }
                Ok(vec!["--devices".into(), listed.join(",")])
            }
            Hosts::Slurm(node_of) => {
                let mut nodes: Vec<(&str, u32)> = Vec::new();
                for gpu in gpus {
                    let node = node_of.get(gpu.0 as usize).ok_or_else(|| {
                        SpawnError::Refused(format!("GPU {} is on no Slurm node", gpu.0))
                    })?;
                    match nodes.iter_mut().find(|(n, _)| n == node) {
                        Some((_, count)) => *count += 1,
                        None => nodes.push((node, 1)),
                    }
                }
                // torchrun starts as many workers on every node. (The daemon's placer spreads gangs
                // evenly on Slurm; should one come uneven, it goes back to the queue and pauses,
                // counted as its own failed start: a placement that comes back uneven every round
                // would otherwise preempt others every round.)
                if nodes.iter().any(|&(_, c)| c != nodes[0].1) {
                    let shape: Vec<String> =
                        nodes.iter().map(|(n, c)| format!("{c} on {n}")).collect();
                    return Err(SpawnError::Failed(format!(
                        "its GPUs are spread unevenly ({}); torchrun needs as many on every node",
                        shape.join(", ")
                    )));
                }
                let names: Vec<&str> = nodes.iter().map(|&(n, _)| n).collect();
                Ok(vec![
                    "--backend".into(),
                    "slurm".into(),
                    "--nodes".into(),
                    nodes.len().to_string(),
                    "--nodelist".into(),
                    names.join(","),
                ])
            }
        }
    }
    /// How many machines `gpus` are on.
    fn count(&self, gpus: &[GpuId]) -> usize {
        match self {
            Hosts::Local(_) => 1,
            Hosts::Slurm(node_of) => {
                let mut nodes: Vec<Option<&String>> =
                    gpus.iter().map(|g| node_of.get(g.0 as usize)).collect();
                nodes.sort_unstable();
                nodes.dedup();
                nodes.len()
            }
        }
    }
}

/// The Slurm job name of an attempt's step (`elastic-run` names its step after its [`ATTEMPT_VAR`]).
pub fn slurm_job_name(marker: &str) -> String {
    format!("gangway-{marker}")
}

/// Where the sweep of Slurm's queue for steps no attempt accounts for is.
enum QueueSweep {
    /// To list at the next poll.
    Due,
    /// Being listed: every user's jobs (id, name).
    Listing(std::thread::JoinHandle<Result<Vec<(String, String)>, crate::slurm::SlurmError>>),
    /// Listed and swept (or not on Slurm).
    Done,
}

/// Runs each job as an `elastic-run` child process of this one, on this machine's GPUs or, through
/// Slurm, on its nodes'.
pub struct ProcessExecutor {
    elastic_run: PathBuf,
    hosts: Hosts,
    /// Exit files and run files, one per attempt.
    state_dir: PathBuf,
    /// How long a stop may take, beyond the job's own `--grace`, before the attempt's processes
    /// are killed.
    pub stop_margin: Duration,
    /// The most of a job's `--grace` a stop waits for, whatever the job asked (one journaled
    /// before the limit was lowered, say): its GPUs stay out of service for as long. Submissions
    /// asking for more are refused ([`check_command`]).
    pub max_grace: Duration,
    /// How long a batch of stops waits for its workers to exit: those still checkpointing then
    /// go on in the background ([`ExecutorError::StillStopping`]), reported by `poll` once over,
    /// so that a job that takes its whole grace (or ignores the stop) holds no other job's start.
    pub stop_patience: Duration,
    /// The most tasks (processes and threads) an attempt may have where cgroups bound them
    /// (default: [`Cgroups::default_max_tasks`]).
    pub max_tasks: u64,
    /// How long a launch waits for its program's check (default: [`DEFAULT_CHECK_PATIENCE`]); one
    /// that outlasts it fails (the job waits for a later round), and so does every later launch of
    /// the same user's until the check comes back.
    pub check_patience: Duration,
    /// How long a user's launches are put off ([`ExecutorError::Later`]) after a check of theirs
    /// took [`SLOW_CHECK`] or longer (default: [`DEFAULT_CHECK_REST`]); their jobs wait meanwhile,
    /// and the executor waits on a slow file system of theirs once per rest at most.
    pub check_rest: Duration,
    /// Whether a job's `LD_LIBRARY_PATH` is checked again at each launch, as at its submission
    /// ([`check_library_path`]; default true): false where the operator lets jobs set it unchecked
    /// (`gangway serve --allow-env LD_LIBRARY_PATH`).
    pub library_path_checked: bool,
    /// The launches' program checks that have not come back, and the users resting.
    checks: Apart,
    runs: HashMap<JobId, Run>,
    /// Stops that outlasted the patience, moved on at each poll.
    stopping: Vec<Stopping>,
    /// Events found outside `poll` (a launch refused before it ran).
    pending: Vec<WorkerEvent>,
    cores: CorePool,
    cgroups: Cgroups,
    /// Tells this executor's processes, cgroups and Slurm steps apart from another daemon's, on the
    /// same machine (which stops by marker) or another sharing the same Slurm cluster (whose
    /// journal may have the same path): a hash of this machine's id and its state directory, the
    /// same after a restart.
    instance: String,
    /// Ended attempts some of whose processes had not yet gone: their markers and cgroups, swept
    /// again every [`LINGERING_SWEEP_EVERY`].
    lingering: Vec<(String, Confinement)>,
    /// When `lingering` was last swept.
    lingering_swept_at: Option<Instant>,
    /// When each user's processes were last scanned for stops past their deadline ([`Kills`]):
    /// looked at again [`SCANNED_KILL_LOOK_EVERY`] after the end of the last look.
    kill_looked_at: HashMap<Owner, Instant>,
    /// Children never waited for, reaped at later polls: those killed at a stop that had not ended
    /// [`KILL_PATIENCE`] later (the kernel holds a process waiting on a file system that never
    /// answers, even through SIGKILL), and the `scancel`s of Slurm steps that ended or that no
    /// attempt accounts for.
    unreaped: Vec<Child>,
    /// Slurm's queue, listed after the first poll (on a thread of its own: a controller that does
    /// not answer holds `squeue` for its timeout and retries), so that steps no attempt accounts
    /// for are cancelled once it is in.
    slurm_queue: QueueSweep,
    /// Whether what an earlier life of this executor left that no attempt accounts for has been
    /// ended (at the first poll, after the control plane re-adopted what it knows).
    swept: bool,
}

impl ProcessExecutor {
    /// Jobs on this machine's GPUs: `devices[g]` is the device index of GPU id `g`; `state_dir` keeps
    /// one exit file and one run file per attempt.
    pub fn new(
        elastic_run: PathBuf,
        devices: Vec<u32>,
        state_dir: PathBuf,
    ) -> std::io::Result<Self> {
        Self::on(elastic_run, Hosts::Local(devices), state_dir)
    }

    /// Jobs on `hosts`' GPUs.
    pub fn on(elastic_run: PathBuf, hosts: Hosts, state_dir: PathBuf) -> std::io::Result<Self> {
        make_private_dir(&state_dir)?;
        let instance = format!("{:016x}", instance_hash(&state_dir.canonicalize()?));
        // Slurm tracks a remote step's processes and binds its memory; this machine's cgroups are
        // left alone.
        let cgroups = match hosts {
            Hosts::Local(_) => Cgroups::detect(),
            Hosts::Slurm(_) => {
                Cgroups::Unavailable("Slurm holds its steps' processes and memory".into())
            }
        };
        Ok(ProcessExecutor {
            elastic_run,
            swept: false,
            hosts,
            state_dir,
            stop_margin: Duration::from_secs(60),
            max_grace: DEFAULT_MAX_GRACE,
            stop_patience: DEFAULT_STOP_PATIENCE,
            max_tasks: cgroups.default_max_tasks(),
            check_patience: DEFAULT_CHECK_PATIENCE,
            check_rest: DEFAULT_CHECK_REST,
            library_path_checked: true,
            checks: Apart::default(),
            runs: HashMap::new(),
            stopping: Vec::new(),
            pending: Vec::new(),
            cores: CorePool::of_this_process(),
            cgroups,
            lingering: Vec::new(),
            lingering_swept_at: None,
            kill_looked_at: HashMap::new(),
            unreaped: Vec::new(),
            slurm_queue: QueueSweep::Done,
            instance,
        })
    }

    /// What every process of an attempt carries in [`ATTEMPT_VAR`]: this executor's, and the
    /// attempt's (`INSTANCE-JOB.ATTEMPT`).
    pub fn attempt_marker(&self, job: JobId, attempt: u64) -> String {
        format!("{}-{}", self.instance, marker(job, attempt))
    }

    /// Pins attempts to cores of `cores` (default: those this process may use).
    pub fn with_cores(mut self, cores: CorePool) -> Self {
        self.cores = cores;
        self
    }

    /// Holds attempts' processes and memory so (default: [`Cgroups::detect`]).
    pub fn with_cgroups(mut self, cgroups: Cgroups) -> Self {
        self.cgroups = cgroups;
        self
    }

    /// How attempts' processes and memory are held, for the operator.
    pub fn cgroups(&self) -> &Cgroups {
        &self.cgroups
    }

    /// Makes an attempt's cgroup, with its memory limit, and, for an attempt with `resources`, takes
    /// its cores (on this machine: Slurm binds a remote step's resources itself).
    fn confine(&mut self, launch: &Launch) -> Result<Confinement, SpawnError> {
        let memory = launch.resources.and_then(|r| r.memory_bytes());
        let name = self.attempt_marker(launch.job, launch.attempt);
        let cgroup = self
            .cgroups
            .create(&name, memory)
            .map_err(|e| SpawnError::from_io("making the attempt's cgroup".into(), e))?;
        // On cgroup v1 the bound is a cgroup in the pids hierarchy, which a warm pool's workers do
        // not join; pools serve only the daemon's own user's jobs, who could fork as that user
        // anyway: theirs go without it there.
        let another_user = (launch.run.as_ref())
            .and_then(|run| run.user)
            .is_some_and(|user| user.uid != inherit::this_user());
        let tasks = match &cgroup {
            Some(cgroup) if another_user || !self.cgroups.bounds_tasks_apart() => self
                .cgroups
                .bound_tasks(&name, cgroup, self.max_tasks)
                .map_err(|e| {
                    confine::remove(cgroup);
                    SpawnError::from_io("bounding the attempt's tasks".into(), e)
                })?,
            _ => None,
        };
        let cores = match (launch.resources, &self.hosts) {
            (Some(resources), Hosts::Local(_)) => self.cores.take(resources.cores()),
            _ => Vec::new(),
        };
        Ok(Confinement {
            cores,
            cgroup,
            tasks,
            owner: Some(
                launch
                    .run
                    .as_ref()
                    .and_then(|run| run.user)
                    .map_or_else(inherit::this_user, |user| user.uid),
            ),
        })
    }

    /// Gives back an ended attempt's cores, and ends whatever it left, without waiting: what does
    /// not go at once is swept again later ([`LINGERING_SWEEP_EVERY`]). (On Slurm, its step is
    /// cancelled by an `scancel` reaped at later polls: this runs in `poll`, on the control plane's
    /// thread.)
    fn release(&mut self, marker: &str, confinement: &Confinement) {
        self.release_with(marker, confinement, &mut Kills::default());
    }

    /// [`ProcessExecutor::release`], its sweep one of `kills`' where that pass's scan covers it.
    fn release_with(&mut self, marker: &str, confinement: &Confinement, kills: &mut Kills) {
        self.cores.give_back(&confinement.cores);
        if let Hosts::Slurm(_) = self.hosts {
            match crate::slurm::start_cancel(&slurm_job_name(marker)) {
                Ok(scancel) => self.unreaped.push(scancel),
                Err(error) => {
                    tracing::warn!(%error, attempt = marker, "starting scancel for an ended attempt")
                }
            }
        }
        if !Self::sweep_once(marker, confinement, kills) {
            self.linger(marker.to_owned(), confinement.clone());
        }
    }

    /// One pass at ending an attempt's processes: its cgroup's (then the cgroup itself, and the one
    /// that bounds its tasks apart) or, without one, those carrying its marker. Whether nothing of
    /// it is left.
    fn sweep_once(marker: &str, confinement: &Confinement, kills: &mut Kills) -> bool {
        kills.kill(marker, confinement) == Some(true)
            && confinement.cgroup.as_deref().is_none_or(confine::remove)
            // The pids hierarchy's cgroup empties with the other.
            && confinement.tasks.as_deref().is_none_or(confine::remove)
    }

    /// Keeps an ended attempt that a sweep just left something of, to be swept again
    /// [`LINGERING_SWEEP_EVERY`] on.
    fn linger(&mut self, marker: String, confinement: Confinement) {
        if self.lingering.is_empty() {
            self.lingering_swept_at = Some(Instant::now());
        }
        self.lingering.push((marker, confinement));
    }

    /// Sweeps what ended attempts left, every [`LINGERING_SWEEP_EVERY`], for a while: on the
    /// control plane's thread, a sweep without a cgroup may take up to a scan's patience, and users
    /// whose processes answer slowly could otherwise make a poll last as long as they have
    /// attempts lingering. Those not reached go first at the next sweep.
    fn sweep_lingering(&mut self) {
        let began = Instant::now();
        if self.lingering.is_empty()
            || (self.lingering_swept_at).is_some_and(|at| began < at + LINGERING_SWEEP_EVERY)
        {
            return;
        }
        self.lingering_swept_at = Some(began);
        let lingering = std::mem::take(&mut self.lingering);
        // One scan of each user's processes for all of what their ended attempts left.
        let mut kills = Kills::of(lingering.iter().map(|(m, c)| (m.as_str(), c)), |_| true);
        let (mut unreached, mut left) = (Vec::new(), Vec::new());
        for (marker, confinement) in lingering {
            if began.elapsed() >= LINGERING_SWEEP_BUDGET
                && !kills.scanned_for(&marker, &confinement)
            {
                unreached.push((marker, confinement));
            } else if !Self::sweep_once(&marker, &confinement, &mut kills) {
                left.push((marker, confinement));
            }
        }
        unreached.append(&mut left);
        self.lingering = unreached;
    }

    /// Carries out `job`'s allotment due ([`Executor::reallot`]), re-pinning its processes in
    /// place: whether it was (or none was due). Where its processes do not answer, none could be
    /// re-pinned, so it keeps what it has (its old cores are not handed to another job while it
    /// runs on them), and the allotment waits for the next poll.
    fn allot(&mut self, job: JobId) -> bool {
        let Some(run) = self.runs.get_mut(&job) else {
            return true;
        };
        let Some(resources) = run.allotment_due else {
            return true;
        };
        let Some(pids) = attempt_processes(&run.marker, &run.confinement) else {
            return false;
        };
        run.allotment_due = None;
        // Re-pinned in place: the workers keep running, on the new cores from their next slice.
        self.cores.give_back(&run.confinement.cores);
        let cores = self.cores.take(resources.cores());
        let threads = confine::repin(&pids, &cores);
        if let (Some(cgroup), Some(bytes)) = (&run.confinement.cgroup, resources.memory_bytes())
            && let Err(e) = self.cgroups.set_limit(cgroup, bytes)
        {
            // Lowering a limit below what the job already uses fails; it keeps the old one.
            tracing::warn!(job = job.0, error = %e, "changing the memory limit");
        }
        tracing::info!(job = job.0, cores = %confine::core_list(&cores), threads, "re-pinned");
        run.confinement.cores = cores;
        run.launch.resources = Some(resources);
        run.save_record();
        true
    }

    fn attempt_file(&self, job: JobId, attempt: u64, what: &str) -> PathBuf {
        self.state_dir
            .join(format!("{}.{what}", marker(job, attempt)))
    }

    /// The files an attempt reports through, in the state directory.
    fn attempt_files(&self, job: JobId, attempt: u64) -> AttemptFiles {
        AttemptFiles::in_dir(&self.state_dir, &marker(job, attempt))
    }

    /// Where an attempt launched before the daemon kept its files itself reported (in a directory of
    /// its user's own when it ran as another user): read as that user's files, never followed.
    fn legacy_files(&self, launch: &Launch) -> AttemptFiles {
        let stem = marker(launch.job, launch.attempt);
        let (dir, owner) = match launch.run.as_ref().and_then(|r| r.user) {
            Some(user) => (self.state_dir.join(format!("uid-{}", user.uid)), user.uid),
            None => (self.state_dir.clone(), inherit::this_user()),
        };
        AttemptFiles {
            owner,
            ..AttemptFiles::in_dir(&dir, &stem)
        }
    }

    /// Starts the attempt, reporting through `files`; `Refused` when the job can never start (retrying
    /// is pointless), `Failed` when it could not start now (the round puts it back in the queue).
    fn spawn(
        &self,
        launch: &Launch,
        confinement: &Confinement,
        files: &AttemptFiles,
    ) -> Result<(Child, Duration), SpawnError> {
        let Some(run) = &launch.run else {
            return Err(SpawnError::Refused(
                "it has no command: submit real jobs with `elastic-run --daemon`".into(),
            ));
        };
        let stop_timeout = self.stop_timeout(launch);
        let placement = self.hosts.placement_args(&launch.gpus)?;
        // Checked again now, for the user it runs as (by this process, on their behalf): directories
        // on its path may have changed hands since it was submitted. What runs is the file checked,
        // open.
        let submitter = run
            .user
            .map_or_else(Submitter::this_process, |u| Submitter {
                uid: u.uid,
                gid: u.gid,
            });
        // The daemon's own user's files are the operator's: only other users rest.
        let checks = if submitter.uid == inherit::this_user() {
            self.checks.clone()
        } else {
            self.checks
                .resting(SLOW_CHECK, CHECK_SHARE, self.check_rest)
        };
        let checked = check_apart(
            &checks,
            run,
            submitter,
            self.check_patience,
            self.library_path_checked,
        )?;
        let mut handover = files
            .create(launch.batch)
            .map_err(|e| SpawnError::from_io("making the attempt's files".to_owned(), e))?;
        let mut command = Command::new(&self.elastic_run);
        if let Some(user) = run.user {
            use std::os::unix::process::CommandExt;
            command.uid(user.uid).gid(user.gid);
        }
        // The GPUs first: a submitted command never names them (the client refuses --devices).
        // It starts in `/` and enters its working directory and opens its log itself, once it
        // runs: here, between fork and exec, a path of the submitter's that never answers (their
        // FUSE mount) would hold this launch, the executor and the round for good.
        command
            .args(&placement)
            .args(&run.args)
            .current_dir("/")
            .env_clear()
            .envs(&run.env)
            .env(ATTEMPT_VAR, self.attempt_marker(launch.job, launch.attempt))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Only the daemon names these: a submitter's own values are dropped.
        for var in [
            EXIT_FILE_VAR,
            PROGRESS_FILE_VAR,
            inherit::PROGRAM_FD_VAR,
            inherit::PROGRAM_PATH_VAR,
            inherit::SCRIPT_VAR,
            inherit::WORKDIR_VAR,
            inherit::LOG_VAR,
            pool::OFF_VAR,
            pool::POOL_CGROUP_VAR,
            pool::CGROUP_VAR,
        ] {
            command.env_remove(var);
        }
        command.env(inherit::WORKDIR_VAR, &run.cwd);
        if let Some(log) = &run.log {
            command.env(inherit::LOG_VAR, log);
        }
        if let Some(script) = &checked.script {
            command.env(inherit::SCRIPT_VAR, script);
        }
        self.pool_env(&mut command, run, confinement)?;
        // Only the policy chooses a batch and stages.
        for (var, chosen) in [(POLICY_BATCH_VAR, launch.batch), (POLICY_PP_VAR, launch.pp)] {
            match chosen {
                Some(value) => command.env(var, value.to_string()),
                None => command.env_remove(var),
            };
        }
        // A script runs through its (checked) interpreter, by its path: the kernel reads it there.
        let program = checked.program;
        if !program.script {
            handover.add(inherit::PROGRAM_FD_VAR, program.file);
            command.env(inherit::PROGRAM_PATH_VAR, &program.path);
        }
        if let Some(resources) = launch.resources {
            // What each machine's processes share: the whole allotment here; on Slurm, one node's
            // part of it (Slurm binds the CPUs itself).
            let hosts = self.hosts.count(&launch.gpus).max(1) as f64;
            let cpus = match &self.hosts {
                Hosts::Local(_) => confinement.cores.len().max(1),
                Hosts::Slurm(_) => Resources {
                    cpus: resources.cpus / hosts,
                    ..resources
                }
                .cores(),
            };
            command.env(confine::CPUS_VAR, cpus.to_string()).env(
                confine::MEMORY_GB_VAR,
                format!("{:.3}", resources.memory_gb / hosts),
            );
        }
        if !confinement.cores.is_empty() {
            command.env(
                confine::CPU_LIST_VAR,
                confine::core_list(&confinement.cores),
            );
            confine::pin(&mut command, &confinement.cores);
        }
        let _cgroup_procs = [&confinement.cgroup, &confinement.tasks]
            .into_iter()
            .flatten()
            .map(|cgroup| {
                confine::join(&mut command, cgroup)
                    .map_err(|e| SpawnError::from_io(format!("opening {}", cgroup.display()), e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        handover.pass_to(&mut command);
        // Its own session (and so its own process group): the daemon's terminal signals never
        // reach it, it outlives a daemon restart to be re-adopted, and, above all, it has no
        // controlling terminal. In the daemon's session, a job of another user's could open the
        // terminal root started the daemon from (`/dev/tty`) and type commands into it (TIOCSTI)
        // or read what root types.
        // SAFETY: setsid(2) is async-signal-safe, and the child is a new process, no group leader.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().map_err(|e| {
            SpawnError::from_io(format!("starting {}", self.elastic_run.display()), e)
        })?;
        drop(handover);
        Ok((child, stop_timeout))
    }

    /// What a `--spawn pool` launch needs from the daemon: the pool lives as long as the daemon, and
    /// outside the attempts' cgroups (whose ends would end it), while the workers it forks join
    /// their attempt's. A job run as another user than the daemon's cannot keep a pool outside
    /// the attempt's cgroup: its workers start directly.
    fn pool_env(
        &self,
        command: &mut Command,
        run: &RunCommand,
        confinement: &Confinement,
    ) -> Result<(), SpawnError> {
        command.env(pool::OWNER_VAR, std::process::id().to_string());
        let Some(cgroup) = &confinement.cgroup else {
            return Ok(());
        };
        command.env(pool::CGROUP_VAR, cgroup);
        if run.user.is_some_and(|u| u.uid != inherit::this_user()) {
            command.env(
                pool::OFF_VAR,
                "the job runs as another user than the daemon, which cannot keep its pool out of \
                 the attempt's cgroup",
            );
            return Ok(());
        }
        let pools = self
            .cgroups
            .create(&self.pools_cgroup_name(), None)
            .map_err(|e| SpawnError::from_io("making the pools' cgroup".into(), e))?;
        if let Some(pools) = pools {
            command.env(pool::POOL_CGROUP_VAR, pools);
        }
        Ok(())
    }

    /// The cgroup its jobs' warm pools run in, under its cgroups' root.
    fn pools_cgroup_name(&self) -> String {
        format!("{}-pools", self.instance)
    }

    /// How long `launch`'s workers get to checkpoint and exit when stopped: their grace, at most
    /// [`ProcessExecutor::max_grace`], and a margin. (A command elastic-run refuses still starts:
    /// it reports why in its exit file.)
    fn stop_timeout(&self, launch: &Launch) -> Duration {
        let grace = launch.run.as_ref().map_or(Duration::ZERO, |run| {
            crate::cli::parse(&run.args).map_or(Duration::ZERO, |inv| inv.options.grace())
        });
        self.capped_stop_timeout(grace + self.stop_margin)
    }

    /// `stop_timeout`, at most the longest this executor waits for a stop.
    fn capped_stop_timeout(&self, stop_timeout: Duration) -> Duration {
        stop_timeout.min(self.max_grace + self.stop_margin)
    }

    /// The event for a run that exited.
    fn ending(&self, run: &Run, now: f64) -> WorkerEvent {
        let (job, attempt) = (run.launch.job, run.attempt);
        let report = run.files.exit_report().unwrap_or_else(|e| {
            tracing::warn!(job = job.0, error = %e, "elastic-run's report is not readable");
            None
        });
        match report {
            Some(ExitReport { code: 0, .. }) => WorkerEvent::Finished {
                job,
                attempt,
                at: now,
            },
            Some(ExitReport { code, why }) => WorkerEvent::Failed {
                job,
                attempt,
                at: now,
                error: format!("elastic-run exited {code}: {why}"),
                // 2: a user error; 1: elastic-run spent the job's restart budget; 75: stopped by
                // someone else's SIGTERM, with a checkpoint saved, or another elastic-run of the
                // job still held its checkpoints: worth placing again.
                retryable: code == 75,
            },
            None => WorkerEvent::Failed {
                job,
                attempt,
                at: now,
                error: "elastic-run died without reporting (killed?)".into(),
                retryable: true,
            },
        }
    }

    /// Asks `run` to stop: SIGTERM to its `elastic-run` (see `stop_is_over` for what follows).
    /// Whether it was sent.
    fn signal_stop(run: &mut Run) -> bool {
        if run.child.is_none() {
            return run.signal_leader() == Some(true);
        }
        // SAFETY: kill(2) of our child, not reaped (its pid is still its own).
        unsafe { libc::kill(run.pid, libc::SIGTERM) };
        true
    }

    /// Moves `stops` on by one look each at most ([`ProcessExecutor::stop_is_over`]), those of a
    /// user's past their deadline by one scan of that user's processes ([`Kills`]): the jobs, attempts
    /// and saved work of those that are over (their files and leftovers gone), and the stops left.
    fn move_stops_on(&mut self, stops: Vec<Stopping>) -> (Vec<(JobId, u64, f64)>, Vec<Stopping>) {
        let now = Instant::now();
        let mut kills = Kills::past_deadline(&stops, &self.kill_looked_at, now);
        let (mut over, mut left) = (Vec::new(), Vec::new());
        for mut stop in stops {
            if self.stop_is_over(&mut stop, &mut kills, now) {
                let (job, attempt) = (stop.run.launch.job, stop.run.attempt);
                over.push((
                    job,
                    attempt,
                    self.finish_stop(stop.run, stop.asked_at, &mut kills),
                ));
            } else {
                left.push(stop);
            }
        }
        // The next look waits from the end of this one.
        let looked = Instant::now();
        (self.kill_looked_at).retain(|_, at| looked < *at + SCANNED_KILL_LOOK_EVERY);
        (self.kill_looked_at).extend(kills.scanned().map(|owner| (owner, looked)));
        (over, left)
    }

    /// Moves `stop` on at `now` without waiting, with one look at its processes at most (from
    /// `kills`): whether it is over. Before its deadline, once its run exited (our child reaped, or
    /// an adopted run's pinned `elastic-run` ended: an `elastic-run` ends its workers before it
    /// exits). At the deadline every process of the attempt is killed, and the stop is over once
    /// none is left (its cgroup empty, or, without one, a scan of its user's processes, one every
    /// [`SCANNED_KILL_LOOK_EVERY`] per user, finding none). It is given up on (what is left is
    /// swept later) [`KILL_PATIENCE`] after the kill where what was left was seen not to end (or
    /// our child not to be reaped), [`UNANSWERED_KILL_PATIENCE`] after it where its processes did
    /// not answer.
    fn stop_is_over(&mut self, stop: &mut Stopping, kills: &mut Kills, now: Instant) -> bool {
        if !stop.signalled {
            // An adopted run whose elastic-run had not answered when the stop was asked: killed
            // without its SIGTERM it would lose its grace, so nothing is done until it answers.
            match stop.run.signal_leader() {
                Some(true) => stop.signalled_at(now),
                Some(false) => return true,
                None => {}
            }
            return false;
        }
        match stop.killed_at {
            None if now < stop.deadline => stop.run.ended() == Some(true),
            // The attempt is killed, and the stop ends or is given up on, only at a look.
            _ if !kills.look_due(stop) => false,
            None => Self::kill_at_deadline(stop, kills, now),
            Some(killed_at) => self.killed_stop_is_over(stop, kills, killed_at, now),
        }
    }

    /// SIGKILL to every process of `stop`'s attempt, its deadline passed: whether the stop is over
    /// (its run had ended), else what is left is looked at from the next look.
    fn kill_at_deadline(stop: &mut Stopping, kills: &mut Kills, now: Instant) -> bool {
        // Our child's end costs no scan; an adopted run's look goes to the kill.
        if stop.run.child.is_some() && stop.run.ended() == Some(true) {
            return true;
        }
        let found_none = kills.kill(&stop.run.marker, &stop.run.confinement);
        let run = &mut stop.run;
        match &mut run.child {
            Some(child) => {
                let _ = child.kill();
            }
            // Not our child: killed once its processes answer.
            None if found_none.is_none() => return false,
            None if found_none == Some(true) => return true,
            None => {}
        }
        tracing::warn!(
            job = run.launch.job.0,
            "the workers outlived the stop timeout; killed them"
        );
        stop.killed_at = Some(now);
        false
    }

    /// Whether `stop`, whose attempt was killed at `killed_at`, is over: once nothing of it is
    /// left, not once its elastic-run has ended. SIGKILL lands asynchronously, and workers tearing
    /// down their GPU contexts outlive their launcher, on GPUs the stop hands on.
    fn killed_stop_is_over(
        &mut self,
        stop: &mut Stopping,
        kills: &mut Kills,
        killed_at: Instant,
        now: Instant,
    ) -> bool {
        // While our child lives (held in the kernel), nothing else could end the stop. (Not our
        // child: nothing to reap, and the sweep is its look.)
        if stop.run.child.is_none() || stop.run.ended() == Some(true) {
            // Killed again at each look, which catches a process forked meanwhile.
            let found_none = kills.kill(&stop.run.marker, &stop.run.confinement);
            match found_none {
                Some(true) => return true,
                // A scan that did not answer tells nothing (its user's scans rest a while after
                // slow ones): the stop waits for one that does, for a while.
                None if now < killed_at + UNANSWERED_KILL_PATIENCE => return false,
                None | Some(false) => {}
            }
        }
        if now < killed_at + KILL_PATIENCE {
            return false;
        }
        let run = &mut stop.run;
        tracing::error!(
            job = run.launch.job.0,
            pid = run.pid,
            "the attempt's processes have not all been seen to end {} s after SIGKILL: the kernel \
             holds them, or their user's processes do not answer a look, most likely waiting on a \
             file system that does not answer (the job's own FUSE mount, say); the stop goes on \
             without them, and they are swept later",
            now.saturating_duration_since(killed_at).as_secs()
        );
        self.unreaped.extend(run.child.take());
        true
    }

    /// What a stop that is over comes to: the work its workers saved. Its files and whatever it
    /// left behind go.
    fn finish_stop(&mut self, mut run: Run, now: f64, kills: &mut Kills) -> f64 {
        // The workers' last report: their checkpoint on the way out.
        run.progressed();
        tracing::info!(
            job = run.launch.job.0,
            seconds = run.launched.elapsed().as_secs_f64(),
            "workers stopped"
        );
        run.forget();
        self.release_with(&run.marker, &run.confinement, kills);
        run.work_done(now)
    }

    /// Whether `job`'s last attempt is still stopping (in the background).
    fn still_stopping(&self, job: JobId) -> bool {
        self.stopping.iter().any(|s| s.run.launch.job == job)
    }

    /// The attempts it runs or still stops.
    fn attempts(&self) -> impl Iterator<Item = &Run> {
        self.runs
            .values()
            .chain(self.stopping.iter().map(|s| &s.run))
    }

    /// Ends what an earlier life of this executor left that no attempt it runs accounts for (the
    /// control plane re-adopted what it knows before the first poll): attempts whose run files
    /// remain (one stopped in the background when the daemon died, whose workers would hold GPUs
    /// the control plane gives to others), and on Slurm, steps whose `elastic-run` died with the
    /// daemon or that the journal never knew.
    fn sweep_orphans(&mut self) {
        self.swept = true;
        self.end_unaccounted_attempts();
        if matches!(self.hosts, Hosts::Slurm(_)) {
            self.slurm_queue = QueueSweep::Due;
        }
    }

    /// Kills the processes of every attempt with a run file in the state directory that no attempt
    /// it runs or stops accounts for, and removes its files. (Its checkpoint in progress, if it
    /// was stopping, is lost: the job resumes from the last one its workers saved whole.)
    fn end_unaccounted_attempts(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.state_dir) else {
            return;
        };
        let known: Vec<String> = self
            .attempts()
            .map(|r| marker(r.launch.job, r.attempt))
            .collect();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".run")) else {
                continue;
            };
            if known.iter().any(|k| k == stem) {
                continue;
            }
            let path = entry.path();
            // The state directory is the daemon's own (private): its run files are its own.
            let record: Option<RunRecord> = std::fs::read(&path)
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok());
            tracing::warn!(
                attempt = stem,
                "ending an attempt an earlier life of this daemon left, which no job accounts for"
            );
            // A run file it cannot read: its processes by this executor's marker for the name.
            let (marker, confinement, files) = match record {
                // Run files of before it named the executor: the attempt's own name.
                Some(r) => (
                    r.marker.unwrap_or_else(|| stem.to_owned()),
                    r.confinement,
                    r.files,
                ),
                None => (
                    format!("{}-{stem}", self.instance),
                    Confinement::default(),
                    None,
                ),
            };
            if !Self::sweep_once(&marker, &confinement, &mut Kills::default()) {
                self.linger(marker, confinement);
            }
            if let Some(files) = files {
                files.remove();
            }
            let _ = std::fs::remove_file(&path);
        }
    }

    /// Lists Slurm's queue when due (a thread that cannot start now is tried again at the next
    /// poll), and once it is in, starts cancelling this executor's jobs there that no attempt
    /// accounts for (an attempt launched since the listing began accounts for its own), by id and
    /// whoever's they are (another user's attempts run as them), without waiting for `scancel`:
    /// the children are reaped at later polls.
    fn cancel_unaccounted_steps(&mut self) {
        let listing = match std::mem::replace(&mut self.slurm_queue, QueueSweep::Done) {
            QueueSweep::Listing(listing) if listing.is_finished() => listing,
            QueueSweep::Due => {
                let listing = std::thread::Builder::new()
                    .name("gangway-squeue".into())
                    .spawn(crate::slurm::queue);
                self.slurm_queue = match listing {
                    Ok(listing) => QueueSweep::Listing(listing),
                    Err(error) => {
                        tracing::warn!(%error, "starting to list Slurm's queue");
                        QueueSweep::Due
                    }
                };
                return;
            }
            waiting => {
                self.slurm_queue = waiting;
                return;
            }
        };
        let jobs = match listing.join() {
            Ok(Ok(jobs)) => jobs,
            Ok(Err(error)) => {
                tracing::warn!(%error, "listing Slurm's jobs to cancel orphans");
                return;
            }
            Err(_) => {
                tracing::warn!("listing Slurm's jobs to cancel orphans panicked");
                return;
            }
        };
        let prefix = slurm_job_name(&format!("{}-", self.instance));
        let known: Vec<String> = self.attempts().map(|r| slurm_job_name(&r.marker)).collect();
        for (id, name) in jobs {
            if name.starts_with(&prefix) && !known.contains(&name) {
                tracing::warn!(slurm_job = %id, %name, "cancelling a Slurm job no attempt accounts for");
                match crate::slurm::start_cancel_id(&id) {
                    Ok(scancel) => self.unreaped.push(scancel),
                    Err(error) => tracing::warn!(%error, %name, "starting scancel for an orphan"),
                }
            }
        }
    }
}

impl Executor for ProcessExecutor {
    fn launch(&mut self, launch: &Launch, now: f64) -> Result<(), ExecutorError> {
        match self.runs.get(&launch.job) {
            Some(run) if run.attempt == launch.attempt => return Ok(()),
            Some(old) => {
                // The control plane stops a job before starting it again; never leave one running.
                tracing::warn!(
                    job = launch.job.0,
                    attempt = old.attempt,
                    "a new attempt replaces a running one; stopping it"
                );
                let _ = self.stop(launch.job, now);
            }
            None => {}
        }
        // Two attempts of a job never run at once (they would share its checkpoints).
        if self.still_stopping(launch.job) {
            return Err(ExecutorError::StillStopping(launch.job));
        }
        let run_file = self.attempt_file(launch.job, launch.attempt, "run");
        let marker = self.attempt_marker(launch.job, launch.attempt);
        let files = self.attempt_files(launch.job, launch.attempt);
        let record = |pid: i32, stop_timeout: Duration, confinement: &Confinement| RunRecord {
            pid,
            launched_at: now,
            stop_timeout,
            launch: launch.clone(),
            confinement: confinement.clone(),
            marker: Some(marker.clone()),
            files: Some(files.clone()),
        };
        let spawned = self.confine(launch).and_then(|confinement| {
            // Written before the spawn too (pid 0: not known yet), so that a daemon killed in
            // between finds the attempt by its marker rather than leave it running unknown.
            let stop_timeout = self.stop_timeout(launch);
            write_run_file(&run_file, &record(0, stop_timeout, &confinement));
            match self.spawn(launch, &confinement, &files) {
                Ok(spawned) => Ok((spawned, confinement)),
                Err(e) => {
                    let _ = std::fs::remove_file(&run_file);
                    files.remove();
                    self.release(&marker, &confinement);
                    Err(e)
                }
            }
        });
        match spawned {
            Ok(((child, stop_timeout), confinement)) => {
                write_run_file(
                    &run_file,
                    &record(child.id() as i32, stop_timeout, &confinement),
                );
                let run = Run {
                    attempt: launch.attempt,
                    stop_timeout,
                    pid: child.id() as i32,
                    child: Some(child),
                    leader: None,
                    allotment_due: None,
                    files: files.clone(),
                    run_file,
                    launched: Instant::now(),
                    launched_at: now,
                    launch: launch.clone(),
                    reported: None,
                    unreadable: false,
                    confinement,
                    marker: self.attempt_marker(launch.job, launch.attempt),
                };
                self.runs.insert(launch.job, run);
                Ok(())
            }
            Err(SpawnError::Failed(reason)) => Err(ExecutorError::Launch {
                job: launch.job,
                reason,
            }),
            Err(SpawnError::Host(reason)) => Err(ExecutorError::Later {
                job: launch.job,
                reason,
                after: HOST_RETRY.as_secs_f64(),
            }),
            Err(SpawnError::Later(reason, after)) => Err(ExecutorError::Later {
                job: launch.job,
                reason,
                after: after.as_secs_f64(),
            }),
            // Retrying cannot help: the job fails, and says why.
            Err(SpawnError::Refused(reason)) => {
                tracing::warn!(job = launch.job.0, %reason, "cannot launch");
                self.pending.push(WorkerEvent::Failed {
                    job: launch.job,
                    attempt: launch.attempt,
                    at: now,
                    error: reason,
                    retryable: false,
                });
                Ok(())
            }
        }
    }

    fn stop(&mut self, job: JobId, now: f64) -> Result<f64, ExecutorError> {
        self.stop_many(&[job], now).remove(0).1
    }

    fn stop_many(&mut self, jobs: &[JobId], now: f64) -> Vec<(JobId, Result<f64, ExecutorError>)> {
        let mut stopping = Vec::new();
        let mut answers = Vec::new();
        for &job in jobs {
            match self.runs.remove(&job) {
                Some(mut run) => {
                    let signalled = Self::signal_stop(&mut run);
                    stopping.push((run, signalled));
                }
                None => answers.push((job, Err(ExecutorError::NotRunning(job)))),
            }
        }
        let began = Instant::now();
        let mut stopping: Vec<Stopping> = stopping
            .into_iter()
            .map(|(run, signalled)| Stopping {
                deadline: began + run.stop_timeout,
                run,
                asked_at: now,
                killed_at: None,
                signalled,
            })
            .collect();
        // The stops of one batch wait together, for the slowest, up to the patience.
        loop {
            let over;
            (over, stopping) = self.move_stops_on(stopping);
            answers.extend(over.into_iter().map(|(job, _, steps)| (job, Ok(steps))));
            if stopping.is_empty() || began.elapsed() >= self.stop_patience {
                break;
            }
            // A resize waits on this: look often (a wait, or a read of one process's files).
            std::thread::sleep(Duration::from_millis(20));
        }
        for stop in stopping {
            let job = stop.run.launch.job;
            tracing::warn!(
                job = job.0,
                patience = self.stop_patience.as_secs_f64(),
                "the workers are still checkpointing; their stop goes on without holding the round"
            );
            answers.push((job, Err(ExecutorError::StillStopping(job))));
            self.stopping.push(stop);
        }
        answers
    }

    fn retune(&mut self, job: JobId, _steps_per_second: f64, _pace: &[Segment], _now: f64) {
        // Real workers set their own pace; packing partners are not supported for processes.
        tracing::debug!(job = job.0, "retune ignored by the process executor");
    }

    fn rebatch(&mut self, job: JobId, batch: u32) {
        let Some(run) = self.runs.get(&job) else {
            return;
        };
        // Only a job launched with a chosen batch reads one.
        if run.launch.batch.is_none_or(|b| b == batch) {
            return;
        }
        if let Err(e) = run.files.write_batch(batch) {
            tracing::warn!(job = job.0, error = %e, "passing a retuned batch");
            return;
        }
        if let Some(run) = self.runs.get_mut(&job) {
            run.launch.batch = Some(batch);
            run.save_record();
        }
    }

    fn reallot(&mut self, job: JobId, resources: Resources) {
        let Some(run) = self.runs.get_mut(&job) else {
            return;
        };
        if run.launch.resources.is_none() {
            return;
        }
        run.allotment_due = Some(resources);
        if !self.allot(job) {
            tracing::warn!(
                job = job.0,
                "its processes do not answer: it keeps its cores until they do"
            );
        }
    }

    fn alive(&mut self, job: JobId, attempt: u64) -> bool {
        if self.runs.get(&job).is_some_and(|r| r.attempt == attempt) {
            return true;
        }
        let record: Option<RunRecord> = std::fs::read(self.attempt_file(job, attempt, "run"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        // Alive, or ended while the daemon was down with its exit file written: adopted either
        // way, and the next poll reports the ending.
        let Some(mut record) = record else {
            return false;
        };
        let files = record
            .files
            .take()
            .unwrap_or_else(|| self.legacy_files(&record.launch));
        let mut run = Run {
            attempt,
            stop_timeout: self.capped_stop_timeout(record.stop_timeout),
            child: None,
            // 0 where the daemon stopped between writing the record and learning the pid: the
            // run then finds its `elastic-run` by marker (see `Run::leader_gone`).
            pid: record.pid,
            leader: None,
            allotment_due: None,
            files,
            run_file: self.attempt_file(job, attempt, "run"),
            launched: Instant::now(),
            launched_at: record.launched_at,
            launch: record.launch,
            reported: None,
            unreadable: false,
            confinement: record.confinement,
            marker: record.marker.unwrap_or_else(|| marker(job, attempt)),
        };
        // Adopted while its processes do not answer (it is signalled only once they do, and
        // launched again only once they answer that it is gone).
        if run.leader_gone() == Some(true) && !run.files.ended() {
            return false;
        }
        self.cores.hold(&run.confinement.cores);
        self.runs.insert(job, run);
        true
    }

    fn poll(&mut self, now: f64) -> Vec<WorkerEvent> {
        if !self.swept {
            self.sweep_orphans();
        }
        self.cancel_unaccounted_steps();
        let mut events = std::mem::take(&mut self.pending);
        self.unreaped
            .retain_mut(|child| matches!(child.try_wait(), Ok(None)));
        events.extend(self.runs.values_mut().filter_map(Run::progressed));
        let exited: Vec<JobId> = self
            .runs
            .iter_mut()
            .filter_map(|(&job, run)| run.exited().then_some(job))
            .collect();
        for job in exited {
            let run = self.runs.remove(&job).expect("listed");
            events.push(self.ending(&run, now));
            run.forget();
            self.release(&run.marker, &run.confinement);
        }
        let stopping = std::mem::take(&mut self.stopping);
        let (over, left) = self.move_stops_on(stopping);
        self.stopping = left;
        events.extend(
            over.into_iter()
                .map(|(job, attempt, steps_done)| WorkerEvent::Stopped {
                    job,
                    attempt,
                    steps_done,
                }),
        );
        self.sweep_lingering();
        // Allotments its processes did not answer for (each try a scan, refused at once while
        // they rest).
        let due: Vec<JobId> = (self.runs.iter())
            .filter_map(|(&job, run)| run.allotment_due.is_some().then_some(job))
            .collect();
        for job in due {
            self.allot(job);
        }
        events
    }

    fn next_event(&self) -> Option<f64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One scan of a user's processes kills every attempt of theirs due in a pass, and the others'
    /// kills read what it found (a fresh scan would find none of theirs left).
    #[test]
    fn a_pass_kills_a_users_attempts_by_one_scan() {
        use std::os::unix::process::ExitStatusExt;
        /// Children SIGKILLed and reaped when dropped (a failed assertion leaves none behind).
        struct Reaped(Vec<Child>);
        impl Drop for Reaped {
            fn drop(&mut self) {
                for child in &mut self.0 {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        let confinement = Confinement {
            owner: Some(crate::inherit::this_user()),
            ..Confinement::default()
        };
        let markers = ["first", "second"].map(|m| format!("kills-test-{m}-{}", std::process::id()));
        let mut children = Reaped(
            (markers.iter())
                .map(|marker| {
                    Command::new("sleep")
                        .arg("30")
                        .env(ATTEMPT_VAR, marker)
                        .spawn()
                        .unwrap()
                })
                .collect(),
        );
        // Each carries its marker once its exec is done.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(markers.iter())
            .all(|m| attempt_processes(m, &confinement).is_some_and(|p| p.len() == 1))
        {
            assert!(Instant::now() < deadline, "the children never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut kills = Kills::of(markers.iter().map(|m| (m.as_str(), &confinement)), |_| true);
        assert!(!kills.scanned_for(&markers[1], &confinement));
        // Not asked again on `None`: a scan that outlasts its patience still kills both.
        assert_eq!(
            kills.kill(&markers[0], &confinement),
            Some(false),
            "the first attempt's process was not found (None: the scan outlasted its patience)"
        );
        assert!(kills.scanned_for(&markers[1], &confinement));
        // Both were killed by that one scan: the second, too, before its own kill was asked for.
        for child in &mut children.0 {
            assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        }
        assert_eq!(kills.kill(&markers[1], &confinement), Some(false));
        assert_eq!(kill_attempt(&markers[1], &confinement), Some(true));
    }

    /// An attempt's `elastic-run` is found by marker as the oldest marked process leading its
    /// group, not a process it started that leads a group or session of its own (its guardian,
    /// torchrun, a worker).
    #[test]
    fn the_marked_leader_is_the_oldest_group_leader_of_the_attempt() {
        use std::os::unix::process::CommandExt;
        let marker = format!("leader-test-{}", std::process::id());
        let mut elastic_run = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 30 & wait"])
            .env(ATTEMPT_VAR, &marker)
            .process_group(0)
            .spawn()
            .unwrap();
        let confinement = Confinement {
            owner: Some(crate::inherit::this_user()),
            ..Confinement::default()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let found = loop {
            let pids = attempt_processes(&marker, &confinement).unwrap_or_default();
            if pids.len() == 2 {
                break marked_leader(&marker, &confinement);
            }
            assert!(
                Instant::now() < deadline,
                "its child never started: {pids:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        for pid in attempt_processes(&marker, &confinement).unwrap_or_default() {
            // SAFETY: kill(2) of a process this test started (it carries the test's marker).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = elastic_run.wait();
        assert_eq!(found, Some(Some(elastic_run.id() as i32)));
    }

    #[test]
    fn slurm_gangs_run_on_their_nodes_and_only_evenly() {
        let hosts = Hosts::Slurm(["a", "a", "b", "b", "c"].map(String::from).to_vec());
        let gpus = |ids: &[u32]| ids.iter().map(|&g| GpuId(g)).collect::<Vec<_>>();
        let Ok(args) = hosts.placement_args(&gpus(&[0, 1, 2, 3])) else {
            panic!("an even gang runs")
        };
        assert_eq!(
            args,
            ["--backend", "slurm", "--nodes", "2", "--nodelist", "a,b"]
        );
        assert_eq!(hosts.count(&gpus(&[0, 1, 2, 3])), 2);
        // 2 on a, 1 on c: back to the queue, not a failure of the job.
        assert!(matches!(
            hosts.placement_args(&gpus(&[0, 1, 4])),
            Err(SpawnError::Failed(why)) if why.contains("2 on a, 1 on c")
        ));
        let local = Hosts::Local(vec![3, 5]);
        assert!(matches!(local.placement_args(&gpus(&[1])), Ok(a) if a == ["--devices", "5"]));
        assert!(matches!(
            local.placement_args(&gpus(&[2])),
            Err(SpawnError::Refused(_))
        ));
    }
}
