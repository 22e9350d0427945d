//! The run loop of both backends: torchrun on this machine's GPUs (or fake ones), or one torchrun agent
//! per node through Slurm; relaunched from the last checkpoint after a crash or a hang, and stopped
//! cooperatively on request.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gangway_elastic::{BatchPlan, HostOffer, JobSpec, Plan, plan};

use crate::cli::{Invocation, Spawn};
use crate::exit::{Verdict, classify};
use crate::inherit::{Inherited, Program, REPORT_LIMIT, python_command, read_private, this_user};
use crate::process::Launch;
use crate::slurm::{self, Allocation};
use crate::spawn;

/// Where a run's workers go.
#[derive(Clone, Debug)]
pub enum Target {
    /// These GPUs (device indices) of this machine.
    Local(Vec<u32>),
    /// These Slurm nodes.
    Slurm(Allocation),
}

impl Target {
    /// Whether torchrun's agent starts a launch's workers here: elastic-run starts them itself
    /// only on this machine, and only when asked to (`--spawn direct` or `pool`).
    fn runs_torchrun(&self, spawn: Spawn) -> bool {
        !(matches!(self, Target::Local(_)) && spawn.is_agentless())
    }

    fn offer(&self) -> Vec<HostOffer> {
        match self {
            Target::Local(gpus) => vec![HostOffer::new("localhost", gpus.iter().copied())],
            Target::Slurm(allocation) => allocation.offer(),
        }
    }

    fn gpus(&self) -> usize {
        self.offer().iter().map(|o| o.gpus.len()).sum()
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The workers finished the job.
    Completed,
    /// Stopped on request after the workers saved a checkpoint; running the same command resumes.
    Preempted,
    /// A user error (not retried) or crashes beyond the restart budget.
    Failed {
        /// The launcher's exit code: 2 for a user error, 1 otherwise (crashes beyond the budget, or
        /// a job the daemon reports failed or cancelled).
        code: i32,
        /// Why, in words.
        why: String,
    },
}

impl Ending {
    /// The launcher's exit code: 0 done, 75 (EX_TEMPFAIL) preempted, else the failure's.
    pub fn exit_code(&self) -> i32 {
        match self {
            Ending::Completed => 0,
            Ending::Preempted => 75,
            Ending::Failed { code, .. } => *code,
        }
    }
}

impl std::fmt::Display for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ending::Completed => f.write_str("completed"),
            Ending::Preempted => f.write_str("stopped with a checkpoint"),
            Ending::Failed { why, .. } => f.write_str(why),
        }
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The machine has no GPUs to run on, and no `--fake-gpus` stands in for them.
    #[error("no GPUs: pass --fake-gpus N on a machine without any")]
    NoGpus,
    /// The job's parallel layout does not fit the GPUs it was given.
    #[error("cannot plan the job on {gpus} GPUs: {cause}")]
    Plan {
        /// GPUs offered.
        gpus: usize,
        /// Why the planner refused them.
        cause: gangway_elastic::PlanError,
    },
    /// A file or process the launch needs could not be made or started.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done (`creating DIR`, `starting the workers`).
        what: String,
        /// What the system said.
        cause: std::io::Error,
    },
    /// The daemon could not be reached or refused the job, or what it passed a launch (its choice of
    /// batch or pipeline stages) is not one the job allows.
    #[error("{0}")]
    Daemon(String),
    /// Slurm could not be queried or could not give the job its nodes.
    #[error("slurm: {0}")]
    Slurm(#[from] slurm::SlurmError),
    /// Another `elastic-run` holds the job's checkpoint directory (the path).
    #[error("another elastic-run is running this job (its checkpoint directory {0} is locked)")]
    Busy(PathBuf),
}

impl LaunchError {
    /// The launcher's exit code: 75 (EX_TEMPFAIL) when another `elastic-run` of the job still holds
    /// its checkpoints (one stopping, say, when a daemon restarted and launched the job again),
    /// which a scheduler retries; 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::Busy(_) => 75,
            // The job's own batch cannot run on its GPUs: retrying cannot help.
            LaunchError::Plan {
                cause: gangway_elastic::PlanError::BatchIndivisible { .. },
                ..
            } => 2,
            _ => 1,
        }
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LaunchError {
    let what = what.into();
    move |cause| LaunchError::Io { what, cause }
}

/// The last output of a launch, for classifying its end.
const TAIL_BYTES: usize = 64 << 10;

/// The global batch a launch runs at, from `--global-batch` (`range`): for a job that adapts its
/// batch, the daemon's policy's choice (`chosen`, from [`crate::executor::POLICY_BATCH_VAR`]) kept
/// within the range, else the range's least; a fixed batch stays. `None` without `--global-batch`.
fn launch_batch(
    range: Option<(u32, u32)>,
    chosen: Option<&str>,
) -> Result<Option<u32>, LaunchError> {
    let Some((min, max)) = range else {
        return Ok(None);
    };
    let chosen = match chosen.filter(|_| min < max) {
        None => return Ok(Some(min)),
        Some(text) => text.parse::<u32>().map_err(|_| {
            LaunchError::Daemon(format!(
                "{}={text:?} is not a global batch size",
                crate::executor::POLICY_BATCH_VAR
            ))
        })?,
    };
    Ok(Some(chosen.clamp(min, max)))
}

/// The pipeline stages a launch runs with: for a job that names its stages by GPU type
/// (`by_type`), the daemon's choice for this launch's type (`chosen`, from
/// [`crate::executor::POLICY_PP_VAR`]), which must be one of the job's own; else `own` (`--pp`).
fn launch_stages(
    own: u32,
    by_type: Option<&BTreeMap<String, u32>>,
    chosen: Option<&str>,
) -> Result<u32, LaunchError> {
    let (Some(by_type), Some(text)) = (by_type, chosen) else {
        return Ok(own);
    };
    match text.parse::<u32>() {
        Ok(pp) if pp == own || by_type.values().any(|&p| p == pp) => Ok(pp),
        _ => Err(LaunchError::Daemon(format!(
            "{}={text:?} is not one of the job's pipeline stage counts (--pp {own}, --pp-by-type {})",
            crate::executor::POLICY_PP_VAR,
            by_type
                .iter()
                .map(|(t, pp)| format!("{t}={pp}"))
                .collect::<Vec<_>>()
                .join(",")
        ))),
    }
}

/// Where the workers read a batch retuned mid-run (the helper's `retuned()`).
const RETUNE_FILE_VAR: &str = "GANGWAY_RETUNE_FILE";

/// Passes a global batch the daemon's policy retuned while the job keeps its GPUs (what it writes to
/// the descriptor [`crate::inherit::POLICY_BATCH_FD_VAR`]) to this launch's workers: kept within the
/// job's range, split over the launch's replicas by the launch's rule and micro-batch limit (without
/// `--max-micro-batch`, the launch's own batch: a larger one accumulates), and written to their
/// retune file as `GLOBAL MICRO ACCUM`.
struct Retuner<'a> {
    to: &'a Path,
    range: (u32, u32),
    dp: u32,
    max_micro_batch: u32,
    /// The daemon's last choice passed on (at first, the launch's own).
    last: Option<u32>,
}

impl Retuner<'_> {
    /// Passes on a new choice, if the daemon made one since the last call.
    fn check(&mut self, inherited: &Inherited) {
        let Some(chosen) = inherited.policy_batch() else {
            return;
        };
        if self.last == Some(chosen) {
            return;
        }
        let global = chosen.clamp(self.range.0, self.range.1);
        let written = BatchPlan::fit(global, self.dp, self.max_micro_batch, true)
            .map_err(|e| e.to_string())
            .and_then(|b| {
                let line = format!("{} {} {}\n", b.global_batch, b.micro_batch, b.accum_steps);
                crate::executor::write_atomically(self.to, line.as_bytes())
                    .map(|()| b.global_batch)
                    .map_err(|e| e.to_string())
            });
        // A failed write is tried again at the next check.
        match written {
            Ok(batch) => {
                self.last = Some(chosen);
                eprintln!("elastic-run: global batch {batch} (retuned by the daemon)");
            }
            Err(e) => eprintln!("elastic-run: could not pass on a retuned batch {chosen}: {e}"),
        }
    }
}

/// Runs `inv` on `target` until it completes, fails, or `stop` is raised. Every process it starts
/// carries `token` (see [`crate::process`]); a Slurm step is named `token`. What a daemon handed
/// over (`inherited`) gets the workers' progress, gives retuned batches, and is the program run.
pub fn run(
    inv: &Invocation,
    target: &Target,
    stop: &AtomicBool,
    token: &str,
    inherited: &mut Inherited,
) -> Result<Ending, LaunchError> {
    let options = &inv.options;
    if target.gpus() == 0 {
        return Err(LaunchError::NoGpus);
    }
    let job_id = options
        .job_id
        .clone()
        .unwrap_or_else(|| default_job_id(inv));
    let checkpoint_dir = options
        .checkpoint_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("checkpoints").join(&job_id));
    std::fs::create_dir_all(&checkpoint_dir)
        .map_err(io(format!("creating {}", checkpoint_dir.display())))?;
    let chosen = std::env::var(crate::executor::POLICY_BATCH_VAR).ok();
    let global_batch = launch_batch(options.global_batch, chosen.as_deref())?;
    if let (Some(batch), Some((min, max))) = (global_batch, options.global_batch)
        && min < max
    {
        eprintln!("elastic-run: global batch {batch} (of {min}:{max})");
    }
    let spec = JobSpec {
        tp: options.tp,
        pp: launch_stages(
            options.pp,
            options.pp_by_type.as_ref(),
            std::env::var(crate::executor::POLICY_PP_VAR)
                .ok()
                .as_deref(),
        )?,
        min_gpus: options.gpus.0,
        max_gpus: options.gpus.1,
        global_batch: global_batch.unwrap_or(options.gpus.1.max(1)),
        max_micro_batch: options
            .max_micro_batch
            .or(global_batch)
            .unwrap_or(options.gpus.1.max(1)),
        // A batch the job fixed is its hyperparameter: run at it exactly (on as many replicas as
        // divide it), or not at all; only a range, or no batch named, may be rounded to the replicas.
        rescale_batch: options.global_batch.is_none_or(|(min, max)| min < max),
    };
    let plan = plan(&spec, &target.offer()).map_err(|cause| LaunchError::Plan {
        gpus: target.gpus(),
        cause,
    })?;
    // One run of a job at a time: two would share its checkpoints and its stop file.
    let _lock = lock(&checkpoint_dir)?;
    let stop_file = checkpoint_dir.join("STOP");
    let retune_file = checkpoint_dir.join("retune");
    // torchrun's agent's log folder, where elastic-run chooses it (see `torchrun`).
    let torchrun_logs = (target.runs_torchrun(inv.options.spawn)
        && !names_torchrun_logs(&inv.torchrun, |name| std::env::var_os(name)))
    .then(|| checkpoint_dir.join("torchrun-logs"));
    // Where a scheduler other than gangway's daemon reads the workers' progress, else ours (which
    // the daemon's descriptor gets copies of).
    let progress_file = std::env::var_os(crate::executor::PROGRESS_FILE_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| checkpoint_dir.join("progress.json"));
    let mut crashes = 0;
    for attempt in 0.. {
        // Stopped before (re)launching: nothing to save, nothing to start.
        if stop.load(Ordering::SeqCst) {
            return Ok(Ending::Preempted);
        }
        // A stale stop request would end the new launch at its first step, and a stale progress
        // report would start its hang timer before it has started.
        let _ = std::fs::remove_file(&stop_file);
        let _ = std::fs::remove_file(&progress_file);
        let _ = std::fs::remove_file(&retune_file);
        // The last launch's (a link put there is removed, not followed).
        if let Some(logs) = &torchrun_logs {
            let _ = std::fs::remove_dir_all(logs);
        }
        // A job that adapts its batch, under a daemon that may retune it.
        let mut retuner = match options.global_batch {
            Some(range) if range.0 < range.1 && inherited.has_policy_batch() => Some(Retuner {
                to: &retune_file,
                range,
                dp: plan.parallel.dp,
                max_micro_batch: spec.max_micro_batch,
                last: chosen.as_deref().and_then(|c| c.parse().ok()),
            }),
            _ => None,
        };
        let files = Files {
            checkpoint_dir: &checkpoint_dir,
            stop_file: &stop_file,
            progress_file: &progress_file,
            retune_file: retuner.as_ref().map(|r| r.to),
            torchrun_logs: torchrun_logs.as_deref(),
        };
        let resume = newest_checkpoint(&checkpoint_dir);
        let program = inherited.program();
        let mut command =
            launch_command(inv, target, &plan, &job_id, &files, token, attempt, program)?;
        // The job's own newest checkpoint; else a GANGWAY_RESUME_FROM the user set (a pretrained
        // start) passes through.
        if let Some((_, path)) = &resume {
            command.env(RESUME_FROM_VAR, path);
        }
        let hosts: Vec<String> = plan
            .cuda_visible_devices()
            .into_iter()
            .map(|(host, devices)| match target {
                Target::Local(_) => devices,
                Target::Slurm(_) => format!("{host}:{devices}"),
            })
            .collect();
        eprintln!(
            "elastic-run: launch {attempt} of {job_id}: {} on GPUs {} ({})",
            plan.parallel,
            hosts.join(" "),
            match &resume {
                Some((step, _)) => format!("from its checkpoint at step {step}"),
                None => "from the start".to_owned(),
            }
        );
        let cancel = matches!(target, Target::Slurm(_)).then(|| token.to_owned());
        let mut launch =
            Launch::spawn(command, token, cancel).map_err(io("starting the workers"))?;
        let (tail, readers) = capture(&mut launch);
        let watch = watch(
            &mut launch,
            stop,
            options.hang_timeout,
            &progress_file,
            || std::fs::write(&stop_file, b"stop\n"),
            || {
                inherited.relay_progress(&progress_file);
                if let Some(retuner) = retuner.as_mut() {
                    retuner.check(inherited);
                }
            },
        );
        let (status, hung) = match watch {
            Watched::Exited(status) => (status, false),
            Watched::StopRequested => {
                let status = launch
                    .stop(options.grace())
                    .map_err(io("stopping the workers"))?;
                // Their last report: the step of the checkpoint they saved on the way out.
                inherited.relay_progress(&progress_file);
                eprintln!(
                    "elastic-run: stopped on request ({status}); run the same command to resume"
                );
                return Ok(Ending::Preempted);
            }
            Watched::Hung(since) => {
                eprintln!("elastic-run: no progress for {since:?}: the job is hung; killing it");
                (launch.kill().map_err(io("killing a hung launch"))?, true)
            }
        };
        // Every process is gone now, so the readers reach the end of the output.
        drop(launch);
        inherited.relay_progress(&progress_file);
        for reader in readers {
            let _ = reader.join();
        }
        let output =
            String::from_utf8_lossy(tail.lock().expect("tail").make_contiguous()).into_owned();
        let verdict = if hung {
            Verdict::Crashed("hung".into())
        } else {
            classify(status, &output)
        };
        match verdict {
            Verdict::Completed => return Ok(Ending::Completed),
            Verdict::UserError(why) => {
                eprintln!("elastic-run: {why}; not retried");
                return Ok(Ending::Failed { code: 2, why });
            }
            Verdict::Crashed(why) => {
                crashes += 1;
                if crashes > options.max_restarts {
                    eprintln!(
                        "elastic-run: {why}; the restart budget ({}) is spent",
                        options.max_restarts
                    );
                    return Ok(Ending::Failed { code: 1, why });
                }
                eprintln!(
                    "elastic-run: {why}; restart {crashes} of {} from the last checkpoint",
                    options.max_restarts
                );
            }
        }
    }
    unreachable!("the loop returns")
}

/// The script's name and a hash of the command line: the same command gets the same id (and checkpoint
/// directory), so that running it again after a preemption resumes it.
pub(crate) fn default_job_id(inv: &Invocation) -> String {
    let stem = Path::new(&inv.script)
        .file_stem()
        .map_or("job".into(), |s| s.to_string_lossy().into_owned());
    // FNV-1a: stable across runs and Rust versions, unlike the standard library's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let words = inv
        .torchrun
        .iter()
        .chain([&inv.script])
        .chain(&inv.script_args);
    for byte in words.flat_map(|w| w.bytes().chain([0])) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{stem}-{:08x}", hash as u32)
}

/// Holds an exclusive lock on the job's checkpoint directory while it lives.
struct DirLock {
    _file: std::fs::File,
}

fn lock(dir: &Path) -> Result<DirLock, LaunchError> {
    let path = dir.join(".elastic-run.lock");
    let file = std::fs::File::create(&path).map_err(io(format!("creating {}", path.display())))?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock(2) on a descriptor we own; the lock goes with the descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(LaunchError::Busy(dir.to_path_buf()));
    }
    Ok(DirLock { _file: file })
}

/// The worker contract's variable naming the checkpoint to resume from.
const RESUME_FROM_VAR: &str = "GANGWAY_RESUME_FROM";

/// The newest checkpoint in the worker helper's manifest (`gangway-manifest/1`), with its step.
fn newest_checkpoint(dir: &Path) -> Option<(u64, PathBuf)> {
    let text = std::fs::read_to_string(dir.join("manifest.json")).ok()?;
    let doc: serde_json::Value = serde_json::from_str(&text).ok()?;
    if doc["format"] != "gangway-manifest/1" {
        return None;
    }
    doc["checkpoints"]
        .as_array()?
        .iter()
        .filter_map(|e| {
            let file = e["file"].as_str()?;
            // Only a plain file name inside the directory (the helper writes `ckpt-<step>.pt`).
            let plain = !file.contains('/') && !file.starts_with('.');
            Some((e["step"].as_u64()?, dir.join(file))).filter(|_| plain)
        })
        .max_by_key(|(step, _)| *step)
}

/// The files of the worker contract.
struct Files<'a> {
    checkpoint_dir: &'a Path,
    stop_file: &'a Path,
    progress_file: &'a Path,
    /// Where the workers read a batch the daemon retuned, for a job that adapts its batch.
    retune_file: Option<&'a Path>,
    /// torchrun's agent's folder for the workers' logs, where elastic-run chooses it (see
    /// [`torchrun`]).
    torchrun_logs: Option<&'a Path>,
}

/// The launch's command line (torchrun, under `srun` as a step named `token` for Slurm; or the direct
/// spawner) and the worker contract's environment for launch `attempt`, which gets a rendezvous id of
/// its own.
#[allow(clippy::too_many_arguments)]
fn launch_command(
    inv: &Invocation,
    target: &Target,
    plan: &Plan,
    job_id: &str,
    files: &Files,
    token: &str,
    attempt: u32,
    program: Option<&Program>,
) -> Result<Command, LaunchError> {
    let options = &inv.options;
    let mut command = match target {
        Target::Local(_) if !target.runs_torchrun(options.spawn) => {
            let exe = std::env::current_exe().map_err(io("finding elastic-run itself"))?;
            let mode = match options.spawn {
                Spawn::Pool => spawn::Mode::Pool,
                _ => spawn::Mode::Direct,
            };
            let mut command = spawn::command(
                &exe,
                mode,
                plan.world_size(),
                &options.python,
                &inv.script,
                &inv.script_args,
            );
            if let Some(program) = program {
                program.pass_to(&mut command);
            }
            command
        }
        Target::Local(_) => {
            let mut torchrun_options = vec![
                "--nnodes=1".to_owned(),
                "--max-restarts=0".to_owned(),
                format!("--nproc-per-node={}", plan.world_size()),
            ];
            // --standalone picks a free port and a fresh rendezvous id for every launch.
            if !inv
                .torchrun
                .iter()
                .any(|a| a.starts_with("--rdzv") || a == "--standalone")
            {
                torchrun_options.push("--standalone".into());
            }
            torchrun(
                python_command(&options.python, program),
                &torchrun_options,
                files.torchrun_logs,
                inv,
            )
        }
        Target::Slurm(allocation) => {
            let mut srun = allocation.srun(plan, token)?;
            srun.arg(&options.python);
            let rdzv_id = format!("{token}-{attempt}");
            let port = allocation.rendezvous_port(&rdzv_id);
            let torchrun_options = allocation.torchrun_options(plan, &rdzv_id, port)?;
            torchrun(srun, &torchrun_options, files.torchrun_logs, inv)
        }
    };
    match target {
        Target::Local(_) => {
            let (_, devices) = plan.cuda_visible_devices().remove(0);
            // Device indices are NVML's, which orders GPUs by PCI bus; CUDA must count the same way.
            command
                .env("CUDA_VISIBLE_DEVICES", devices)
                .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
        }
        // Slurm binds each node's GPUs itself (--gres) and sets CUDA_VISIBLE_DEVICES there.
        Target::Slurm(_) => {
            command.env_remove("CUDA_VISIBLE_DEVICES");
        }
    }
    let parallel = plan.parallel;
    command
        .env("GANGWAY_JOB_ID", job_id)
        .env("GANGWAY_CHECKPOINT_DIR", files.checkpoint_dir)
        .env("GANGWAY_STOP_FILE", files.stop_file)
        .env("GANGWAY_PROGRESS_FILE", files.progress_file)
        .env(
            "GANGWAY_PLAN",
            format!("dp={},tp={},pp={}", parallel.dp, parallel.tp, parallel.pp),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if options.global_batch.is_some() {
        command
            .env("GANGWAY_GLOBAL_BATCH", plan.batch.global_batch.to_string())
            .env("GANGWAY_MICRO_BATCH", plan.batch.micro_batch.to_string())
            .env("GANGWAY_ACCUM_STEPS", plan.batch.accum_steps.to_string());
    }
    match files.retune_file {
        Some(path) => command.env(RETUNE_FILE_VAR, path),
        None => command.env_remove(RETUNE_FILE_VAR),
    };
    Ok(command)
}

/// torchrun's options that say where, or whether, its agent writes the workers' logs, and the
/// environment variables its parser reads them from.
const TORCHRUN_LOG_OPTIONS: [&str; 8] = [
    "--log-dir",
    "--log_dir",
    "--redirects",
    "--tee",
    "--logs-specs",
    "--logs_specs",
    "-r",
    "-t",
];
const TORCHRUN_LOG_VARIABLES: [&str; 4] =
    ["PET_LOG_DIR", "PET_REDIRECTS", "PET_TEE", "PET_LOGS_SPECS"];

/// Whether the user's torchrun options, or the environment (`var`), name where or whether the
/// workers' logs go. Any prefix of a long option counts, as torchrun's parser takes abbreviations.
fn names_torchrun_logs(torchrun: &[String], var: impl Fn(&str) -> Option<OsString>) -> bool {
    let named = |arg: &String| {
        let name = arg.split('=').next().unwrap_or(arg);
        TORCHRUN_LOG_OPTIONS.iter().any(|&option| {
            if option.starts_with("--") {
                name.len() > 2 && option.starts_with(name)
            } else {
                // `-r 3`, or `-r3`.
                name.starts_with(option) && !name.starts_with("--")
            }
        })
    };
    torchrun.iter().any(named)
        || TORCHRUN_LOG_VARIABLES
            .iter()
            .any(|v| var(v).is_some_and(|value| !value.is_empty()))
}

/// `command` (a Python, or `srun` running one) running torchrun with `options`, then the user's
/// torchrun options, script and arguments. With `logs`, torchrun's agent gets it as its log
/// folder: without one it makes a new folder in /tmp for every launch and never removes it (one
/// per attempt of every job on a daemon's host; 30 from one run of the test suite); `logs` is the
/// job's own, emptied before each launch, and given only where the user named no log option.
fn torchrun(
    mut command: Command,
    options: &[String],
    logs: Option<&Path>,
    inv: &Invocation,
) -> Command {
    command.args(["-m", "torch.distributed.run"]).args(options);
    if let Some(logs) = logs {
        let mut option = OsString::from("--log-dir=");
        option.push(logs);
        command.arg(option);
    }
    command
        .args(&inv.torchrun)
        .arg(&inv.script)
        .args(&inv.script_args);
    command
}

/// Forwards the launch's stdout and stderr to ours, keeping the last bytes of both; the threads end
/// when every process of the launch has closed its output.
fn capture(launch: &mut Launch) -> (Arc<Mutex<VecDeque<u8>>>, Vec<JoinHandle<()>>) {
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_BYTES)));
    let mut readers = Vec::new();
    let child = launch.child();
    let streams: [(Option<Box<dyn std::io::Read + Send>>, bool); 2] = [
        (child.stdout.take().map(|s| Box::new(s) as _), true),
        (child.stderr.take().map(|s| Box::new(s) as _), false),
    ];
    for (stream, is_stdout) in streams {
        let Some(stream) = stream else { continue };
        let tail = Arc::clone(&tail);
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(stream).split(b'\n').map_while(Result::ok) {
                let _ = if is_stdout {
                    writeln!(std::io::stdout(), "{}", String::from_utf8_lossy(&line))
                } else {
                    writeln!(std::io::stderr(), "{}", String::from_utf8_lossy(&line))
                };
                let mut tail = tail.lock().expect("tail");
                tail.extend(line.iter().chain(b"\n"));
                let excess = tail.len().saturating_sub(TAIL_BYTES);
                tail.drain(..excess);
            }
        }));
    }
    (tail, readers)
}

enum Watched {
    Exited(std::process::ExitStatus),
    StopRequested,
    /// No new step for this long.
    Hung(Duration),
}

/// Before a launch's first progress report (torch import, rendezvous, checkpoint load), it counts as
/// hung only after this many times the hang timeout.
const STARTUP_ALLOWANCE: f64 = 10.0;

/// How often a launch is looked at: its exit, a stop asked for (SIGTERM, the daemon's), its progress
/// to pass on. Each of those waits for it, at every restart.
const TICK: Duration = Duration::from_millis(20);

/// Waits for the launch to exit, a stop request (after which `request_stop` runs), or a hang: no new
/// step for `hang_timeout` seconds once steps are reported. `every_tick` runs between checks.
fn watch(
    launch: &mut Launch,
    stop: &AtomicBool,
    hang_timeout: Option<f64>,
    progress_file: &Path,
    request_stop: impl FnOnce() -> std::io::Result<()>,
    mut every_tick: impl FnMut(),
) -> Watched {
    let mut last_step: Option<u64> = None;
    let mut since = Instant::now();
    loop {
        match launch.try_wait() {
            Ok(Some(status)) => return Watched::Exited(status),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %e, "waiting for torchrun");
                return Watched::Hung(since.elapsed());
            }
        }
        if stop.load(Ordering::SeqCst) {
            if let Err(e) = request_stop() {
                tracing::warn!(error = %e, "could not write the stop file; SIGTERM only");
            }
            return Watched::StopRequested;
        }
        if let Some(timeout) = hang_timeout {
            let step = read_step(progress_file);
            let allowed = if last_step.is_none() && step.is_none() {
                timeout * STARTUP_ALLOWANCE
            } else {
                timeout
            };
            if step != last_step {
                last_step = step;
                since = Instant::now();
            } else if since.elapsed().as_secs_f64() > allowed {
                return Watched::Hung(since.elapsed());
            }
        }
        every_tick();
        std::thread::sleep(TICK);
    }
}

/// The step in the progress file the worker helper writes.
fn read_step(path: &Path) -> Option<u64> {
    let bytes = read_private(path, this_user(), REPORT_LIMIT).ok()?;
    serde_json::from_slice::<serde_json::Value>(&bytes).ok()?["step"].as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn a_job_that_adapts_its_batch_runs_at_the_policys_choice_within_its_range() {
        assert_eq!(launch_batch(None, Some("64")).unwrap(), None);
        // A fixed batch stays, whatever the environment says.
        assert_eq!(launch_batch(Some((32, 32)), Some("64")).unwrap(), Some(32));
        // A range: the policy's choice, else the least.
        assert_eq!(launch_batch(Some((16, 256)), Some("96")).unwrap(), Some(96));
        assert_eq!(launch_batch(Some((16, 256)), None).unwrap(), Some(16));
        assert_eq!(
            launch_batch(Some((16, 256)), Some("4096")).unwrap(),
            Some(256)
        );
        assert_eq!(launch_batch(Some((16, 256)), Some("1")).unwrap(), Some(16));
        let e = launch_batch(Some((16, 256)), Some("lots")).unwrap_err();
        assert!(
            e.to_string().contains("GANGWAY_POLICY_BATCH=\"lots\""),
            "{e}"
        );
    }

    #[test]
    fn a_pipeline_runs_with_the_daemons_stages_for_its_gpu_type_when_it_named_them() {
        let by_type = BTreeMap::from([("rtx".to_owned(), 8), ("a100".to_owned(), 2)]);
        assert_eq!(launch_stages(1, Some(&by_type), Some("8")).unwrap(), 8);
        assert_eq!(launch_stages(1, Some(&by_type), Some("2")).unwrap(), 2);
        assert_eq!(launch_stages(1, Some(&by_type), Some("1")).unwrap(), 1);
        assert_eq!(launch_stages(4, Some(&by_type), None).unwrap(), 4);
        // A job that named no stages by type keeps its own, whatever the environment says.
        assert_eq!(launch_stages(4, None, Some("8")).unwrap(), 4);
        // Stages the job never named are refused, not run.
        for bad in ["3", "0", "many"] {
            let e = launch_stages(1, Some(&by_type), Some(bad)).unwrap_err();
            assert!(e.to_string().contains("--pp-by-type a100=2,rtx=8"), "{e}");
        }
    }

    #[test]
    fn torchrun_gets_a_log_folder_unless_the_user_named_where_logs_go() {
        let args = |line: &str| {
            line.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let no_env = |_: &str| None;
        for named in [
            "--log-dir /logs",
            "--log_dir=/logs",
            "--redirects 3",
            "--redir 3",
            "-r 3",
            "-r3",
            "--tee=1",
            "--te 1",
            "-t 1",
            "--logs-specs mine",
            "--standalone --log-dir=/x",
        ] {
            assert!(names_torchrun_logs(&args(named), no_env), "{named}");
        }
        for unnamed in [
            "",
            "--standalone",
            "--rdzv-backend c10d",
            "--role trainer",
            "--run-path",
        ] {
            assert!(!names_torchrun_logs(&args(unnamed), no_env), "{unnamed}");
        }
        let tee = |name: &str| (name == "PET_TEE").then(|| OsString::from("3"));
        assert!(names_torchrun_logs(&[], tee), "PET_TEE=3");
        let empty = |name: &str| (name == "PET_LOG_DIR").then(OsString::new);
        assert!(!names_torchrun_logs(&[], empty), "PET_LOG_DIR set empty");

        let inv = crate::cli::parse(&args("--gpus 2 train.py")).unwrap();
        let logs = Path::new("/ckpt/torchrun-logs");
        let command = torchrun(Command::new("python3"), &[], Some(logs), &inv);
        let given: Vec<_> = command.get_args().collect();
        assert!(
            given.contains(&OsStr::new("--log-dir=/ckpt/torchrun-logs")),
            "{given:?}"
        );
        let command = torchrun(Command::new("python3"), &[], None, &inv);
        assert!(
            !command
                .get_args()
                .any(|a| a.to_string_lossy().contains("log-dir"))
        );
    }

    #[test]
    fn the_launch_resumes_from_the_newest_checkpoint_in_the_manifest() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(newest_checkpoint(dir.path()), None, "no manifest yet");
        let manifest = |checkpoints: &str| {
            let doc =
                format!(r#"{{"format": "gangway-manifest/1", "checkpoints": [{checkpoints}]}}"#);
            std::fs::write(dir.path().join("manifest.json"), doc).unwrap();
        };
        manifest(
            r#"{"step": 300, "file": "ckpt-000000000300.pt"}, {"step": 200, "file": "ckpt-000000000200.pt"}"#,
        );
        assert_eq!(
            newest_checkpoint(dir.path()),
            Some((300, dir.path().join("ckpt-000000000300.pt")))
        );
        manifest(r#"{"step": 400, "file": "../elsewhere.pt"}"#);
        assert_eq!(
            newest_checkpoint(dir.path()),
            None,
            "never outside the directory"
        );
        std::fs::write(dir.path().join("manifest.json"), "{\"format\": \"other\"}").unwrap();
        assert_eq!(newest_checkpoint(dir.path()), None);
    }
}
