//! Starting an attempt: its confinement (cores, cgroups), its files, and its `elastic-run`; and
//! carrying out a new allotment in place.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gangway_protocol::command::Submitter;
use gangway_protocol::ids::JobId;
use gangway_protocol::worker::{Launch, Resources, RunCommand};

use super::attempt::attempt_processes;
use super::command::check_apart;
use super::{
    ATTEMPT_VAR, CHECK_SHARE, Confinement, EXIT_FILE_VAR, Hosts, POLICY_BATCH_VAR, POLICY_PP_VAR,
    PROGRESS_FILE_VAR, ProcessExecutor, SLOW_CHECK, marker,
};
use crate::confine;
use crate::inherit::{self, AttemptFiles};
use crate::pool;

/// Why an attempt did not start.
pub(super) enum SpawnError {
    /// It never can (no command, no such device, a missing directory or a permission).
    Refused(String),
    /// It could not now, for a reason of its own (its user's file system did not answer, its
    /// GPUs are spread unevenly): the job pauses before its next try.
    Failed(String),
    /// This machine could not start it now (out of processes, memory, file descriptors or disk,
    /// a storage hiccup): not the job's doing, tried again after [`super::HOST_RETRY`].
    Host(String),
    /// It was not tried, and would not be for this long: its user rests ([`SLOW_CHECK`]).
    Later(String, Duration),
}

impl SpawnError {
    pub(super) fn from_io(what: String, e: std::io::Error) -> Self {
        use std::io::ErrorKind::{NotFound, PermissionDenied};
        let why = format!("{what}: {e}");
        match e.kind() {
            NotFound | PermissionDenied => SpawnError::Refused(why),
            _ => SpawnError::Host(why),
        }
    }
}

impl ProcessExecutor {
    /// Makes an attempt's cgroup, with its memory limit, and, for an attempt with `resources`, takes
    /// its cores (on this machine: Slurm binds a remote step's resources itself).
    pub(super) fn confine(&mut self, launch: &Launch) -> Result<Confinement, SpawnError> {
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

    /// Carries out `job`'s allotment due ([`gangway_protocol::worker::Executor::reallot`]), re-pinning its processes in
    /// place: whether it was (or none was due). Where its processes do not answer, none could be
    /// re-pinned, so it keeps what it has (its old cores are not handed to another job while it
    /// runs on them), and the allotment waits for the next poll.
    pub(super) fn allot(&mut self, job: JobId) -> bool {
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

    pub(super) fn attempt_file(&self, job: JobId, attempt: u64, what: &str) -> PathBuf {
        self.state_dir
            .join(format!("{}.{what}", marker(job, attempt)))
    }

    /// The files an attempt reports through, in the state directory.
    pub(super) fn attempt_files(&self, job: JobId, attempt: u64) -> AttemptFiles {
        AttemptFiles::in_dir(&self.state_dir, &marker(job, attempt))
    }

    /// Where an attempt launched before the daemon kept its files itself reported (in a directory of
    /// its user's own when it ran as another user): read as that user's files, never followed.
    pub(super) fn legacy_files(&self, launch: &Launch) -> AttemptFiles {
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
    pub(super) fn spawn(
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
    pub(super) fn pools_cgroup_name(&self) -> String {
        format!("{}-pools", self.instance)
    }

    /// How long `launch`'s workers get to checkpoint and exit when stopped: their grace, at most
    /// [`ProcessExecutor::max_grace`], and a margin. (A command elastic-run refuses still starts:
    /// it reports why in its exit file.)
    pub(super) fn stop_timeout(&self, launch: &Launch) -> Duration {
        let grace = launch.run.as_ref().map_or(Duration::ZERO, |run| {
            crate::cli::parse(&run.args).map_or(Duration::ZERO, |inv| inv.options.grace())
        });
        self.capped_stop_timeout(grace + self.stop_margin)
    }

    /// `stop_timeout`, at most the longest this executor waits for a stop.
    pub(super) fn capped_stop_timeout(&self, stop_timeout: Duration) -> Duration {
        stop_timeout.min(self.max_grace + self.stop_margin)
    }
}
