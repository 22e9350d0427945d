//! Runs several policies on one scenario, in parallel, and measures finish-time fairness: against the
//! `isolated` reference, or on goodput workloads each job alone on its share (`sim::alone`).

use anyhow::Result;

use gangway_core::job::WorkUnit;
use gangway_core::metrics::Summary;
use gangway_core::placement::{PackingPlacer, Placer};
use gangway_core::policy::{self, PolicyConfig};
use gangway_core::sim::alone::jcts_alone;
use gangway_core::sim::{SimResult, Simulation};

/// The policy that finish-time fairness (rho) is measured against.
pub const REFERENCE_POLICY: &str = "isolated";

/// Most simulations that run at the same time.
const MAX_RUNS_AT_ONCE: usize = 8;

/// Makes a progress callback for one policy's run: called with (jobs finished, jobs in the trace).
pub type ProgressFactory<'a> = &'a (dyn Fn(&str) -> Progress + Sync);

/// One run's progress callback.
type Progress = Box<dyn FnMut(usize, usize) + Send>;

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
    // Goodput workloads measure rho as Sia does, each job alone on its share, not by a reference policy.
    let by_share = with_ftf && simulation.trace.work_unit() == WorkUnit::Progress;
    if with_ftf && !by_share && reference_at.is_none() {
        reference_at = Some(to_run.len());
        to_run.push(REFERENCE_POLICY);
    }
    let config = PolicyConfig {
        seed: simulation.config.seed,
        ..policy_config.clone()
    };
    // Every run at once (up to MAX_RUNS_AT_ONCE): the operating system shares the cores, so the whole
    // comparison takes about as long as its longest run or its total work over the cores, whichever is
    // more, whatever order the runs are named in. (Runs in fixed batches of one per core waited for each
    // batch's slowest, and an LP policy named late ran alone at the end.)
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<SimResult>>> = (0..to_run.len())
        .map(|_| std::sync::Mutex::new(None))
        .collect();
    let progress_of: Vec<std::sync::Mutex<Option<Progress>>> = to_run
        .iter()
        .map(|name| std::sync::Mutex::new(Some(progress(name))))
        .collect();
    std::thread::scope(|scope| -> Result<()> {
        let workers: Vec<_> = (0..to_run.len().min(MAX_RUNS_AT_ONCE))
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&name) = to_run.get(k) else {
                            return Ok(());
                        };
                        let mut report = progress_of[k]
                            .lock()
                            .expect("progress lock")
                            .take()
                            .expect("each run once");
                        let mut policy = policy::build(name, &config)?;
                        let result =
                            simulation
                                .run(policy.as_mut(), placer().as_mut(), &mut |d, t| report(d, t));
                        *slots[k].lock().expect("result lock") = Some(result);
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("a simulation thread panicked")?;
        }
        Ok(())
    })?;
    let mut results: Vec<SimResult> = slots
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .expect("result lock")
                .expect("every run finished")
        })
        .collect();
    let reference_at = reference_at.filter(|_| with_ftf && !by_share);
    let summaries = names
        .iter()
        .enumerate()
        .map(|(k, shown)| {
            if by_share {
                let alone = jcts_alone(
                    &results[k],
                    simulation.trace,
                    simulation.cluster,
                    &simulation.config,
                    &names[k],
                    &config,
                )?;
                Ok(results[k].summary_against(shown, Some(&alone)))
            } else {
                Ok(results[k].summary(shown, reference_at.map(|r| &results[r])))
            }
        })
        .collect::<Result<Vec<Summary>>>()?;
    // The runs are handed over, not copied: under a long trace each holds a record per job. The
    // reference, when it was not asked for, goes.
    results.truncate(names.len());
    Ok(results.into_iter().zip(summaries).collect())
}
