//! Gandiva on Gavel's trace as the load grows: time-slicing alone while the jobs fit, and random packing
//! of pairs that do not interfere once they do not: `cargo run --release --example gandiva`.
//!
//! It compares `gandiva` with agnostic LAS, which time-slices the same GPUs without packing, on the
//! bundled continuous-single trace in Gavel's setup (36 V100 + 36 P100 + 36 K80, jobs 4000..4999). Packing
//! starts near 4.4 jobs/hour, where the active jobs first outnumber the GPUs.

use anyhow::Result;
use gangway::fidelity::run_gavel_setup;
use gangway::scenario::EMBEDDED_TRACE;

fn main() -> Result<()> {
    let names: Vec<String> = ["max_min_fairness", "gandiva"].map(String::from).to_vec();
    println!("| jobs/h | policy | avg JCT h | avg rho | worst rho |");
    println!("|---|---|---|---|---|");
    for rate in [2.0, 4.4, 5.6] {
        for s in run_gavel_setup(EMBEDDED_TRACE, rate, &names)? {
            println!(
                "| {rate} | {} | {:.2} | {:.2} | {:.2} |",
                s.policy,
                s.avg_jct_h,
                s.avg_ftf.unwrap_or(f64::NAN),
                s.max_ftf.unwrap_or(f64::NAN)
            );
        }
    }
    Ok(())
}
