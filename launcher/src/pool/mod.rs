//! `elastic-run --spawn pool`: workers forked from a warm pool that has already imported torch,
//! instead of fresh interpreters that import it again at every launch (seconds on every resize).
//!
//! The pool (`zygote.py`, run with the job's own Python) belongs to one user and one *context*:
//! everything a fork inherits and cannot change afterwards (user and groups, namespaces,
//! capabilities, limits, umask, niceness, ignored signals, the Python program and the environment
//! other than a launch's own variables). That context is its fingerprint: a launch with another
//! gets another pool, and the pool refuses a request whose fingerprint is not its own. What a
//! launch sets per attempt (its CPUs, cgroup, directory, output and the workers' environment) the
//! pool's leader for that launch applies after the fork. The spawner stays the supervisor of record:
//! it reports each worker's exit as for a direct launch, and forwards SIGTERM and SIGINT, which do
//! not reach the pool's processes through its process group.
//!
//! **Who may reach it.** Its socket lives in a directory of the user's own, mode 0700, checked
//! (owner, mode, no link) before use; the pool serves a connection only when the peer's credentials
//! (`SO_PEERCRED`) are its own user's, and the spawner checks the pool's the same way.
//!
//! **Lifetime.** It exits with its owner: the daemon that runs the job (`GANGWAY_POOL_OWNER`), or
//! the standalone `elastic-run` that started it; and after [`IDLE`] without a launch. A launch's
//! processes go with the launch: the leader kills them when the spawner goes, and they die if the
//! leader does.
//!
//! Anything that stops a pool launch (no private directory, a pool that fails to start, a
//! refusal) falls back to a direct launch, with one line saying why. A pool that failed to start
//! is not tried again for its context for ten minutes: each try costs a torch import.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::inherit::{Program, python_command};
use crate::process::stat_field;
use crate::spawn::{Exit, Workers};

/// Who owns the pool a launch uses (a pid): the daemon sets it to its own; else the `elastic-run`
/// that runs the spawner.
pub const OWNER_VAR: &str = "GANGWAY_POOL_OWNER";
/// Set by the daemon when its attempts may not use a pool, with why: they run directly.
pub const OFF_VAR: &str = "GANGWAY_POOL_OFF";
/// The cgroup a pool is started in (the daemon's, outside every attempt's, so that ending an
/// attempt does not end the pool).
pub const POOL_CGROUP_VAR: &str = "GANGWAY_POOL_CGROUP";
/// The attempt's own cgroup, which a pool launch's workers join.
pub const CGROUP_VAR: &str = "GANGWAY_CGROUP";
/// Marks a pool in its environment, with its socket's name: what the pool's processes carry in
/// `/proc/PID/environ` (a forked worker keeps its pool's there, whatever it sets).
pub const POOL_VAR: &str = "GANGWAY_POOL";
/// More modules for the pool to import before it forks workers (comma-separated): a job's own
/// heavy imports. Part of the pool's context: another list is another pool.
pub const PRELOAD_VAR: &str = "GANGWAY_POOL_PRELOAD";
/// How long a pool waits for a launch before it exits.
pub const IDLE: Duration = Duration::from_secs(300);
/// How long a context whose pool failed to start goes without one before it is tried again.
const FAILED_FOR: Duration = Duration::from_secs(600);
/// How long a pool may take to import torch and start serving.
const START_LIMIT: Duration = Duration::from_secs(120);

const ZYGOTE: &str = include_str!("zygote.py");

/// Variables a launch sets for itself (and the pool applies per launch); every other variable is
/// the pool's context.
fn launch_own(name: &str) -> bool {
    const EXACT: [&str; 14] = [
        "RANK",
        "LOCAL_RANK",
        "ROLE_RANK",
        "GROUP_RANK",
        "ROLE_NAME",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "ROLE_WORLD_SIZE",
        "GROUP_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "OMP_NUM_THREADS",
    ];
    (name.starts_with("GANGWAY_") && name != PRELOAD_VAR)
        || name.starts_with("TORCHELASTIC_")
        || EXACT.contains(&name)
}

/// Workers forked by a pool: their exits come from the pool's leader over the connection.
pub struct PoolWorkers {
    stream: UnixStream,
    /// Each rank's pid.
    pids: Vec<u32>,
    /// Whether each rank's exit is still to come.
    running: Vec<bool>,
    /// Bytes of a message not yet whole.
    pending: Vec<u8>,
}

/// Starts `ranks.len()` workers of `python -u script args` through this user's pool for this
/// context (starting the pool if it is not there), each rank with the spawner's environment and its
/// own variables; `Err` says why not, and nothing was started.
pub fn launch(
    python: &Path,
    program: Option<&Program>,
    script: &str,
    args: &[String],
    ranks: &[Vec<(&'static str, String)>],
) -> Result<PoolWorkers, String> {
    if let Ok(why) = std::env::var(OFF_VAR) {
        return Err(why);
    }
    let env = utf8_env()?;
    let context = Context::of_this_process(python, program, &env)?;
    let dir = private_dir()?;
    let name = format!("pool-{:016x}", context.hash());
    let mut stream = connect_or_start(&dir, &name, &context, python, program)?;
    let cgroup_procs = match std::env::var_os(CGROUP_VAR) {
        Some(dir) => Some(
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(Path::new(&dir).join("cgroup.procs"))
                .map_err(|e| format!("opening the attempt's cgroup: {e}"))?,
        ),
        None => None,
    };
    let inherited = inherited_fds();
    if inherited.len() > MAX_INHERITED {
        return Err(format!(
            "{} descriptors to hand the workers, more than {MAX_INHERITED}",
            inherited.len()
        ));
    }
    let cwd =
        std::fs::File::open(".").map_err(|e| format!("opening the working directory: {e}"))?;
    let request = serde_json::json!({
        "version": 1,
        "fingerprint": context.fingerprint,
        "argv0": program.map_or(python, |p| &p.path),
        "script": script,
        "args": args,
        "env": env,
        "ranks": ranks.iter().map(|vars| vars.iter().cloned().collect::<BTreeMap<_, _>>()).collect::<Vec<_>>(),
        "cpus": crate::confine::usable_cores(),
        "cgroup": std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
        "cgroup_fd": cgroup_procs.is_some(),
        "inherited": inherited,
    });
    let mut fds = vec![cwd.as_raw_fd(), 0, 1, 2];
    fds.extend(cgroup_procs.as_ref().map(|f| f.as_raw_fd()));
    fds.extend(&inherited);
    let mut bytes = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
    bytes.push(b'\n');
    send_with_fds(&stream, &bytes, &fds).map_err(|e| format!("sending the launch: {e}"))?;
    let mut pending = Vec::new();
    let reply = read_message(&mut stream, &mut pending, None)?
        .ok_or("the pool closed the connection before starting the workers")?;
    if let Some(why) = reply.get("refused").and_then(|w| w.as_str()) {
        return Err(format!("the pool refused the launch: {why}"));
    }
    let pids: Vec<u32> = reply
        .get("started")
        .and_then(|p| serde_json::from_value(p.clone()).ok())
        .ok_or_else(|| format!("the pool answered {reply}"))?;
    Ok(PoolWorkers {
        stream,
        running: vec![true; pids.len()],
        pids,
        pending,
    })
}

impl PoolWorkers {
    /// Waits (bounded) for the leader's `done`: every process the workers left has been killed.
    fn finish(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match read_message(&mut self.stream, &mut self.pending, Some(left)) {
                Ok(Some(message)) if message.get("done").is_none() => continue,
                _ => return,
            }
        }
    }
}

impl Workers for PoolWorkers {
    fn running(&self) -> usize {
        self.running.iter().filter(|&&r| r).count()
    }

    fn wait_exits(&mut self, timeout: Duration) -> Vec<Exit> {
        let mut exits = Vec::new();
        let mut wait = Some(timeout);
        while self.running() > 0 {
            match read_message(&mut self.stream, &mut self.pending, wait) {
                Ok(Some(message)) => {
                    let rank = message.get("exited").and_then(|r| r.as_u64());
                    let code = message.get("code").and_then(|c| c.as_i64());
                    if let (Some(rank), Some(code)) = (rank, code)
                        && let Some(running) = self.running.get_mut(rank as usize)
                        && std::mem::replace(running, false)
                    {
                        exits.push(Exit {
                            rank: rank as usize,
                            pid: self.pids[rank as usize],
                            code: code as i32,
                        });
                        if self.running() == 0 {
                            // The leader sweeps what the workers left, then says it is done.
                            self.finish();
                        }
                    }
                    // More may be waiting: read on without blocking.
                    wait = Some(Duration::ZERO);
                }
                Ok(None) => {
                    // The leader is gone before every worker's exit was told: they died with it
                    // (their parent-death signal).
                    eprintln!("elastic-run: the warm pool's leader for this launch died");
                    for (rank, running) in self.running.iter_mut().enumerate() {
                        if std::mem::replace(running, false) {
                            exits.push(Exit {
                                rank,
                                pid: self.pids[rank],
                                code: -libc::SIGKILL,
                            });
                        }
                    }
                }
                Err(_) => break,
            }
        }
        exits
    }

    fn signal(&mut self, signal: i32) {
        let _ = self
            .stream
            .write_all(format!("{{\"signal\":{signal}}}\n").as_bytes());
    }

    fn relay(&mut self, signal: i32) {
        self.signal(signal);
    }
}

/// The most descriptors a launch may hand its workers beyond 0, 1 and 2 (one message carries at
/// most 253).
const MAX_INHERITED: usize = 200;

/// This process's descriptors above 2 that a program it ran would inherit (not close-on-exec):
/// a direct worker gets them, so a forked one gets them too, at the same numbers.
fn inherited_fds() -> Vec<RawFd> {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut fds: Vec<RawFd> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        // SAFETY: F_GETFD only reads a descriptor's flags (EBADF for the directory's own, now
        // closed).
        .filter(|&fd| {
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            flags >= 0 && flags & libc::FD_CLOEXEC == 0
        })
        .collect();
    fds.sort_unstable();
    fds
}

/// Reads one newline-ended JSON message, waiting up to `wait` (`None`: as long as it takes);
/// `Ok(None)` at end of stream, `Err` when none came in time.
fn read_message(
    stream: &mut UnixStream,
    pending: &mut Vec<u8>,
    wait: Option<Duration>,
) -> Result<Option<serde_json::Value>, String> {
    let deadline = wait.map(|w| Instant::now() + w);
    loop {
        if let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            return serde_json::from_slice(&line)
                .map(Some)
                .map_err(|e| format!("a message from the pool: {e}"));
        }
        let timeout = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() && !readable(stream, 0) {
                    return Err("no message yet".into());
                }
                left
            }
            None => Duration::from_secs(3600),
        };
        if !readable(stream, timeout.as_millis().min(i32::MAX as u128) as i32) {
            if deadline.is_some() {
                return Err("no message yet".into());
            }
            continue;
        }
        let mut buf = [0u8; 4096];
        match stream.read(&mut buf) {
            Ok(0) => return Ok(None),
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Ok(None),
        }
    }
}

/// Whether `stream` has something to read (or was closed) within `millis`.
fn readable(stream: &UnixStream, millis: i32) -> bool {
    let mut fd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut fd, 1, millis) > 0 }
}

/// The spawner's environment, which every JSON message can carry; a launch with a variable that
/// is not UTF-8 starts directly.
fn utf8_env() -> Result<BTreeMap<String, String>, String> {
    std::env::vars_os()
        .map(|(k, v)| match (k.into_string(), v.into_string()) {
            (Ok(k), Ok(v)) => Ok((k, v)),
            (Ok(k), Err(_)) | (Err(_), Ok(k)) => Err(format!("{k} is not UTF-8")),
            _ => Err("an environment variable is not UTF-8".into()),
        })
        .collect()
}

/// What a pool and every launch it serves must share (see the module's doc).
struct Context {
    fingerprint: String,
    /// The pool's own environment: the context's variables, and its mark.
    env: BTreeMap<String, String>,
    owner: (i32, String),
}

impl Context {
    fn of_this_process(
        python: &Path,
        program: Option<&Program>,
        env: &BTreeMap<String, String>,
    ) -> Result<Context, String> {
        let owner_pid = match std::env::var(OWNER_VAR) {
            Ok(pid) => pid
                .parse()
                .map_err(|_| format!("{OWNER_VAR}={pid} is not a pid"))?,
            // SAFETY: getppid(2) cannot fail.
            Err(_) => unsafe { libc::getppid() },
        };
        let owner = (owner_pid, start_time(owner_pid)?);
        let env: BTreeMap<String, String> = env
            .iter()
            .filter(|(k, _)| !launch_own(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let program_meta = match program {
            Some(program) => std::fs::File::from(
                program
                    .fd
                    .try_clone()
                    .map_err(|e| format!("the checked program: {e}"))?,
            )
            .metadata(),
            None => std::fs::metadata(python),
        }
        .map_err(|e| format!("{}: {e}", python.display()))?;
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let status: Vec<&str> = status
            .lines()
            .filter(|l| {
                [
                    "Uid:",
                    "Gid:",
                    "Groups:",
                    "Umask:",
                    "SigIgn:",
                    "CapInh:",
                    "CapPrm:",
                    "CapEff:",
                    "CapBnd:",
                    "CapAmb:",
                    "NoNewPrivs:",
                    "Seccomp:",
                ]
                .iter()
                .any(|p| l.starts_with(p))
            })
            .collect();
        let namespaces: Vec<String> = ["mnt", "pid", "net", "ipc", "uts", "user", "cgroup"]
            .iter()
            .map(|ns| {
                std::fs::read_link(format!("/proc/self/ns/{ns}"))
                    .map(|l| l.display().to_string())
                    .unwrap_or_default()
            })
            .collect();
        // Linux's 16 resources, RLIMIT_CPU (0) to RLIMIT_RTTIME (15).
        let limits: Vec<(u64, u64)> = (0..16)
            .map(|resource| {
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                // SAFETY: getrlimit(2) writes one rlimit.
                unsafe { libc::getrlimit(resource as _, &mut limit) };
                (limit.rlim_cur, limit.rlim_max)
            })
            .collect();
        let nice = stat_field("self", 19);
        let fingerprint = serde_json::json!({
            "zygote": format!("{:016x}", hash(ZYGOTE)),
            "python": python,
            "program": [program_meta.dev(), program_meta.ino(), program_meta.size(),
                        program_meta.mtime(), program_meta.mtime_nsec(), program_meta.ctime(),
                        program_meta.ctime_nsec()],
            "owner": owner,
            "status": status,
            "namespaces": namespaces,
            "limits": limits,
            "nice": nice,
            "oom_score_adj": std::fs::read_to_string("/proc/self/oom_score_adj").unwrap_or_default().trim(),
            "env": env,
        })
        .to_string();
        Ok(Context {
            fingerprint,
            env,
            owner,
        })
    }

    fn hash(&self) -> u64 {
        hash(&self.fingerprint)
    }
}

fn hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    // Fixed keys: every spawner names the same context's pool alike. A collision only means a
    // refusal (the pool compares whole fingerprints), never a wrong pool.
    let mut hasher = std::hash::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// Field 22 of `/proc/PID/stat`, its start time: tells a process apart from a later one with its
/// pid.
fn start_time(pid: i32) -> Result<String, String> {
    stat_field(&pid.to_string(), 22)
        .ok_or_else(|| format!("the pool's owner {pid}: no readable /proc/{pid}/stat"))
}

/// This user's pool directory ([`pool_dir_of`]); made 0700, and refused unless it is a directory of
/// the user's own that nobody else may enter (a link, another owner, or a wider mode on an existing
/// one).
pub fn private_dir() -> Result<PathBuf, String> {
    let user = gangway_protocol::command::Submitter::this_process();
    let dir = pool_dir_of(&user, std::env::var_os("XDG_RUNTIME_DIR").as_deref());
    check_private_dir(&dir, user.uid)?;
    Ok(dir)
}

/// Where `user`'s pool lives, given their `XDG_RUNTIME_DIR`: `$XDG_RUNTIME_DIR/gangway` when that
/// is absolute and nobody but root and the user can change it or any directory above it
/// ([`gangway_protocol::command::check_directory`]), else `/tmp/gangway-pool-UID`. A root job's
/// environment may carry another user's `XDG_RUNTIME_DIR` (`su` without `-` keeps it, and
/// `elastic-run --daemon` sends the whole environment), whose owner could swap the directory for a
/// link between its check and root's sweep of it, which removes files there.
pub fn pool_dir_of(
    user: &gangway_protocol::command::Submitter,
    runtime_dir: Option<&std::ffi::OsStr>,
) -> PathBuf {
    match runtime_dir.map(Path::new) {
        Some(runtime)
            if runtime.is_absolute()
                && gangway_protocol::command::check_directory(runtime, user).is_ok() =>
        {
            runtime.join("gangway")
        }
        _ => PathBuf::from(format!("/tmp/gangway-pool-{}", user.uid)),
    }
}

/// Makes `dir` (mode 0700) if it is not there, then checks it is a directory of `uid`'s, not a
/// link, that nobody else may enter.
pub fn check_private_dir(dir: &Path, uid: u32) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(format!("making {}: {e}", dir.display()));
        }
        _ => {}
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} must be a directory of uid {uid}'s with mode 0700 (it is uid {}'s {:?}, mode {:o})",
            dir.display(),
            meta.uid(),
            meta.file_type(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// A connection to the pool `name` in `dir`, started first if it is not serving; one spawner at a
/// time starts it (the others wait on its lock file).
fn connect_or_start(
    dir: &Path,
    name: &str,
    context: &Context,
    python: &Path,
    program: Option<&Program>,
) -> Result<UnixStream, String> {
    let socket = dir.join(format!("{name}.sock"));
    if socket.as_os_str().len() >= 108 {
        return Err(format!("{} is too long for a socket", socket.display()));
    }
    // Held until this returns: one spawner at a time starts the pool (and a sweep leaves it be).
    let _lock = lock_pool(&dir.join(format!("{name}.lock")), true)?
        .ok_or("the pool's lock file: not locked")?;
    if let Ok(stream) = connect(&socket) {
        return Ok(stream);
    }
    // A pool that could not start for this context is not tried again at every launch, for
    // FAILED_FOR (then the failure may have been a passing one).
    let failed = dir.join(format!("{name}.failed"));
    if let Ok(why) = crate::inherit::read_private(&failed, crate::inherit::this_user(), 4096) {
        let recent = std::fs::metadata(&failed)
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age < FAILED_FOR));
        if recent {
            return Err(String::from_utf8_lossy(&why).into_owned());
        }
        let _ = std::fs::remove_file(&failed);
    }
    sweep_stale(dir, name);
    let log_path = dir.join(format!("{name}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&log_path)
        .map_err(|e| format!("the pool's log: {e}"))?;
    let mut command = python_command(python, program);
    command
        .args(["-u", "-c", ZYGOTE])
        .arg(&socket)
        .arg(context.owner.0.to_string())
        .arg(&context.owner.1)
        .arg(IDLE.as_secs().to_string())
        // The cgroup it moves itself to before importing anything ("": stay).
        .arg(std::env::var_os(POOL_CGROUP_VAR).unwrap_or_default())
        .current_dir(dir)
        .env_clear()
        .envs(&context.env)
        .env(POOL_VAR, name)
        // Room in its environment's memory, where each worker writes its own over it (so that
        // /proc shows the worker's run token and attempt, as for a direct one).
        .env("GANGWAY_POOL_ROOM", " ".repeat(64 << 10))
        .stdin(Stdio::piped())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    // Out of the launch's process group, so that stopping the launch does not stop the pool; and
    // started as the spawner starts direct workers (no code between fork and exec), so that it
    // begins with the signal dispositions they would have.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command
        .spawn()
        .map_err(|e| format!("starting the pool: {e}"))?;
    let fingerprint = context.fingerprint.clone();
    let mut stdin = child.stdin.take().expect("piped");
    stdin
        .write_all(fingerprint.as_bytes())
        .map_err(|e| format!("starting the pool: {e}"))?;
    drop(stdin);
    let began = Instant::now();
    loop {
        if let Ok(stream) = connect(&socket) {
            return Ok(stream);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let last = log.lines().rev().find(|l| l.contains("gangway-pool["));
            let why = format!(
                "the pool exited at its start ({status}: {}; see {})",
                last.and_then(|l| l.split("]: ").nth(1))
                    .unwrap_or("no reason logged"),
                log_path.display()
            );
            let _ = std::fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&failed)
                .and_then(|mut f| f.write_all(why.as_bytes()));
            return Err(why);
        }
        if began.elapsed() > START_LIMIT {
            let _ = child.kill();
            return Err(format!("the pool did not start in {START_LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Locks a pool's lock file at `path` (made if absent), waiting for it with `wait`, else answering
/// `None` while another holds it. The lock is held while the file is open. A lock taken on a file
/// that a sweep removed meanwhile locks nothing, so that case takes the new file.
fn lock_pool(path: &Path, wait: bool) -> Result<Option<std::fs::File>, String> {
    loop {
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| format!("the pool's lock file: {e}"))?;
        let how = if wait {
            libc::LOCK_EX
        } else {
            libc::LOCK_EX | libc::LOCK_NB
        };
        // SAFETY: flock(2) on a descriptor we hold; released when `lock` is dropped.
        if unsafe { libc::flock(lock.as_raw_fd(), how) } != 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) if !wait => Ok(None),
                _ => Err(format!("locking the pool: {e}")),
            };
        }
        let held = lock.metadata().map_err(|e| e.to_string())?;
        let named = std::fs::symlink_metadata(path);
        if named.is_ok_and(|m| (m.dev(), m.ino()) == (held.dev(), held.ino())) {
            return Ok(Some(lock));
        }
    }
}

/// Removes what pools that are gone left in `dir` over a day ago: their sockets (a pool killed
/// leaves its socket, on which nothing listens), the logs of failed starts, their markers and their
/// locks. Each pool's files are named after its context, which includes its owner. A pool's files are
/// removed under its lock, taken without waiting (a spawner starting that pool holds it), and never
/// `own`'s, the pool whose lock the caller holds.
fn sweep_stale(dir: &Path, own: &str) {
    const STALE: Duration = Duration::from_secs(24 * 3600);
    const KINDS: [&str; 4] = ["sock", "log", "failed", "lock"];
    let old = |path: &Path| {
        std::fs::symlink_metadata(path)
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > STALE))
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut stale: Vec<String> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|e| KINDS.iter().any(|k| e == *k))
        })
        .filter(|path| old(path))
        .filter_map(|path| Some(path.file_stem()?.to_str()?.to_owned()))
        .filter(|stem| stem != own)
        .collect();
    stale.sort_unstable();
    stale.dedup();
    for stem in stale {
        let file = |kind: &str| dir.join(format!("{stem}.{kind}"));
        let socket = file("sock");
        let Ok(Some(_lock)) = lock_pool(&file("lock"), false) else {
            continue;
        };
        // A young socket, or one a pool serves, keeps every file of its pool (a young one's
        // pool may have been killed an hour ago: its log may say why).
        let refused = || {
            UnixStream::connect(&socket)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        };
        let serving = std::fs::symlink_metadata(&socket).is_ok() && (!old(&socket) || !refused());
        if serving {
            continue;
        }
        // The lock goes whatever its age: nobody else holds it, and a spawner that opened it
        // meanwhile takes the next one (`lock_pool`).
        for kind in KINDS {
            let path = file(kind);
            if kind == "lock" || old(&path) {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

/// A connection to the pool at `socket`, if one of this user's serves there.
fn connect(socket: &Path) -> Result<UnixStream, String> {
    let stream = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    let uid = peer_uid(stream.as_raw_fd()).map_err(|e| e.to_string())?;
    if uid != crate::inherit::this_user() {
        return Err(format!("the socket is served by uid {uid}"));
    }
    Ok(stream)
}

/// The user of the process at the other end of a Unix socket (`SO_PEERCRED`).
pub fn peer_uid(fd: RawFd) -> std::io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt(2) writes at most `len` bytes into `cred`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Sends `bytes` with `fds` attached (`SCM_RIGHTS`), all of `bytes` in one call.
fn send_with_fds(stream: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the sendmsg call, and the
    // control buffer is CMSG_SPACE bytes for one header carrying `fds`.
    let sent = unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = space as _;
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(header), fd_bytes);
        libc::sendmsg(stream.as_raw_fd(), &message, 0)
    };
    if sent < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The descriptors went with the first bytes; the rest follows as plain data.
    let mut writer = stream;
    writer.write_all(&bytes[sent as usize..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user's pool is in their runtime directory only while nobody else could change it (a root
    /// job's environment may name another user's).
    #[test]
    fn a_pool_is_in_the_runtime_directory_only_where_nobody_else_could_change_it() {
        use gangway_protocol::command::Submitter;
        use std::os::unix::fs::PermissionsExt;
        let me = Submitter::this_process();
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let runtime = dir.path().join("runtime");
        std::fs::create_dir(&runtime).unwrap();
        let fallback = PathBuf::from(format!("/tmp/gangway-pool-{}", me.uid));
        assert_eq!(
            pool_dir_of(&me, Some(runtime.as_os_str())),
            runtime.join("gangway")
        );
        assert_eq!(pool_dir_of(&me, Some("run".as_ref())), fallback);
        assert_eq!(pool_dir_of(&me, None), fallback);
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(pool_dir_of(&me, Some(runtime.as_os_str())), fallback);
        // Another user's (only root can make one).
        if me.uid == 0 {
            std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::os::unix::fs::chown(&runtime, Some(65534), Some(65534)).unwrap();
            assert_eq!(pool_dir_of(&me, Some(runtime.as_os_str())), fallback);
        }
    }

    /// Sets `path`'s times `ago` in the past (a socket, too, which cannot be opened).
    fn age(path: &Path, ago: Duration) {
        let then = std::time::SystemTime::now() - ago;
        let since = then.duration_since(std::time::UNIX_EPOCH).unwrap();
        let time = libc::timespec {
            tv_sec: since.as_secs() as libc::time_t,
            tv_nsec: 0,
        };
        let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: utimensat(2) with a NUL-terminated path and two timespecs.
        let rc =
            unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), [time, time].as_ptr(), 0) };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    }

    #[test]
    fn a_sweep_removes_what_dead_pools_left_over_a_day_ago_and_nothing_a_live_young_or_locked_one_has()
     {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str| dir.path().join(name);
        let two_days = Duration::from_secs(2 * 24 * 3600);
        // A pool killed two days ago: its socket (nothing listens), log and lock.
        drop(std::os::unix::net::UnixListener::bind(file("pool-dead.sock")).unwrap());
        // A pool killed an hour ago, and a pool serving for two days.
        drop(std::os::unix::net::UnixListener::bind(file("pool-young.sock")).unwrap());
        let _live = std::os::unix::net::UnixListener::bind(file("pool-live.sock")).unwrap();
        for pool in ["dead", "young", "live"] {
            for ext in ["log", "lock"] {
                std::fs::write(file(&format!("pool-{pool}.{ext}")), b"").unwrap();
            }
        }
        // A failed start's marker and log, with no socket ever.
        std::fs::write(file("pool-failed.failed"), b"").unwrap();
        std::fs::write(file("pool-failed.log"), b"").unwrap();
        // Pools killed two days ago whose lock is held: the caller's own, and one a spawner is
        // starting again (it holds the lock until it can connect).
        for pool in ["own", "starting"] {
            drop(
                std::os::unix::net::UnixListener::bind(file(&format!("pool-{pool}.sock"))).unwrap(),
            );
            std::fs::write(file(&format!("pool-{pool}.log")), b"").unwrap();
        }
        let _own = lock_pool(&file("pool-own.lock"), true).unwrap().unwrap();
        let _starting = lock_pool(&file("pool-starting.lock"), true)
            .unwrap()
            .unwrap();
        for name in std::fs::read_dir(dir.path()).unwrap() {
            let path = name.unwrap().path();
            if !path.to_string_lossy().contains("young") {
                age(&path, two_days);
            }
        }
        sweep_stale(dir.path(), "pool-own");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "pool-live.lock",
                "pool-live.log",
                "pool-live.sock",
                "pool-own.lock",
                "pool-own.log",
                "pool-own.sock",
                "pool-starting.lock",
                "pool-starting.log",
                "pool-starting.sock",
                "pool-young.lock",
                "pool-young.log",
                "pool-young.sock"
            ]
        );
        // A lock taken on a file a sweep removed meanwhile is not the lock: the next taker gets
        // the file that is there.
        let path = file("pool-x.lock");
        let first = lock_pool(&path, true).unwrap().unwrap();
        std::fs::remove_file(&path).unwrap();
        let second = lock_pool(&path, false).unwrap().expect("a new file, free");
        assert_ne!(
            first.metadata().unwrap().ino(),
            second.metadata().unwrap().ino()
        );
        assert!(lock_pool(&path, false).unwrap().is_none(), "held");
    }

    #[test]
    fn a_launchs_own_variables_are_not_the_pools_context() {
        for name in [
            "GANGWAY_RUN_TOKEN",
            "GANGWAY_ATTEMPT",
            "RANK",
            "MASTER_PORT",
            "TORCHELASTIC_RUN_ID",
            "CUDA_VISIBLE_DEVICES",
            "OMP_NUM_THREADS",
        ] {
            assert!(launch_own(name), "{name}");
        }
        for name in [
            "PATH",
            "PYTHONPATH",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "MKL_NUM_THREADS",
            PRELOAD_VAR,
        ] {
            assert!(!launch_own(name), "{name}");
        }
    }

    #[test]
    fn the_pool_directory_must_be_private_and_the_users_own() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let uid = crate::inherit::this_user();
        let dir = base.path().join("pool");
        check_private_dir(&dir, uid).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let why = check_private_dir(&dir, uid).unwrap_err();
        assert!(why.contains("mode 755"), "{why}");
        let link = base.path().join("link");
        std::os::unix::fs::symlink(base.path().join("elsewhere"), &link).unwrap();
        std::fs::create_dir(base.path().join("elsewhere")).unwrap();
        assert!(check_private_dir(&link, uid).is_err());
        let mine = base.path().join("mine");
        check_private_dir(&mine, uid).unwrap();
        assert!(check_private_dir(&mine, uid + 1).is_err());
    }

    /// (That the descriptors arrive is what every pool launch shows: the workers write to them.)
    #[test]
    fn a_message_sent_with_descriptors_arrives_whole_from_this_user() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        send_with_fds(&a, b"hello\n", &[file.as_raw_fd()]).unwrap();
        let mut buf = [0u8; 6];
        b.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hello\n");
        assert_eq!(
            peer_uid(b.as_raw_fd()).unwrap(),
            crate::inherit::this_user()
        );
    }
}
