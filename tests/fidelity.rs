//! Fidelity against Gavel's own published numbers (continuous-single trace, seed 0, 36:36:36 GPUs,
//! 360 s rounds, jobs 4000..5000): average JCT within +-10% of Gavel's, and mean rho within +-10% where
//! Gavel reports it, except the figures Gavel's own simulator does not reproduce, listed in
//! `NOT_REPRODUCED_BY_GAVEL` (reported in docs/FIDELITY.md).
//! - the seed policies (`fifo`, `max_min_fairness`, `finish_time_fairness`, `gandiva`) at 0.4, 2.0 and 4.0
//!   jobs/hour (issue 4);
//! - the heterogeneity-aware ones (`fifo_perf`, `max_min_fairness_perf`, `finish_time_fairness_perf`,
//!   `max_min_fairness_packed`, `allox`) at 0.4, 2.0, 4.0 and 4.8 jobs/hour (issue 5), one test each so
//!   that they run in parallel.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gangway::core::metrics::Summary;
use gangway::fidelity::{GavelExpected, rate_key, run_gavel_setup};

mod support;

/// Gavel's expected figures and the trace, or `None` (with a message) without the shared data.
fn shared_gavel() -> Option<(GavelExpected, String)> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/gavel"));
    let expected = dir.join("expected_continuous_single_seed0.txt");
    if !expected.is_file() {
        support::skip(&format!(
            "{} not found (the shared reference data is absent)",
            expected.display()
        ));
        return None;
    }
    let expected = GavelExpected::parse(&std::fs::read_to_string(expected).unwrap()).unwrap();
    let trace = std::fs::read_to_string(dir.join("continuous_single_seed0.csv")).unwrap();
    Some((expected, trace))
}

/// Figures that Gavel's own simulator, run today in the same setup, does not reproduce: gangway is
/// checked against what it gave instead. Its runs are in testdata/gavel_rerun (every measured job's JCT,
/// written by `scripts/gavel_rerun.py` with Gavel @ c4fa400 and ECOS); docs/FIDELITY.md reports them.
/// - AlloX at 4.8 jobs/hour: rho 0.65 re-run (published: 0.73).
/// - Heterogeneity-aware FTF at 4.8 jobs/hour: 22.00 h re-run (published: 20.43 h). gangway's 22.47 h is
///   also, by a hair, within 10% of the published figure; the re-run is the stricter reference.
const NOT_REPRODUCED_BY_GAVEL: &[(&str, f64, Figure)] = &[
    ("allox", 4.8, Figure::Rho),
    ("finish_time_fairness_perf", 4.8, Figure::Jct),
];

/// Only a figure that Gavel's simulator misses by more than this may be checked against its re-run.
const MIN_RERUN_DISCREPANCY: f64 = 0.05;

/// Every measured job's JCT in seconds, from one re-run of Gavel's simulator.
fn rerun_jcts(policy: &str, rate: f64) -> BTreeMap<String, f64> {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/gavel_rerun"))
        .join(format!("{policy}_{rate:.1}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let run: serde_json::Value = serde_json::from_str(&text).unwrap();
    serde_json::from_value(run["jct_s"].clone()).unwrap()
}

/// A figure as Gavel's simulator gives it when re-run: average JCT in hours, or mean rho against its
/// own isolated run, over the same jobs.
fn rerun_figure(policy: &str, rate: f64, figure: Figure) -> f64 {
    let jcts = rerun_jcts(policy, rate);
    assert_eq!(
        jcts.len(),
        1000,
        "{policy} at {rate}: the re-run must hold the whole window"
    );
    let mean = |values: Vec<f64>| values.iter().sum::<f64>() / values.len() as f64;
    match figure {
        Figure::Jct => mean(jcts.values().copied().collect()) / 3600.0,
        Figure::Rho => {
            let isolated = rerun_jcts("isolated", rate);
            mean(jcts.iter().map(|(job, jct)| jct / isolated[job]).collect())
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Figure {
    Jct,
    Rho,
}

/// Checks one figure: within 10% of Gavel's published number, or, where Gavel's simulator does not
/// reproduce that, within 10% of what it gives instead.
fn expect_close(policy: &str, rate: f64, figure: Figure, ours: f64, published: f64) {
    let rerun = NOT_REPRODUCED_BY_GAVEL
        .contains(&(policy, rate, figure))
        .then(|| rerun_figure(policy, rate, figure));
    let reference = match rerun {
        Some(rerun) => {
            assert!(
                (rerun / published - 1.0).abs() > MIN_RERUN_DISCREPANCY,
                "{policy} {figure:?} at {rate}: Gavel's simulator gives {rerun:.2}, close to its published \
                 {published:.2}; remove it from NOT_REPRODUCED_BY_GAVEL"
            );
            rerun
        }
        None => published,
    };
    let gap = ours / reference - 1.0;
    assert!(
        gap.abs() <= 0.10,
        "{policy} {figure:?} at {rate} jobs/h: {ours:.2} vs Gavel's {reference:.2}{} ({:+.1}%)",
        if rerun.is_some() { " (re-run)" } else { "" },
        gap * 100.0
    );
}

/// The re-run reproduces Gavel's published AlloX at 0.4 jobs/hour (17.58 h, rho 0.84): the evidence that
/// the re-runs are in Gavel's setup.
#[test]
fn the_gavel_rerun_reproduces_a_published_figure() {
    let jct = rerun_figure("allox", 0.4, Figure::Jct);
    let rho = rerun_figure("allox", 0.4, Figure::Rho);
    // Gavel publishes two decimals.
    assert_eq!(format!("{jct:.2}"), "17.58", "re-run JCT {jct:.4} h");
    assert_eq!(format!("{rho:.2}"), "0.84", "re-run rho {rho:.4}");
}

/// Runs `policies` at each of `rates` and checks every figure Gavel published for them.
fn check(policies: &[&str], rates: &[f64]) -> Vec<(f64, Summary)> {
    let Some((expected, trace)) = shared_gavel() else {
        return Vec::new();
    };
    let names: Vec<String> = policies.iter().map(|p| p.to_string()).collect();
    let mut all = Vec::new();
    for &rate in rates {
        for s in run_gavel_setup(&trace, rate, &names).unwrap() {
            assert_eq!(
                s.measured_jobs, 1000,
                "{} at {rate}: not every window job finished",
                s.policy
            );
            let gavel = expected.jct_h[&(s.policy.clone(), rate_key(rate))];
            expect_close(&s.policy, rate, Figure::Jct, s.avg_jct_h, gavel);
            if let (Some(ours), Some(gavel)) = (
                s.avg_ftf,
                expected.ftf.get(&(s.policy.clone(), rate_key(rate))),
            ) {
                expect_close(&s.policy, rate, Figure::Rho, ours, *gavel);
            }
            all.push((rate, s));
        }
    }
    all
}

const SEED_RATES: &[f64] = &[0.4, 2.0, 4.0];
const PERF_RATES: &[f64] = &[0.4, 2.0, 4.0, 4.8];

#[test]
fn seed_policies_match_gavel_within_ten_percent() {
    check(
        &[
            "fifo",
            "max_min_fairness",
            "finish_time_fairness",
            "gandiva",
        ],
        SEED_RATES,
    );
}

#[test]
fn fifo_perf_matches_gavel() {
    check(&["fifo_perf"], PERF_RATES);
}

#[test]
fn max_min_fairness_perf_matches_gavel() {
    check(&["max_min_fairness_perf"], PERF_RATES);
}

#[test]
fn finish_time_fairness_perf_matches_gavel() {
    check(&["finish_time_fairness_perf"], PERF_RATES);
}

#[test]
fn max_min_fairness_packed_matches_gavel() {
    check(&["max_min_fairness_packed"], PERF_RATES);
}

#[test]
fn allox_matches_gavel() {
    check(&["allox"], PERF_RATES);
}

/// At 4.8 jobs/hour Gavel reports heterogeneity-aware LAS 1.9x faster than agnostic LAS (35.79 h against
/// 18.97 h); gangway must show the same kind of gain.
#[test]
fn heterogeneity_aware_las_beats_agnostic_las_at_high_load() {
    let results = check(&["max_min_fairness", "max_min_fairness_perf"], &[4.8]);
    if results.is_empty() {
        return; // no shared data: `check` said so
    }
    let [(_, agnostic), (_, aware)] = results.as_slice() else {
        panic!("expected two summaries, got {}", results.len());
    };
    {
        let speedup = agnostic.avg_jct_h / aware.avg_jct_h;
        assert!(
            speedup > 1.5,
            "heterogeneity-aware LAS is only {speedup:.2}x faster ({:.2} h vs {:.2} h)",
            aware.avg_jct_h,
            agnostic.avg_jct_h
        );
    }
}

/// Issue 35's goal on Gavel's workload: on the continuous-single trace at 5.6 jobs/h, `ramp` (there
/// Gavel's packed sum of throughputs, re-solved every round: the trace has no goodput model) finishes
/// jobs sooner on average than the best of gangway's Gavel policies there, at Gavel's cadence, with
/// no worse worst rho, p99 or makespan (docs/POLICIES.md: 17.66 h against 18.03 h).
#[test]
fn ramp_beats_the_best_gavel_policy_on_the_continuous_single_trace() {
    let Some((_, trace)) = shared_gavel() else {
        return;
    };
    let policies = ["ramp".to_owned(), "max_sum_throughput_packed".to_owned()];
    let runs = run_gavel_setup(&trace, 5.6, &policies).unwrap();
    let [ours, best] = runs.as_slice() else {
        panic!("expected two summaries, got {}", runs.len());
    };
    let shown = format!("ramp {ours:?}\nmax_sum_throughput_packed {best:?}");
    assert_eq!(ours.unfinished_jobs + best.unfinished_jobs, 0, "{shown}");
    assert!(ours.avg_jct_h < best.avg_jct_h, "{shown}");
    assert!(ours.p99_jct_h <= best.p99_jct_h, "{shown}");
    assert!(ours.makespan_h <= best.makespan_h, "{shown}");
    let worst = |s: &Summary| s.max_ftf.expect("rho against the isolated run");
    assert!(worst(ours) <= worst(best), "{shown}");
}
