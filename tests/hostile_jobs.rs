//! A hostile local user against a daemon run as root with process workers, as a shared GPU server
//! runs it (issue 28): a job that swaps the files it was told of for FIFOs and links to `/dev/zero`,
//! floods what it was handed, swaps a program after its submission, or leaves an orphan behind.
//! The daemon runs jobs as their submitters only as root, so these need root and a second,
//! unprivileged user (`nobody`); they skip elsewhere, and fail in CI, which runs as root.

mod support;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const NOBODY: u32 = 65534;

/// Whether this test may run: as root only (skipping says why; in CI it fails).
fn as_root() -> bool {
    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        support::skip("only a daemon run as root runs jobs as other users");
    }
    root
}

/// A root daemon with process workers on one fake GPU, whose `elastic-run` is `elastic_run`,
/// listening on `listen` (a 0666 socket when it is one).
struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
    listen: String,
    elastic_run: PathBuf,
    /// `gangway serve`'s flags beyond [`serve`]'s own.
    flags: Vec<String>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// On a Unix socket anyone may connect to, with a stand-in `elastic-run` running `fake`.
    fn on_socket(fake: &str) -> Daemon {
        Daemon::on_socket_with(fake, &[])
    }

    /// [`Daemon::on_socket`], `gangway serve` given `flags` too.
    fn on_socket_with(fake: &str, flags: &[&str]) -> Daemon {
        let dir = shared_tempdir();
        let elastic_run = dir.path().join("elastic-run");
        support::stand_in_elastic_run(&elastic_run, fake);
        let listen = format!("unix:{}", dir.path().join("gangway.sock").display());
        let flags = flags.iter().map(|f| f.to_string()).collect();
        Daemon::start(dir, listen, elastic_run, flags)
    }

    /// On TCP (its token's holders are the daemon's own user: root), with the real `elastic-run`.
    fn on_tcp() -> Daemon {
        let dir = shared_tempdir();
        let listen = format!("127.0.0.1:{}", support::free_port());
        Daemon::start(
            dir,
            listen,
            env!("CARGO_BIN_EXE_elastic-run").into(),
            Vec::new(),
        )
    }

    fn start(
        dir: tempfile::TempDir,
        listen: String,
        elastic_run: PathBuf,
        flags: Vec<String>,
    ) -> Daemon {
        let child = serve(dir.path(), &listen, &elastic_run, &flags);
        let daemon = Daemon {
            child,
            dir,
            listen,
            elastic_run,
            flags,
        };
        daemon.wait_until_answering();
        daemon
    }

    fn wait_until_answering(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.get("/healthz", Duration::from_secs(2)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the daemon did not answer\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the daemon with SIGKILL and starts it again on the same journal.
    fn restart(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.child = serve(
            self.dir.path(),
            &self.listen,
            &self.elastic_run,
            &self.flags,
        );
        self.wait_until_answering();
    }

    fn journal(&self) -> PathBuf {
        self.dir.path().join("journal")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    fn socket(&self) -> Option<&str> {
        self.listen.strip_prefix("unix:")
    }

    /// A request's status and body, or why none came within `timeout`.
    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<(u16, String), String> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let token = std::fs::read_to_string(self.journal().join("api-token")).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            token.trim(),
            body.len()
        );
        let answer = match self.socket() {
            Some(socket) => exchange(UnixStream::connect(socket), &head, timeout),
            None => exchange(std::net::TcpStream::connect(&self.listen), &head, timeout),
        }
        .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = answer
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("{method} {path}: no status in {answer:?}"))?;
        let body = answer
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_owned();
        Ok((status, body))
    }

    fn get(&self, path: &str, timeout: Duration) -> Result<(u16, String), String> {
        self.request("GET", path, None, timeout)
    }

    /// Cancels job `id` as the daemon's own user (root), waiting for the answer up to a minute.
    fn cancel(&self, id: u64) {
        let answer = self.request(
            "DELETE",
            &format!("/jobs/{id}"),
            None,
            Duration::from_secs(60),
        );
        assert!(
            matches!(answer, Ok((200, _))),
            "cancelling {id}: {answer:?}"
        );
    }

    fn job(&self, id: u64) -> Value {
        let (_, body) = self
            .get(&format!("/jobs/{id}"), Duration::from_secs(10))
            .unwrap();
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }

    /// Waits until job `id` is in one of `phases`, while checking that the daemon answers
    /// `/healthz` promptly all along.
    fn wait_for_phase(&self, id: u64, phases: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            assert_answers_promptly(self);
            let job = self.job(id);
            if phases.iter().any(|p| job["phase"] == *p) {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} never reached {phases:?}: {job}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The daemon's resident memory, in kB.
    fn rss_kb(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }
}

/// `gangway serve` with process workers on one fake GPU, its journal and log in `dir`, and `flags`.
fn serve(dir: &Path, listen: &str, elastic_run: &Path, flags: &[String]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("daemon.log"))
        .unwrap();
    Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["serve", "--fake-gpus", "1", "--workers", "processes"])
        .args(["--round", "1", "--listen", listen, "--socket-mode", "666"])
        .arg("--elastic-run")
        .arg(elastic_run)
        .arg("--journal")
        .arg(dir.join("journal"))
        .args(flags)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// A temporary directory others may enter (the jobs of `nobody` run beneath it).
fn shared_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Writes `head` on a fresh connection and reads the whole answer, within `timeout` each way.
fn exchange<S: Read + Write + TimeoutSocket>(
    stream: std::io::Result<S>,
    head: &str,
    timeout: Duration,
) -> std::io::Result<String> {
    let mut stream = stream?;
    stream.timeouts(timeout)?;
    stream.write_all(head.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// Sockets whose reads and writes time out.
trait TimeoutSocket {
    fn timeouts(&self, timeout: Duration) -> std::io::Result<()>;
}

impl TimeoutSocket for UnixStream {
    fn timeouts(&self, timeout: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(timeout))?;
        self.set_write_timeout(Some(timeout))
    }
}

impl TimeoutSocket for std::net::TcpStream {
    fn timeouts(&self, timeout: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(timeout))?;
        self.set_write_timeout(Some(timeout))
    }
}

/// The daemon answers `/healthz` and `/jobs` within 3 s (a frozen actor answers neither).
fn assert_answers_promptly(daemon: &Daemon) {
    for path in ["/healthz", "/jobs"] {
        let answer = daemon.get(path, Duration::from_secs(3));
        assert!(
            matches!(answer, Ok((200, _))),
            "{path}: {answer:?}\n{}",
            daemon.log()
        );
    }
}

/// `nobody`'s home under the daemon's directory, where its jobs run.
fn home_of_nobody(daemon: &Daemon) -> PathBuf {
    let home = daemon.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(NOBODY), Some(NOBODY)).unwrap();
    home
}

/// `nobody` submits a job over the daemon's socket with `elastic-run --daemon`, and follows it.
fn submit_as_nobody(daemon: &Daemon, job: &str, env: &[(&str, &str)]) -> Child {
    nobodys_submission(daemon, job, &[])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// `elastic-run --daemon`, with `options`, as `nobody` in their home: a job of theirs to submit.
fn nobodys_submission(daemon: &Daemon, job: &str, options: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_elastic-run"));
    command
        .args(["--daemon", &daemon.listen, "--python", "/bin/sh"])
        .args(["--job-id", job])
        .args(options)
        .args(["--expected-runtime", "60", "train.py"])
        .current_dir(home_of_nobody(daemon))
        .uid(NOBODY)
        .gid(NOBODY)
        // Not cargo's library path for the tests: the job needs none (the daemon would check each
        // of its directories).
        .env_remove("LD_LIBRARY_PATH");
    command
}

/// The id of the newest job, once there is one newer than `after`.
fn newest_job(daemon: &Daemon, after: Option<u64>) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = daemon.get("/jobs", Duration::from_secs(5)).unwrap();
        let jobs: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if let Some(id) = jobs
            .as_array()
            .and_then(|all| all.iter().filter_map(|j| j["id"].as_u64()).max())
            && after.is_none_or(|a| id > a)
        {
            return id;
        }
        assert!(Instant::now() < deadline, "no job was submitted: {body}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The stand-in `elastic-run` of the first two tests: as its job's user, it does to every file it
/// was told of what `$ATTACK` says, floods the descriptors it was handed, then ends as it was asked.
const HOSTILE_ELASTIC_RUN: &str = r#"#!/bin/bash
for f in "$GANGWAY_PROGRESS_FILE" "$GANGWAY_EXIT_FILE" "$GANGWAY_POLICY_BATCH_FILE"; do
  [ -n "$f" ] || continue
  rm -f "$f"
  case "$ATTACK" in
    fifo) mkfifo "$f" ;;
    zero) ln -s /dev/zero "$f" ;;
  esac
done
# All it can do with what it was handed: far more than a report, and nothing that parses.
[ -n "$GANGWAY_PROGRESS_FD" ] && head -c 20000000 /dev/zero >&"$GANGWAY_PROGRESS_FD"
[ -n "$GANGWAY_EXIT_FD" ] && head -c 20000000 /dev/zero >&"$GANGWAY_EXIT_FD"
sleep 2
exit 0
"#;

/// Issue 28, items 1 and 3: a job that swaps its progress and exit files for FIFOs (the daemon
/// froze opening one, for good, and again at recovery) or links them to `/dev/zero` (the daemon read
/// it without bound: 2.8 GB resident at each retry).
#[test]
fn a_job_that_swaps_its_files_for_fifos_or_dev_zero_never_freezes_or_bloats_the_daemon() {
    if !as_root() {
        return;
    }
    let mut daemon = Daemon::on_socket(HOSTILE_ELASTIC_RUN);
    // Nothing of the daemon's is theirs to reach: the journal, and the attempts' files beside it.
    let journal = daemon.journal();
    for dir in [journal.clone(), journal.join("runs")] {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
    }
    let before = daemon.rss_kb();
    let mut last = None;
    for attack in ["fifo", "zero"] {
        let mut follower = submit_as_nobody(&daemon, attack, &[("ATTACK", attack)]);
        let id = newest_job(&daemon, last);
        last = Some(id);
        // It ends without a report the daemon can read: a crash, retried, then failed; all the
        // while the daemon answers.
        daemon.wait_for_phase(id, &["failed"]);
        let _ = follower.kill();
        let _ = follower.wait();
        assert_answers_promptly(&daemon);
    }
    let after = daemon.rss_kb();
    eprintln!("the daemon's resident memory: {before} kB before the attacks, {after} kB after");
    assert!(
        after < before + 200_000,
        "the daemon grew from {before} kB to {after} kB"
    );
    // A daemon killed and restarted recovers (it once hung there on the same FIFO).
    daemon.restart();
    assert_answers_promptly(&daemon);
}

/// Issue 28, item 2: a program in a directory anyone may write, swapped by another user after its
/// job was submitted, ran as root at launch. It is refused at submission, and a directory opened
/// up after the submission is caught at launch, before anything runs.
#[test]
fn a_program_swapped_after_submission_never_runs_as_root() {
    if !as_root() {
        return;
    }
    let daemon = Daemon::on_tcp();
    let dir = daemon.dir.path();
    let work = dir.join("work");
    std::fs::create_dir(&work).unwrap();
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    // The interpreter: root's own copy of a shell (a binary, run by its descriptor).
    let python = shared.join("python");
    std::fs::copy("/bin/dash", &python)
        .or_else(|_| std::fs::copy("/bin/sh", &python))
        .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        work.join("hold.sh"),
        "trap 'exit 0' TERM\nsleep 600 &\nwait\n",
    )
    .unwrap();
    std::fs::write(work.join("train.sh"), "echo legit > ran\n").unwrap();
    let request = |python: &Path, script: &str| {
        json!({
            "gpus": 1,
            "work": 60.0,
            "run": {
                "args": ["--python", python, "--spawn", "direct", "--grace", "1", "--job-id", script, script],
                "cwd": work,
                "env": {"PATH": "/usr/bin:/bin"},
            }
        })
    };
    let submit = |body: &Value| {
        daemon
            .request("POST", "/jobs", Some(body), Duration::from_secs(10))
            .unwrap()
    };
    // Refused at submission while anyone may write its directory.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (status, body) = submit(&request(&python, "train.sh"));
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("shared is writable by everyone"), "{body}");
    // Accepted while only root may; it waits behind a job that holds the one GPU.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (status, held) = submit(&request(Path::new("/bin/sh"), "hold.sh"));
    assert_eq!(status, 201, "{held}");
    let held: Value = serde_json::from_str(&held).unwrap();
    let holder = held["id"].as_u64().unwrap();
    daemon.wait_for_phase(holder, &["running"]);
    let (status, body) = submit(&request(&python, "train.sh"));
    assert_eq!(status, 201, "{body}");
    let waiting = serde_json::from_str::<Value>(&body).unwrap()["id"]
        .as_u64()
        .unwrap();
    // Then the directory is opened to everyone, and another user swaps the program.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let swapped = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "rm -f {python} && printf '#!/bin/sh\\nid -u > {pwned}\\n' > {python} && chmod 755 {python}",
            python = python.display(),
            pwned = work.join("pwned").display()
        ))
        .uid(NOBODY)
        .gid(NOBODY)
        .status()
        .unwrap();
    assert!(swapped.success());
    daemon.cancel(holder);
    let job = daemon.wait_for_phase(waiting, &["failed", "finished"]);
    assert_eq!(job["phase"], "failed", "{job}");
    assert!(!work.join("pwned").exists(), "the swapped program ran");
    assert!(!work.join("ran").exists());
    let log = daemon.log();
    assert!(
        log.contains("its program may not run") && log.contains("shared is writable by everyone"),
        "{log}"
    );
}

/// The stand-in `elastic-run` of the orphan test: it leaves a process in a session of its own with
/// an empty environment (nothing marks it as the job's), then ends as `$END` says.
const ORPHANING_ELASTIC_RUN: &str = r#"#!/bin/bash
cd "$GANGWAY_WORKDIR" || exit 1
# How it ended, where the daemon reads it (a descriptor it handed over, or a file it named).
report() {
  if [ -n "$GANGWAY_EXIT_FD" ]; then echo "$1" >&"$GANGWAY_EXIT_FD"; else echo "$1" > "$GANGWAY_EXIT_FILE"; fi
}
env -i setsid sh -c 'echo $$ > orphan.pid; exec sleep 600' </dev/null >/dev/null 2>&1 &
while [ ! -s orphan.pid ]; do sleep 0.01; done
if [ "$END" = finish ]; then
  report '{"code":0,"why":"done"}'
  exit 0
fi
trap 'report "{\"code\":75,\"why\":\"stopped\"}"; exit 75' TERM
while true; do sleep 0.1; done
"#;

/// Whether `pid` is a live process running `sleep` (not a zombie, nor a reused pid).
fn sleeping(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
}

/// Issue 28, item 6: `env -i setsid sleep &` in a job outlived its end and its cancel (processes were
/// found by an environment marker only). Nothing of a job outlives it: its cgroup holds them all.
#[test]
fn nothing_a_job_started_outlives_its_end_or_its_cancel() {
    if !as_root() {
        return;
    }
    let daemon = Daemon::on_socket(ORPHANING_ELASTIC_RUN);
    let pidfile = home_of_nobody(&daemon).join("orphan.pid");
    let mut last = None;
    for end in ["finish", "cancel"] {
        let _ = std::fs::remove_file(&pidfile);
        let mut follower = submit_as_nobody(&daemon, end, &[("END", end)]);
        let id = newest_job(&daemon, last);
        last = Some(id);
        let deadline = Instant::now() + Duration::from_secs(30);
        let orphan: i32 = loop {
            if let Some(pid) = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                break pid;
            }
            assert!(
                Instant::now() < deadline,
                "the orphan never started\n{}",
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        if end == "cancel" {
            daemon.wait_for_phase(id, &["running"]);
            daemon.cancel(id);
        }
        daemon.wait_for_phase(id, &["finished", "cancelled"]);
        let _ = follower.kill();
        let _ = follower.wait();
        let deadline = Instant::now() + Duration::from_secs(20);
        while sleeping(orphan) {
            assert!(
                Instant::now() < deadline,
                "{end}: the orphan {orphan} outlived its job\n{}",
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The stand-in `elastic-run` of the fork test: as its job's user, it forks until it is refused,
/// keeping every child, writes their pids to `forked`, and waits to be stopped.
const FORKING_ELASTIC_RUN: &str = r#"#!/bin/bash
cd "$GANGWAY_WORKDIR" || exit 1
exec python3 -c '
import os, signal
kids = []
try:
    for _ in range(1000):
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        kids.append(pid)
except OSError:
    pass
with open("forked.part", "w") as f:
    f.write("".join(f"{pid}\n" for pid in kids))
os.rename("forked.part", "forked")
signal.pause()
'
"#;

/// Jobs run through a root daemon escape their users' own limits (no login session sets them), so
/// a job forking without end took every pid of the machine, the daemon's next fork included. Each
/// attempt's tasks are bounded (`--max-tasks-per-job`), and its children end with it.
#[test]
fn a_job_that_forks_without_end_is_held_to_its_bound_and_ends_with_its_children() {
    if !as_root() {
        return;
    }
    let daemon = Daemon::on_socket_with(FORKING_ELASTIC_RUN, &["--max-tasks-per-job", "64"]);
    let log = daemon.log();
    if !log.contains("its tasks are bounded") {
        support::skip(&format!("no cgroup bounds tasks here: {log}"));
        return;
    }
    let forked = home_of_nobody(&daemon).join("forked");
    let mut follower = submit_as_nobody(&daemon, "forks", &[]);
    let id = newest_job(&daemon, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    let kids: Vec<i32> = loop {
        if let Ok(text) = std::fs::read_to_string(&forked) {
            break text.lines().map(|l| l.parse().unwrap()).collect();
        }
        assert!(
            Instant::now() < deadline,
            "the job never said what it forked\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Below the bound: elastic-run's interpreter counts too.
    assert!(
        (8..64).contains(&kids.len()),
        "{} children under a bound of 64",
        kids.len()
    );
    assert_answers_promptly(&daemon);
    daemon.wait_for_phase(id, &["running"]);
    daemon.cancel(id);
    daemon.wait_for_phase(id, &["cancelled"]);
    let _ = follower.kill();
    let _ = follower.wait();
    let alive = |pid: &i32| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"python3\0"))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while kids.iter().any(alive) {
        assert!(
            Instant::now() < deadline,
            "the job's children outlived it\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A stand-in `elastic-run` that runs until it is stopped.
const WAITING_ELASTIC_RUN: &str = r#"#!/bin/bash
trap 'echo "{\"code\":75,\"why\":\"stopped\"}" >&"$GANGWAY_EXIT_FD"; exit 75' TERM
while true; do sleep 0.1; done
"#;

/// `gangway ARGS` against the daemon's socket, as `uid`: whether it succeeded, and what it said.
fn gangway_as(daemon: &Daemon, uid: u32, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(args)
        .args(["--daemon", &daemon.listen])
        .current_dir("/")
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}

/// A user who may reach the socket submits jobs that run as them: they may cancel those, and only
/// those; taking GPUs out of service, and weighing a job above the default, is the operator's (the
/// daemon's user, or root).
#[test]
fn another_user_may_cancel_only_their_own_jobs_and_never_cordon() {
    if !as_root() {
        return;
    }
    let daemon = Daemon::on_socket(WAITING_ELASTIC_RUN);
    let mut theirs = submit_as_nobody(&daemon, "theirs", &[]);
    let their_job = newest_job(&daemon, None);
    // Root's own job, submitted over the same socket.
    let mut mine = Command::new(env!("CARGO_BIN_EXE_elastic-run"))
        .args([
            "--daemon",
            &daemon.listen,
            "--python",
            "/bin/sh",
            "--job-id",
            "mine",
        ])
        .args(["--expected-runtime", "60", "train.py"])
        .current_dir(daemon.dir.path())
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let my_job = newest_job(&daemon, Some(their_job));
    let (ok, said) = gangway_as(&daemon, NOBODY, &["cancel", &my_job.to_string()]);
    assert!(
        !ok && said.contains("is not yours"),
        "{said}\n{}",
        daemon.log()
    );
    let (ok, said) = gangway_as(&daemon, NOBODY, &["cordon", "0"]);
    assert!(
        !ok && said.contains("may not take GPUs in or out of service"),
        "{said}"
    );
    // Nor may they weigh their jobs above everyone else's; the operator may (that job is then
    // refused for having no command, which this daemon's process workers need).
    let weighed = ["submit", "--gpus", "1", "--work", "60", "--weight", "5"];
    let (ok, said) = gangway_as(&daemon, NOBODY, &weighed);
    assert!(
        !ok && said.contains("only the daemon's operator (its user, or root) may give a job more"),
        "{said}"
    );
    let (ok, said) = gangway_as(&daemon, 0, &weighed);
    assert!(!ok && said.contains("a job needs a command"), "{said}");
    // Nor take a team's share, or invent tenants for more shares: their own name only.
    let (ok, said) = gangway_as(
        &daemon,
        NOBODY,
        &[
            "submit", "--gpus", "1", "--work", "60", "--tenant", "team-a",
        ],
    );
    assert!(
        !ok && said.contains(&format!("uid {NOBODY} may submit under `nobody` only")),
        "{said}"
    );
    assert!(daemon.job(my_job)["phase"] != "cancelled");
    let (ok, said) = gangway_as(&daemon, NOBODY, &["cancel", &their_job.to_string()]);
    assert!(ok, "{said}");
    daemon.wait_for_phase(their_job, &["cancelled"]);
    let (ok, said) = gangway_as(&daemon, 0, &["cancel", &my_job.to_string()]);
    assert!(ok, "{said}");
    daemon.wait_for_phase(my_job, &["cancelled"]);
    for follower in [&mut theirs, &mut mine] {
        let _ = follower.kill();
        let _ = follower.wait();
    }
}

/// Another user may keep only so many unfinished jobs on a root daemon (each is memory and journal
/// the daemon keeps): one more is a 429 that names the limit and its flag. And they submit under the
/// tenants the operator gave them, in place of their own name.
#[test]
fn another_users_tenants_and_unfinished_jobs_are_the_operators_to_give() {
    if !as_root() {
        return;
    }
    // The operator gives nobody a team's tenant, which is then theirs, in place of their own name.
    let private = tempfile::tempdir().unwrap();
    let tenants = private.path().join("tenants.csv");
    std::fs::write(&tenants, "user,tenant\nnobody,team-a\n").unwrap();
    let daemon = Daemon::on_socket_with(
        WAITING_ELASTIC_RUN,
        &[
            "--max-jobs-per-user",
            "1",
            "--tenants",
            tenants.to_str().unwrap(),
        ],
    );
    let submit = |tenant: &str| {
        let args = ["submit", "--gpus", "1", "--work", "60", "--tenant", tenant];
        gangway_as(&daemon, NOBODY, &args)
    };
    let (ok, said) = submit("nobody");
    assert!(
        !ok && said.contains("`team-a` only (the tenants the operator gave it"),
        "{said}"
    );
    // Past the tenant, refused for what this daemon needs of every job: a command. A request
    // naming no tenant (the API's `default`) goes under the one they were given.
    for tenant in ["team-a", "default"] {
        let (ok, said) = submit(tenant);
        assert!(
            !ok && said.contains("a job needs a command"),
            "{tenant}: {said}"
        );
    }
    let nobodys = |job: &str| nobodys_submission(&daemon, job, &["--tenant", "team-a"]);
    let quiet = |mut command: Command| {
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut first = quiet(nobodys("first"));
    let job = newest_job(&daemon, None);
    let second = nobodys("second").output().unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{said}");
    assert!(
        said.contains(&format!("uid {NOBODY} has 1 unfinished jobs"))
            && said.contains("--max-jobs-per-user"),
        "{said}"
    );
    let (ok, said) = gangway_as(&daemon, NOBODY, &["cancel", &job.to_string()]);
    assert!(ok, "{said}");
    daemon.wait_for_phase(job, &["cancelled"]);
    let _ = first.kill();
    let _ = first.wait();
    let mut third = quiet(nobodys("third"));
    let last = newest_job(&daemon, Some(job));
    // Cancelled, not left running: the daemon's jobs outlive it.
    let (ok, said) = gangway_as(&daemon, NOBODY, &["cancel", &last.to_string()]);
    assert!(ok, "{said}");
    daemon.wait_for_phase(last, &["cancelled"]);
    let _ = third.kill();
    let _ = third.wait();
}

/// What another user runs to reach a socket: `refused ERRNO` (no connection), `closed` (connected,
/// then closed on without a word), or `answer BYTES` (what it was told after sending a request).
const CONNECT: &str = "import socket, sys\n\
s = socket.socket(socket.AF_UNIX)\n\
try:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    print('refused', e.errno)\n    sys.exit()\n\
s.settimeout(10)\n\
try:\n    s.sendall(b'{}\\n')\n    answer = s.recv(100)\n\
except (BrokenPipeError, ConnectionResetError):\n    answer = b''\n\
print('answer', answer) if answer else print('closed')\n";

/// A user's warm pool (`elastic-run --spawn pool`) serves that user only: another cannot enter its
/// directory; one who reaches its socket anyway (a hard link where they may enter, its mode
/// opened) is closed on unserved, and the pool logs it; and they cannot read the pool's
/// environment, which holds the user's.
#[test]
fn another_user_cannot_reach_a_users_warm_pool() {
    if !as_root() {
        return;
    }
    let Some(python) = support::torch_python() else {
        return;
    };
    let dir = shared_tempdir();
    let runtime = dir.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = dir.path().join("hold.py");
    std::fs::write(
        &script,
        "import os, time\nwhile not os.path.exists('release'):\n    time.sleep(0.05)\n",
    )
    .unwrap();
    let job = Command::new(env!("CARGO_BIN_EXE_elastic-run"))
        .args(["--fake-gpus", "1", "--gpus", "1", "--python", &python])
        .args(["--spawn", "pool", "--job-id", "held", "--checkpoint-dir"])
        .arg(dir.path().join("checkpoints"))
        .arg(&script)
        .current_dir(dir.path())
        .env("XDG_RUNTIME_DIR", &runtime)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pool_dir = runtime.join("gangway");
    let in_pool_dir = |suffix: &str| -> Option<PathBuf> {
        std::fs::read_dir(&pool_dir)
            .ok()?
            .filter_map(|e| Some(e.ok()?.path()))
            .find(|p| p.to_string_lossy().ends_with(suffix))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let socket = loop {
        if let Some(socket) = in_pool_dir(".sock") {
            break socket;
        }
        assert!(
            Instant::now() < deadline,
            "no pool socket in {}",
            pool_dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mode = std::fs::metadata(&pool_dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the pool's directory is private");
    let as_nobody = |path: &Path| {
        let out = Command::new("/usr/bin/python3")
            .args(["-c", CONNECT])
            .arg(path)
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
            + &String::from_utf8_lossy(&out.stderr)
    };
    assert_eq!(as_nobody(&socket), "refused 13", "EACCES at the directory");
    let link = dir.path().join("pool.sock");
    std::fs::hard_link(&socket, &link).unwrap();
    std::fs::set_permissions(&link, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(
        as_nobody(&link),
        "closed",
        "connected through the link, and closed on unserved"
    );
    let log = std::fs::read_to_string(in_pool_dir(".log").unwrap()).unwrap();
    assert!(
        log.contains(&format!("refused a connection from uid {NOBODY}")),
        "{log}"
    );
    // Nor can they read what the pool holds: its environment is the user's.
    let pool = log
        .lines()
        .find_map(|l| {
            l.split("gangway-pool[")
                .nth(1)?
                .split(']')
                .next()?
                .parse::<i32>()
                .ok()
        })
        .expect("the pool's pid in its log");
    let read = Command::new("/bin/cat")
        .arg(format!("/proc/{pool}/environ"))
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    assert!(!read.status.success(), "nobody read the pool's environment");
    std::fs::write(dir.path().join("release"), "").unwrap();
    let out = job.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the user's own job ran through the pool: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("no warm pool"));
}
