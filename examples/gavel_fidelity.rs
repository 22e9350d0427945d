//! Prints the comparison with Gavel's published average JCTs (and mean rho) as a Markdown table, for
//! every rate in Gavel's file, or those given: `cargo run --release --example gavel_fidelity [-- POLICY,...
//! [RATE,...]]`.
//! Reads ../shared/data/gavel (the shared reference data).

use anyhow::{Context, Result};
use gangway::fidelity::{GavelExpected, run_gavel_setup};

fn main() -> Result<()> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/gavel");
    let policies: Vec<String> = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fifo,max_min_fairness".into())
        .split(',')
        .map(str::to_owned)
        .collect();
    let expected = GavelExpected::parse(
        &std::fs::read_to_string(format!("{dir}/expected_continuous_single_seed0.txt"))
            .context("reading Gavel's numbers")?,
    )?;
    let trace = std::fs::read_to_string(format!("{dir}/continuous_single_seed0.csv"))
        .context("reading the trace")?;
    println!(
        "| rate (jobs/h) | policy | Gavel JCT h | gangway JCT h | gap | Gavel rho | gangway rho |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut rates: Vec<u32> = match std::env::args().nth(2) {
        Some(list) => list
            .split(',')
            .map(|r| r.parse::<f64>().map(gangway::fidelity::rate_key))
            .collect::<Result<_, _>>()
            .context("rates: expected numbers such as 0.4,2.0")?,
        None => policies.iter().flat_map(|p| expected.rates(p)).collect(),
    };
    rates.sort_unstable();
    rates.dedup();
    for key in rates {
        let rate = f64::from(key) / 100.0;
        let summaries = run_gavel_setup(&trace, rate, &policies)?;
        for s in summaries {
            let gavel = expected.jct_h.get(&(s.policy.clone(), key));
            let gavel_rho = expected.ftf.get(&(s.policy.clone(), key));
            let unfinished = if s.unfinished_jobs > 0 {
                format!(" ({} unfinished)", s.unfinished_jobs)
            } else {
                String::new()
            };
            println!(
                "| {rate:.1} | {} | {} | {:.2}{unfinished} | {} | {} | {} |",
                s.policy,
                gavel.map_or("-".into(), |g| format!("{g:.2}")),
                s.avg_jct_h,
                gavel.map_or("-".into(), |g| format!(
                    "{:+.1}%",
                    (s.avg_jct_h / g - 1.0) * 100.0
                )),
                gavel_rho.map_or("-".into(), |g| format!("{g:.2}")),
                s.avg_ftf.map_or("-".into(), |r| format!("{r:.2}")),
            );
        }
    }
    Ok(())
}
