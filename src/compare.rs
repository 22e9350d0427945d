//! Runs several policies on one scenario, in parallel, and measures finish-time fairness against the
//! `isolated` reference.

use anyhow::Result;

use gangway_core::metrics::Summary;
use gangway_core::policy::{self, PolicyConfig};
use gangway_core::sim::{PackingPlacer, Placer, SimResult, Simulation};

/// The policy that finish-time fairness (rho) is measured against.
pub const REFERENCE_POLICY: &str = "isolated";

/// Makes a progress callback for one policy's run: called with (jobs finished, jobs in the trace).
pub type ProgressFactory<'a> = &'a (dyn Fn(&str) -> Box<dyn FnMut(usize, usize) + Send> + Sync);

/// Makes a fresh placer for each run.
pub type PlacerFactory<'a> = &'a (dyn Fn() -> Box<dyn Placer> + Sync);

/// The jobs of a run that never finished, leaving out those too large for the cluster (reported apart).
/// The simulator runs until every job finishes, so any other unfinished job means the policy stalled.
pub fn unfinished(result: &SimResult) -> Vec<gangway_core::job::JobId> {
    result
        .records
        .iter()
        .filter(|r| r.finish.is_none() && !result.unschedulable.contains(&r.id))
        .map(|r| r.id)
        .collect()
}

/// The default placer: best-fit consolidation without a topology.
pub fn packing() -> Box<dyn Placer> {
    Box::new(PackingPlacer)
}

/// Runs each policy in `names` (and the `isolated` reference when `with_ftf`) with placers from
/// `placer`, returning results in the order of `names`. Policies are built from `policy_config`, with
/// the simulation's seed.
pub fn run_policies(
    simulation: &Simulation<'_>,
    policy_config: &PolicyConfig,
    names: &[String],
    with_ftf: bool,
    placer: PlacerFactory<'_>,
    progress: ProgressFactory<'_>,
) -> Result<Vec<(SimResult, Summary)>> {
    // Check every spec before spending time on any run.
    let mut to_run: Vec<&str> = Vec::new();
    let mut reference_at = None;
    for name in names {
        if policy::parse(name)?.0.name == REFERENCE_POLICY {
            reference_at = Some(to_run.len());
        }
        to_run.push(name);
    }
    if with_ftf && reference_at.is_none() {
        reference_at = Some(to_run.len());
        to_run.push(REFERENCE_POLICY);
    }
    let config = PolicyConfig {
        seed: simulation.config.seed,
        ..policy_config.clone()
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut results: Vec<Option<SimResult>> = vec![None; to_run.len()];
    for chunk in (0..to_run.len()).collect::<Vec<_>>().chunks(threads) {
        std::thread::scope(|scope| -> Result<()> {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&k| {
                    let name = to_run[k];
                    let mut report = progress(name);
                    let config = config.clone();
                    scope.spawn(move || -> Result<(usize, SimResult)> {
                        let mut policy = policy::build(name, &config)?;
                        let result =
                            simulation
                                .run(policy.as_mut(), placer().as_mut(), &mut |d, t| report(d, t));
                        Ok((k, result))
                    })
                })
                .collect();
            for h in handles {
                let (k, result) = h.join().expect("a simulation thread panicked")?;
                results[k] = Some(result);
            }
            Ok(())
        })?;
    }
    let results: Vec<SimResult> = results
        .into_iter()
        .map(|r| r.expect("every run finished"))
        .collect();
    let reference = reference_at
        .filter(|_| with_ftf)
        .map(|k| results[k].clone());
    Ok(names
        .iter()
        .enumerate()
        .map(|(k, shown)| {
            let summary = results[k].summary(shown, reference.as_ref());
            (results[k].clone(), summary)
        })
        .collect())
}
