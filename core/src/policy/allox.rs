//! AlloX (Le et al., "AlloX: Compute Allocation in Hybrid Clusters", EuroSys'20), as Gavel evaluates it
//! (`allox`): non-preemptive; jobs waiting are matched to free GPUs so as to minimize the sum of their
//! completion times on unrelated machines.
//!
//! Each free GPU w is a machine; putting job i in the k-th position from the end of w's queue costs
//! k x p\[i\]\[w\], its processing time there (remaining steps over its rate on w's type), since k jobs wait
//! for it. A min-cost bipartite matching of jobs to (GPU, position) slots (Kuhn-Munkres) minimizes the total
//! completion time; the job matched to the last position counted from the end of each GPU's queue is
//! assigned that GPU's type, whole, until it finishes. Like Gavel, the matching is recomputed only when a
//! job arrived or left and at least `realloc` seconds (1,920) have passed, and the assignment is realized
//! by the round mechanism, which also lets unassigned jobs use GPUs that would otherwise idle.
//!
//! AlloX schedules single-GPU jobs (Gavel's version asserts it); gangs wait for whatever the matching
//! leaves, first come first served.

use pathfinding::kuhn_munkres::kuhn_munkres_min;
use pathfinding::matrix::Matrix;

use super::{
    Cadenced, JobView, Knob, PolicyEntry, Realize, Registry, RegistryError, RoundInput,
    TimeSharePolicy, TimeShares, TypePreference,
};
use crate::job::{IdMap, JobId};

/// Enters this module's policies (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("allox", |config| {
            let matching = Cadenced::new(Matching::default(), config.knob("realloc"));
            Box::new(Realize::new(matching, config.seed))
        })
        .summary(
            "AlloX: non-preemptive; waiting jobs matched to free GPUs to minimize total \
             completion time (Gavel's `allox`)",
        )
        .knob(Knob {
            name: "realloc",
            default: 1920.0,
            range: super::KnobRange::SECONDS,
            help: "seconds between re-matchings, at least (Gavel: 1,920)",
        }),
    )?;
    Ok(())
}

/// AlloX's state: the jobs matched so far. Re-matched on Gavel's cadence ([`Cadenced`]).
#[derive(Default)]
pub struct Matching {
    /// The GPU type each matched job holds until it finishes (AlloX never preempts).
    assigned: IdMap<JobId, usize>,
}

/// Costs are matched as integers: seconds, scaled to keep sub-second resolution.
const COST_SCALE: f64 = 1000.0;
/// The largest cost matrix built (cells); Kuhn-Munkres is cubic in it.
const MAX_CELLS: usize = 2_000_000;

impl Matching {
    /// Matches the jobs not yet assigned to the GPUs no assigned job holds.
    fn rematch(&mut self, input: &RoundInput<'_>) {
        let active: IdMap<JobId, &JobView<'_>> = input.jobs.iter().map(|v| (v.id(), v)).collect();
        self.assigned.retain(|j, _| active.contains_key(j));
        let mut free: Vec<u32> = input.capacity.to_vec();
        for (job, &t) in &self.assigned {
            free[t] = free[t].saturating_sub(active[job].job.gpus);
        }
        let (single, gangs): (Vec<&JobView<'_>>, Vec<&JobView<'_>>) = input
            .jobs
            .iter()
            .filter(|v| !self.assigned.contains_key(&v.id()))
            .partition(|v| v.job.gpus == 1);
        let workers: Vec<usize> = (0..free.len())
            .flat_map(|t| std::iter::repeat_n(t, free[t] as usize))
            .collect();
        let (m, n) = (single.len(), workers.len());
        if m > 0 && n > 0 {
            // Slot k * n + w: position k + 1 from the end of worker w's queue. Positions are capped so
            // that the matrix stays under MAX_CELLS (a worker rarely needs more than a few times its
            // fair number of positions); the cap never drops below what fits every job.
            let positions = m.min((MAX_CELLS / (m * n)).max(m.div_ceil(n)));
            let weights = Matrix::from_fn(m, n * positions, |(i, col)| {
                let (k, w) = (col / n, col % n);
                let rate = single[i].rates[workers[w]];
                let p = if rate > 0.0 {
                    single[i].remaining_steps / rate
                } else {
                    1e12
                };
                ((k + 1) as f64 * p * COST_SCALE).min(i64::MAX as f64 / 4.0) as i64
            });
            let (_, slots) = kuhn_munkres_min(&weights);
            // On each worker, the job farthest from the end of its queue runs first.
            let mut first: Vec<Option<(usize, usize)>> = vec![None; n];
            for (i, &col) in slots.iter().enumerate() {
                let (k, w) = (col / n, col % n);
                if single[i].rates[workers[w]] > 0.0 && first[w].is_none_or(|(best, _)| k > best) {
                    first[w] = Some((k, i));
                }
            }
            for (w, chosen) in first.iter().enumerate() {
                if let Some((_, i)) = *chosen {
                    free[workers[w]] -= 1;
                    self.assigned.insert(single[i].id(), workers[w]);
                }
            }
        }
        for view in gangs {
            let fit = (0..free.len()).find(|&t| free[t] >= view.job.gpus && view.rates[t] > 0.0);
            if let Some(t) = fit {
                free[t] -= view.job.gpus;
                self.assigned.insert(view.id(), t);
            }
        }
    }

    /// Whole time on the assigned type, for every job present at this matching. Like every Gavel policy
    /// but FIFO, GPUs that no assigned job uses may still run the others (that is why Gavel's AlloX
    /// equals all-on-V100 at low load); a job that arrives later waits for the next matching. The type
    /// order too is the one at the matching, as Gavel's is fixed.
    fn assigned_shares(&self, input: &RoundInput<'_>) -> TimeShares {
        let types = input.capacity.len();
        let mut shares = TimeShares::new(types, TypePreference::Ordered(input.type_order.to_vec()));
        shares.fill_idle = true;
        for view in input.jobs {
            let assigned = self.assigned.get(&view.id()).copied();
            shares.push(
                view.id(),
                (0..types).map(|t| if assigned == Some(t) { 1.0 } else { 0.0 }),
            );
        }
        shares
    }
}

impl TimeSharePolicy for Matching {
    fn shares(&mut self, input: &RoundInput<'_>) -> TimeShares {
        self.rematch(input);
        self.assigned_shares(input)
    }
}
