//! `gangway serve` killed with SIGKILL at random points, while jobs are being submitted and while
//! they run, and restarted on the same journal: no job is lost or made twice, none runs twice at
//! once, no GPU is leased twice, and every job finishes. (Its workers are simulated and die with
//! it: re-adopting live workers is `actors/tests/recovery.rs`'s and `launcher/tests/executor.rs`'s.)

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

/// Submits the jobs while the daemon is killed and restarted `kills` times, then waits for every
/// job to finish. Returns the recovery times.
///
/// The jobs go in one by one, 50 ms apart, from a client that retries each (with its idempotency
/// key) until it is answered, as a client of a daemon that restarts would: whatever a kill
/// interrupts, no job is lost or made twice. (A kill between the journal taking a job and its
/// answer is a narrow window these kills seldom hit: `tests/serve.rs`'s idempotency test covers
/// that retry directly.)
fn chaos(journal: &Path, kills: u32, snapshot_every: u64) -> Vec<Duration> {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(kills));
    let (mut daemon, _) = Daemon::start(journal, port, snapshot_every);
    let bodies: Vec<String> = (0..JOBS)
        .map(|k| {
            let gpus = [1, 2, 4, 8][(k % 4) as usize];
            serde_json::json!({
                "gpus": gpus,
                "work": 600 + rng.below(6000),
                "tenant": format!("team-{}", k % 3),
            })
            .to_string()
        })
        .collect();
    let submitted = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let client = {
        let (journal, submitted) = (journal.to_owned(), std::sync::Arc::clone(&submitted));
        std::thread::spawn(move || {
            for (k, body) in bodies.iter().enumerate() {
                let key = format!("chaos-{k}");
                let deadline = Instant::now() + Duration::from_secs(120);
                // The token is read afresh: each start of the daemon writes a new one.
                while !support::Api::new(&base, &journal, Duration::from_secs(5))
                    .post_raw("/jobs", body, &[("Idempotency-Key", &key)])
                    .is_ok_and(|r| r.status() == 201)
                {
                    assert!(Instant::now() < deadline, "job {k} was never accepted");
                    std::thread::sleep(Duration::from_millis(10));
                }
                submitted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let mut recoveries = Vec::new();
    let mut during_submissions = 0;
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(20 + rng.below(300)));
        if submitted.load(std::sync::atomic::Ordering::SeqCst) < JOBS {
            during_submissions += 1;
        }
        daemon.kill();
        let (restarted, took) = Daemon::start(journal, port, snapshot_every);
        recoveries.push(took);
        daemon = restarted;
    }
    client.join().expect("every job was accepted");
    assert!(
        during_submissions > 0,
        "the kills should have come while jobs were being submitted"
    );
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let jobs = daemon.jobs();
        assert_eq!(jobs.len(), JOBS as usize, "a job was lost, or made twice");
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
