//! Fidelity against Pollux's own simulator (Qiao et al., OSDI'21; petuum/adaptdl, `osdi21-artifact`):
//! its baseline Tiresias on its 16 workloads (4 loads x 4 workloads, 16 nodes of 4 T4 GPUs, 60 s rounds),
//! job by job against the re-run in `testdata/pollux_rerun` (which matches the authors' per-job results
//! exactly). The application profiles and workloads come from the shared reference data.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

const LOADS: [&str; 4] = ["0.5", "1.0", "1.5", "2.0"];

fn shared_pollux() -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/pollux"
    ));
    if dir.join("profiles").is_dir() {
        return Some(dir);
    }
    support::skip(&format!(
        "{} not found (the shared reference data is absent)",
        dir.display()
    ));
    None
}

/// `gangway simulate`, to be given its arguments.
fn gangway_simulate() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gangway"));
    command.arg("simulate");
    command
}

/// What `command` printed on stdout; its failure fails the test with its stderr.
fn stdout_of(command: &mut Command) -> Vec<u8> {
    let run = command.output().unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    run.stdout
}

/// Runs `gangway simulate --policy POLICY --cluster CLUSTER --round ROUND --out OUT --trace TRACE` and
/// returns the per-job CSV it wrote.
fn simulate(policy: &str, cluster: &str, round: &str, trace: &Path, out: &Path) -> PathBuf {
    stdout_of(
        gangway_simulate()
            .args(["--policy", policy, "--cluster", cluster])
            .args(["--round", round, "--out"])
            .arg(out)
            .arg("--trace")
            .arg(trace),
    );
    out.join(format!("jobs_{policy}.csv"))
}

/// Every job's JCT in seconds, by job name, from a CSV with `name_column` and `jct_s`.
fn jcts(path: &Path, name_column: &str) -> HashMap<String, f64> {
    let mut reader =
        csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let headers = reader.headers().unwrap().clone();
    let column = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let (name, jct) = (column(name_column), column("jct_s"));
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            (r[name].to_string(), r[jct].parse().unwrap())
        })
        .collect()
}

/// How close a policy's runs come to Pollux's re-run: the bound on the difference in average JCT at
/// each load, and on the median job's difference.
struct Bounds {
    average: fn(&str) -> f64,
    median_job: f64,
}

/// Runs `policy` on every Pollux workload and compares it, job by job, with Pollux's `reference` runs.
fn compare_with_pollux(policy: &str, reference: &str, bounds: Bounds) {
    let Some(data) = shared_pollux() else { return };
    let rerun = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/pollux_rerun"
    ));
    let out = tempfile::tempdir().unwrap();
    let mut report = Vec::new();
    for load in LOADS {
        let folder = match load {
            "1.0" => "workloads".to_string(),
            other => format!("workloads-{other}"),
        };
        for workload in 1..=4 {
            let trace = data.join(&folder).join(format!("workload-{workload}.csv"));
            let dir = out.path().join(format!("{load}-{workload}"));
            let ours = jcts(&simulate(policy, "t4=16x4", "60", &trace, &dir), "job_id");
            let theirs = jcts(
                &rerun.join(format!("{reference}_load{load}_workload-{workload}.csv")),
                "name",
            );
            assert_eq!(
                ours.len(),
                theirs.len(),
                "{load} {workload}: every job finishes"
            );
            // Our job ids are the workload's rows in order; Pollux names jobs `<app>-<row>`.
            let mut differences: Vec<f64> = theirs
                .iter()
                .map(|(name, jct)| {
                    let row = name.rsplit('-').next().unwrap();
                    (ours[row] - jct).abs() / jct
                })
                .collect();
            differences.sort_by(f64::total_cmp);
            let mean = |m: &HashMap<String, f64>| m.values().sum::<f64>() / m.len() as f64;
            let average = mean(&ours) / mean(&theirs) - 1.0;
            let median = differences[differences.len() / 2];
            report.push(format!(
                "{policy} load {load} workload {workload}: average JCT {:+.1}%, median job {:.1}%",
                average * 100.0,
                median * 100.0
            ));
            assert!(
                average.abs() < (bounds.average)(load),
                "{}",
                report.join("\n")
            );
            assert!(median < bounds.median_job, "{}", report.join("\n"));
        }
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn tiresias_as_pollux_runs_it_matches_pollux_job_by_job() {
    // Measured: within 1.5% on 13 of 16 runs; -3.3%, +5.1% and -8.3% on three at load 2.0, where
    // queues are longest and one early difference moves many jobs. (+5.1% was +1.1% before step times
    // were interpolated across node counts; Pollux interpolates over a Delaunay triangulation of its
    // profiles, which gangway does not reproduce exactly.)
    compare_with_pollux(
        "tiresias_pollux",
        "tiresias",
        Bounds {
            average: |load| if load == "2.0" { 0.10 } else { 0.03 },
            median_job: 0.08,
        },
    );
}

#[test]
fn optimus_matches_pollux_on_average() {
    // Measured: within 2.3% on all 16, the median job within 10%. (Before grants were placed as Pollux places them, fewest GPUs first on the
    // most free servers, and before step times were interpolated across node counts, load 0.5 was 7-12%
    // slower.)
    compare_with_pollux(
        "optimus",
        "optimus",
        Bounds {
            average: |_| 0.03,
            median_job: 0.17,
        },
    );
}

/// Sia's re-run (`testdata/sia_rerun/summary.csv`): average JCT in hours per philly workload.
fn sia_rerun_average_jct(workload: u32) -> f64 {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/sia_rerun/summary.csv"
    ));
    let mut reader = csv::Reader::from_path(&path).unwrap();
    reader
        .records()
        .map(Result::unwrap)
        .find(|r| &r[0] == "sia" && r[1] == format!("workload-{workload}"))
        .map(|r| r[3].parse().unwrap())
        .unwrap_or_else(|| panic!("{}: no sia row for workload {workload}", path.display()))
}

#[test]
fn sia_on_its_heterogeneous_cluster_is_as_fast_as_sias_own_runs() {
    let Some(pollux) = shared_pollux() else {
        return;
    };
    let data = pollux.with_file_name("sia");
    let out = tempfile::tempdir().unwrap();
    let mut report = Vec::new();
    let (mut ours_sum, mut theirs_sum) = (0.0, 0.0);
    for workload in 1..=4 {
        let trace = data.join(format!("workloads/philly/workload-{workload}.csv"));
        let dir = out.path().join(workload.to_string());
        let ours = jcts(
            &simulate("sia", "aws=6x4,rtx=3x8,dgx-ext=2x8", "60", &trace, &dir),
            "job_id",
        );
        assert_eq!(ours.len(), 160, "workload {workload}: every job finishes");
        let average = ours.values().sum::<f64>() / ours.len() as f64 / 3600.0;
        let theirs = sia_rerun_average_jct(workload);
        report.push(format!(
            "sia philly workload {workload}: {average:.3} h, Sia's re-run {theirs:.3} h ({:+.1}%)",
            (average / theirs - 1.0) * 100.0
        ));
        ours_sum += average;
        theirs_sum += theirs;
        // Measured: -8%, -7%, +0%, -6% (oracle throughputs: Sia learns its throughputs as jobs run,
        // and a new job's first GPU type is a tie its solver breaks).
        assert!(
            (average / theirs - 1.0).abs() < 0.10,
            "{}",
            report.join("\n")
        );
    }
    eprintln!("{}", report.join("\n"));
    // Measured over the four: -5.0% (inside the bound by a hair: the oracle outruns learning).
    let ratio = ours_sum / theirs_sum;
    assert!(
        (0.95..1.05).contains(&ratio),
        "{ratio}\n{}",
        report.join("\n")
    );
    // Sia's paper (Table 3) puts Gavel at 1.9 h and Pollux at 1.0 h on philly: Sia stays well ahead.
    assert!(ours_sum / 4.0 < 0.8, "{}", report.join("\n"));
}

#[test]
fn pollux_matches_pollux_published_averages() {
    // Pollux's GA is unseeded and takes hours per workload, so the reference is the authors' published
    // averages (`expected/jct_by_workload.csv`, which their repository's summaries equal), not a re-run.
    let Some(data) = shared_pollux() else { return };
    let expected = data.join("expected/jct_by_workload.csv");
    let mut reader = csv::Reader::from_path(&expected).unwrap();
    let published: HashMap<(String, String), f64> = reader
        .records()
        .map(Result::unwrap)
        .filter(|r| &r[0] == "pollux")
        .map(|r| ((r[1].to_string(), r[2].to_string()), r[4].parse().unwrap()))
        .collect();
    let out = tempfile::tempdir().unwrap();
    let mut report = Vec::new();
    for load in LOADS {
        let folder = match load {
            "1.0" => "workloads".to_string(),
            other => format!("workloads-{other}"),
        };
        for workload in 1..=4 {
            let name = format!("workload-{workload}");
            let trace = data.join(&folder).join(format!("{name}.csv"));
            let dir = out.path().join(format!("{load}-{workload}"));
            let ours = jcts(&simulate("pollux", "t4=16x4", "60", &trace, &dir), "job_id");
            let theirs = published[&(load.to_string(), name)];
            let average = ours.values().sum::<f64>() / ours.len() as f64;
            report.push(format!(
                "pollux load {load} workload {workload}: {average:.0} s, published {theirs:.0} s ({:+.1}%)",
                (average / theirs - 1.0) * 100.0
            ));
            // Pollux's own runs differ by up to 20% per job (its GA is unseeded): issue 17 asks 15%.
            assert!(
                (average / theirs - 1.0).abs() < 0.15,
                "{}",
                report.join("\n")
            );
        }
    }
    eprintln!("{}", report.join("\n"));
}

/// Average JCT in hours of `policy` on `trace` (`--round` seconds) on `cluster`.
fn average_jct_h(policy: &str, cluster: &str, round: &str, trace: &Path) -> f64 {
    average_and_worst_rho(policy, cluster, round, trace).0
}

/// Average JCT in hours and the worst finish-time fairness of `policy` on `trace` (`--round` seconds)
/// on `cluster`.
fn average_and_worst_rho(policy: &str, cluster: &str, round: &str, trace: &Path) -> (f64, f64) {
    let out = tempfile::tempdir().unwrap();
    let all = jcts(
        &simulate(policy, cluster, round, trace, out.path()),
        "job_id",
    );
    assert_eq!(all.len(), 160, "{policy}: every job finishes");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("summary.json")).unwrap())
            .unwrap();
    let worst = summary[0]["max_ftf"].as_f64().expect("rho is measured");
    (all.values().sum::<f64>() / all.len() as f64 / 3600.0, worst)
}

#[test]
fn sias_tables_hold_in_order_and_ratio() {
    let Some(pollux) = shared_pollux() else {
        return;
    };
    let trace = pollux
        .with_file_name("sia")
        .join("workloads/philly/workload-1.csv");
    // Table 3, heterogeneous 64 GPUs: Sia 0.6 h, Pollux 1.0 h, Gavel (tuned jobs, 360 s rounds) 1.9 h.
    // Measured on workload 1: 0.50, 0.73, 2.08.
    let heterogeneous = "aws=6x4,rtx=3x8,dgx-ext=2x8";
    let (sia, sia_rho) = average_and_worst_rho("sia", heterogeneous, "60", &trace);
    let (pollux, pollux_rho) = average_and_worst_rho("pollux", heterogeneous, "60", &trace);
    let (gavel, gavel_rho) =
        average_and_worst_rho("max_sum_throughput_perf", heterogeneous, "360", &trace);
    let shown = format!(
        "sia {sia:.2} h (worst rho {sia_rho:.2}), pollux {pollux:.2} h ({pollux_rho:.2}), \
         gavel {gavel:.2} h ({gavel_rho:.2})"
    );
    assert!(sia < 0.8 * pollux && pollux < 0.6 * gavel, "{shown}");
    // Worst finish-time fairness (Sia's paper: Sia 1.2, Pollux 4.6, Gavel 27.8), each job alone on its
    // share as Sia measures it. Measured on workload 1: 1.16, 3.34, 8.22.
    assert!(
        sia_rho < 1.5 && sia_rho < pollux_rho && pollux_rho < gavel_rho,
        "{shown}"
    );
    // Table 4, 64 T4s: Sia and Pollux within 10% of each other (1.9 h and 2.0 h). Measured: 3.1%.
    let sia = average_jct_h("sia", "aws=16x4", "60", &trace);
    let pollux = average_jct_h("pollux", "aws=16x4", "60", &trace);
    assert!(
        (sia / pollux - 1.0).abs() < 0.10,
        "sia {sia:.2} h, pollux {pollux:.2} h"
    );
}

#[test]
fn sia_learning_its_throughputs_stays_close_to_sias_own_runs() {
    let Some(pollux) = shared_pollux() else {
        return;
    };
    let data = pollux.with_file_name("sia");
    let mut report = Vec::new();
    let mut differences = Vec::new();
    for workload in 1..=4 {
        let trace = data.join(format!("workloads/philly/workload-{workload}.csv"));
        let ours = average_jct_h("sia:learned=1", "aws=6x4,rtx=3x8,dgx-ext=2x8", "60", &trace);
        let theirs = sia_rerun_average_jct(workload);
        differences.push(ours / theirs - 1.0);
        report.push(format!(
            "sia:learned=1 philly workload {workload}: {ours:.3} h, Sia's re-run {theirs:.3} h ({:+.1}%)",
            (ours / theirs - 1.0) * 100.0
        ));
    }
    let report = report.join("\n");
    // A job that has never run costs the same on every GPU type, so its first type is a tie that
    // each solver breaks its own way, and workload 3 swings with it: +13.0% under HiGHS's search,
    // +15.3% under the pick's table (lower-numbered types first among equals), +16.5% with the
    // table preferring the higher-numbered ones. Measured with the table: +5.4%, +9.1%, +15.3%,
    // +7.9%, +9.4% on average (HiGHS: +7.6%). Each workload within 20%, and the four on average
    // within 10%.
    let mean = differences.iter().sum::<f64>() / differences.len() as f64;
    assert!(differences.iter().all(|d| d.abs() < 0.20), "{report}");
    assert!(mean.abs() < 0.10, "{report}\naverage {:+.1}%", mean * 100.0);
    eprintln!("{report}");
}

/// The summary of `policies` on `trace`, on the workload's own cluster and rounds: per policy, its
/// average, p99 JCT and makespan in hours, worst finish-time fairness and restarts.
fn summaries(policies: &str, trace: &Path) -> Vec<serde_json::Value> {
    let printed = stdout_of(
        gangway_simulate()
            .args(["--format", "json", "--policy", policies, "--trace"])
            .arg(trace),
    );
    serde_json::from_slice(&printed).unwrap()
}

#[test]
fn ramp_finishes_sias_jobs_sooner_with_no_worse_tail_and_half_the_restarts() {
    let Some(pollux) = shared_pollux() else {
        return;
    };
    let sia = pollux.with_file_name("sia");
    for family in ["philly", "saturn"] {
        let trace = sia.join(format!("workloads/{family}/workload-1.csv"));
        let runs = summaries("sia,ramp", &trace);
        let (theirs, ours) = (&runs[0], &runs[1]);
        let of = |run: &serde_json::Value, key: &str| run[key].as_f64().unwrap();
        let shown = format!("{family}: sia {theirs}\nramp {ours}");
        // Measured on workload 1: philly 0.435 h against 0.500 h (-13%), saturn 0.478 against
        // 0.567 (-16%); p99 and makespan shorter on both; worst rho 1.06 and 0.93; restarts 220 and
        // 258 against 539 and 535.
        assert!(
            of(ours, "avg_jct_h") < 0.9 * of(theirs, "avg_jct_h"),
            "{shown}"
        );
        for tail in ["p99_jct_h", "makespan_h"] {
            assert!(of(ours, tail) <= of(theirs, tail), "{tail}: {shown}");
        }
        assert!(of(ours, "max_ftf") <= 1.2, "{shown}");
        assert!(
            of(ours, "migrations") < 0.6 * of(theirs, "migrations"),
            "{shown}"
        );
    }
}
