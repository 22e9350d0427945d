//! `gangway serve` killed with SIGKILL at random points, and restarted on the same journal: no job is
//! lost, none runs twice at once, no GPU is leased twice, and every job finishes.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gangway_actors::cluster::JobInfo;
use gangway_actors::ledger::{Ledger, Standing};
use gangway_actors::lifecycle::Phase;

const JOBS: u32 = 40;

mod support;

use support::free_port;

struct Daemon {
    child: Child,
    api: support::Api,
}

impl Daemon {
    /// Starts the daemon and waits until its API answers; returns it and how long that took.
    fn start(journal: &Path, port: u16, snapshot_every: u64) -> (Daemon, Duration) {
        let began = Instant::now();
        let child = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args([
                "serve",
                "--fake-gpus",
                "16",
                "--policy",
                "las",
                "--round",
                "60",
            ])
            .args([
                "--time-scale",
                "2000",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .arg("--journal")
            .arg(journal)
            .args(["--snapshot-every", &snapshot_every.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start gangway serve");
        let base = format!("http://127.0.0.1:{port}");
        support::wait_until_answering(&base);
        let daemon = Daemon {
            child,
            api: support::Api::new(&base, journal, Duration::from_secs(5)),
        };
        (daemon, began.elapsed())
    }

    fn jobs(&self) -> Vec<JobInfo> {
        self.api
            .get("/jobs")
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap()
    }

    fn kill(mut self) {
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
    }
}

/// A small deterministic generator (xorshift64*), so that a failing run can be repeated.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Submits the jobs, kills and restarts the daemon `kills` times, then waits for every job to finish.
/// Returns the recovery times.
fn chaos(journal: &Path, kills: u32, snapshot_every: u64) -> Vec<Duration> {
    let port = free_port();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(kills));
    let (mut daemon, _) = Daemon::start(journal, port, snapshot_every);
    for k in 0..JOBS {
        let gpus = [1, 2, 4, 8][(k % 4) as usize];
        let body = serde_json::json!({
            "gpus": gpus,
            "work": 600 + rng.below(6000),
            "tenant": format!("team-{}", k % 3),
        });
        let response = daemon.api.post("/jobs", &body).unwrap();
        assert_eq!(response.status(), 201);
    }
    let mut recoveries = Vec::new();
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(20 + rng.below(300)));
        daemon.kill();
        let (restarted, took) = Daemon::start(journal, port, snapshot_every);
        recoveries.push(took);
        daemon = restarted;
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let jobs = daemon.jobs();
        assert_eq!(jobs.len(), JOBS as usize, "a job was lost");
        if jobs.iter().all(|j| j.phase == Phase::Finished) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jobs still unfinished after 180 s: {:?}",
            jobs.iter()
                .filter(|j| j.phase != Phase::Finished)
                .map(|j| (j.id, j.phase))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    daemon.kill();
    recoveries
}

/// Replays the journal through a fresh ledger, which refuses any record that starts a running job or
/// takes a held GPU.
fn audit(journal: &Path) -> Ledger {
    let (_journal, recovered) = gangway_actors::ledger::open_journal(journal).unwrap();
    let mut ledger = recovered
        .snapshot
        .map(|(ledger, _)| ledger)
        .unwrap_or_default();
    for (seq, record) in &recovered.records {
        ledger
            .apply(*seq, record)
            .unwrap_or_else(|v| panic!("the journal breaks an invariant: {v}"));
    }
    ledger
}

#[test]
fn twenty_sigkills_lose_no_job_and_never_double_book() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    // No snapshots: the journal keeps the whole history, so that the audit sees every decision.
    let recoveries = chaos(&journal, 20, u64::MAX);
    let ledger = audit(&journal);
    assert_eq!(ledger.jobs.len(), JOBS as usize);
    for entry in ledger.jobs.values() {
        assert!(
            matches!(entry.standing, Standing::Finished { .. }),
            "job {} ended {:?}",
            entry.spec.id,
            entry.standing
        );
    }
    assert!(
        ledger.holders.is_empty(),
        "GPUs still held: {:?}",
        ledger.holders
    );
    let restarts: u32 = ledger.jobs.values().map(|e| e.starts).sum();
    assert!(
        restarts > JOBS,
        "the kills should have interrupted running jobs ({restarts} starts)"
    );
    let worst = recoveries.iter().max().unwrap();
    eprintln!(
        "recovery (restart to API answering): mean {:?}, worst {worst:?}",
        recoveries.iter().sum::<Duration>() / recoveries.len() as u32
    );
}

#[test]
fn recovery_from_snapshots_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    // A snapshot every 25 records: every restart recovers from a snapshot and a short tail.
    chaos(&journal, 5, 25);
    let ledger = audit(&journal);
    assert_eq!(ledger.jobs.len(), JOBS as usize);
    assert!(
        ledger
            .jobs
            .values()
            .all(|e| matches!(e.standing, Standing::Finished { .. }))
    );
    let snapshots = std::fs::read_dir(&journal)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".snap")
        })
        .count();
    assert_eq!(snapshots, 1, "compaction keeps the newest snapshot only");
}
