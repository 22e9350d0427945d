//! Fidelity against Gavel's own published numbers (continuous-single trace, seed 0, 36:36:36 GPUs,
//! 360 s rounds, jobs 4000..5000): `fifo`, `max_min_fairness`, `finish_time_fairness` and `gandiva` within
//! +-10% of Gavel's average JCT at 0.4, 2.0 and 4.0 jobs/hour, and their mean rho within +-10% of Gavel's
//! where Gavel reports it.

use std::path::PathBuf;

use gangway::fidelity::{GavelExpected, rate_key, run_gavel_setup};

fn shared_gavel() -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/gavel"));
    if dir.join("expected_continuous_single_seed0.txt").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: {} not found (the shared reference data is absent)",
            dir.display()
        );
        None
    }
}

#[test]
fn seed_policies_match_gavel_within_ten_percent() {
    let Some(dir) = shared_gavel() else { return };
    let expected = GavelExpected::parse(
        &std::fs::read_to_string(dir.join("expected_continuous_single_seed0.txt")).unwrap(),
    )
    .unwrap();
    let trace = std::fs::read_to_string(dir.join("continuous_single_seed0.csv")).unwrap();
    let policies: Vec<String> = [
        "fifo",
        "max_min_fairness",
        "finish_time_fairness",
        "gandiva",
    ]
    .map(String::from)
    .to_vec();
    for rate in [0.4, 2.0, 4.0] {
        let summaries = run_gavel_setup(&trace, rate, &policies).unwrap();
        for s in &summaries {
            assert_eq!(
                s.measured_jobs, 1000,
                "{} at {rate}: not every window job finished",
                s.policy
            );
            let gavel = expected.jct_h[&(s.policy.clone(), rate_key(rate))];
            let gap = s.avg_jct_h / gavel - 1.0;
            assert!(
                gap.abs() <= 0.10,
                "{} at {rate} jobs/h: {:.2} h vs Gavel's {gavel:.2} h ({:+.1}%)",
                s.policy,
                s.avg_jct_h,
                gap * 100.0
            );
            if let (Some(ours), Some(gavel)) = (
                s.avg_ftf,
                expected.ftf.get(&(s.policy.clone(), rate_key(rate))),
            ) {
                assert!(
                    (ours / gavel - 1.0).abs() <= 0.10,
                    "{} rho at {rate}: {ours:.2} vs {gavel:.2}",
                    s.policy
                );
            }
        }
    }
}
