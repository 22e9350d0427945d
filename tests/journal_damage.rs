//! `gangway serve` on a damaged journal: a segment that must exist but is missing or empty stops it with
//! the file named; a torn tail is reported at the default log level with the jobs it touched; no job
//! that finished goes back to pending.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use gangway_actors::cluster::JobInfo;
use gangway_actors::ledger::{JobSpec, Ledger, Record};
use gangway_actors::lifecycle::Phase;
use gangway_core::cluster::{GpuId, GpuTypeId};
use gangway_core::job::JobId;

mod support;

fn submitted(id: u32) -> Record {
    Record::Submitted(JobSpec {
        id: JobId(id),
        job_type: "toy".into(),
        tenant: "default".into(),
        gpus: 1,
        total_steps: 1e6,
        weight: 1.0,
        arrival: 0.0,
        run: None,
        key: None,
    })
}

fn started(id: u32, attempt: u64) -> Record {
    Record::Started {
        job: JobId(id),
        attempt,
        gpu_type: GpuTypeId(0),
        gpus: [GpuId(id)].into_iter().collect(),
        partner: None,
        at: 1.0,
    }
}

fn finished(id: u32) -> Record {
    Record::Finished {
        job: JobId(id),
        at: 2.0,
    }
}

/// A journal in which job 0 finished, job 1 finished in the last frame, and job 2 waits; with a
/// snapshot after the first frame when `snapshot` is set. Returns the segment that holds the last frame.
fn write_journal(dir: &Path, snapshot: bool) -> PathBuf {
    let (mut journal, _) = gangway_actors::ledger::open_journal(dir).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let first = [
        Record::Epoch {
            unix_seconds: now,
            time_scale: 1.0,
        },
        submitted(0),
        submitted(1),
        submitted(2),
    ];
    journal.append_batch(&first).unwrap();
    if snapshot {
        let mut ledger = Ledger::default();
        for (seq, record) in (1..).zip(&first) {
            ledger.apply(seq, record).unwrap();
        }
        journal.snapshot(&ledger).unwrap();
    }
    journal
        .append_batch(&[started(0, 0), started(1, 1), finished(0)])
        .unwrap();
    journal.append(&finished(1)).unwrap();
    drop(journal);
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segments.sort();
    segments.pop().unwrap()
}

fn serve(journal: &Path, port: u16) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gangway"));
    command
        .args(["serve", "--fake-gpus", "4", "--policy", "fifo"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--journal")
        .arg(journal)
        // The default log filter, whatever the caller's shell says.
        .env_remove("RUST_LOG");
    command
}

/// Runs `serve` on `journal`, which must refuse to start; returns its stderr.
fn refused(journal: &Path) -> String {
    let output = serve(journal, support::free_port())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success(), "gangway serve started");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_missing_or_emptied_segment_stops_the_daemon_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let segment = write_journal(&journal, true);
    let saved = std::fs::read(&segment).unwrap();
    let name = segment.file_name().unwrap().to_str().unwrap().to_owned();

    std::fs::remove_file(&segment).unwrap();
    let stderr = refused(&journal);
    assert!(
        stderr.contains(&name) && stderr.contains("missing"),
        "{stderr}"
    );

    std::fs::write(&segment, b"").unwrap();
    let stderr = refused(&journal);
    assert!(
        stderr.contains(&name) && stderr.contains("empty, but records were committed"),
        "{stderr}"
    );
    // Said once, not once per cause.
    assert_eq!(stderr.matches(&name).count(), 1, "{stderr}");
    std::fs::write(&segment, saved).unwrap();
}

#[test]
fn a_torn_tail_is_reported_by_default_and_finished_jobs_stay_finished() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let segment = write_journal(&journal, false);
    // Cut the last frame (job 1's finish) short.
    let bytes = std::fs::read(&segment).unwrap();
    std::fs::write(&segment, &bytes[..bytes.len() - 2]).unwrap();

    let port = support::free_port();
    let log = dir.path().join("stderr");
    let mut child = serve(&journal, port)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    support::wait_until_answering(&base);
    let jobs: Vec<JobInfo> = support::Api::new(&base, &journal, Duration::from_secs(5))
        .get("/jobs")
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains("dropped 1 record(s) (records 8..=8)")
            && stderr.contains("they touched job 1 (finished)"),
        "{stderr}"
    );
    let phase = |id: u32| jobs.iter().find(|j| j.id == JobId(id)).unwrap().phase;
    assert_eq!(phase(0), Phase::Finished, "{jobs:?}");
    assert_ne!(phase(1), Phase::Finished, "its finish was never committed");
}
