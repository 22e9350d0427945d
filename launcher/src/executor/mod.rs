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
//!
//! This module holds the executor's state and its [`Executor`] face; its parts hold what it does:
//! `command` (a command's checks, at submission and at every launch), `launch` (an attempt's
//! confinement, files and `elastic-run`), `attempt` (one attempt's processes and record),
//! `stops` (a stop from SIGTERM to the last process gone), `kills` (one pass's kills, one scan
//! per user), `sweeps` (what ended attempts, and an earlier life of the daemon, left), `hosts`
//! (this machine's GPUs or Slurm's nodes) and `contract` (what `elastic-run` and the daemon tell
//! each other).

mod attempt;
mod command;
mod contract;
mod hosts;
mod kills;
mod launch;
mod stops;
mod sweeps;

pub use command::{CheckedCommand, check_command, checked_command};
pub(crate) use contract::write_atomically;
pub use contract::{
    ATTEMPT_VAR, EXIT_FILE_VAR, ExitReport, POLICY_BATCH_VAR, POLICY_PP_VAR, PROGRESS_FILE_VAR,
    reported,
};
pub use hosts::{Hosts, slurm_job_name};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use gangway_protocol::ids::JobId;
use gangway_protocol::worker::{Executor, ExecutorError, Launch, Resources, Segment, WorkerEvent};
use serde::{Deserialize, Serialize};

use self::attempt::write_run_file;
use self::launch::SpawnError;
use crate::apart::Apart;
use crate::confine::{self, Cgroups, CorePool};
use crate::inherit::{self, AttemptFiles};
use crate::process::{Owner, Pinned};

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
    /// ([`gangway_protocol::command::check_library_path`]; default true): false where the operator lets jobs set it unchecked
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
    /// When each user's processes were last scanned for stops past their deadline ([`kills::Kills`]).
    kill_looks: kills::KillLooks,
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
            kill_looks: kills::KillLooks::default(),
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
