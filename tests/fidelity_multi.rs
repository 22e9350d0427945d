//! Fidelity on Gavel's continuous-multiple trace (issue 15: scale factors 1, 2, 4, 8 with probability
//! 0.7, 0.1, 0.15, 0.05), against Gavel's own simulator re-run on it (`testdata/gavel_rerun/multi_*.json`,
//! written by `scripts/gavel_rerun.py run --multi`): 36 V100 + 36 P100 + 36 K80, one GPU per server,
//! 360 s rounds, jobs 4000..4999 measured. Average JCT within 3% of the re-run at 0.4 and 1.0 jobs/hour
//! and within 10% at 1.6 and 2.0; FIFO above 0.4 jobs/hour within `FIFO_GAP`, for a bug of Gavel's
//! (docs/FIDELITY.md).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

mod support;

const RATES: [f64; 4] = [0.4, 1.0, 1.6, 2.0];

/// FIFO's gap above 0.4 jobs/hour, from Gavel's side: its FIFO gives a job the type a stale loop
/// variable names, whether or not it has room, and so allocates up to 59 V100s of 36 (docs/FIDELITY.md).
/// gangway's never oversubscribes; the average is checked within this bound.
const FIFO_GAP: f64 = 0.15;

fn trace() -> Option<PathBuf> {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/gavel/continuous_multiple_seed0.csv"
    ));
    if path.is_file() {
        return Some(path);
    }
    support::skip(&format!(
        "{} not found (the shared reference data is absent)",
        path.display()
    ));
    None
}

/// Gavel's re-run: each measured job's JCT (None where Gavel gave up on the job).
fn rerun(policy: &str, rate: f64) -> BTreeMap<String, Option<f64>> {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/gavel_rerun"))
        .join(format!("multi_{policy}_{rate:.1}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let run: serde_json::Value = serde_json::from_str(&text).unwrap();
    serde_json::from_value(run["jct_s"].clone()).unwrap()
}

fn matches_gavel(policy: &str) {
    let Some(trace) = trace() else { return };
    let out = tempfile::tempdir().unwrap();
    let mut report = Vec::new();
    for rate in RATES {
        let dir = out.path().join(rate.to_string());
        let run = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(["simulate", "--policy", policy, "--rate", &rate.to_string()])
            .args([
                "--cluster",
                "v100=36,p100=36,k80=36",
                "--gpus-per-node",
                "1",
            ])
            .args([
                "--round",
                "360",
                "--window",
                "4000..5000",
                "--no-ftf",
                "--out",
            ])
            .arg(&dir)
            .arg("--trace")
            .arg(&trace)
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let mut reader = csv::Reader::from_path(dir.join(format!("jobs_{policy}.csv"))).unwrap();
        let ours: BTreeMap<String, f64> = reader
            .records()
            .map(Result::unwrap)
            .map(|r| (r[0].to_string(), r[6].parse::<f64>().unwrap()))
            .collect();
        let theirs = rerun(policy, rate);
        // Jobs Gavel finished (it gives up on a job after repeated failed rounds).
        let both: Vec<(f64, f64)> = theirs
            .iter()
            .filter_map(|(job, jct)| Some((*ours.get(job)?, (*jct)?)))
            .collect();
        assert!(
            both.len() >= 999,
            "{policy} at {rate}: {} jobs in common",
            both.len()
        );
        let gap =
            both.iter().map(|p| p.0).sum::<f64>() / both.iter().map(|p| p.1).sum::<f64>() - 1.0;
        report.push(format!("{policy} at {rate} jobs/h: {:+.1}%", gap * 100.0));
        let bound = match (policy, rate) {
            ("fifo", r) if r > 0.4 => FIFO_GAP,
            (_, r) if r <= 1.0 => 0.03,
            _ => 0.10,
        };
        assert!(gap.abs() <= bound, "{}", report.join("\n"));
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn fifo_matches_gavel_on_multi_gpu_jobs() {
    matches_gavel("fifo");
}

#[test]
fn max_min_fairness_matches_gavel_on_multi_gpu_jobs() {
    matches_gavel("max_min_fairness");
}

#[test]
fn gandiva_matches_gavel_on_multi_gpu_jobs() {
    matches_gavel("gandiva");
}

#[test]
fn max_min_fairness_perf_matches_gavel_on_multi_gpu_jobs() {
    matches_gavel("max_min_fairness_perf");
}
