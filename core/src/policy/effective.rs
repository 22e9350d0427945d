//! Effective throughput and the allocation matrix of Gavel's heterogeneity-aware policies (Narayanan et
//! al., OSDI'20, section 3).
//!
//! An allocation X\[j\]\[t\] is the fraction of time job j spends on GPU type t. A job's effective throughput
//! under X is `sum_t X[j][t] * T[j][t]`, where T\[j\]\[t\] is its rate with its whole gang on type t (the
//! throughput model's answer, [`JobView::rates`]). Every policy here shares Gavel's base constraints:
//! X >= 0, each row sums to at most 1, and each type's GPUs are not oversubscribed,
//! `sum_j gpus_j * X[j][t] <= capacity[t]`.

use super::{JobView, RoundInput, TimeShares, TypePreference, Unit};
use crate::cluster::GpuTypeId;
use crate::solver::{Program, Relation, Solution, Var};

/// `sum_t X[t] * T[t]`: steps per second a job makes on average under an allocation row.
pub fn effective_throughput(rates: &[f64], row: &[f64]) -> f64 {
    rates.iter().zip(row).map(|(r, x)| r * x).sum()
}

/// A job's rate on its fastest type (0 if it can run nowhere).
pub fn best_rate(rates: &[f64]) -> f64 {
    rates.iter().copied().fold(0.0, f64::max)
}

/// Gavel's proportional share, the fairness reference of its max-min policies and its isolated policy,
/// for a gang of `gpus`: `capacity[t] / (m gpus)` of every type, scaled so that the row sums to at most 1.
pub fn proportional_row(capacity: &[u32], m: usize, gpus: u32) -> Vec<f64> {
    let per_gang = (m.max(1) * gpus.max(1) as usize) as f64;
    let raw: Vec<f64> = capacity.iter().map(|&c| f64::from(c) / per_gang).collect();
    let scale = raw.iter().sum::<f64>().max(1.0);
    raw.into_iter().map(|x| x / scale).collect()
}

/// The GPU types in the order the mechanism should offer them to a heterogeneity-aware policy: fastest
/// first for the jobs seen so far (Gavel hard-codes V100, P100, K80 for the same reason). Each job
/// counts its rates relative to its best type, so that models with large step rates do not decide the
/// order alone; and the order follows every job admitted, not only the active ones, so that it does not
/// flip (and move jobs) as the few active jobs change at low load.
#[derive(Clone, Debug)]
pub struct FastestFirst {
    /// Per type, the sum over jobs seen of rate / best rate.
    relative_speed: Vec<f64>,
    order: Vec<GpuTypeId>,
}

impl FastestFirst {
    /// The order for `types` GPU types before any job is seen: the cluster's own type order.
    pub fn new(types: usize) -> Self {
        FastestFirst {
            relative_speed: vec![0.0; types],
            order: (0..types as u16).map(GpuTypeId).collect(),
        }
    }

    /// Counts one more job, by its rates per type (0 where it cannot run). A job with a rate that is
    /// not a finite, non-negative number is not counted.
    pub fn observe(&mut self, rates: &[f64]) {
        if rates.iter().any(|r| !r.is_finite() || *r < 0.0) {
            return;
        }
        let best = best_rate(rates);
        if best <= 0.0 {
            return;
        }
        for (speed, rate) in self.relative_speed.iter_mut().zip(rates) {
            *speed += rate / best;
        }
        let speed = &self.relative_speed;
        // Stable: equal speeds keep the cluster's type order.
        self.order
            .sort_by(|a, b| speed[b.0 as usize].total_cmp(&speed[a.0 as usize]));
    }

    /// Every GPU type, fastest first for the jobs observed so far (ties in the cluster's order).
    pub fn order(&self) -> &[GpuTypeId] {
        &self.order
    }
}

/// One unit an allocation ranges over: a job alone, or two jobs packed on the same GPUs.
#[derive(Clone, Debug)]
pub struct UnitSpec {
    /// The job, or the pair, as grants and time shares name it.
    pub unit: Unit,
    /// Its gang size: a pair's two jobs share the same `gpus` GPUs.
    pub gpus: u32,
    /// Each member's index in `RoundInput::jobs` and its rate per GPU type within this unit.
    pub members: Vec<(usize, Vec<f64>)>,
}

/// Every job alone, at its own rates.
pub fn single_units(jobs: &[JobView<'_>]) -> Vec<UnitSpec> {
    jobs.iter()
        .enumerate()
        .map(|(j, v)| UnitSpec {
            unit: Unit::Job(v.id()),
            gpus: v.job.gpus,
            members: vec![(j, v.rates.to_vec())],
        })
        .collect()
}

/// A pair worth packing: jobs `a` and `b` (indices), their packed rates per type, and the best combined
/// normalized rate over the types.
struct Candidate {
    benefit: f64,
    a: usize,
    b: usize,
    ra: Vec<f64>,
    rb: Vec<f64>,
}

/// Every job alone, plus the pairs worth packing: two jobs of one gang size whose packed rates, each
/// over its rate alone, add up to at least 1 on some type (packing beats time-slicing them), keeping for
/// each job only its `partners` best pairs so that the program stays linear in the number of jobs.
pub fn packing_units(input: &RoundInput<'_>, partners: usize) -> Vec<UnitSpec> {
    let jobs = input.jobs;
    let types = input.capacity.len();
    let mut units = single_units(jobs);
    let mut candidates: Vec<Candidate> = Vec::new();
    for a in 0..jobs.len() {
        for b in a + 1..jobs.len() {
            let (va, vb) = (&jobs[a], &jobs[b]);
            if va.job.gpus != vb.job.gpus {
                continue;
            }
            let mut benefit: f64 = 0.0;
            let (mut ra, mut rb) = (vec![0.0; types], vec![0.0; types]);
            for t in 0..types {
                let packed = input.model.packed_steps_per_second(
                    va.job,
                    vb.job,
                    GpuTypeId(t as u16),
                    va.job.gpus,
                );
                let alone = va.rates[t] > 0.0 && vb.rates[t] > 0.0;
                if let Some((pa, pb)) = packed.filter(|(pa, pb)| alone && *pa > 0.0 && *pb > 0.0) {
                    ra[t] = pa;
                    rb[t] = pb;
                    benefit = benefit.max(pa / va.rates[t] + pb / vb.rates[t]);
                }
            }
            if benefit >= 1.0 {
                candidates.push(Candidate {
                    benefit,
                    a,
                    b,
                    ra,
                    rb,
                });
            }
        }
    }
    candidates.sort_by(|x, y| {
        y.benefit
            .total_cmp(&x.benefit)
            .then((x.a, x.b).cmp(&(y.a, y.b)))
    });
    let mut taken = vec![0usize; jobs.len()];
    for Candidate { a, b, ra, rb, .. } in candidates {
        if taken[a] >= partners || taken[b] >= partners {
            continue;
        }
        taken[a] += 1;
        taken[b] += 1;
        units.push(UnitSpec {
            unit: Unit::Pair(jobs[a].id(), jobs[b].id()),
            gpus: jobs[a].job.gpus,
            members: vec![(a, ra), (b, rb)],
        });
    }
    units
}

/// The variables X\[u\]\[t\] of a program over units, with Gavel's base constraints already stated: every
/// job's shares, over all the units it is in, sum to at most 1; no type is oversubscribed (a pair uses
/// its GPUs once). A unit gets no variable on a type where a member cannot run.
pub struct AllocationVars {
    types: usize,
    units: Vec<UnitSpec>,
    x: Vec<Option<Var>>,
    /// Per job: (unit, member position) of every unit it is in.
    of_job: Vec<Vec<(usize, usize)>>,
}

impl AllocationVars {
    /// Declares in `program` one share variable in 0..=1 per unit and GPU type where every member
    /// of the unit runs, with Gavel's base constraints over `num_jobs` jobs (indexed as in
    /// [`UnitSpec::members`]) and `capacity` GPUs per type.
    pub fn over(
        program: &mut Program,
        units: Vec<UnitSpec>,
        num_jobs: usize,
        capacity: &[u32],
    ) -> Self {
        let types = capacity.len();
        let x: Vec<Option<Var>> = units
            .iter()
            .flat_map(|u| (0..types).map(move |t| u.members.iter().all(|(_, r)| r[t] > 0.0)))
            .map(|runs| runs.then(|| program.var(0.0, 1.0)))
            .collect();
        let mut of_job = vec![Vec::new(); num_jobs];
        for (k, unit) in units.iter().enumerate() {
            for (position, (j, _)) in unit.members.iter().enumerate() {
                of_job[*j].push((k, position));
            }
        }
        let vars = AllocationVars {
            types,
            units,
            x,
            of_job,
        };
        for j in 0..num_jobs {
            let all: Vec<_> = vars.of_job[j]
                .iter()
                .flat_map(|&(k, _)| vars.unit_vars(k).map(|(_, v)| (1.0, v)))
                .collect();
            program.constrain(all, Relation::AtMost, 1.0);
        }
        for (t, &c) in capacity.iter().enumerate() {
            let column = vars
                .units
                .iter()
                .enumerate()
                .filter_map(|(k, u)| vars.x[k * types + t].map(|v| (f64::from(u.gpus), v)));
            program.constrain(column, Relation::AtMost, f64::from(c));
        }
        vars
    }

    fn unit_vars(&self, k: usize) -> impl Iterator<Item = (usize, Var)> + '_ {
        (0..self.types).filter_map(move |t| self.x[k * self.types + t].map(|v| (t, v)))
    }

    /// Job j's effective throughput, `sum over its units and types of rate x X`, each term weighted by
    /// `weight(t)` and scaled by `scale`, as program terms.
    pub fn weighted_throughput(
        &self,
        j: usize,
        scale: f64,
        weight: impl Fn(usize) -> f64,
    ) -> Vec<(f64, Var)> {
        self.of_job[j]
            .iter()
            .flat_map(|&(k, position)| {
                let rates = &self.units[k].members[position].1;
                self.unit_vars(k)
                    .map(|(t, v)| (rates[t] * scale * weight(t), v))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Job j's effective throughput times `scale`, as program terms.
    pub fn throughput(&self, j: usize, scale: f64) -> Vec<(f64, Var)> {
        self.weighted_throughput(j, scale, |_| 1.0)
    }

    /// The solved allocation as time shares, offered fastest type first.
    pub fn shares(&self, solution: &Solution, input: &RoundInput<'_>) -> TimeShares {
        let mut out = TimeShares::new(
            self.types,
            TypePreference::Ordered(input.type_order.to_vec()),
        );
        out.fill_idle = true;
        for (k, unit) in self.units.iter().enumerate() {
            let row: Vec<f64> = (0..self.types)
                .map(|t| {
                    self.x[k * self.types + t].map_or(0.0, |v| solution.value(v).clamp(0.0, 1.0))
                })
                .collect();
            // Pairs the solver left out need no row.
            if matches!(unit.unit, Unit::Pair(..)) && row.iter().all(|x| *x <= 1e-9) {
                continue;
            }
            match unit.unit {
                Unit::Job(j) => out.push(j, row),
                Unit::Pair(a, b) => out.push_pair(a, b, row),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(order: &[GpuTypeId]) -> Vec<u16> {
        order.iter().map(|t| t.0).collect()
    }

    #[test]
    fn a_model_with_large_rates_does_not_decide_the_order_alone() {
        let mut order = FastestFirst::new(3);
        assert_eq!(
            ids(order.order()),
            [0, 1, 2],
            "no jobs: the cluster's order"
        );
        // Two jobs twice as fast on type 0, and one with step rates a hundred times larger that is a
        // little faster on type 1: summed raw rates would put type 1 first.
        order.observe(&[2.0, 1.0, 0.5]);
        order.observe(&[2.0, 1.0, 0.5]);
        order.observe(&[100.0, 120.0, 10.0]);
        assert_eq!(ids(order.order()), [0, 1, 2]);
        // Once most jobs seen prefer type 1, it comes first.
        for _ in 0..3 {
            order.observe(&[1.0, 3.0, 0.5]);
        }
        assert_eq!(ids(order.order()), [1, 0, 2]);
    }

    #[test]
    fn jobs_that_cannot_run_anywhere_bad_rates_and_ties_leave_the_order_alone() {
        let mut order = FastestFirst::new(3);
        order.observe(&[0.0, 0.0, 0.0]);
        order.observe(&[f64::NAN, 5.0, 0.0]);
        order.observe(&[1.0, 1.0, 1.0]);
        assert_eq!(ids(order.order()), [0, 1, 2]);
        order.observe(&[0.0, 0.0, 2.0]);
        assert_eq!(ids(order.order()), [2, 0, 1]);
    }

    #[test]
    fn the_proportional_row_divides_each_type_among_gangs_and_caps_the_row_at_one() {
        // 4 jobs on 4 + 4 GPUs: a single-GPU job gets 1 of each type, capped to half of each.
        assert_eq!(proportional_row(&[4, 4], 4, 1), [0.5, 0.5]);
        // 16 jobs: a quarter of a GPU of each type, or an eighth of the time of a 2-GPU gang.
        assert_eq!(proportional_row(&[4, 4], 16, 1), [0.25, 0.25]);
        assert_eq!(proportional_row(&[4, 4], 16, 2), [0.125, 0.125]);
    }
}
