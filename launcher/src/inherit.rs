//! What the daemon hands one attempt's `elastic-run`, as open descriptors rather than paths, so that
//! nothing a job can change is ever opened by the daemon.
//!
//! For each attempt the process executor makes three files in its own state directory (0700, its
//! user's), each created afresh and private (0600), and passes `elastic-run` a descriptor to each:
//!
//! - the **exit** file ([`EXIT_FD_VAR`], write only): `elastic-run` writes its [`ExitReport`] there
//!   before it exits;
//! - the **progress** file ([`PROGRESS_FD_VAR`], write only): `elastic-run` copies its workers' latest
//!   progress report there (they write it in the job's own checkpoint directory);
//! - the **batch** file ([`POLICY_BATCH_FD_VAR`], read only): the daemon writes the global batch its
//!   policy chose, in place, and `elastic-run` reads it for a job that adapts its batch.
//!
//! A job can write whatever those descriptors allow, but it cannot make the daemon open anything
//! else: the daemon opens the files by their names in its private directory, without following a
//! link or blocking, checks on the open descriptor that each is a regular file of its own, and reads
//! at most [`REPORT_LIMIT`] bytes ([`read_private`]). The files outlive a daemon restart, so a
//! re-adopted attempt goes on reporting.
//!
//! The same way, the program `elastic-run` starts (its `--python`) is checked by the daemon at launch
//! ([`gangway_protocol::command::open_program`]) and handed over open ([`PROGRAM_FD_VAR`]):
//! `elastic-run` executes that descriptor, so a file swapped after the check never runs. Under
//! torchrun's `--no-python`, the script's checked path ([`SCRIPT_VAR`]) is what the workers run.
//!
//! Nor does the daemon wait on a path of the job's while it launches it: `elastic-run` starts in `/`
//! and itself enters the job's working directory ([`WORKDIR_VAR`]) and opens its log
//! ([`LOG_VAR`]), as the job's user ([`Inherited::enter`]). Between fork and exec, a directory
//! that never answers (a submitter's FUSE mount) held the daemon's launch with it.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::executor::ExitReport;

/// The descriptor `elastic-run` writes its [`ExitReport`] to.
pub const EXIT_FD_VAR: &str = "GANGWAY_EXIT_FD";
/// The descriptor `elastic-run` copies its workers' progress reports to.
pub const PROGRESS_FD_VAR: &str = "GANGWAY_PROGRESS_FD";
/// The descriptor `elastic-run` reads the daemon's choice of global batch from.
pub const POLICY_BATCH_FD_VAR: &str = "GANGWAY_POLICY_BATCH_FD";
/// The descriptor of the program `elastic-run` runs its workers with (its `--python`), as checked.
pub const PROGRAM_FD_VAR: &str = "GANGWAY_PROGRAM_FD";
/// Where that program was found (its name for the program itself: Python finds its virtualenv by
/// it), beside [`PROGRAM_FD_VAR`].
pub const PROGRAM_PATH_VAR: &str = "GANGWAY_PROGRAM";
/// Under torchrun's `--no-python`: where the daemon found the script the workers run (absolute), run
/// in place of the name on the command line.
pub const SCRIPT_VAR: &str = "GANGWAY_SCRIPT";
/// The job's working directory, which `elastic-run` enters first ([`Inherited::enter`]).
pub const WORKDIR_VAR: &str = "GANGWAY_WORKDIR";
/// The job's log, which `elastic-run` appends its output and its workers' to ([`Inherited::enter`]).
pub const LOG_VAR: &str = "GANGWAY_LOG";

/// The version of this hand-over (the variables and descriptors above, and what `elastic-run` does
/// with them). A daemon runs only an `elastic-run` that speaks its own ([`check_elastic_run`]): one
/// that does not would ignore what it was handed (an older one, without [`WORKDIR_VAR`], ran the job
/// in `/`). Raise it with any change either side must know of.
pub const HANDOVER: u32 = 1;
/// `elastic-run HANDOVER_FLAG` prints [`HANDOVER`] and exits.
pub const HANDOVER_FLAG: &str = "--handover";
/// How long [`check_elastic_run`] waits for `elastic-run` to say its hand-over.
const HANDOVER_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// Checks the `elastic-run` a daemon would launch every job through, before it launches any: that
/// nobody but root and the daemon's user can change it (it runs as every job's user, root's
/// included: as a program a job names, [`gangway_protocol::command::open_program`]), and that it
/// speaks this daemon's [`HANDOVER`]. Says what is wrong and what to do.
pub fn check_elastic_run(path: &Path) -> Result<(), String> {
    let daemon = gangway_protocol::command::Submitter::this_process();
    let nowhere = gangway_protocol::worker::RunCommand {
        args: Vec::new(),
        cwd: PathBuf::from("/"),
        env: Default::default(),
        log: None,
        user: None,
    };
    let path = gangway_protocol::command::check_program("elastic-run", path, &nowhere, &daemon)
        .map_err(|e| {
            format!(
                "{}; it runs every job, so only root and the daemon's user may be able to \
                 change it: install it where they alone can (`install -m 755 elastic-run \
                 /usr/local/bin/`) and pass --elastic-run PATH",
                e.problem
            )
        })?;
    let said = handover_of(&path)?;
    if said.trim() != HANDOVER.to_string() {
        let said = match said.trim() {
            "" => "does not say which hand-over it speaks (it is older than this gangway)".into(),
            other => format!("speaks hand-over {other:.40}, this gangway {HANDOVER}"),
        };
        return Err(format!(
            "{}: {said}: install the elastic-run built with this gangway",
            path.display()
        ));
    }
    Ok(())
}

/// What `path HANDOVER_FLAG` prints (nothing, if it fails), within [`HANDOVER_PATIENCE`].
fn handover_of(path: &Path) -> Result<String, String> {
    let mut child = Command::new(path)
        .arg(HANDOVER_FLAG)
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let deadline = std::time::Instant::now() + HANDOVER_PATIENCE;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut said = String::new();
                if status.success()
                    && let Some(out) = child.stdout.as_mut()
                {
                    // A line at most: a number.
                    let _ = out.take(64).read_to_string(&mut said);
                }
                return Ok(said);
            }
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} did not say which hand-over it speaks within {} s",
                    path.display(),
                    HANDOVER_PATIENCE.as_secs()
                ));
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
}

/// The most the daemon reads of an attempt's report: a progress report is one line of JSON.
pub const REPORT_LIMIT: u64 = 64 * 1024;

/// Why a private file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PrivateFileError {
    /// It could not be opened, inspected or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// It is not a regular file (a directory, a FIFO, a device).
    #[error("{path} is not a regular file (mode {mode:o})")]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// Its mode, type bits included.
        mode: u32,
    },
    /// Another user owns it.
    #[error("{path} belongs to uid {found}, not {expected}")]
    Owner {
        /// The file.
        path: PathBuf,
        /// Its owner's uid.
        found: u32,
        /// The uid that should own it.
        expected: u32,
    },
    /// It holds more than the limit allows.
    #[error("{path} holds {size} bytes, more than the {limit} allowed")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size, in bytes.
        size: u64,
        /// The most allowed, in bytes.
        limit: u64,
    },
}

/// Opens `path` for reading or writing without following a link at its name or blocking on it (a
/// FIFO, a device), and checks on the open descriptor that it is a regular file owned by `owner`
/// and no larger than `limit`.
pub fn open_private(
    path: &Path,
    write: bool,
    owner: u32,
    limit: u64,
) -> Result<File, PrivateFileError> {
    let io = |source| PrivateFileError::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.file_type().is_file() {
        return Err(PrivateFileError::NotRegular {
            path: path.to_owned(),
            mode: meta.mode(),
        });
    }
    if meta.uid() != owner {
        return Err(PrivateFileError::Owner {
            path: path.to_owned(),
            found: meta.uid(),
            expected: owner,
        });
    }
    if meta.len() > limit {
        return Err(PrivateFileError::TooLarge {
            path: path.to_owned(),
            size: meta.len(),
            limit,
        });
    }
    Ok(file)
}

/// The contents of the regular file `path` of `owner`'s, at most `limit` bytes (see
/// [`open_private`]).
pub fn read_private(path: &Path, owner: u32, limit: u64) -> Result<Vec<u8>, PrivateFileError> {
    let file = open_private(path, false, owner, limit)?;
    let mut bytes = Vec::new();
    // Bounded again: the file may grow between the check and the read.
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|source| PrivateFileError::Io {
            path: path.to_owned(),
            source,
        })?;
    Ok(bytes)
}

/// This process's effective user: the owner of the files it makes.
pub fn this_user() -> u32 {
    // SAFETY: geteuid(2) cannot fail.
    unsafe { libc::geteuid() }
}

/// Replaces the whole contents of `file` with `bytes`, in place (the reader holds the same file).
fn rewrite(file: &File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all_at(bytes, 0)?;
    file.set_len(bytes.len() as u64)
}

/// One attempt's files in the daemon's state directory (see the module's doc).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttemptFiles {
    /// The exit file, where `elastic-run` writes its [`ExitReport`].
    pub exit: PathBuf,
    /// The progress file, where `elastic-run` copies its workers' progress reports.
    pub progress: PathBuf,
    /// The batch file, where the daemon writes its policy's choice of global batch.
    pub batch: PathBuf,
    /// Whose files they are: this process's user, but for those of attempts launched before the
    /// daemon kept them itself.
    #[serde(default = "this_user")]
    pub owner: u32,
}

/// Descriptors to hand a child, each named in its environment by a variable that holds its number.
#[derive(Default)]
pub struct Handover {
    fds: Vec<(&'static str, OwnedFd)>,
}

impl Handover {
    /// Adds `fd`, which the child finds by `var`.
    pub fn add(&mut self, var: &'static str, fd: OwnedFd) {
        self.fds.push((var, fd));
    }

    /// Makes `command`'s child inherit the descriptors and name them in its environment. They keep
    /// their numbers and stay close-on-exec in this process, where other threads may start other
    /// children: only this child's copies are made inheritable. Keep `self` until the command has
    /// been spawned.
    pub fn pass_to(&self, command: &mut Command) {
        let fds: Vec<(&str, RawFd)> = self
            .fds
            .iter()
            .map(|(var, fd)| (*var, fd.as_raw_fd()))
            .collect();
        pass_fds(command, &fds);
    }
}

/// Makes `command`'s child inherit `fds` (open in this process until it is spawned), each named in
/// its environment by its variable. Only the child's copies are made inheritable: other children,
/// which other threads may start meanwhile, get none.
fn pass_fds(command: &mut Command, fds: &[(&str, RawFd)]) {
    use std::os::unix::process::CommandExt;
    for (var, fd) in fds {
        command.env(var, fd.to_string());
    }
    let raw: Vec<RawFd> = fds.iter().map(|&(_, fd)| fd).collect();
    // SAFETY: between fork and exec the closure only calls fcntl(2), which is async-signal-safe,
    // on descriptors opened before the fork, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            for &fd in &raw {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

impl AttemptFiles {
    /// The files of the attempt `stem` in `dir`.
    pub fn in_dir(dir: &Path, stem: &str) -> Self {
        AttemptFiles {
            exit: dir.join(format!("{stem}.exit")),
            progress: dir.join(format!("{stem}.progress")),
            batch: dir.join(format!("{stem}.batch")),
            owner: this_user(),
        }
    }

    /// Makes the three files afresh (whatever was at their names is removed first), private to this
    /// process's user, the batch file holding `batch`; returns the descriptors `elastic-run` gets.
    pub fn create(&self, batch: Option<u32>) -> std::io::Result<Handover> {
        self.remove();
        let fresh = |path: &Path| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
        };
        let exit = fresh(&self.exit)?;
        let progress = fresh(&self.progress)?;
        fresh(&self.batch)?;
        if let Some(batch) = batch {
            self.write_batch(batch)?;
        }
        let batch_reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.batch)?;
        let mut handover = Handover::default();
        handover.add(EXIT_FD_VAR, exit.into());
        handover.add(PROGRESS_FD_VAR, progress.into());
        handover.add(POLICY_BATCH_FD_VAR, batch_reader.into());
        Ok(handover)
    }

    /// The report `elastic-run` left, once it has written one it can be read from (`Ok(None)` while
    /// there is none, or what is there is not a report).
    pub fn exit_report(&self) -> Result<Option<ExitReport>, PrivateFileError> {
        Ok(self
            .read(&self.exit)?
            .and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }

    /// Whether `elastic-run` wrote something where its report goes: it ended, even if its processes
    /// are not yet reaped.
    pub fn ended(&self) -> bool {
        match self.read(&self.exit) {
            Ok(bytes) => bytes.is_some_and(|b| !b.is_empty()),
            Err(e) => matches!(e, PrivateFileError::TooLarge { .. }),
        }
    }

    /// The workers' latest progress report, as `elastic-run` copied it (`Ok(None)` before there is
    /// one).
    pub fn progress(&self) -> Result<Option<Vec<u8>>, PrivateFileError> {
        self.read(&self.progress)
    }

    /// Writes the global batch the policy chose, in place, where `elastic-run` reads it: a fixed
    /// width, so that a reader never sees two numbers run together.
    pub fn write_batch(&self, batch: u32) -> std::io::Result<()> {
        let file = open_private(&self.batch, true, self.owner, REPORT_LIMIT)
            .map_err(std::io::Error::other)?;
        rewrite(&file, format!("{batch:>10}\n").as_bytes())
    }

    /// Removes the files.
    pub fn remove(&self) {
        for path in [&self.exit, &self.progress, &self.batch] {
            let _ = std::fs::remove_file(path);
        }
    }

    fn read(&self, path: &Path) -> Result<Option<Vec<u8>>, PrivateFileError> {
        match read_private(path, self.owner, REPORT_LIMIT) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(PrivateFileError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// `elastic-run`'s side: the descriptors its daemon handed it, taken from the environment once, at
/// its start.
#[derive(Default)]
pub struct Inherited {
    exit: Option<File>,
    progress: Option<File>,
    batch: Option<File>,
    program: Option<Program>,
    /// What the daemon named rather than handed over open: see [`Inherited::enter`].
    workdir: Option<PathBuf>,
    log: Option<PathBuf>,
    script: Option<PathBuf>,
    /// The progress report last copied, so that an unchanged one is not written again.
    last_progress: Vec<u8>,
}

/// A program to run as checked: its descriptor, executed in place of its path, and the path, which
/// it gets as its name.
#[derive(Debug)]
pub struct Program {
    /// The open program, as checked.
    pub fd: OwnedFd,
    /// Where it was found, given to it as its name (`argv[0]`).
    pub path: PathBuf,
}

impl Program {
    /// A command that runs this program: by its descriptor (`/proc/self/fd/N`), named by its path.
    pub fn command(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let mut command = Command::new(format!("/proc/self/fd/{}", self.fd.as_raw_fd()));
        command.arg0(&self.path);
        command
    }

    /// Hands this program on to `command`'s child (another `elastic-run`, which runs the workers).
    pub fn pass_to(&self, command: &mut Command) {
        command.env(PROGRAM_PATH_VAR, &self.path);
        pass_fds(command, &[(PROGRAM_FD_VAR, self.fd.as_raw_fd())]);
    }
}

/// Why [`Inherited::enter`] could not enter the job's directory or open its log.
#[derive(Debug)]
pub struct EnterError {
    /// What it could not do, and what the system said.
    pub why: String,
    /// Whether it will not do better later (the directory is gone, or not the user's to enter; the
    /// log is a link): a user error. Otherwise (an I/O error, a stale NFS handle, a full disk) the
    /// job is worth placing again.
    pub lasting: bool,
}

impl EnterError {
    fn of(what: String, verb: &str, error: &std::io::Error) -> EnterError {
        use std::io::ErrorKind;
        let lasting = matches!(
            error.kind(),
            ErrorKind::NotFound
                | ErrorKind::PermissionDenied
                | ErrorKind::NotADirectory
                | ErrorKind::IsADirectory
                | ErrorKind::InvalidInput
                | ErrorKind::Other
        ) || matches!(
            error.raw_os_error(),
            // A link at the log's name; a FIFO with no reader.
            Some(libc::ELOOP | libc::ENXIO)
        );
        EnterError {
            why: format!("cannot {verb} {what}: {error}"),
            lasting,
        }
    }
}

/// Sends this process's standard output and error to `log`, appended (see [`Inherited::enter`]).
fn output_to(log: &Path) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(log)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    // SAFETY: fcntl(2) and dup2(2) on descriptors this process owns; dup2 replaces 1 and 2 atomically.
    unsafe {
        if libc::fcntl(file.as_raw_fd(), libc::F_SETFL, libc::O_APPEND) != 0
            || libc::dup2(file.as_raw_fd(), 1) < 0
            || libc::dup2(file.as_raw_fd(), 2) < 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A command that runs `python`: the program the daemon checked, when it handed one over.
pub fn python_command(python: &Path, program: Option<&Program>) -> Command {
    match program {
        Some(program) => program.command(),
        None => Command::new(python),
    }
}

/// Takes descriptor `var` names, if it is an open one; `None` otherwise.
fn take_fd(var: &str) -> Option<OwnedFd> {
    let fd: RawFd = std::env::var(var).ok()?.parse().ok().filter(|&fd| fd > 2)?;
    // SAFETY: fcntl(2) on a number only reads (or sets) the descriptor's flags; a number that is
    // not an open descriptor fails with EBADF.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: the descriptor is open, was inherited for this purpose, and nothing else in this
    // process owns it (it is taken once, at start).
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Inherited {
    /// Takes the descriptors named in the environment and removes their variables, so that no
    /// worker sees them (they are close-on-exec from here on).
    ///
    /// # Safety
    /// Call it once, at the start of `main`, before any other thread exists (it changes the
    /// environment).
    pub unsafe fn from_env() -> Self {
        let program = take_fd(PROGRAM_FD_VAR).and_then(|fd| {
            let path = std::env::var_os(PROGRAM_PATH_VAR)?;
            Some(Program {
                fd,
                path: PathBuf::from(path),
            })
        });
        let inherited = Inherited {
            exit: take_fd(EXIT_FD_VAR).map(File::from),
            progress: take_fd(PROGRESS_FD_VAR).map(File::from),
            batch: take_fd(POLICY_BATCH_FD_VAR).map(File::from),
            program,
            workdir: std::env::var_os(WORKDIR_VAR).map(PathBuf::from),
            log: std::env::var_os(LOG_VAR).map(PathBuf::from),
            script: std::env::var_os(SCRIPT_VAR).map(PathBuf::from),
            last_progress: Vec::new(),
        };
        for var in [
            EXIT_FD_VAR,
            PROGRESS_FD_VAR,
            POLICY_BATCH_FD_VAR,
            PROGRAM_FD_VAR,
            PROGRAM_PATH_VAR,
            WORKDIR_VAR,
            LOG_VAR,
            SCRIPT_VAR,
        ] {
            // SAFETY: the caller guarantees no other thread exists.
            unsafe { std::env::remove_var(var) };
        }
        inherited
    }

    /// Enters the working directory and opens the log the daemon named, as the job's user: the log
    /// is appended to, created readable by that user alone (the job may print its secrets), and
    /// must be a regular file (a link at its name is not followed; a FIFO is opened without
    /// blocking and refused). Standard output and error go there from now on. Call it first, before
    /// the signal handlers, so that a stop's `SIGTERM` ends it while it waits here, wherever the
    /// kernel lets a signal in (a FUSE server that took the request and never answers holds it even
    /// through SIGKILL: the daemon's stop then goes on without it).
    pub fn enter(&self) -> Result<(), EnterError> {
        if let Some(dir) = &self.workdir {
            std::env::set_current_dir(dir).map_err(|e| {
                EnterError::of(
                    format!("its working directory {}", dir.display()),
                    "enter",
                    &e,
                )
            })?;
        }
        if let Some(log) = &self.log {
            output_to(log)
                .map_err(|e| EnterError::of(format!("its log {}", log.display()), "write", &e))?;
        }
        Ok(())
    }

    /// Under torchrun's `--no-python`, the script the daemon checked, to run in place of the name
    /// on the command line.
    pub fn script(&self) -> Option<&Path> {
        self.script.as_deref()
    }

    /// Copies the workers' progress report (their file, `from`) to the daemon, if one reads it and
    /// it changed since the last copy.
    pub fn relay_progress(&mut self, from: &Path) {
        let Some(file) = &self.progress else { return };
        // The workers' file is this user's own; read as carefully as the daemon reads its.
        let Ok(report) = read_private(from, this_user(), REPORT_LIMIT) else {
            return;
        };
        if report == self.last_progress {
            return;
        }
        match rewrite(file, &report) {
            Ok(()) => self.last_progress = report,
            Err(e) => eprintln!("elastic-run: could not pass on the workers' progress: {e}"),
        }
    }

    /// Writes how the run ended where the daemon reads it; false when no daemon handed a file.
    pub fn report_exit(&self, report: &ExitReport) -> std::io::Result<bool> {
        let Some(mut file) = self.exit.as_ref() else {
            return Ok(false);
        };
        let bytes = serde_json::to_vec(report).map_err(std::io::Error::other)?;
        rewrite(file, &bytes)?;
        file.flush()?;
        Ok(true)
    }

    /// Whether the daemon may retune this run's batch.
    pub fn has_policy_batch(&self) -> bool {
        self.batch.is_some()
    }

    /// The global batch the daemon's policy chose last, if it wrote one.
    pub fn policy_batch(&self) -> Option<u32> {
        let file = self.batch.as_ref()?;
        let mut buf = [0u8; 32];
        let n = file.read_at(&mut buf, 0).ok()?;
        std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
    }

    /// The program the daemon checked, to run in place of `--python`.
    pub fn program(&self) -> Option<&Program> {
        self.program.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory gone or not the user's, a link or a FIFO at the log's name, will not do better
    /// later (a user error); an I/O error, a stale handle or a full disk may.
    #[test]
    fn what_entering_fails_on_is_lasting_or_worth_another_try() {
        let lasting = |errno| {
            EnterError::of(
                "x".into(),
                "enter",
                &std::io::Error::from_raw_os_error(errno),
            )
            .lasting
        };
        for errno in [
            libc::ENOENT,
            libc::EACCES,
            libc::ENOTDIR,
            libc::ELOOP,
            libc::ENXIO,
        ] {
            assert!(lasting(errno), "errno {errno}");
        }
        for errno in [
            libc::EIO,
            libc::ESTALE,
            libc::ENOSPC,
            libc::EINTR,
            libc::ENOTCONN,
        ] {
            assert!(!lasting(errno), "errno {errno}");
        }
    }

    #[test]
    fn private_files_are_read_only_when_regular_owned_and_small() {
        let dir = tempfile::tempdir().unwrap();
        let me = this_user();
        let file = dir.path().join("report");
        std::fs::write(&file, b"{}").unwrap();
        assert_eq!(read_private(&file, me, 16).unwrap(), b"{}");
        assert!(matches!(
            read_private(&file, me + 1, 16),
            Err(PrivateFileError::Owner { found, .. }) if found == me
        ));
        std::fs::write(&file, vec![b'x'; 17]).unwrap();
        assert!(matches!(
            read_private(&file, me, 16),
            Err(PrivateFileError::TooLarge { size: 17, .. })
        ));
        // A link is never followed, to /dev/zero or anywhere.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(
            read_private(&link, me, 16),
            Err(PrivateFileError::Io { source, .. }) if source.raw_os_error() == Some(libc::ELOOP)
        ));
        // A FIFO neither blocks the open nor is read.
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            read_private(&fifo, me, 16),
            Err(PrivateFileError::NotRegular { .. })
        ));
        assert!(matches!(
            read_private(Path::new("/dev/null"), 0, 16),
            Err(PrivateFileError::NotRegular { .. })
        ));
    }

    #[test]
    fn what_runs_is_the_program_that_was_checked_even_if_its_path_changes_after() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("python");
        std::fs::copy("/bin/sh", &path).unwrap();
        let run = gangway_protocol::worker::RunCommand {
            args: Vec::new(),
            cwd: dir.path().to_owned(),
            env: Default::default(),
            log: None,
            user: None,
        };
        let me = gangway_protocol::command::Submitter::this_process();
        let checked =
            gangway_protocol::command::open_program("run.args", &path, &run, &me).unwrap();
        assert!(!checked.script);
        let program = Program {
            fd: checked.file,
            path: checked.path,
        };
        // Swapped after the check: the checked file runs, under its name.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "#!/bin/sh\necho swapped\n").unwrap();
        let out = program
            .command()
            .args(["-c", "echo \"$0\" ran"])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("{} ran", path.display())
        );
    }

    #[test]
    fn an_attempts_files_carry_its_reports_and_the_policys_batch() {
        let dir = tempfile::tempdir().unwrap();
        let files = AttemptFiles::in_dir(dir.path(), "7.2");
        // Something left at a name is replaced, never written through.
        std::os::unix::fs::symlink("/etc/passwd", &files.batch).unwrap();
        let handover = files.create(Some(96)).unwrap();
        assert!(!files.ended());
        assert_eq!(files.progress().unwrap(), Some(Vec::new()));
        use std::os::unix::fs::PermissionsExt;
        for path in [&files.exit, &files.progress, &files.batch] {
            let meta = std::fs::symlink_metadata(path).unwrap();
            assert!(meta.is_file());
            assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        }
        // elastic-run's side, built from the descriptors as it would inherit them.
        let mut fds = handover.fds.into_iter().map(|(_, fd)| fd);
        let mut inherited = Inherited {
            exit: fds.next().map(File::from),
            progress: fds.next().map(File::from),
            batch: fds.next().map(File::from),
            ..Inherited::default()
        };
        assert_eq!(inherited.policy_batch(), Some(96));
        files.write_batch(128).unwrap();
        assert_eq!(inherited.policy_batch(), Some(128));
        let workers = dir.path().join("progress.json");
        for report in [r#"{"step": 1000, "total_steps": 2000}"#, r#"{"step": 2}"#] {
            std::fs::write(&workers, report).unwrap();
            inherited.relay_progress(&workers);
        }
        assert_eq!(files.progress().unwrap().unwrap(), br#"{"step": 2}"#);
        // What is not the workers' regular file of this user's is not relayed.
        std::fs::remove_file(&workers).unwrap();
        std::os::unix::fs::symlink(&files.exit, &workers).unwrap();
        inherited.relay_progress(&workers);
        assert_eq!(files.progress().unwrap().unwrap(), br#"{"step": 2}"#);
        let report = ExitReport {
            code: 75,
            why: "stopped".into(),
        };
        assert!(inherited.report_exit(&report).unwrap());
        assert!(files.ended());
        assert_eq!(files.exit_report().unwrap(), Some(report));
        // More than a report: refused, said, never read whole.
        let flood = vec![b'x'; REPORT_LIMIT as usize + 1];
        inherited
            .exit
            .as_ref()
            .unwrap()
            .write_all_at(&flood, 0)
            .unwrap();
        assert!(files.ended());
        assert!(matches!(
            files.exit_report(),
            Err(PrivateFileError::TooLarge { .. })
        ));
        files.remove();
        assert!(!files.exit.exists() && !files.batch.exists());
    }
}
