//! `pollux`'s exact search against Pollux's own genetic algorithm on the same rounds
//! (`testdata/pollux_ga/README.md` says how the table was made): Pollux's fitness, the p = -1 power
//! mean of the scaled speedups with restart factors as `pollux.py` computes it, of the allocation
//! each search picked, on 20 busy rounds of a `pollux` run of Pollux's workload 1 at loads 1.0 and 2.0
//! (the GA ran on 14 of them; the other 6 have `pollux`'s figures only).
//!
//! The table is a recorded measurement (the GA takes minutes a round): these tests check what it
//! recorded, and fail when a regenerated table breaks the bounds. Two gaps, measured:
//! - **The pick**: the GA searches a larger space than `pollux` does. A gang that spans servers may
//!   hold part of a server there (7 replicas as 4 + 3, 6 as 1 + 4 + 1), next to single-server jobs, as
//!   long as no two distributed jobs share a server (Pollux's repair). `pollux` gives a gang that spans
//!   servers whole servers only, so that its program needs GPUs per type, not per server. Where the
//!   GA's best is above `pollux`'s pick (by at most 1.5%), it is by such partial servers.
//! - **The placement**: `pollux`'s program counts GPUs per type, not per server, so a pick can be
//!   unplaceable: a gang on part of a server waits for a server with room, and when the free GPUs are
//!   spread over several servers it gets none, while a job with no GPUs counts 0.001 in the harmonic
//!   mean. In 7 of the 20 rounds some granted job got no GPUs, and the objective of what ran fell to
//!   2-15% of the pick's (over the whole runs: 23 of 1,075 rounds at load 1.0, 263 of 2,257 at load
//!   2.0). The GA's picks are per server and always placeable. This is a defect to fix (issue 17's
//!   note), recorded in the table's `gangway_placed` column, not asserted here.

use std::collections::HashMap;
use std::path::Path;

/// One round of the table.
struct Round {
    name: String,
    values: HashMap<String, f64>,
}

impl Round {
    fn get(&self, column: &str) -> f64 {
        self.values[column]
    }
}

fn rounds() -> Vec<Round> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/pollux_ga/rounds.csv");
    let mut reader = csv::Reader::from_path(&path).expect("testdata/pollux_ga/rounds.csv");
    let headers = reader.headers().expect("a header").clone();
    reader
        .records()
        .map(|record| {
            let record = record.expect("a record");
            let mut values = HashMap::new();
            for (column, field) in headers.iter().zip(record.iter()) {
                let value = match field {
                    "True" => Ok(1.0),
                    "False" => Ok(0.0),
                    number => number.parse::<f64>(),
                };
                if let Ok(value) = value {
                    values.insert(column.to_string(), value);
                }
            }
            Round {
                name: format!("{} round {}", &record[0], &record[1]),
                values,
            }
        })
        .collect()
}

/// The best the GA reached on a round in any of its runs: as shipped from Pollux's first call (cold),
/// carried over from the two rounds before (warm), or long (1,000 or 500 generations); `None` where
/// it did not run.
fn best_ga(round: &Round) -> Option<f64> {
    ["ga100_cold_best", "ga100_warm_best", "ga_long_best"]
        .iter()
        .map(|c| round.values.get(*c).copied())
        .collect::<Option<Vec<f64>>>()
        .map(|v| v.into_iter().fold(f64::MIN, f64::max))
}

/// The largest shortfall of `pollux`'s pick below the GA's best on any round, relative (measured:
/// 1.49%, workload 1 round 333, where the GA runs a deepspeech2 gang as 1 + 4 + 1 replicas).
const PICK_BELOW_BEST: f64 = 0.015;
#[test]
fn the_table_covers_busy_rounds_and_the_ga_ran_on_each() {
    let rounds = rounds();
    assert_eq!(rounds.len(), 20);
    assert!(rounds.iter().filter(|r| best_ga(r).is_some()).count() >= 11);
    assert!(rounds.iter().any(|r| r.get("jobs") >= 50.0));
}

#[test]
fn the_exact_search_picks_within_the_measured_bound_of_the_gas_best() {
    let mut ratios = Vec::new();
    for round in rounds() {
        let best = best_ga(&round).expect("the GA ran on every round");
        let picked = round.get("gangway_picked");
        assert!(
            picked >= best * (1.0 - PICK_BELOW_BEST),
            "{}: gangway's pick {picked}, the GA's best {best}",
            round.name
        );
        ratios.push(picked / best);
    }
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    // Measured: 1.0006.
    assert!(
        mean >= 1.0,
        "mean of gangway's pick / the GA's best: {mean}"
    );
    // Equal (to the table's 6 digits) or better on 16 of the 20 rounds, every round at load 2.0 among
    // them.
    let level = ratios.iter().filter(|&&r| r >= 1.0 - 1e-5).count();
    assert_eq!(level, 16, "{level} of {}", ratios.len());
}
