//! `gangway serve` and its clients, end to end: submit, list, show, cancel, events, metrics, and bad
//! requests that are refused without changing anything.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::cargo_bin_cmd;
use serde_json::{Value, json};

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

mod support;

fn agent() -> ureq::Agent {
    support::agent(Duration::from_secs(10))
}

/// Starts a daemon on 4 fake GPUs; returns it and its address.
fn daemon(journal: &std::path::Path) -> (Daemon, String) {
    let addr = format!("127.0.0.1:{}", support::free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args([
            "serve",
            "--fake-gpus",
            "4",
            "--policy",
            "fifo",
            "--listen",
            &addr,
        ])
        .args(["--time-scale", "50"])
        .arg("--journal")
        .arg(journal)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let daemon = Daemon(child);
    support::wait_until_answering(&format!("http://{addr}"));
    (daemon, addr)
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

#[test]
fn bad_requests_get_a_clear_4xx_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, addr) = daemon(&dir.path().join("journal"));
    let jobs = format!("http://{addr}/jobs");
    let post = |body: &str| {
        status_and_body(
            agent()
                .post(&jobs)
                .header("content-type", "application/json")
                .send(body),
        )
    };
    let cases: [(&str, u16, &str); 6] = [
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
    ];
    for (body, status, message) in cases {
        let (got, answer) = post(body);
        assert_eq!(got, status, "{body}: {answer}");
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(message),
            "{body}: `{error}` should say `{message}`"
        );
    }
    let (status, answer) = status_and_body(agent().get(&jobs).call());
    assert_eq!(
        (status, answer),
        (200, json!([])),
        "refused requests added nothing"
    );

    let (status, _) = status_and_body(agent().get(format!("{jobs}/12")).call());
    assert_eq!(status, 404);
    let (status, answer) = status_and_body(agent().delete(format!("{jobs}/x")).call());
    assert_eq!(status, 400, "{answer}");
}

#[test]
fn clients_submit_list_and_cancel_and_the_event_stream_follows() {
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, addr) = daemon(&dir.path().join("journal"));
    let mut events = agent().get(format!("http://{addr}/events")).call().unwrap();
    assert_eq!(events.status(), 200);

    let submit = |gpus: &str, work: &str| {
        let out = cargo_bin_cmd!("gangway")
            .args(["submit", "--gpus", gpus, "--work", work, "--daemon", &addr])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
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

    let out = cargo_bin_cmd!("gangway")
        .args(["jobs", "--format", "json", "--daemon", &addr])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["phase"], "running");
    assert_eq!(listed[0]["placement"], json!([0, 1, 2, 3]));
    assert_eq!(listed[1]["phase"], "pending");

    let out = cargo_bin_cmd!("gangway")
        .args(["cancel", "0", "--daemon", &addr])
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = cargo_bin_cmd!("gangway")
        .args(["cancel", "0", "--daemon", &addr])
        .output()
        .unwrap();
    assert!(!out.status.success(), "cancelling twice is refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("409"));

    // With the GPUs free, the second job runs and finishes (60 s of work at 50x: about a second).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, job) = status_and_body(agent().get(format!("http://{addr}/jobs/1")).call());
        if job["phase"] == "finished" {
            break;
        }
        assert!(Instant::now() < deadline, "job 1 did not finish: {job}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut metrics = agent()
        .get(format!("http://{addr}/metrics"))
        .call()
        .unwrap();
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
}
