//! Fidelity against Gavel's own published numbers (continuous-single trace, seed 0, 36:36:36 GPUs,
//! 360 s rounds, jobs 4000..5000): average JCT within +-10% of Gavel's, and mean rho within +-10% where
//! Gavel reports it, except the figures listed in `KNOWN_GAPS` (reported in docs/FIDELITY.md).
//! - the seed policies (`fifo`, `max_min_fairness`, `finish_time_fairness`, `gandiva`) at 0.4, 2.0 and 4.0
//!   jobs/hour (issue 4);
//! - the heterogeneity-aware ones (`fifo_perf`, `max_min_fairness_perf`, `finish_time_fairness_perf`,
//!   `max_min_fairness_packed`, `allox`) at 0.4, 2.0, 4.0 and 4.8 jobs/hour (issue 5), one test each so
//!   that they run in parallel.

use std::path::PathBuf;

use gangway::core::metrics::Summary;
use gangway::fidelity::{GavelExpected, rate_key, run_gavel_setup};

/// Gavel's expected figures and the trace, or `None` (with a message) without the shared data.
fn shared_gavel() -> Option<(GavelExpected, String)> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/gavel"));
    let expected = dir.join("expected_continuous_single_seed0.txt");
    if !expected.is_file() {
        eprintln!(
            "skipping: {} not found (the shared reference data is absent)",
            dir.display()
        );
        return None;
    }
    let expected = GavelExpected::parse(&std::fs::read_to_string(expected).unwrap()).unwrap();
    let trace = std::fs::read_to_string(dir.join("continuous_single_seed0.csv")).unwrap();
    Some((expected, trace))
}

/// Figures that do not yet match Gavel's within 10%, and are therefore not claimed: (policy, rate, what).
/// Each is reported in docs/FIDELITY.md with the measured gap. A figure is removed from here once it
/// matches; the test fails if a listed gap has closed, so that the list cannot go stale.
const KNOWN_GAPS: &[(&str, f64, Figure)] = &[
    // gangway's heterogeneity-aware FTF is 16% faster than Gavel's near saturation (17.2 h vs 20.4 h),
    // and its mean rho 14% lower (0.55 vs 0.64).
    ("finish_time_fairness_perf", 4.8, Figure::Jct),
    ("finish_time_fairness_perf", 4.8, Figure::Rho),
    // AlloX's JCT matches at every rate, but its mean rho is 11-15% lower than Gavel's at 0.4, 2.0 and 4.8
    // jobs/hour (within 10% at 4.0).
    ("allox", 0.4, Figure::Rho),
    ("allox", 2.0, Figure::Rho),
    ("allox", 4.8, Figure::Rho),
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Figure {
    Jct,
    Rho,
}

/// Checks one figure: within 10% of Gavel's, or, for a listed gap, still outside.
fn expect_close(policy: &str, rate: f64, figure: Figure, ours: f64, gavel: f64) {
    let gap = ours / gavel - 1.0;
    let known = KNOWN_GAPS.contains(&(policy, rate, figure));
    if known {
        assert!(
            gap.abs() > 0.10,
            "{policy} {figure:?} at {rate} now matches Gavel ({ours:.2} vs {gavel:.2}): remove it from KNOWN_GAPS"
        );
    } else {
        assert!(
            gap.abs() <= 0.10,
            "{policy} {figure:?} at {rate} jobs/h: {ours:.2} vs Gavel's {gavel:.2} ({:+.1}%)",
            gap * 100.0
        );
    }
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
