//! Fidelity against Synergy's own simulator (Mohan et al., OSDI'22; msr-fiddle/synergy @ 1bb2bed): its
//! two deployment traces on its 32-GPU deployment cluster (4 servers of 8 GPUs, 24 CPUs, 500 GB; 300 s
//! rounds), FIFO on the static trace (makespan) and SRTF on the dynamic one (average and p99 JCT), with
//! each mechanism, against the re-run in `testdata/synergy_rerun` (Synergy's simulator run here). The
//! profiles and traces come from the shared reference data.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

mod support;

/// How far gangway may be from the re-run, relative.
const TOLERANCE: f64 = 0.10;

fn shared_synergy() -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/synergy"
    ));
    if dir.join("synergy_model_profiles.json").is_file() {
        return Some(dir);
    }
    support::skip(&format!(
        "{} not found (the shared reference data is absent)",
        dir.display()
    ));
    None
}

/// The re-run's figures by (trace, policy, mechanism): makespan, average and p99 JCT in hours.
fn rerun() -> HashMap<(String, String, String), [f64; 3]> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/synergy_rerun/summary.csv"
    );
    let mut reader = csv::Reader::from_path(path).unwrap();
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            let number = |i: usize| r[i].parse::<f64>().unwrap();
            (
                (r[0].to_owned(), r[1].to_owned(), r[2].to_owned()),
                [number(4), number(5), number(6)],
            )
        })
        .collect()
}

/// `gangway simulate` on the deployment cluster: each policy's makespan, average and p99 JCT in hours.
fn simulate(trace: &PathBuf, policies: &str) -> HashMap<String, [f64; 3]> {
    let cluster = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/synergy_deployment.toml"
    );
    let run = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["simulate", "--cluster-file", cluster, "--round", "300"])
        .args([
            "--no-ftf", "--format", "json", "--policy", policies, "--trace",
        ])
        .arg(trace)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summaries: Vec<serde_json::Value> = serde_json::from_slice(&run.stdout).unwrap();
    summaries
        .iter()
        .map(|s| {
            assert_eq!(s["unfinished_jobs"], 0, "{s}");
            let h = |k: &str| s[k].as_f64().unwrap();
            (
                s["policy"].as_str().unwrap().to_owned(),
                [h("makespan_h"), h("avg_jct_h"), h("p99_jct_h")],
            )
        })
        .collect()
}

/// Checks `metrics` (0 makespan, 1 average, 2 p99) of each mechanism against the re-run's.
fn compare(trace: &str, file: &str, policy: &str, metrics: &[usize]) {
    let Some(data) = shared_synergy() else { return };
    let reference = rerun();
    let policies = format!("{policy}+proportional,{policy}+tune,{policy}+opt");
    let ours = simulate(&data.join("deploy_trace").join(file), &policies);
    let names = ["makespan", "average JCT", "p99 JCT"];
    let mut report = Vec::new();
    // opt against the re-run whose phase 1 ran on HiGHS, as ours does (GLPK stalls on the static trace).
    for (mechanism, theirs) in [
        ("proportional", "proportional"),
        ("tune", "tune"),
        ("opt", "opt_highs"),
    ] {
        let key = (trace.to_owned(), policy.to_owned(), theirs.to_owned());
        let expected = reference[&key];
        let got = ours[&format!("{policy}+{mechanism}")];
        for &m in metrics {
            let off = got[m] / expected[m] - 1.0;
            report.push(format!(
                "{trace} {policy}+{mechanism} {}: {:.2} h vs Synergy's {:.2} h ({:+.1}%)",
                names[m],
                got[m],
                expected[m],
                off * 100.0
            ));
            assert!(off.abs() <= TOLERANCE, "{}", report.join("\n"));
        }
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn fifo_makespan_on_the_static_trace_matches_synergy() {
    compare("static", "static_100job_6_3_1100.0", "fifo", &[0]);
}

#[test]
fn srtf_jct_on_the_dynamic_trace_matches_synergy() {
    compare("dynamic", "dynamic/srtf.log", "srtf", &[1, 2]);
}
