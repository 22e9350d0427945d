//! `gangway serve` and its clients, end to end: submit, list, show, cancel, events, metrics; bad
//! requests that are refused without changing anything; the token, the `Host` check and the other
//! guards of the API; Unix sockets; connection limits.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::cargo_bin_cmd;
use serde_json::{Value, json};

mod support;

// Its file-holding server is for the launcher's tests alone.
#[path = "../launcher/tests/fuse/mod.rs"]
#[allow(dead_code)]
mod fuse;

use support::Api;

struct Daemon {
    child: Child,
    addr: String,
    api: Api,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn gangway() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gangway"))
}

/// `gangway serve` on 4 fake GPUs, with `extra` options, on TCP at `port`.
fn serve_command(journal: &Path, port: u16, extra: &[&str]) -> Command {
    let mut command = gangway();
    command
        .args(["serve", "--fake-gpus", "4", "--policy", "fifo"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--journal")
        .arg(journal)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// Starts a daemon on 4 fake GPUs, 50 times faster than real time.
fn daemon(journal: &Path) -> Daemon {
    daemon_with(journal, support::free_port(), &["--time-scale", "50"])
}

fn daemon_with(journal: &Path, port: u16, extra: &[&str]) -> Daemon {
    start(serve_command(journal, port, extra), journal, port)
}

fn start(mut command: Command, journal: &Path, port: u16) -> Daemon {
    let child = command.spawn().unwrap();
    let addr = format!("127.0.0.1:{port}");
    let base = format!("http://{addr}");
    support::wait_until_answering(&base);
    Daemon {
        child,
        api: Api::new(&base, journal, Duration::from_secs(10)),
        addr,
    }
}

fn status_and_body(
    response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> (u16, Value) {
    let mut response = response.unwrap();
    let status = response.status().as_u16();
    (
        status,
        response.body_mut().read_json().unwrap_or(Value::Null),
    )
}

/// Waits until job `id` is in `phase` (30 s at most); what the daemon last said of it.
fn wait_for_phase(api: &Api, id: u32, phase: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, job) = status_and_body(api.get(&format!("/jobs/{id}")));
        if job["phase"] == phase {
            return job;
        }
        assert!(Instant::now() < deadline, "job {id} never {phase}: {job}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `gangway ARGS`.
fn run(args: &[&str]) -> Output {
    cargo_bin_cmd!("gangway").args(args).output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_requests_get_a_clear_4xx_with_a_json_body_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(&dir.path().join("journal"));
    let post = |body: &str| status_and_body(d.api.post_raw("/jobs", body, &[]));
    let cases: &[(&str, u16, &str)] = &[
        (r#"{"gpus": 1"#, 400, "EOF"),
        (r#"{"gpus": 1}"#, 422, "missing field `work`"),
        (
            r#"{"gpus": 0, "work": 60}"#,
            422,
            "gpus: must be at least 1",
        ),
        (
            r#"{"gpus": 1, "work": -5}"#,
            422,
            "work: must be a positive number",
        ),
        (
            r#"{"gpus": 8, "work": 60}"#,
            422,
            "gpus: job type \"default\" cannot run here: no GPU type has 8 GPUs",
        ),
        (
            r#"{"gpus": 1, "work": 60, "id": 7}"#,
            422,
            "id: the control plane numbers jobs",
        ),
        // Unknown fields are named, all of them, nested ones with their path.
        (
            r#"{"gpus": 1, "work": 60, "tenat": "x", "prio": 1}"#,
            400,
            "unknown fields `prio`, `tenat`",
        ),
        (
            r#"{"gpus": 1, "work": 60, "run": {"args": ["t.py"], "cwd": "/", "evn": {}}}"#,
            400,
            "`run.evn`",
        ),
        (r#"{"gpus": "one", "work": 60}"#, 422, "gpus: invalid type"),
        // Numbers are bounded, and the limit is named.
        (
            r#"{"gpus": 1, "work": 1e308}"#,
            422,
            "work: 1e308 is above the limit of 1e9",
        ),
        (
            r#"{"gpus": 100000, "work": 60}"#,
            422,
            "gpus: 100000 is above the limit of 65536",
        ),
        (
            r#"{"gpus": 1, "work": 60, "weight": 1e300}"#,
            422,
            "weight: must be a number from",
        ),
        // Control characters in names.
        (
            r#"{"gpus": 1, "work": 60, "tenant": "a\u0000b\n\u001b[31m"}"#,
            422,
            "tenant: must not contain control characters",
        ),
        (
            r#"{"gpus": 1, "work": 60, "job_type": "x\u0007"}"#,
            422,
            "job_type: must not contain control characters",
        ),
        (r#"[1, 2]"#, 400, "must be a JSON object"),
        // A key given twice, which serde would read as its last value.
        (
            r#"{"gpus": 1, "work": 60, "run": {"args": ["t.py"], "cwd": "/", "env": {"PATH": "/bin", "PATH": "/tmp/evil"}}}"#,
            422,
            "run.env: `PATH` is given twice",
        ),
    ];
    for &(body, status, message) in cases {
        let (got, answer) = post(body);
        assert_eq!(got, status, "{body}: {answer}");
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(message),
            "{body}: `{error}` should say `{message}`"
        );
        assert!(!error.chars().any(char::is_control), "{error}");
    }
    let (status, answer) = status_and_body(d.api.get("/jobs"));
    assert_eq!(
        (status, answer),
        (200, json!([])),
        "refused requests added nothing"
    );

    // Every error has a JSON body, whatever made it.
    let agent = support::agent(Duration::from_secs(10));
    let base = &d.api.base;
    let auth = d.api.authorization.as_str();
    let errors = [
        (
            agent
                .get(format!("{base}/jobs/12"))
                .header("Authorization", auth)
                .call(),
            404,
            "does not exist",
        ),
        (
            agent
                .get(format!("{base}/nowhere"))
                .header("Authorization", auth)
                .call(),
            404,
            "no GET /nowhere",
        ),
        (
            agent
                .put(format!("{base}/jobs"))
                .header("Authorization", auth)
                .send_empty(),
            405,
            "does not take PUT",
        ),
        (
            agent
                .delete(format!("{base}/jobs/x"))
                .header("Authorization", auth)
                .call(),
            400,
            "not a job id",
        ),
        (
            agent
                .post(format!("{base}/jobs"))
                .header("Authorization", auth)
                .header("content-type", "text/plain")
                .send("{}"),
            415,
            "Content-Type",
        ),
        (
            agent
                .post(format!("{base}/gpus/cordon"))
                .header("Authorization", auth)
                .send_json(json!({"gpu": [1]})),
            400,
            "unknown field `gpu`",
        ),
        (
            agent.get(format!("{base}/jobs")).call(),
            401,
            "Authorization",
        ),
    ];
    let mut answers: Vec<(u16, String, &str)> = errors
        .into_iter()
        .map(|(response, status, message)| {
            let mut response = response.unwrap();
            assert_eq!(response.status().as_u16(), status);
            (
                status,
                response.body_mut().read_to_string().unwrap(),
                message,
            )
        })
        .collect();
    // A body declared over the limit is refused before it is sent, so the answer comes back
    // whole. (A client that writes megabytes first, as ureq does, may find the connection closed
    // under it instead: the daemon does not read what it will refuse.)
    let (status, text) = raw_exchange(
        &d.addr,
        &format!(
            "POST /jobs HTTP/1.1\r\nHost: {}\r\nAuthorization: {auth}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            d.addr,
            2 << 20
        ),
    );
    answers.push((status, text, "over the limit"));
    assert_eq!(answers.last().unwrap().0, 413);
    for (status, text, message) in answers {
        let body: Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("{status}: not JSON: {text}"));
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(message),
            "{status}: `{error}` should say `{message}`"
        );
    }
}

/// Sends `request` as is and reads the answer to the end: its status and its body.
fn raw_exchange(addr: &str, request: &str) -> (u16, String) {
    try_exchange(addr, request.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

/// Sends `request` as is on a new connection and reads the answer to the end: its status and its
/// body, or what went wrong.
fn try_exchange(addr: &str, request: &[u8]) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .write_all(request)
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {answer:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok((status, body.to_string()))
}

#[test]
fn tcp_needs_the_token_and_a_loopback_host() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let d = daemon(&journal);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(journal.join("api-token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "only the daemon's user reads the token"
    );

    let agent = support::agent(Duration::from_secs(10));
    let base = &d.api.base;
    let (status, _) = status_and_body(agent.get(format!("{base}/healthz")).call());
    assert_eq!(status, 200, "liveness needs no token");
    for authorization in [None, Some("Bearer 00"), Some(&*"Bearer ".repeat(2))] {
        let mut request = agent.post(format!("{base}/jobs"));
        if let Some(value) = authorization {
            request = request.header("Authorization", value);
        }
        let mut response = request.send_json(json!({"gpus": 1, "work": 60})).unwrap();
        assert_eq!(response.status(), 401, "{authorization:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let body: Value = response.body_mut().read_json().unwrap();
        assert!(
            body["error"].as_str().unwrap().contains("api-token"),
            "{body}"
        );
    }
    // A page that rebinds its own name to 127.0.0.1 sends its name as the Host.
    let (status, body) = status_and_body(
        agent
            .get(format!("{base}/jobs"))
            .header("Authorization", &d.api.authorization)
            .header(
                "Host",
                &format!("evil.example:{}", d.addr.rsplit(':').next().unwrap()),
            )
            .call(),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().starts_with("Host:"),
        "{body}"
    );
    let (status, body) = status_and_body(d.api.get("/jobs"));
    assert_eq!((status, body), (200, json!([])));

    // The clients read the token from the file `gangway serve` wrote.
    let out = cargo_bin_cmd!("gangway")
        .args(["submit", "--gpus", "1", "--work", "60", "--daemon", &d.addr])
        .env("GANGWAY_TOKEN_FILE", journal.join("api-token"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(&["jobs", "--daemon", &d.addr, "--token-file", "/nonexistent"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("/nonexistent"), "{}", stderr(&out));
    let out = cargo_bin_cmd!("gangway")
        .args(["jobs", "--daemon", &d.addr])
        .current_dir(dir.path())
        .env_remove("GANGWAY_TOKEN_FILE")
        .output()
        .unwrap();
    assert!(!out.status.success(), "no token file here or above");
    assert!(
        stderr(&out).contains("401") && stderr(&out).contains("GANGWAY_TOKEN_FILE"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn serve_refuses_a_public_address_a_short_round_and_a_port_in_use_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let journal_arg = journal.display().to_string();
    let port = support::free_port();
    let public = format!("0.0.0.0:{port}");
    // `serve --fake-gpus 1` with `args` fails, saying `says`.
    let refuses = |args: &[&str], says: &str| {
        let out = run(&[&["serve", "--fake-gpus", "1"], args].concat());
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
    };
    refuses(
        &["--listen", &public, "--journal", &journal_arg],
        "--allow-remote",
    );
    refuses(
        &["--round", "1e-9", "--journal", &journal_arg],
        "--round must be at least 1 second",
    );
    refuses(
        &["--max-grace", "0", "--journal", &journal_arg],
        "--max-grace must be from 1 to 604800 seconds",
    );
    refuses(
        &["--max-tasks-per-job", "63", "--journal", &journal_arg],
        "--max-tasks-per-job must be from 64 to",
    );

    use std::os::unix::fs::PermissionsExt;
    // A journal under a directory every user may write: refused before anything is made there
    // (the API's token was written into it before the journal was checked).
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let shared_journal = shared.join("journal").display().to_string();
    refuses(
        &["--journal", &shared_journal],
        "shared: is writable by every user",
    );
    assert!(!shared.join("journal").exists(), "nothing is made there");

    // A port in use: only the clean error, no panic and no backtrace.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run(&[
        "serve",
        "--fake-gpus",
        "1",
        "--listen",
        &addr,
        "--journal",
        &journal_arg,
    ]);
    assert!(!out.status.success());
    let text = stderr(&out);
    assert!(text.contains("Address already in use"), "{text}");
    assert!(
        !text.contains("panicked") && !text.contains("reactor"),
        "{text}"
    );

    // --allow-remote serves other machines, behind the token.
    let d = daemon_with(
        &journal,
        port,
        &["--allow-remote", "--allow-host", "gpu-box.lan"],
    );
    let agent = support::agent(Duration::from_secs(10));
    let (status, _) = status_and_body(
        agent
            .get(format!("{}/jobs", d.api.base))
            .header("Host", &format!("gpu-box.lan:{port}"))
            .header("Authorization", &d.api.authorization)
            .call(),
    );
    assert_eq!(status, 200, "an allowed name");
}

#[test]
fn the_same_idempotency_key_gives_the_same_job_even_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let port = support::free_port();
    let body = r#"{"gpus": 1, "work": 100000, "tenant": "alice"}"#;
    let key = [("Idempotency-Key", "retry-7f3a")];
    let first = {
        let d = daemon_with(&journal, port, &[]);
        let (status, first) = status_and_body(d.api.post_raw("/jobs", body, &key));
        assert_eq!(status, 201, "{first}");
        let (status, again) = status_and_body(d.api.post_raw("/jobs", body, &key));
        assert_eq!((status, &again), (201, &first), "a retry gets the same job");
        let other = r#"{"gpus": 2, "work": 100000, "tenant": "alice"}"#;
        let (status, refused) = status_and_body(d.api.post_raw("/jobs", other, &key));
        assert_eq!(status, 422, "{refused}");
        assert!(
            refused["error"].as_str().unwrap().contains("retry-7f3a"),
            "{refused}"
        );
        let (status, bad) =
            status_and_body(d.api.post_raw("/jobs", body, &[("Idempotency-Key", "")]));
        assert_eq!(status, 400, "{bad}");
        first
    };
    let d = daemon_with(&journal, port, &[]);
    let (status, after) = status_and_body(d.api.post_raw("/jobs", body, &key));
    assert_eq!((status, &after), (201, &first), "the key was journaled");
    let (_, jobs) = status_and_body(d.api.get("/jobs"));
    assert_eq!(jobs.as_array().unwrap().len(), 1, "{jobs}");
    // Another key makes another job.
    let (status, second) = status_and_body(d.api.post_raw(
        "/jobs",
        body,
        &[("Idempotency-Key", "retry-8")],
    ));
    assert_eq!(status, 201);
    assert_ne!(second, first);
}

#[test]
fn the_bundled_clients_reach_a_unix_socket_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gangway.sock");
    let listen = format!("unix:{}", socket.display());
    let _daemon = KillOnDrop(
        gangway()
            .args([
                "serve",
                "--fake-gpus",
                "2",
                "--policy",
                "fifo",
                "--listen",
                &listen,
            ])
            .arg("--journal")
            .arg(dir.path().join("journal"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the daemon did not listen");
        std::thread::sleep(Duration::from_millis(10));
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "only this user may connect");
    assert!(
        !dir.path().join("journal/api-token").exists(),
        "no token on a socket"
    );
    let out = run(&[
        "submit", "--gpus", "1", "--work", "60", "--tenant", "bob", "--daemon", &listen,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    let out = run(&["jobs", "--format", "json", "--daemon", &listen]);
    assert!(out.status.success(), "{}", stderr(&out));
    let jobs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(jobs[0]["tenant"], "bob");
    let out = run(&["cancel", "0", "--daemon", &listen]);
    assert!(out.status.success(), "{}", stderr(&out));
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn healthz_answers_under_hundreds_of_idle_and_slow_connections() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let port = support::free_port();
    let mut command = serve_command(&journal, port, &["--header-timeout", "2"]);
    // Fewer descriptors than the connections below, as with `ulimit -n 128`.
    // SAFETY: setrlimit(2) is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 128,
                rlim_max: 128,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let d = start(command, &journal, port);
    // Alone, an idle connection is closed after the header timeout.
    let mut lone = TcpStream::connect(&d.addr).unwrap();
    assert!(closed(&mut lone), "an idle connection stays open");
    let mut idle = Vec::new();
    for _ in 0..300 {
        if let Ok(stream) = TcpStream::connect(&d.addr) {
            idle.push(stream);
        }
    }
    let mut slow = Vec::new();
    for _ in 0..50 {
        if let Ok(mut stream) = TcpStream::connect(&d.addr) {
            let _ = stream.write_all(b"GET /jobs HTTP/1.1\r\nHost: local");
            slow.push(stream);
        }
    }
    assert!(
        idle.len() + slow.len() > 128,
        "more connections than descriptors"
    );
    for _ in 0..5 {
        let (status, body) = status_and_body(
            support::agent(Duration::from_secs(20))
                .get(format!("{}/healthz", d.api.base))
                .call()
                .map_err(|e| panic!("/healthz under load: {e}")),
        );
        assert_eq!(status, 200, "{body}");
    }
    let (status, _) = status_and_body(d.api.get("/jobs"));
    assert_eq!(status, 200);
    // An idle connection is closed by the daemon (evicted, or after the header timeout).
    let mut first = idle.swap_remove(0);
    assert!(closed(&mut first), "an idle connection stays open forever");
}

/// Whether the daemon closed `stream` (an end of file or a reset), waiting up to a minute.
fn closed(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut byte = [0u8];
    match stream.read(&mut byte) {
        Ok(n) => n == 0,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// A TCP connection to `addr` from the loopback address `source` (any 127.x.y.z is this machine's,
/// so that one test can be two TCP peers).
fn connect_from(source: std::net::Ipv4Addr, addr: &str) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let addr: std::net::SocketAddrV4 = addr.parse().unwrap();
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a new socket, owned by the TcpStream at once; bind(2) and connect(2) with valid
    // addresses of `len` bytes.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let local = sockaddr(source, 0);
        if libc::bind(fd, (&raw const local).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let remote = sockaddr(*addr.ip(), addr.port());
        if libc::connect(fd, (&raw const remote).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// Slow-body clients: `connections` at once, each sending `head` (which declares a 100 kB body),
/// then its body a byte every 50 ms, and connecting again whenever the daemon closes it; until
/// dropped.
struct Flood {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flood {
    fn start<S: Write>(
        connections: usize,
        head: String,
        connect: impl Fn() -> std::io::Result<S> + Send + 'static,
    ) -> Flood {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (started, first_round) = std::sync::mpsc::channel();
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let open = || {
                    let mut stream = connect().ok()?;
                    stream.write_all(head.as_bytes()).ok()?;
                    Some(stream)
                };
                let mut streams: Vec<Option<S>> = (0..connections).map(|_| None).collect();
                while !stop.load(Ordering::Relaxed) {
                    for stream in &mut streams {
                        let alive = stream.as_mut().is_some_and(|s| s.write_all(b" ").is_ok());
                        if !alive {
                            *stream = open();
                        }
                    }
                    let _ = started.send(());
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        first_round.recv().unwrap();
        // Time for the daemon to read the heads (without the fix, the flood now holds every slot).
        std::thread::sleep(Duration::from_millis(500));
        Flood {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A `POST /jobs` head declaring a body of 100 kB, with `extra` headers.
fn slow_post_head(extra: &str) -> String {
    format!(
        "POST /jobs HTTP/1.1\r\n{extra}Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    )
}

#[test]
fn a_peer_trickling_bodies_cannot_lock_out_another_tcp_peer() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let d = daemon_with(
        &journal,
        support::free_port(),
        &["--max-connections", "8", "--time-scale", "50"],
    );
    // Authorized (the token), from 127.0.0.2.
    let head = slow_post_head(&format!(
        "Host: {}\r\nAuthorization: {}\r\n",
        d.addr, d.api.authorization
    ));
    let addr = d.addr.clone();
    let flood = Flood::start(20, head, move || {
        connect_from(std::net::Ipv4Addr::new(127, 0, 0, 2), &addr)
    });
    // Another peer, 127.0.0.1, on a new connection each time.
    let request = format!(
        "GET /jobs HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\nConnection: close\r\n\r\n",
        d.addr, d.api.authorization
    );
    let answers: Vec<_> = (0..20)
        .map(|_| try_exchange(&d.addr, request.as_bytes()))
        .collect();
    let failed: Vec<_> = answers
        .iter()
        .filter(|a| !matches!(a, Ok((200, _))))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 20 failed: {failed:?}",
        failed.len()
    );
    let (status, answer) = status_and_body(d.api.post("/jobs", &json!({"gpus": 1, "work": 60})));
    assert_eq!(status, 201, "{answer}");
    drop(flood);
}

#[test]
fn a_user_trickling_bodies_cannot_lock_out_another_user_on_a_socket() {
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: two socket peers need two users, and only root can be another");
        return;
    }
    const NOBODY: u32 = 65534;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gangway.sock");
    let listen = format!("unix:{}", socket.display());
    let _daemon = KillOnDrop(
        gangway()
            .args(["serve", "--fake-gpus", "2", "--policy", "fifo"])
            .args(["--listen", &listen, "--socket-mode", "666"])
            .args(["--max-connections", "8"])
            .arg("--journal")
            .arg(dir.path().join("journal"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the daemon did not listen");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Root floods; nobody lists the jobs with the bundled client.
    let path = socket.clone();
    let flood = Flood::start(20, slow_post_head("Host: localhost\r\n"), move || {
        std::os::unix::net::UnixStream::connect(&path)
    });
    let mut failed = Vec::new();
    for _ in 0..10 {
        let out = gangway()
            .args(["jobs", "--format", "json", "--daemon", &listen])
            .current_dir("/")
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap();
        if !out.status.success() {
            failed.push(stderr(&out));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of 10 failed: {failed:?}",
        failed.len()
    );
    drop(flood);
    // Another user's job brings a command, by which the daemon bounds and runs it: one without
    // (these simulated workers run none) is the operator's to submit.
    let submit = |uid: u32| {
        gangway()
            .args(["submit", "--gpus", "1", "--work", "60", "--daemon", &listen])
            .current_dir("/")
            .uid(uid)
            .gid(uid)
            .output()
            .unwrap()
    };
    let theirs = submit(NOBODY);
    assert!(
        !theirs.status.success() && stderr(&theirs).contains("another user's job brings a command"),
        "{}",
        stderr(&theirs)
    );
    let operators = submit(0);
    assert!(operators.status.success(), "{}", stderr(&operators));
}

#[test]
fn malformed_requests_get_a_json_error_and_well_formed_ones_keep_alive() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(&dir.path().join("journal"));
    let host = format!(
        "Host: {}\r\nAuthorization: {}\r\n",
        d.addr, d.api.authorization
    );
    let many: String = (0..120).map(|k| format!("X-{k}: 1\r\n")).collect();
    let cases: [(Vec<u8>, u16, &str); 5] = [
        (
            b"\x16\x03\x01 garbage\r\n\r\n".to_vec(),
            400,
            "is not `METHOD /PATH HTTP/1.1`",
        ),
        (
            b"GET /jobs HTTP/9\r\n\r\n".to_vec(),
            400,
            "HTTP/1.0 or HTTP/1.1",
        ),
        (
            format!("GET /jobs HTTP/1.1\r\n{host}X-Evil: a\x01b\r\n\r\n").into_bytes(),
            400,
            "header line 4 (`X-Evil`)",
        ),
        (
            format!(
                "POST /jobs HTTP/1.1\r\n{host}Content-Type: application/json\r\n\
                 Content-Length: 99999999999999999999\r\n\r\n"
            )
            .into_bytes(),
            400,
            "Content-Length: `99999999999999999999` is not a number of bytes",
        ),
        (
            format!("GET /jobs HTTP/1.1\r\n{host}{many}\r\n").into_bytes(),
            431,
            "more than 100 header fields",
        ),
    ];
    for (request, status, message) in cases {
        let shown = String::from_utf8_lossy(&request).into_owned();
        let (got, text) =
            try_exchange(&d.addr, &request).unwrap_or_else(|e| panic!("{shown:?}: {e}"));
        assert_eq!(got, status, "{shown:?}: {text}");
        let body: Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("{shown:?}: not JSON: {text:?}"));
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(message),
            "{shown:?}: `{error}` should say `{message}`"
        );
    }
    // Pipelined requests are answered in order on one connection, up to a malformed one.
    let get = format!("GET /jobs HTTP/1.1\r\n{host}\r\n");
    let post = format!(
        "POST /jobs HTTP/1.1\r\n{host}Content-Type: application/json\r\nContent-Length: 23\r\n\r\n\
         {{\"gpus\": 1, \"work\": 60}}"
    );
    let (status, text) = raw_exchange(&d.addr, &format!("{get}{post}{get}BAD LINE\r\n\r\n"));
    assert_eq!(status, 200);
    let statuses: Vec<&str> = text
        .split("HTTP/1.1 ")
        .skip(1)
        .map(|answer| &answer[..3])
        .collect();
    assert_eq!(statuses, ["201", "200", "400"], "{text}");
    assert!(text.contains(r#"{"id":0}"#), "{text}");
    assert!(
        text.contains("the request line `BAD LINE` is not `METHOD /PATH HTTP/1.1`"),
        "{text}"
    );
    let (_, jobs) = status_and_body(d.api.get("/jobs"));
    assert_eq!(
        jobs.as_array().map(Vec::len),
        Some(1),
        "the pipelined job, once"
    );
}

/// A stand-in for `elastic-run` that records how it was called.
fn fake_elastic_run(dir: &Path) -> PathBuf {
    let path = dir.join("elastic-run");
    support::stand_in_elastic_run(
        &path,
        "#!/bin/bash\necho \"$@\" >> \"$(dirname \"$0\")/calls.log\"\necho '{\"code\":0,\"why\":\"done\"}' >&\"$GANGWAY_EXIT_FD\"\n",
    );
    path
}

#[test]
fn submitted_commands_are_checked_before_they_can_run() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let fake = fake_elastic_run(dir.path());
    let port = support::free_port();
    let fake_arg = fake.display().to_string();
    let d = daemon_with(
        &journal,
        port,
        &[
            "--workers",
            "processes",
            "--time-scale",
            "1",
            "--round",
            "1",
            "--elastic-run",
            &fake_arg,
        ],
    );
    let work = dir.path().display().to_string();
    std::fs::create_dir(dir.path().join("real")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
    let job = |run: Value| json!({"gpus": 1, "work": 60, "run": run});
    let command = |extra: Value| {
        let mut run = json!({
            "args": ["--python", "/bin/sh", "train.py"],
            "cwd": work,
            "env": {"PATH": "/usr/bin:/bin"},
            "log": format!("{work}/job.log"),
        });
        for (k, v) in extra.as_object().unwrap() {
            run[k] = v.clone();
        }
        job(run)
    };
    let cases = [
        (
            command(json!({"env": {"BASH_ENV": "$(id > /tmp/x)"}})),
            422,
            "run.env: BASH_ENV changes how",
        ),
        // What torchrun would run instead of the checked script, said where elastic-run cannot see
        // it, or shortened so that elastic-run reads it otherwise.
        (
            command(json!({"env": {"PATH": "/usr/bin:/bin", "PET_NO_PYTHON": "1"}})),
            422,
            "PET_NO_PYTHON sets torchrun's --no-python where elastic-run cannot see it",
        ),
        (
            command(json!({"env": {"PATH": "/usr/bin:/bin", "PYTHON_EXEC": "/tmp/x"}})),
            422,
            "run.env: PYTHON_EXEC makes torchrun start its workers with another program",
        ),
        (
            command(json!({"args": ["--python", "/bin/sh", "--no-p", "x", "train.py"]})),
            422,
            "`--no-p`: write torchrun's `--no-python` in full",
        ),
        (
            command(json!({"env": {"LD_PRELOAD": "/tmp/x.so"}})),
            422,
            "--allow-env LD_PRELOAD",
        ),
        (
            command(json!({"log": "/dev/null"})),
            422,
            "run.log: /dev/null exists and is not a regular file",
        ),
        (
            command(json!({"log": "relative.log"})),
            422,
            "run.log: relative.log is not an absolute path",
        ),
        (
            command(json!({"log": "/no/such/dir/x.log"})),
            422,
            "run.log: /no/such/dir does not exist",
        ),
        (
            command(json!({"cwd": "/no/such/dir"})),
            422,
            "run.cwd: /no/such/dir does not exist",
        ),
        // A link to a directory, however the path ends (the kernel follows `link/`).
        (
            command(json!({"cwd": format!("{work}/link/")})),
            422,
            "/link/ is a symbolic link",
        ),
        (
            command(json!({"cwd": format!("{work}/link/.")})),
            422,
            "/link/. is a symbolic link",
        ),
        (
            command(json!({"cwd": format!("{work}/link//")})),
            422,
            "/link// is a symbolic link",
        ),
        (
            command(json!({"cwd": format!("{work}/link")})),
            422,
            "/link is a symbolic link",
        ),
        (
            command(json!({"user": {"uid": 0, "gid": 0}})),
            422,
            "run.user: the daemon sets it",
        ),
        (
            command(json!({"args": ["--devices", "3", "train.py"]})),
            422,
            "run.args: elastic-run refuses",
        ),
        (
            command(json!({"args": ["--backend", "slurm", "train.py"]})),
            422,
            "leave out --backend",
        ),
        (
            command(json!({"args": ["--grace", "604800", "train.py"]})),
            422,
            "run.args: --grace 604800 s is longer than this daemon allows (600 s",
        ),
        // Nothing to run: it would be placed, preempting others, only to fail at its launch.
        (
            json!({"gpus": 1, "work": 60}),
            422,
            "run: this daemon's workers are processes: a job needs a command",
        ),
        (
            command(json!({"args": ["--python", "no-such-python", "train.py"]})),
            422,
            "not on the submitted PATH",
        ),
    ];
    for (body, status, message) in cases {
        let (got, answer) = status_and_body(d.api.post("/jobs", &body));
        assert_eq!(got, status, "{body}: {answer}");
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(message),
            "{body}: `{error}` should say `{message}`"
        );
    }
    // Without the token nothing runs at all.
    let (status, _) = status_and_body(
        support::agent(Duration::from_secs(10))
            .post(format!("{}/jobs", d.api.base))
            .send_json(command(json!({}))),
    );
    assert_eq!(status, 401);
    let (_, jobs) = status_and_body(d.api.get("/jobs"));
    assert_eq!(jobs, json!([]), "nothing refused was kept");
    assert!(
        !dir.path().join("calls.log").exists(),
        "nothing refused ran"
    );

    // A command that passes runs, with the operator's allowed variables.
    let (status, answer) = status_and_body(d.api.post(
        "/jobs",
        &command(json!({"env": {"PATH": "/usr/bin:/bin", "TMPDIR": "/tmp"}})),
    ));
    assert_eq!(status, 201, "{answer}");
    wait_for_phase(&d.api, 0, "finished");
    let calls = std::fs::read_to_string(dir.path().join("calls.log")).unwrap();
    assert_eq!(calls.trim(), "--devices 0 --python /bin/sh train.py");
}

#[test]
fn the_jobs_table_titles_each_column_once_and_escapes_names() {
    use gangway_actors::ledger::{JobSpec, Record};
    use gangway_core::job::JobId;
    // A journal from before names were checked, with control characters in one.
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    {
        let (mut writer, _) = gangway_actors::ledger::open_journal(&journal).unwrap();
        writer
            .append_batch(&[Record::Submitted(JobSpec {
                id: JobId(0),
                job_type: "toy".into(),
                tenant: "a\u{1b}[31mred\n".into(),
                gpus: 1,
                total_steps: 1e6,
                weight: 1.0,
                arrival: 0.0,
                run: None,
                key: None,
            })])
            .unwrap();
    }
    // One core and 8 GB over 4 GPUs: the running 1-GPU job holds a quarter of each.
    let d = daemon_with(
        &journal,
        support::free_port(),
        &["--time-scale", "50", "--cpus", "1", "--memory-gb", "8"],
    );
    let job = wait_for_phase(&d.api, 0, "running");
    assert_eq!(job["resources"], json!({"cpus": 0.25, "memory_gb": 2.0}));
    let out = cargo_bin_cmd!("gangway")
        .args(["jobs", "--daemon", &d.addr])
        .env("GANGWAY_TOKEN_FILE", journal.join("api-token"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8(out.stdout).unwrap();
    let header = table.lines().next().unwrap();
    assert_eq!(header.matches("GPUS").count(), 1, "{header}");
    assert!(header.contains("PLACEMENT"), "{header}");
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[4..6], ["0.25", "2.0"], "its CPUs and memory: {table}");

    // The servers: this machine, with the job on one GPU, and one GPU cordoned.
    let (status, _) = status_and_body(d.api.post("/gpus/cordon", &json!({"gpus": [3]})));
    assert_eq!(status, 200);
    let (_, nodes) = status_and_body(d.api.get("/nodes"));
    let node = &nodes[0];
    assert_eq!(nodes.as_array().unwrap().len(), 1, "{nodes}");
    assert_eq!(
        (
            &node["gpus"],
            &node["free"],
            &node["jobs"],
            &node["out_of_service"]
        ),
        (
            &json!([0, 1, 2, 3]),
            &json!(2),
            &json!([0]),
            &json!([[3, "cordoned"]])
        ),
        "{nodes}"
    );
    let out = cargo_bin_cmd!("gangway")
        .args(["nodes", "--daemon", &d.addr])
        .env("GANGWAY_TOKEN_FILE", journal.join("api-token"))
        .output()
        .unwrap();
    let listed = String::from_utf8(out.stdout).unwrap();
    assert!(listed.starts_with("NODE"), "{listed}");
    let row = listed.lines().nth(1).unwrap();
    assert!(
        row.contains("1 of 4 out: cordoned") && row.ends_with(" 0"),
        "{listed}"
    );
    assert!(
        !table.contains('\u{1b}'),
        "no raw escape reaches the terminal: {table:?}"
    );
    assert!(table.contains("a\\u{1b}[31mred\\n"), "{table}");
    assert_eq!(table.lines().count(), 2, "one line per job: {table:?}");
}

#[test]
fn submit_refuses_work_that_is_not_a_number() {
    for work in ["nan", "inf", "-1", "0"] {
        let out = run(&[
            "submit",
            "--gpus",
            "1",
            "--work",
            work,
            "--daemon",
            "127.0.0.1:9",
        ]);
        assert!(!out.status.success());
        let text = stderr(&out);
        assert!(
            text.contains("--work") && text.contains("not a positive number"),
            "{work}: {text}"
        );
        assert!(!text.contains("null"), "{text}");
    }
}

#[test]
fn clients_submit_list_and_cancel_and_the_event_stream_follows() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let d = daemon(&journal);
    let addr = d.addr.clone();
    let mut events = d.api.get("/events").unwrap();
    assert_eq!(events.status(), 200);

    let gangway = |args: &[&str]| {
        cargo_bin_cmd!("gangway")
            .args(args)
            .args(["--daemon", &addr])
            .env("GANGWAY_TOKEN_FILE", journal.join("api-token"))
            .output()
            .unwrap()
    };
    let submit = |gpus: &str, work: &str| {
        let out = gangway(&["submit", "--gpus", gpus, "--work", work]);
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    assert_eq!(submit("4", "100000"), "0");
    assert_eq!(submit("2", "60"), "1");

    // The first job runs on all 4 GPUs; the stream shows it getting there.
    let mut lines = BufReader::new(events.body_mut().as_reader()).lines();
    let mut seen = Vec::new();
    while !seen.contains(&"running".to_owned()) {
        let line = lines.next().expect("the stream ended").unwrap();
        if let Some(data) = line.strip_prefix("data:") {
            let event: Value = serde_json::from_str(data.trim()).unwrap();
            if event["job"] == 0 {
                seen.push(event["to"].as_str().unwrap().to_owned());
            }
        }
    }
    assert_eq!(seen, ["placing", "starting", "running"]);

    let out = gangway(&["jobs", "--format", "json"]);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["phase"], "running");
    assert_eq!(listed[0]["placement"], json!([0, 1, 2, 3]));
    assert_eq!(listed[1]["phase"], "pending");

    let out = gangway(&["cancel", "0"]);
    assert!(out.status.success());
    let out = gangway(&["cancel", "0"]);
    assert!(!out.status.success(), "cancelling twice is refused");
    assert!(stderr(&out).contains("409"));

    // With the GPUs free, the second job runs and finishes (60 s of work at 50x: about a second).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, job) = status_and_body(d.api.get("/jobs/1"));
        if job["phase"] == "finished" {
            break;
        }
        assert!(Instant::now() < deadline, "job 1 did not finish: {job}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut metrics = d.api.get("/metrics").unwrap();
    let text = metrics.body_mut().read_to_string().unwrap();
    for line in [
        "gangway_jobs_submitted_total 2",
        "gangway_jobs_cancelled_total 1",
        "gangway_jobs_finished_total 1",
        "gangway_invariant_violations_total 0",
        "gangway_queued_jobs 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in:\n{text}"
        );
    }
    assert!(text.contains("gangway_round_latency_seconds_bucket{le=\"+Inf\"}"));
    assert!(text.lines().any(|l| l == "gangway_round_failures_total 0"));
    // The same counters as JSON, with the last failed round (none here).
    let (status, stats) = status_and_body(d.api.get("/stats"));
    assert_eq!(status, 200, "{stats}");
    assert_eq!(stats["submitted"], 2, "{stats}");
    assert_eq!(stats["round_failures"], 0, "{stats}");
    assert!(stats["last_round_failure"].is_null(), "{stats}");
}

#[test]
fn a_root_daemon_runs_a_socket_peers_command_as_that_peer() {
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only a daemon running as root runs jobs as their submitters");
        return;
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    const NOBODY: u32 = 65534;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(NOBODY), Some(NOBODY)).unwrap();
    let fake = dir.path().join("elastic-run");
    support::stand_in_elastic_run(
        &fake,
        // Into the job's directory and log, as elastic-run goes.
        "#!/bin/bash\ncd \"$GANGWAY_WORKDIR\" && exec >> \"$GANGWAY_LOG\" 2>&1\nid -u > \"$(pwd)/whoami\"\necho \"$LD_LIBRARY_PATH\" > \"$(pwd)/libpath\"\necho \"ran $*\"\necho '{\"code\":0,\"why\":\"done\"}' >&\"$GANGWAY_EXIT_FD\"\n",
    );
    let socket = dir.path().join("gangway.sock");
    let listen = format!("unix:{}", socket.display());
    let _daemon = KillOnDrop(
        gangway()
            .args([
                "serve",
                "--fake-gpus",
                "1",
                "--workers",
                "processes",
                "--round",
                "1",
            ])
            .args(["--listen", &listen, "--socket-mode", "666", "--elastic-run"])
            .arg(&fake)
            .arg("--journal")
            .arg(dir.path().join("journal"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the daemon did not listen");
        std::thread::sleep(Duration::from_millis(10));
    }
    // A library path of root's and the submitter's own directories, one of them not there (as
    // CUDA's images set one), is theirs to set; one that others may write is refused, by name.
    let lib = home.join("lib");
    std::fs::create_dir(&lib).unwrap();
    std::os::unix::fs::chown(&lib, Some(NOBODY), Some(NOBODY)).unwrap();
    let submit = |library_path: &str| {
        Command::new(env!("CARGO_BIN_EXE_elastic-run"))
            .args([
                "--daemon", &listen, "--python", "/bin/sh", "--job-id", "mine",
            ])
            .args(["--expected-runtime", "60", "train.py"])
            .current_dir(&home)
            .uid(NOBODY)
            .gid(NOBODY)
            .env("LD_LIBRARY_PATH", library_path)
            .output()
            .unwrap()
    };
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = submit(&format!("/usr/lib:{}", lib.display()));
    assert!(!out.status.success());
    for says in [
        format!("LD_LIBRARY_PATH entry \"{}\" is refused", lib.display()),
        "writable by everyone".into(),
        "--allow-env LD_LIBRARY_PATH".into(),
    ] {
        assert!(stderr(&out).contains(&says), "{}", stderr(&out));
    }
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o755)).unwrap();
    let library_path = format!("/usr/lib:/usr/no-such-lib:{}", lib.display());
    let out = submit(&library_path);
    assert!(out.status.success(), "{}", stderr(&out));
    let whoami = std::fs::read_to_string(home.join("whoami")).unwrap();
    assert_eq!(
        whoami.trim(),
        NOBODY.to_string(),
        "the job ran as its submitter"
    );
    let libpath = std::fs::read_to_string(home.join("libpath")).unwrap();
    assert_eq!(libpath.trim(), library_path);
    let log = home.join("checkpoints/mine/elastic-run.log");
    assert_eq!(std::fs::metadata(&log).unwrap().uid(), NOBODY);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("ran --devices 0 --python /bin/sh --job-id mine")
    );
}

/// Synergy's `tune`, live: a CPU-hungry model (alexnet: best at 12 CPUs per GPU) alone on a 2-core,
/// 2-GPU machine is given both cores, where its GPU-proportional share is one; the executor pins it
/// to them and says so. Under the same policy without the mechanism it gets its share.
#[test]
fn tune_gives_a_cpu_hungry_job_more_cores_live() {
    let profiles = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/synergy/synergy_model_profiles.json"
    );
    if !Path::new(profiles).is_file() {
        support::skip_unless_ci(support::in_ci(), "the shared Synergy profiles are absent");
        return;
    }
    if gangway_launcher::confine::usable_cores().len() < 2 {
        support::skip("this machine gives the tests fewer than 2 cores");
        return;
    }
    let told = |policy: &str| -> String {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("journal");
        let fake = dir.path().join("elastic-run");
        support::stand_in_elastic_run(
            &fake,
            "#!/bin/bash\nallowed=$(grep Cpus_allowed_list /proc/self/status | cut -f2)\n\
             echo \"$GANGWAY_CPUS $allowed $GANGWAY_MEMORY_GB\" >> \"$(dirname \"$0\")/told.log\"\n\
             echo '{\"code\":0,\"why\":\"done\"}' >&\"$GANGWAY_EXIT_FD\"\n",
        );
        let port = support::free_port();
        let mut command = gangway();
        command
            .args([
                "serve",
                "--fake-gpus",
                "2",
                "--cpus",
                "2",
                "--memory-gb",
                "200",
            ])
            .args(["--policy", policy, "--profiles", profiles])
            .args(["--workers", "processes", "--round", "1", "--elastic-run"])
            .arg(&fake)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--journal"])
            .arg(&journal)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let d = start(command, &journal, port);
        let work = dir.path().display().to_string();
        let job = json!({"gpus": 1, "work": 60, "job_type": "alexnet", "run": {
            "args": ["--python", "/bin/sh", "train.py"],
            "cwd": work,
            "env": {"PATH": "/usr/bin:/bin"},
        }});
        let (status, answer) = status_and_body(d.api.post("/jobs", &job));
        assert_eq!(status, 201, "{policy}: {answer}");
        wait_for_phase(&d.api, 0, "finished");
        std::fs::read_to_string(dir.path().join("told.log"))
            .unwrap()
            .trim()
            .to_owned()
    };
    let cores = gangway_launcher::confine::usable_cores();
    let both = if cores[1] == cores[0] + 1 {
        format!("{}-{}", cores[0], cores[1])
    } else {
        format!("{},{}", cores[0], cores[1])
    };
    // Its best case per GPU is 12 CPUs and 125 GB: as much of it as the server has.
    assert_eq!(told("fifo+tune"), format!("2 {both} 125.000"));
    // Its share: half the server.
    assert_eq!(told("fifo"), format!("1 {} 100.000", cores[0]));
}

/// `--cpus` and `--memory-gb` describe this machine: refused with servers described elsewhere, and
/// beyond what this process may use.
#[test]
fn serve_refuses_cpus_it_cannot_pin_and_memory_that_is_not_a_size() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--cluster", "v100=4", "--cpus", "2"],
            "gives its servers' own",
        ),
        (
            &["--fake-gpus", "2", "--cpus", "100000"],
            "--cpus 100000: this process may use",
        ),
        (
            &["--fake-gpus", "2", "--memory-gb", "-1"],
            "must be a positive number of GB",
        ),
        (
            &["--fake-gpus", "2", "--policy", "fifo+tune"],
            "policy `fifo+tune` needs resource profiles (Synergy's synergy_model_profiles.json, --profiles)",
        ),
    ];
    for (args, says) in cases {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("journal");
        let out = cargo_bin_cmd!("gangway")
            .args(["serve", "--listen", "127.0.0.1:9", "--journal"])
            .arg(&journal)
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
}

/// `GET /jobs` pages: by phase, after an id, a limit at a time, with a `Link` to the next page;
/// a bad parameter is named. Without a query it is the whole list, with its length told.
#[test]
fn the_job_list_pages_by_phase_and_id_and_names_a_bad_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(&dir.path().join("journal"));
    // Four run on the four GPUs (FIFO); two wait.
    let ids: Vec<u64> = (0..6)
        .map(|_| {
            let (status, body) =
                status_and_body(d.api.post("/jobs", &json!({"gpus": 1, "work": 1e6})));
            assert_eq!(status, 201, "{body}");
            body["id"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(ids, [0, 1, 2, 3, 4, 5]);
    wait_for_phase(&d.api, 3, "running");
    let page = |query: &str| {
        let mut response = d.api.get(&format!("/jobs{query}")).unwrap();
        let status = response.status().as_u16();
        let link = (response.headers().get("link")).map(|l| l.to_str().unwrap().to_owned());
        let body: Value = response.body_mut().read_json().unwrap();
        let listed: Vec<u64> = (body.as_array().iter().flat_map(|a| a.iter()))
            .filter_map(|j| j["id"].as_u64())
            .collect();
        (status, listed, link, body)
    };
    let (status, listed, link, _) = page("?limit=4");
    assert_eq!((status, listed), (200, vec![0, 1, 2, 3]));
    assert_eq!(
        link.as_deref(),
        Some("</jobs?after=3&limit=4>; rel=\"next\"")
    );
    let (_, listed, link, _) = page("?after=3&limit=4");
    assert_eq!((listed, link), (vec![4, 5], None));
    let (_, listed, _, _) = page("?phase=pending");
    assert_eq!(listed, [4, 5]);
    let (_, listed, link, _) = page("?phase=running%2Cpending&after=2&limit=1");
    assert_eq!(listed, [3]);
    assert_eq!(
        link.as_deref(),
        Some("</jobs?after=3&limit=1&phase=running,pending>; rel=\"next\"")
    );
    for (query, said) in [
        (
            "?limit=0",
            "`limit`: must be a whole number from 1 to 10000",
        ),
        (
            "?limit=10001",
            "`limit`: must be a whole number from 1 to 10000",
        ),
        (
            "?phase=runing",
            "`phase`: `runing` is not a phase (one of pending, placing",
        ),
        ("?after=x", "`after`: `x` is not a job id (a number)"),
        ("?sort=id", "unknown query parameter `sort`"),
    ] {
        let (status, _, _, body) = page(query);
        assert_eq!(status, 400, "{query}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(said), "{query}: {error}");
    }
    // The whole list, its length told before it is streamed.
    let mut whole = d.api.get("/jobs").unwrap();
    let length: usize = (whole.headers().get("content-length"))
        .and_then(|l| l.to_str().ok()?.parse().ok())
        .expect("a content-length");
    let body = whole.body_mut().read_to_vec().unwrap();
    assert_eq!(body.len(), length);
    let all: Vec<Value> = serde_json::from_slice(&body).unwrap();
    assert_eq!(all.len(), 6);
}

/// A stand-in `elastic-run` for the stop tests: `MODE=finish` ends at once; `MODE=slow` runs until
/// stopped, then takes 8 s to checkpoint (longer than the daemon's stop patience) before it exits.
const SLOW_TO_STOP: &str = r#"#!/bin/bash
if [ "$MODE" = finish ]; then echo '{"code":0,"why":"done"}' >&"$GANGWAY_EXIT_FD"; exit 0; fi
trap 'sleep 8; echo "{\"code\":75,\"why\":\"stopped\"}" >&"$GANGWAY_EXIT_FD"; exit 75' TERM
while true; do sleep 0.1; done
"#;

/// A job slow to checkpoint holds no other job's start behind the round: its stop goes on in the
/// background once the daemon's `--stop-patience` has passed, its GPU out of service (and said so)
/// until its workers exit; then the next job runs there.
#[test]
fn a_slow_checkpoint_goes_on_in_the_background_its_gpu_out_of_service() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let fake = dir.path().join("elastic-run");
    support::stand_in_elastic_run(&fake, SLOW_TO_STOP);
    let fake = fake.display().to_string();
    let flags = [
        "--workers",
        "processes",
        "--round",
        "1",
        "--stop-patience",
        "1",
    ];
    let d = daemon_with(
        &journal,
        support::free_port(),
        &[&flags[..], &["--elastic-run", &fake]].concat(),
    );
    let work = dir.path().display().to_string();
    // Each job takes the whole server (4 GPUs): the second waits for the first's.
    let job = |mode: &str| {
        json!({"gpus": 4, "work": 600, "run": {
            "args": ["--python", "/bin/sh", "train.py"],
            "cwd": work,
            "env": {"PATH": "/usr/bin:/bin", "MODE": mode},
        }})
    };
    let (status, answer) = status_and_body(d.api.post("/jobs", &job("slow")));
    assert_eq!(status, 201, "{answer}");
    wait_for_phase(&d.api, 0, "running");
    let (status, answer) = status_and_body(d.api.post("/jobs", &job("finish")));
    assert_eq!(status, 201, "{answer}");

    // The cancel is answered after the patience, while the workers still checkpoint.
    let (status, answer) = status_and_body(d.api.delete("/jobs/0"));
    assert_eq!(status, 200, "{answer}");
    let (_, nodes) = status_and_body(d.api.get("/nodes"));
    let out = &nodes[0]["out_of_service"];
    assert_eq!(out[0][0], 0, "{nodes}");
    let why = out[0][1].as_str().unwrap_or_default();
    assert!(
        why.contains("job 0's workers, which have not stopped yet"),
        "{nodes}"
    );
    let (_, stats) = status_and_body(d.api.get("/stats"));
    assert_eq!(stats["stops_in_background"], 1, "{stats}");
    let (_, waiting) = status_and_body(d.api.get("/jobs/1"));
    assert_eq!(waiting["phase"], "pending", "{waiting}");

    // Once they have exited, the GPU is back and the next job runs on it.
    wait_for_phase(&d.api, 1, "finished");
    let (_, stats) = status_and_body(d.api.get("/stats"));
    assert_eq!(stats["stops_in_background"], 0, "{stats}");
    assert_eq!(stats["gpus_out_of_service"], 0, "{stats}");
}

/// A submission whose directory is on a file system that never answers (a FUSE mount whose server
/// takes every request and hangs) waits on the daemon's check of it, and the API must go on
/// answering everyone else: the check ran on the API's own threads, and as many such submissions
/// as it has threads froze it (`/healthz` included) until the file system answered. Needs root to
/// mount, as CI runs.
#[test]
fn submissions_whose_paths_never_answer_hold_none_of_the_apis_threads() {
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        // As the other tests of a root daemon here: CI runs as root.
        eprintln!("skipped: mounting a FUSE file system needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let fake = fake_elastic_run(dir.path()).display().to_string();
    let port = support::free_port();
    let flags = ["--workers", "processes", "--elastic-run", &fake];
    let d = daemon_with(&journal, port, &flags);
    let hanging = dir.path().join("hanging");
    std::fs::create_dir(&hanging).unwrap();
    // Mounted after the daemon started, so that it is let go first if this test fails (a daemon
    // waiting on it cannot end until it is).
    let Some(mount) = fuse::Swallowing::mount(&hanging) else {
        // The kernel's to allow (a container may refuse root the mount): no set-up step can
        // provide it, so this skips even under CI=true, saying why.
        eprintln!("skipped: this process may not mount a FUSE file system (root, /dev/fuse)");
        return;
    };
    let base = format!("http://{}", d.addr);
    // More than the API has threads (one per core).
    let count = std::thread::available_parallelism().map_or(2, |n| n.get()) + 2;
    let submissions: Vec<_> = (0..count)
        .map(|_| {
            let (base, journal) = (base.clone(), journal.clone());
            let cwd = hanging.display().to_string();
            std::thread::spawn(move || {
                let api = Api::new(&base, &journal, Duration::from_secs(60));
                let job = json!({"gpus": 1, "work": 60, "run": {
                    "args": ["--python", "/bin/sh", "train.py"], "cwd": cwd,
                }});
                status_and_body(api.post("/jobs", &job))
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while mount.swallowed.load(std::sync::atomic::Ordering::SeqCst) < count {
        assert!(
            Instant::now() < deadline,
            "{} of {count} submissions reached the file system: the others wait for an API thread",
            mount.swallowed.load(std::sync::atomic::Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let prompt = Api::new(&base, &journal, Duration::from_secs(3));
    for path in ["/healthz", "/jobs"] {
        let (status, _) = status_and_body(prompt.get(path));
        assert_eq!(status, 200, "{path}");
    }
    // Answered at last with an error that says nothing of the directory (its server went): the
    // submissions are put off, to be made again (a 503), not refused for their directory.
    drop(mount);
    for submission in submissions {
        let (status, body) = submission.join().unwrap();
        assert_eq!(status, 503, "{body}");
        let said = body["error"].as_str().unwrap_or_default();
        let named = format!("run.cwd: {}: Input/output error", hanging.display());
        assert!(said.starts_with(&named), "{body}");
        assert!(
            said.ends_with("submit it again once its file system answers"),
            "{body}"
        );
    }
}
