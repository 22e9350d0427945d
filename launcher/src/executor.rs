//! The control plane's [`Executor`] over real processes, so that `gangway serve` runs real jobs.
//!
//! Each start of a job is one `elastic-run` child, on exactly the GPUs the round gave it
//! (`--devices`), with the job's command, working directory and environment as submitted. So a job
//! under the daemon gets everything it gets alone: the worker contract, cooperative preemption,
//! hang detection, and its restart budget.
//!
//! - **Stop** is SIGTERM to that `elastic-run`: the workers save a checkpoint and exit within its
//!   `--grace`. A stop that outlasts `stop_timeout` kills every process of the attempt.
//! - **Resize and migration** are a stop, then a launch on other GPUs: a new torchrun with a new
//!   rendezvous that resumes from the checkpoint, at the world size the new GPUs allow.
//! - **Endings** come from the exit file `elastic-run` writes: completed, a user error, or a crash
//!   beyond its restart budget. A launch that died without one (killed) is a crash worth retrying.
//! - **Re-adoption**: the children run in their own process groups and outlive the daemon; every
//!   process of an attempt carries [`ATTEMPT_VAR`] in its environment, and a restarted daemon finds
//!   them by it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gangway_actors::executor::{Executor, ExecutorError, Launch, WorkerEvent};
use gangway_core::job::JobId;
use serde::{Deserialize, Serialize};

use crate::process::processes_with_env;

/// Marks every process of one attempt: `JOB.ATTEMPT`.
pub const ATTEMPT_VAR: &str = "GANGWAY_ATTEMPT";
/// Where `elastic-run` writes its [`ExitReport`] before it exits.
pub const EXIT_FILE_VAR: &str = "GANGWAY_EXIT_FILE";

/// How an `elastic-run` ended, as it writes it to `$GANGWAY_EXIT_FILE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitReport {
    /// Its exit code: 0 completed, 2 user error, 75 preempted, 1 crashed beyond its budget.
    pub code: i32,
    pub why: String,
}

impl ExitReport {
    /// Writes the report atomically (temporary file, then rename).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let temp = path.with_extension("tmp");
        std::fs::write(
            &temp,
            serde_json::to_vec(self).map_err(std::io::Error::other)?,
        )?;
        std::fs::rename(temp, path)
    }
}

/// What a restarted daemon needs to re-adopt an attempt, kept in its run file.
#[derive(Serialize, Deserialize)]
struct RunRecord {
    pid: i32,
    launched_at: f64,
    launch: Launch,
}

/// One running attempt.
struct Run {
    attempt: u64,
    /// `None` for an attempt re-adopted after a restart (not our child).
    child: Option<Child>,
    pid: i32,
    exit_file: PathBuf,
    launched: Instant,
    launched_at: f64,
    launch: Launch,
}

impl Run {
    /// Work done by control-plane time `now`, as the scheduler counts it: real steps are the
    /// script's business, and the checkpoint on disk is what the next launch resumes from.
    fn work_done(&self, now: f64) -> f64 {
        let l = &self.launch;
        let done_at_launch = l.total_steps - l.remaining_steps;
        let running = (now - self.launched_at - l.startup_seconds).max(0.0);
        // Never all of it: only the workers' own exit finishes a job.
        (done_at_launch + running * l.steps_per_second).min(l.total_steps * 0.999)
    }

    fn exited(&mut self) -> bool {
        match &mut self.child {
            Some(child) => !matches!(child.try_wait(), Ok(None)),
            None => !process_has(self.pid, &self.marker()),
        }
    }

    fn marker(&self) -> String {
        marker(self.launch.job, self.attempt)
    }

    /// Removes the attempt's files once its ending is known.
    fn forget(&self) {
        let _ = std::fs::remove_file(&self.exit_file);
        let _ = std::fs::remove_file(self.exit_file.with_extension("run"));
    }
}

fn marker(job: JobId, attempt: u64) -> String {
    format!("{}.{attempt}", job.0)
}

/// Whether `pid` is alive and carries the attempt's marker (not a reused pid).
fn process_has(pid: i32, marker: &str) -> bool {
    let needle = format!("{ATTEMPT_VAR}={marker}");
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == needle.as_bytes()))
}

/// Runs each job as an `elastic-run` child process on this machine.
pub struct ProcessExecutor {
    elastic_run: PathBuf,
    /// The device index of each control-plane GPU id.
    devices: Vec<u32>,
    /// Exit files and run files, one per attempt.
    state_dir: PathBuf,
    /// How long a stop may take before the attempt's processes are killed.
    pub stop_timeout: Duration,
    runs: HashMap<JobId, Run>,
    /// Events found outside `poll` (a launch refused before it ran).
    pending: Vec<WorkerEvent>,
}

impl ProcessExecutor {
    /// `devices[g]` is the device index of GPU id `g`; `state_dir` keeps one exit file and one run
    /// file per attempt.
    pub fn new(
        elastic_run: PathBuf,
        devices: Vec<u32>,
        state_dir: PathBuf,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(&state_dir)?;
        Ok(ProcessExecutor {
            elastic_run,
            devices,
            state_dir,
            stop_timeout: Duration::from_secs(300),
            runs: HashMap::new(),
            pending: Vec::new(),
        })
    }

    fn attempt_file(&self, job: JobId, attempt: u64, what: &str) -> PathBuf {
        self.state_dir
            .join(format!("{}.{what}", marker(job, attempt)))
    }

    fn spawn(&self, launch: &Launch) -> Result<Child, String> {
        let Some(run) = &launch.run else {
            return Err("it has no command: submit real jobs with `elastic-run --daemon`".into());
        };
        let mut devices = Vec::new();
        for gpu in launch.gpus.iter() {
            let device = self
                .devices
                .get(gpu.0 as usize)
                .ok_or_else(|| format!("GPU {} has no device on this machine", gpu.0))?;
            devices.push(device.to_string());
        }
        let (out, err) = match &run.log {
            Some(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("opening the log {}: {e}", path.display()))?;
                let copy = file.try_clone().map_err(|e| e.to_string())?;
                (Stdio::from(file), Stdio::from(copy))
            }
            None => (Stdio::null(), Stdio::null()),
        };
        let exit_file = self.attempt_file(launch.job, launch.attempt, "exit");
        let _ = std::fs::remove_file(&exit_file);
        let mut command = Command::new(&self.elastic_run);
        // The GPUs first: a submitted command never names them (the client refuses --devices).
        command
            .arg("--devices")
            .arg(devices.join(","))
            .args(&run.args)
            .current_dir(&run.cwd)
            .env_clear()
            .envs(&run.env)
            .env(ATTEMPT_VAR, marker(launch.job, launch.attempt))
            .env(EXIT_FILE_VAR, &exit_file)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // Its own process group: the daemon's terminal signals never reach it, and it outlives a
        // daemon restart to be re-adopted.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        command
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.elastic_run.display()))
    }

    /// The event for a run that exited.
    fn ending(&self, run: &Run, now: f64) -> WorkerEvent {
        let (job, attempt) = (run.launch.job, run.attempt);
        let report: Option<ExitReport> = std::fs::read(&run.exit_file)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
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
                // someone else's SIGTERM, with a checkpoint saved, so worth placing again.
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

    /// Stops every process of `run`: SIGTERM to `elastic-run`, then, after `stop_timeout`,
    /// SIGKILL to everything carrying the attempt's marker.
    fn signal_stop(run: &Run) {
        // SAFETY: kill(2) on the pid we started; at worst it is gone already.
        unsafe { libc::kill(run.pid, libc::SIGTERM) };
    }

    fn wait_stopped(&self, run: &mut Run, deadline: Instant) {
        while !run.exited() {
            if Instant::now() >= deadline {
                tracing::warn!(
                    job = run.launch.job.0,
                    "the workers outlived the stop timeout; killing them"
                );
                kill_marked(&run.marker());
                if let Some(child) = &mut run.child {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Whatever it left behind (it never should).
        kill_marked(&run.marker());
    }
}

/// SIGKILLs every process carrying the attempt's marker.
fn kill_marked(marker: &str) {
    for _ in 0..50 {
        let pids = processes_with_env(ATTEMPT_VAR, marker);
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // SAFETY: kill(2) on a pid just read from /proc.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Executor for ProcessExecutor {
    fn launch(&mut self, launch: &Launch, now: f64) -> Result<(), ExecutorError> {
        if self
            .runs
            .get(&launch.job)
            .is_some_and(|r| r.attempt == launch.attempt)
        {
            return Ok(());
        }
        match self.spawn(launch) {
            Ok(child) => {
                let record = RunRecord {
                    pid: child.id() as i32,
                    launched_at: now,
                    launch: launch.clone(),
                };
                let run_file = self.attempt_file(launch.job, launch.attempt, "run");
                if let Err(e) = serde_json::to_vec(&record)
                    .map_err(std::io::Error::other)
                    .and_then(|bytes| std::fs::write(&run_file, bytes))
                {
                    tracing::warn!(error = %e, "writing {}: a restarted daemon cannot re-adopt it", run_file.display());
                }
                let run = Run {
                    attempt: launch.attempt,
                    pid: child.id() as i32,
                    child: Some(child),
                    exit_file: self.attempt_file(launch.job, launch.attempt, "exit"),
                    launched: Instant::now(),
                    launched_at: now,
                    launch: launch.clone(),
                };
                self.runs.insert(launch.job, run);
                Ok(())
            }
            // The GPUs are fine and retrying cannot help: the job fails, and says why.
            Err(reason) => {
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
                Some(run) => {
                    Self::signal_stop(&run);
                    stopping.push(run);
                }
                None => answers.push((job, Err(ExecutorError::NotRunning(job)))),
            }
        }
        let deadline = Instant::now() + self.stop_timeout;
        for mut run in stopping {
            self.wait_stopped(&mut run, deadline);
            tracing::info!(
                job = run.launch.job.0,
                seconds = run.launched.elapsed().as_secs_f64(),
                "workers stopped"
            );
            run.forget();
            answers.push((run.launch.job, Ok(run.work_done(now))));
        }
        answers
    }

    fn retune(&mut self, job: JobId, _steps_per_second: f64, _now: f64) {
        // Real workers set their own pace; packing partners are not supported for processes.
        tracing::debug!(job = job.0, "retune ignored by the process executor");
    }

    fn alive(&mut self, job: JobId, attempt: u64) -> bool {
        if self.runs.get(&job).is_some_and(|r| r.attempt == attempt) {
            return true;
        }
        let record: Option<RunRecord> = std::fs::read(self.attempt_file(job, attempt, "run"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let Some(record) = record.filter(|r| process_has(r.pid, &marker(job, attempt))) else {
            return false;
        };
        self.runs.insert(
            job,
            Run {
                attempt,
                child: None,
                pid: record.pid,
                exit_file: self.attempt_file(job, attempt, "exit"),
                launched: Instant::now(),
                launched_at: record.launched_at,
                launch: record.launch,
            },
        );
        true
    }

    fn poll(&mut self, now: f64) -> Vec<WorkerEvent> {
        let mut events = std::mem::take(&mut self.pending);
        let exited: Vec<JobId> = self
            .runs
            .iter_mut()
            .filter_map(|(&job, run)| run.exited().then_some(job))
            .collect();
        for job in exited {
            let run = self.runs.remove(&job).expect("listed");
            kill_marked(&run.marker());
            events.push(self.ending(&run, now));
            run.forget();
        }
        events
    }

    fn next_event(&self) -> Option<f64> {
        None
    }
}
