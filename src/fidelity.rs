//! Checking the simulator against Gavel's published numbers.
//!
//! Gavel's `expected_continuous_single_seed0.txt` lists, per input rate, each policy's average JCT in
//! hours (first half) and its mean finish-time fairness rho (second half). Blocks start with a line
//! listing policy names; a block whose values are all small (< 5) is a rho block.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};

use gangway_core::metrics::{Summary, Window};
use gangway_core::policy;
use gangway_core::sim::Simulation;
use gangway_core::trace::TraceOptions;

use crate::scenario;

/// Gavel's numbers, keyed by (policy, rate x 100 rounded).
#[derive(Debug, Default)]
pub struct GavelExpected {
    /// Average JCT in hours, by (policy, rate key).
    pub jct_h: BTreeMap<(String, u32), f64>,
    /// Average finish-time fairness (rho), by (policy, rate key).
    pub ftf: BTreeMap<(String, u32), f64>,
}

/// A rate as an exact key: 0.4 -> 40.
pub fn rate_key(rate: f64) -> u32 {
    (rate * 100.0).round() as u32
}

impl GavelExpected {
    /// Reads Gavel's published figures from `testdata`'s text, blocks of rows per rate; a row that
    /// cannot be read is an error naming its line.
    pub fn parse(text: &str) -> Result<Self> {
        let mut blocks: Vec<Vec<(String, u32, f64)>> = Vec::new();
        let mut rate = None;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.starts_with('[') {
                blocks.push(Vec::new());
            } else if let Some(r) = line.strip_prefix("Input job rate:") {
                rate = Some(
                    r.trim()
                        .parse::<f64>()
                        .with_context(|| format!("line {}: bad rate", n + 1))?,
                );
            } else if let Some((policy, value)) = line.split_once(':') {
                let (Some(rate), Some(block)) = (rate, blocks.last_mut()) else {
                    continue;
                };
                let value: f64 = value
                    .trim()
                    .parse()
                    .with_context(|| format!("line {}: bad value", n + 1))?;
                block.push((policy.trim().to_owned(), rate_key(rate), value));
            }
        }
        let mut out = GavelExpected::default();
        for block in blocks {
            let is_ftf = !block.is_empty() && block.iter().all(|(_, _, v)| *v < 5.0);
            let target = if is_ftf { &mut out.ftf } else { &mut out.jct_h };
            for (policy, rate, value) in block {
                target.entry((policy, rate)).or_insert(value);
            }
        }
        if out.jct_h.is_empty() {
            bail!("no JCT figures found");
        }
        Ok(out)
    }

    /// Rates that have a JCT for `policy`.
    pub fn rates(&self, policy: &str) -> Vec<u32> {
        self.jct_h
            .keys()
            .filter(|(p, _)| p == policy)
            .map(|(_, r)| *r)
            .collect()
    }
}

/// Runs Gavel's setup (continuous-single seed 0 at `rate`, 36 V100 + 36 P100 + 36 K80, 360 s rounds,
/// jobs 4000..5000) for `policies`, from the trace text given (Gavel's CSV).
///
/// rho is measured as Gavel measures it, against an `isolated` run that reallocates on the policy's own
/// cadence: every round for gangway's agnostic policies, and every 1,920 s (Gavel's simulator, which
/// reallocates every policy, `isolated` included, on that cadence) for the policies that follow it, those
/// with a `realloc` knob.
pub fn run_gavel_setup(trace_text: &str, rate: f64, policies: &[String]) -> Result<Vec<Summary>> {
    let table = scenario::load_throughputs(None)?;
    let options = TraceOptions {
        rate: Some(rate),
        ..TraceOptions::default()
    };
    let trace = gangway_core::trace::parse(
        &gangway_core::error::Source("gavel".into()),
        trace_text,
        &options,
    )?;
    let cluster = gangway_core::cluster::Cluster::parse_spec("v100=36,p100=36,k80=36", 1)?;
    let mut names: Vec<String> = policies.to_vec();
    let reference = |spec: &str| -> Result<String> {
        let knobs = policy::builtin().resolve(spec)?.knobs;
        Ok(match knobs.iter().find(|(k, _)| *k == "realloc") {
            Some((_, seconds)) => format!("isolated:realloc={seconds}"),
            None => "isolated".to_owned(),
        })
    };
    let references: Vec<String> = policies
        .iter()
        .map(|p| reference(p))
        .collect::<Result<_>>()?;
    for r in &references {
        if !names.contains(r) {
            names.push(r.clone());
        }
    }
    // Each policy's rho is against its own reference, so none is measured by the runs themselves.
    let report = Simulation::builder()
        .trace(trace)
        .cluster(cluster)
        .table(table)
        .window(Window(Some(4000..5000)))
        .policies(&names)
        .fairness(false)
        .run()?;
    let by_name = |name: &str| &report.get(name).expect("ran").result;
    Ok(policies
        .iter()
        .zip(&references)
        .map(|(p, r)| by_name(p).summary(p, Some(by_name(r))))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_jct_and_rho_blocks() {
        let text = "=== continuous_jobs\n['fifo']\n['fifo', 'las']\nInput job rate: 0.40\nfifo: 17.58\nlas: 23.26\n\
                    Input job rate: 2.00\nfifo: 18.32\n['las']\nInput job rate: 0.40\nlas: 99.0\n\
                    ['las', 'fifo']\nInput job rate: 0.40\nlas: 1.00\nfifo: 0.84\n";
        let e = GavelExpected::parse(text).unwrap();
        assert_eq!(e.jct_h[&("fifo".into(), 200)], 18.32);
        // The first JCT figure wins over a later repeat.
        assert_eq!(e.jct_h[&("las".into(), 40)], 23.26);
        assert_eq!(e.ftf[&("fifo".into(), 40)], 0.84);
        assert_eq!(e.rates("fifo"), vec![40, 200]);
    }
}
