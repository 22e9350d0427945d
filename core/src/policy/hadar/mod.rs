//! Hadar (Sultana et al., "Hadar: Heterogeneity-Aware Optimization-Based Online Scheduling for Deep
//! Learning Cluster", IPDPS 2024): an online primal-dual scheduler over per-GPU-type throughputs.
//!
//! Each round is one step of the online primal-dual scheme. The primal side is the jobs' utility: the
//! share of its remaining work a job would finish this round on a given allocation, per GPU (times its
//! weight), so that short jobs on fast GPUs are worth most. The dual side is a price per GPU type that
//! rises exponentially with the type's utilization this round, from the lowest to the highest utility
//! density on offer: p_t(y) = L (U / L)^y for y in \[0, 1\]. Jobs are considered from the highest utility
//! density down; each takes the allocation with the best payoff (utility minus the priced GPUs), if it
//! is positive, and raises the prices of what it took. A job whose best payoff is not positive waits:
//! the prices keep the last GPUs of a type for the jobs that gain most from them.
//!
//! Hadar's task-level heterogeneity (a gang whose tasks run on different GPU types, at the pace of the
//! slowest) is considered when no single type has room for a gang: the gang then takes the fastest mix
//! of types that covers it, priced type by type, and runs at its rate on the slowest type it uses.
//! (`mixed = 0` turns that off.) Such a gang's grant names the [`mixed`] placement step.
//!
//! Knobs: `mixed` (1: allow gangs across GPU types).

pub mod mixed;

use super::{Grant, JobView, Knob, Policy, PolicyEntry, Registry, RegistryError, RoundInput};
use crate::cluster::GpuTypeId;

/// Enters this module's policies (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("hadar", |config| {
            Box::new(Hadar {
                mixed: config.knob("mixed") != 0.0,
            })
        })
        .summary(
            "Hadar: online primal-dual over per-type throughputs, exponential GPU prices, gangs \
             may span GPU types",
        )
        .knob(Knob {
            name: "mixed",
            default: 1.0,
            range: super::KnobRange::Flag,
            help: "1: a gang may span GPU types (task-level heterogeneity), at the pace of its slowest",
        }),
    )?;
    Ok(())
}

/// Hadar: each round, jobs by utility density take the allocation that pays most at the current GPU
/// prices (see the module docs); built by the registry as `hadar`.
pub struct Hadar {
    mixed: bool,
}

/// Per-GPU-type prices for one round, rising with utilization.
struct Prices {
    low: f64,
    high: f64,
    used: Vec<u32>,
    capacity: Vec<u32>,
}

impl Prices {
    /// The price of the next GPU of type t.
    fn of(&self, t: usize) -> f64 {
        let y = f64::from(self.used[t]) / f64::from(self.capacity[t].max(1));
        self.low * (self.high / self.low).powf(y)
    }

    fn free(&self, t: usize) -> u32 {
        self.capacity[t] - self.used[t]
    }
}

/// A job's utility density on type t: the share of its remaining work done in a round there, per GPU.
fn density(view: &JobView<'_>, t: usize, round: f64) -> f64 {
    let rate = view.rates[t];
    if rate <= 0.0 || view.remaining_steps <= 0.0 {
        return 0.0;
    }
    view.job.weight * (rate * round / view.remaining_steps).min(1.0) / f64::from(view.job.gpus)
}

impl Hadar {
    /// The best-paying allocation for a job: (GPUs per type, payoff).
    fn best(&self, view: &JobView<'_>, prices: &Prices, round: f64) -> Option<(Vec<u32>, f64)> {
        let gpus = view.job.gpus;
        let types = prices.capacity.len();
        let payoff = |take: &[u32], slowest: usize| {
            let cost: f64 = (0..types).map(|t| f64::from(take[t]) * prices.of(t)).sum();
            f64::from(gpus) * density(view, slowest, round) - cost
        };
        let mut best: Option<(Vec<u32>, f64)> = None;
        let mut keep_best = |take: Vec<u32>, value: f64| {
            if value > 0.0 && best.as_ref().is_none_or(|(_, p)| value > *p) {
                best = Some((take, value));
            }
        };
        let mut single_fits = false;
        for t in 0..types {
            if view.rates[t] > 0.0 && prices.free(t) >= gpus {
                single_fits = true;
                let mut take = vec![0; types];
                take[t] = gpus;
                let value = payoff(&take, t);
                keep_best(take, value);
            }
        }
        if !single_fits && self.mixed {
            // No single type holds the gang: the fastest types first, down to the slowest one needed.
            let mut order: Vec<usize> = (0..types).filter(|&t| view.rates[t] > 0.0).collect();
            order.sort_by(|&a, &b| view.rates[b].total_cmp(&view.rates[a]));
            let mut take = vec![0; types];
            let mut left = gpus;
            for &t in &order {
                let n = left.min(prices.free(t));
                take[t] = n;
                left -= n;
                if left == 0 {
                    let value = payoff(&take, t);
                    keep_best(take, value);
                    break;
                }
            }
        }
        best
    }
}

impl Policy for Hadar {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let types = input.capacity.len();
        let round = input.round_length;
        // The range of utility densities on offer bounds the prices.
        let densities: Vec<f64> = input
            .jobs
            .iter()
            .flat_map(|v| (0..types).map(move |t| density(v, t, round)))
            .filter(|d| *d > 0.0)
            .collect();
        let low = densities.iter().copied().fold(f64::INFINITY, f64::min);
        let high = densities.iter().copied().fold(0.0, f64::max);
        if densities.is_empty() {
            return Vec::new();
        }
        let mut prices = Prices {
            // Half the lowest density: at no utilization every job gains more than it pays.
            low: low / 2.0,
            high: high.max(low),
            used: vec![0; types],
            capacity: input.capacity.to_vec(),
        };
        let mut order: Vec<(f64, &JobView<'_>)> = input
            .jobs
            .iter()
            .map(|v| {
                (
                    (0..types).map(|t| density(v, t, round)).fold(0.0, f64::max),
                    v,
                )
            })
            .collect();
        order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.id().cmp(&b.1.id())));
        let mut grants = Vec::new();
        for (_, view) in order {
            let Some((take, _)) = self.best(view, &prices, round) else {
                continue;
            };
            for (used, took) in prices.used.iter_mut().zip(&take) {
                *used += took;
            }
            grants.push(grant(view, &take));
        }
        grants
    }
}

/// The grant for an allocation: one GPU type, or a mix whose slowest type sets the pace.
fn grant(view: &JobView<'_>, take: &[u32]) -> Grant {
    let used: Vec<usize> = (0..take.len()).filter(|&t| take[t] > 0).collect();
    let slowest = *used
        .iter()
        .min_by(|&&a, &&b| view.rates[a].total_cmp(&view.rates[b]))
        .expect("an allocation uses some GPUs");
    let grant = Grant::new(view.id(), GpuTypeId(slowest as u16), view.job.gpus);
    if used.len() > 1 {
        grant.placed_by(&mixed::MIXED_TYPES)
    } else {
        grant
    }
}
