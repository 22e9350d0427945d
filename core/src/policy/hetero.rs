//! Gavel's heterogeneity-aware policies (Narayanan et al., "Heterogeneity-Aware Cluster Scheduling
//! Policies for Deep Learning Workloads", OSDI'20), each a program over the allocation matrix X and
//! effective throughput (see [`super::effective`]), solved by HiGHS (see [`crate::solver`]):
//!
//! - `max_min_fairness_perf`: maximize min_j sum_t T\[j\]\[t\] X\[j\]\[t\] gpus_j / (w_j T_prop\[j\]), where T_prop
//!   is j's throughput under the proportional share and w_j its priority weight;
//! - `max_min_fairness_water_filling`: the same max-min, made Pareto-efficient and hierarchical by
//!   water-filling: raise every unfrozen job's normalized throughput together (each in proportion to its
//!   weight; a tenant's weight is shared among its unfrozen jobs, by job weight), then freeze the jobs that
//!   no allocation can raise further (a MILP with one binary per job), and repeat;
//! - `finish_time_fairness_perf`: minimize max_j rho_j, rho_j = (t_j + R_j / tput_j(X)) / (iso time_j +
//!   R_j / T_iso\[j\]), with T_iso the throughput on Gavel's isolated allocation (1/N of every type);
//!   convex, so it is solved as LP feasibility at a given rho, bisected, and the allocation is the central
//!   one among those that reach the optimum, as Gavel's interior-point solver returns;
//! - `min_total_duration`: maximize s = 1/makespan subject to tput_j(X) >= R_j s for every job;
//! - `max_sum_throughput_perf`: maximize sum_j tput_j(X) / sum_t T\[j\]\[t\] (each job's throughput normalized,
//!   so that fast models do not take everything);
//! - `max_sum_throughput_normalized_by_cost_perf`: maximize sum_j sum_t T\[j\]\[t\] X\[j\]\[t\] / price\[t\].
//!
//! Each has a `*_packed` variant whose allocation also ranges over pairs of jobs packed on the same GPUs,
//! at the throughput table's pair rates (see [`super::effective::packing_units`]).
//!
//! Every one re-solves only when a job arrived or left, and at most once per `realloc` seconds (Gavel's
//! 1,920 s): a knob, `max_min_fairness_perf:realloc=360` re-solves every round.

use super::effective::{
    AllocationVars, UnitSpec, best_rate, packing_units, proportional_row, single_units,
};
use super::finish_time::{IsolatedClock, IsolatedShare};
use super::{
    Cadenced, Knob, Needs, Policy, PolicyConfig, PolicyEntry, Realize, Registry, RegistryError,
    RoundInput, TimeSharePolicy, TimeShares,
};
use crate::solver::{Program, Relation, SolveError, Var};

const REALLOC: Knob = Knob {
    name: "realloc",
    default: 1920.0,
    range: super::KnobRange::SECONDS,
    help: "seconds between re-solves, at least (Gavel: 1,920)",
};

/// Enters this module's policies (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("max_min_fairness_perf", |c| {
            program(Objective::MaxMinFairness, false, c.knob("realloc"), c)
        })
        .alias("las_perf")
        .summary(
            "Gavel's heterogeneity-aware LAS: max-min of effective throughput over the \
             proportional share (LP)",
        )
        .knob(REALLOC)
        .needs(Needs::LP_SOLVER),
    )?;
    registry.register(
        PolicyEntry::new("finish_time_fairness_perf", |c| {
            program(Objective::FinishTimeFairness, false, c.knob("realloc"), c)
        })
        .alias("ftf_perf")
        .summary(
            "Gavel's heterogeneity-aware finish-time fairness: minimize the largest rho \
             (bisected LPs)",
        )
        .knob(REALLOC)
        .needs(Needs::LP_SOLVER),
    )?;
    registry.register(
        PolicyEntry::new("min_total_duration", |c| {
            program(Objective::MinTotalDuration, false, c.knob("realloc"), c)
        })
        .alias("makespan")
        .summary(
            "Gavel's makespan policy: the allocation that finishes every active job soonest (LP)",
        )
        .knob(REALLOC)
        .needs(Needs::LP_SOLVER),
    )?;
    registry.register(
        PolicyEntry::new("max_min_fairness_water_filling", |c| {
            program(Objective::WaterFilling, false, c.knob("realloc"), c)
        })
        .alias("water_filling")
        .summary(
            "Gavel's hierarchical max-min fairness by water-filling: tenants share \
             equally, jobs by weight within a tenant (LPs and MILPs)",
        )
        .knob(REALLOC)
        .needs(Needs::LP_SOLVER),
    )?;
    registry.register(
        PolicyEntry::new("max_sum_throughput_perf", |c| {
            program(Objective::SumThroughput, false, c.knob("realloc"), c)
        })
        .summary(
            "Gavel's throughput policy: maximize the sum of normalized effective throughputs (LP)",
        )
        .knob(REALLOC)
        .needs(Needs::LP_SOLVER),
    )?;
    registry.register(
        PolicyEntry::new("max_sum_throughput_normalized_by_cost_perf", |c| {
            program(Objective::ThroughputPerDollar, false, c.knob("realloc"), c)
        })
        .alias("cost_perf")
        .summary(
            "Gavel's cost policy: maximize effective throughput per dollar, given \
             per-type prices (LP)",
        )
        .knob(REALLOC)
        .needs(Needs::LP_SOLVER),
    )?;
    registry.register(
        PolicyEntry::new("max_min_fairness_packed", |c| {
            program(Objective::MaxMinFairness, true, c.knob("realloc"), c)
        })
        .alias("las_packed")
        .summary(
            "max_min_fairness_perf over jobs and packed pairs (space sharing, the table's \
             pair rates)",
        )
        .knob(REALLOC)
        .needs(Needs::LP_SOLVER),
    )?;
    registry.register(
        PolicyEntry::new("max_min_fairness_water_filling_packed", |c| {
            program(Objective::WaterFilling, true, c.knob("realloc"), c)
        })
        .summary("max_min_fairness_water_filling over jobs and packed pairs")
        .knob(REALLOC)
        .needs(Needs::LP_SOLVER),
    )?;
    registry.register(
        PolicyEntry::new("finish_time_fairness_packed", |c| {
            program(Objective::FinishTimeFairness, true, c.knob("realloc"), c)
        })
        .alias("ftf_packed")
        .summary("finish_time_fairness_perf over jobs and packed pairs")
        .knob(REALLOC)
        .needs(Needs::LP_SOLVER),
    )?;
    registry.register(
        PolicyEntry::new("min_total_duration_packed", |c| {
            program(Objective::MinTotalDuration, true, c.knob("realloc"), c)
        })
        .summary("min_total_duration over jobs and packed pairs")
        .knob(REALLOC)
        .needs(Needs::LP_SOLVER),
    )?;
    registry.register(
        PolicyEntry::new("max_sum_throughput_packed", |c| {
            program(Objective::SumThroughput, true, c.knob("realloc"), c)
        })
        .summary("max_sum_throughput_perf over jobs and packed pairs")
        .knob(REALLOC)
        .needs(Needs::LP_SOLVER),
    )?;
    registry.register(
        PolicyEntry::new("max_sum_throughput_normalized_by_cost_packed", |c| {
            program(Objective::ThroughputPerDollar, true, c.knob("realloc"), c)
        })
        .alias("cost_packed")
        .summary("max_sum_throughput_normalized_by_cost_perf over jobs and packed pairs")
        .knob(REALLOC)
        .needs(Needs::LP_SOLVER),
    )?;
    Ok(())
}

/// Pairs considered per job by the packed variants: its best partners by packing benefit. Gavel's
/// formulation ranges over every pair (quadratic in the jobs); a few partners per job keep the program
/// linear in size, and a job rarely has more than a few partners that beat time-slicing by much.
const PARTNERS: usize = 4;

/// What one of Gavel's programs optimizes (see the module docs for each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    /// Max-min of normalized effective throughput (`max_min_fairness_perf`).
    MaxMinFairness,
    /// The same max-min, hierarchical and Pareto-efficient by water-filling.
    WaterFilling,
    /// The smallest worst finish-time fairness rho (`finish_time_fairness_perf`).
    FinishTimeFairness,
    /// The soonest finish of every active job (`min_total_duration`).
    MinTotalDuration,
    /// The largest sum of normalized effective throughputs (`max_sum_throughput_perf`).
    SumThroughput,
    /// The largest effective throughput per dollar (`max_sum_throughput_normalized_by_cost_perf`).
    ThroughputPerDollar,
}

/// One of Gavel's programs as a policy, the door every `*_perf` and `*_packed` built-in is made
/// through: `objective` over each job alone (and, when `packed`, over pairs of jobs packed on the same
/// GPUs), re-solved when a job arrived or left and at most once per `realloc` seconds, its shares
/// realized round by round by Gavel's mechanism ([`Realize`]). `config` gives the seed and GPU prices.
pub fn program(
    objective: Objective,
    packed: bool,
    realloc: f64,
    config: &PolicyConfig,
) -> Box<dyn Policy> {
    let formulation = Formulation {
        objective,
        packed,
        clock: IsolatedClock::new(IsolatedShare::EveryType),
        last_rho: None,
        config: config.clone(),
    };
    Box::new(Realize::new(
        Cadenced::new(formulation, realloc),
        config.seed,
    ))
}

/// One of Gavel's programs, and the state its objective keeps between solves. It runs re-solved on
/// Gavel's cadence ([`Cadenced`]) through the round mechanism ([`Realize`]).
struct Formulation {
    objective: Objective,
    /// Range over packed pairs too (the `*_packed` variants).
    packed: bool,
    /// Finish-time fairness: the isolated reference, and the last optimal worst rho (where the next
    /// search starts, since it moves little between solves).
    clock: IsolatedClock,
    last_rho: Option<f64>,
    config: PolicyConfig,
}

impl Formulation {
    fn solve(&mut self, input: &RoundInput<'_>) -> TimeShares {
        let jobs = input.jobs;
        let units = if self.packed {
            packing_units(input, PARTNERS)
        } else {
            single_units(jobs)
        };
        let mut program = Program::new();
        let x = AllocationVars::over(&mut program, units.clone(), jobs.len(), input.capacity);
        let solution = match self.objective {
            Objective::MaxMinFairness => {
                // Gavel's max-min reference is the proportional row of a single GPU; the gang size
                // enters through `scale` below, as in Gavel's program.
                let prop = proportional_row(input.capacity, jobs.len(), 1);
                let z = program.var(0.0, f64::INFINITY);
                for (j, v) in jobs.iter().enumerate() {
                    let reference = super::effective::effective_throughput(v.rates, &prop);
                    let scale = f64::from(v.job.gpus) / (v.job.weight * reference);
                    let mut terms = x.throughput(j, scale);
                    terms.push((-1.0, z));
                    program.constrain(terms, Relation::AtLeast, 0.0);
                }
                program.maximize([(1.0, z)])
            }
            Objective::MinTotalDuration => {
                // s = 1 / makespan: every job's throughput covers its remaining steps by then.
                let s = program.var(0.0, f64::INFINITY);
                for (j, v) in jobs.iter().enumerate() {
                    let mut terms = x.throughput(j, 1.0);
                    terms.push((-v.remaining_steps, s));
                    program.constrain(terms, Relation::AtLeast, 0.0);
                }
                program.maximize([(1.0, s)])
            }
            Objective::SumThroughput => program.maximize(normalized_throughput(&x, jobs)),
            Objective::ThroughputPerDollar => {
                let prices = self.config.prices(input.cluster);
                let terms: Vec<_> = jobs
                    .iter()
                    .enumerate()
                    .flat_map(|(j, _)| x.weighted_throughput(j, 1.0, |t| 1.0 / prices[t]))
                    .collect();
                program.maximize(terms)
            }
            Objective::FinishTimeFairness => return self.finish_time_fairness(input, &units),
            Objective::WaterFilling => return water_filling(input, &units),
        };
        match solution {
            Ok(solution) => x.shares(&solution, input),
            Err(e) => {
                tracing::warn!(error = %e, jobs = jobs.len(), "LP failed; falling back to proportional shares");
                proportional_shares(input)
            }
        }
    }

    /// Bisects the smallest rho at which an allocation gives every job the throughput that rho needs,
    /// then takes the allocation in the middle of those that reach it.
    ///
    /// Many allocations reach the optimal worst rho: only the jobs furthest behind are held to it. Gavel's
    /// solver (ECOS, interior point, on the program with `inv_pos`) answers with one in the middle, where
    /// every job gets some slack beyond rho*; this approximates that with the central point of the
    /// allocations that reach rho* + 0.1% (interior point without crossover). A vertex that spends the
    /// slack on throughput instead is a different policy: 16% faster than Gavel's at 4.8 jobs/hour
    /// (docs/FIDELITY.md).
    fn finish_time_fairness(&mut self, input: &RoundInput<'_>, units: &[UnitSpec]) -> TimeShares {
        let rows = self.clock.rows(input);
        let jobs = input.jobs;
        // Throughput job j needs to reach `rho`: R / (rho * ideal - age); None when rho is out of reach.
        let needed = |rho: f64, j: usize| {
            let row = rows[j];
            let slack = rho * row.ideal() - row.age;
            (slack > 0.0).then(|| row.remaining / slack)
        };
        let program_at = |rho: f64| {
            let mut program = Program::new();
            let x = AllocationVars::over(&mut program, units.to_vec(), jobs.len(), input.capacity);
            for j in 0..jobs.len() {
                let need = needed(rho, j)?;
                program.constrain(x.throughput(j, 1.0), Relation::AtLeast, need);
            }
            Some((program, x))
        };
        // Any vertex answers whether rho is reachable.
        let reachable =
            |rho: f64| program_at(rho).is_some_and(|(program, _)| program.maximize([]).is_ok());
        // No job can beat its rho at full speed on its fastest type from now: a lower bound on rho*.
        let floor = rows
            .iter()
            .map(|r| r.rho_at(r.rate, 0.0))
            .filter(|r| r.is_finite())
            .fold(0.0, f64::max);
        // rho* moves little between solves: search from the last one.
        let guess = self
            .last_rho
            .map_or(floor.max(1e-3) * 1.25, |r| r.max(floor));
        let Some((mut lo, mut hi)) = bracket(guess, floor, reachable) else {
            tracing::warn!(
                jobs = jobs.len(),
                "no finish-time-fair allocation found; falling back to proportional shares"
            );
            return proportional_shares(input);
        };
        // rho* to 0.1%, bisecting in log space (the bracket can span orders of magnitude).
        while hi - lo > 1e-3 * hi {
            let mid = if lo > 0.0 { (lo * hi).sqrt() } else { 0.5 * hi };
            if reachable(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        self.last_rho = Some(hi);
        let (program, x) = program_at(hi).expect("hi is reachable");
        let solution = program.central_point().or_else(|e| {
            // Still an allocation that reaches rho*: the vertex that spends the slack on throughput. The
            // program is built as before, so its variables are the ones `x` names.
            if matches!(e, SolveError::Unsupported(_)) {
                // A backend without an interior-point method (microlp) says so once, not every solve.
                tracing::debug!(error = %e, "no central point; using a vertex");
            } else {
                tracing::warn!(error = %e, "no central point; using a vertex");
            }
            let (program, x) = program_at(hi).expect("hi is reachable");
            program.maximize(normalized_throughput(&x, jobs))
        });
        match solution {
            Ok(solution) => x.shares(&solution, input),
            Err(e) => {
                tracing::warn!(error = %e, "LP failed; falling back to proportional shares");
                proportional_shares(input)
            }
        }
    }
}

/// Brackets the smallest reachable rho in (lo, hi], with `floor` a lower bound on it: from `guess`, the
/// step away from it squaring each time (1%, 2%, 4%, 8%, ...); None if nothing below 1e9 is reachable.
fn bracket(guess: f64, floor: f64, reachable: impl Fn(f64) -> bool) -> Option<(f64, f64)> {
    let mut step: f64 = 1.01;
    if reachable(guess) {
        let mut hi = guess;
        loop {
            let lo = hi / step;
            if lo <= floor || !reachable(lo) {
                return Some((lo.max(floor), hi));
            }
            hi = lo;
            step *= step;
        }
    }
    let mut lo = guess;
    loop {
        let hi = lo * step;
        if hi >= 1e9 {
            return None;
        }
        if reachable(hi) {
            return Some((lo, hi));
        }
        lo = hi;
        step *= step;
    }
}

/// The sum of every job's throughput normalized by its summed rates over the types, so that fast models
/// do not take everything (`max_sum_throughput_perf`'s objective).
fn normalized_throughput(x: &AllocationVars, jobs: &[super::JobView<'_>]) -> Vec<(f64, Var)> {
    jobs.iter()
        .enumerate()
        .flat_map(|(j, v)| x.throughput(j, 1.0 / v.rates.iter().sum::<f64>()))
        .collect()
}

/// Hierarchical max-min fairness by water-filling (see the module docs).
fn water_filling(input: &RoundInput<'_>, units: &[UnitSpec]) -> TimeShares {
    let jobs = input.jobs;
    // As for max-min, a single GPU's proportional row; gangs enter through `per_unit` below.
    let prop = proportional_row(input.capacity, jobs.len(), 1);
    // Normalized throughput: effective throughput over the proportional share's.
    let norm: Vec<f64> = jobs
        .iter()
        .map(|v| 1.0 / super::effective::effective_throughput(v.rates, &prop))
        .collect();
    // A bound on any job's normalized throughput, for the big-M constraints.
    let big_m: Vec<f64> = jobs
        .iter()
        .zip(&norm)
        .map(|(v, n)| best_rate(v.rates) * n + 1.0)
        .collect();
    let mut level = vec![0.0; jobs.len()];
    let mut frozen = vec![false; jobs.len()];
    let mut last = None;
    // Each pass freezes at least one job, or stops.
    for _ in 0..jobs.len() {
        let weights = tenant_weights(jobs, &frozen);
        let rising = |j: usize| !frozen[j] && weights[j] > 0.0;
        // Raise every rising job by c / (weight x gpus), keeping every job at least at its level.
        let mut program = Program::new();
        let x = AllocationVars::over(&mut program, units.to_vec(), jobs.len(), input.capacity);
        let c = program.var(0.0, f64::INFINITY);
        for (j, v) in jobs.iter().enumerate() {
            let mut terms = x.throughput(j, norm[j]);
            let per_unit = 1.0 / (weights[j] * f64::from(v.job.gpus));
            terms.extend(rising(j).then_some((-per_unit, c)));
            program.constrain(terms, Relation::AtLeast, level[j]);
        }
        let Ok(solution) = program.maximize([(1.0, c)]) else {
            break;
        };
        let c_value = solution.value(c);
        for (j, v) in jobs.iter().enumerate() {
            if rising(j) {
                level[j] += c_value / (weights[j] * f64::from(v.job.gpus));
            }
        }
        last = Some(x.shares(&solution, input));
        // The most rising jobs that can still go above their level together, all others keeping theirs
        // (z_j = 1); the rest are bottlenecked and freeze where they are.
        let mut milp = Program::new();
        let y = AllocationVars::over(&mut milp, units.to_vec(), jobs.len(), input.capacity);
        let mut can_rise = Vec::new();
        for j in 0..jobs.len() {
            let terms = y.throughput(j, norm[j]);
            milp.constrain(terms.iter().copied(), Relation::AtLeast, level[j]);
            if rising(j) {
                let z = milp.integer(0.0, 1.0);
                let target = level[j] * 1.0001 + 1e-5;
                milp.constrain(
                    terms.into_iter().chain([(-big_m[j], z)]),
                    Relation::AtLeast,
                    target - big_m[j],
                );
                can_rise.push((j, z));
            }
        }
        let objective: Vec<_> = can_rise.iter().map(|&(_, z)| (1.0, z)).collect();
        let Ok(rise) = milp.maximize(objective) else {
            break;
        };
        let mut froze_any = false;
        for &(j, z) in &can_rise {
            if rise.value(z) < 0.5 {
                frozen[j] = true;
                froze_any = true;
            }
        }
        if !froze_any || frozen.iter().all(|f| *f) {
            break;
        }
    }
    last.unwrap_or_else(|| proportional_shares(input))
}

/// Each job's weight in the water-filling: its tenant's (all tenants weigh 1) shared among the tenant's
/// unfrozen jobs in proportion to their own weights; 0 once frozen.
fn tenant_weights(jobs: &[super::JobView<'_>], frozen: &[bool]) -> Vec<f64> {
    let mut tenant_total: rustc_hash::FxHashMap<crate::job::TenantId, f64> = Default::default();
    for (v, _) in jobs.iter().zip(frozen).filter(|(_, f)| !**f) {
        *tenant_total.entry(v.job.tenant).or_default() += v.job.weight;
    }
    jobs.iter()
        .zip(frozen)
        .map(|(v, f)| {
            if *f {
                0.0
            } else {
                v.job.weight / tenant_total[&v.job.tenant]
            }
        })
        .collect()
}

/// Gavel's proportional allocation for every active job: the fallback when a program cannot be solved.
fn proportional_shares(input: &RoundInput<'_>) -> TimeShares {
    let mut out = TimeShares::new(
        input.capacity.len(),
        super::TypePreference::Ordered(input.type_order.to_vec()),
    );
    for v in input.jobs {
        let prop = proportional_row(input.capacity, input.jobs.len(), v.job.gpus);
        out.push(
            v.id(),
            prop.iter()
                .zip(v.rates)
                .map(|(x, r)| if *r > 0.0 { *x } else { 0.0 }),
        );
    }
    out
}

impl TimeSharePolicy for Formulation {
    fn observe(&mut self, input: &RoundInput<'_>) {
        if self.objective == Objective::FinishTimeFairness {
            // The isolated clock advances every round, not only when the program is re-solved.
            self.clock.rows(input);
        }
    }

    fn shares(&mut self, input: &RoundInput<'_>) -> TimeShares {
        self.solve(input)
    }
}

#[cfg(test)]
mod tests {
    use super::bracket;

    #[test]
    fn the_bracket_holds_the_smallest_reachable_rho_from_either_side_of_the_guess() {
        let reachable = |rho: f64| rho >= 2.0;
        for guess in [0.01, 1.0, 1.99, 2.0, 2.5, 300.0] {
            let (lo, hi) = bracket(guess, 0.005, reachable).unwrap();
            assert!(lo < 2.0 && 2.0 <= hi, "guess {guess}: ({lo}, {hi})");
        }
        // The floor is a lower bound: the bracket never goes below it.
        let (lo, hi) = bracket(5.0, 1.5, |rho| rho >= 1.5).unwrap();
        assert!(lo == 1.5 && hi >= 1.5, "({lo}, {hi})");
        assert_eq!(bracket(1.0, 0.0, |_| false), None);
    }
}
