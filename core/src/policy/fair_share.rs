//! Heterogeneity-agnostic fair sharing, as time shares for the round mechanism:
//! - `max_min_fairness` (LAS): Gavel's max-min fairness with every GPU type treated as equal. Each job's
//!   total share s_j maximizes min_j (gpus_j * s_j / weight_j) subject to s_j <= 1 and the cluster's GPU
//!   count; that is water-filling, solved exactly here without an LP. Jobs that have received least
//!   run first, because the mechanism divides a share by the time received.
//! - `isolated`: each job gets 1/N of every GPU type (N = active jobs), capped at one full gang: the
//!   reference that finish-time fairness (rho) is measured against.
//!
//! A share is split across GPU types in proportion to their GPU counts, which is what an agnostic policy
//! can do, and what Gavel's solver returns on a cluster with equal counts per type.

use super::{
    Cadenced, ClassCount, ClassSharePolicy, ClassShares, JobClass, JobView, Knob, PolicyConfig,
    PolicyEntry, Realize, Registry, RegistryError, RoundInput, TimeSharePolicy, TimeShares,
    TypePreference, shares_per_job,
};
use crate::job::IdMap;

/// Splits a job's total share `s` over the types it can run on, in proportion to their GPU counts.
pub(super) fn split<'a>(
    view: &'a JobView<'_>,
    capacity: &'a [u32],
    s: f64,
) -> impl Iterator<Item = f64> + 'a {
    split_where(capacity, view.rates.iter().map(|r| *r > 0.0), s)
}

/// Splits a total share `s` over the types where `runs` says true, in proportion to their GPU counts.
fn split_where<'a>(
    capacity: &'a [u32],
    runs: impl Iterator<Item = bool> + Clone + 'a,
    s: f64,
) -> impl Iterator<Item = f64> + 'a {
    let usable: f64 = capacity
        .iter()
        .zip(runs.clone())
        .filter(|(_, r)| *r)
        .map(|(n, _)| f64::from(*n))
        .sum();
    capacity.iter().zip(runs).map(move |(n, r)| {
        if r && usable > 0.0 {
            s * f64::from(*n) / usable
        } else {
            0.0
        }
    })
}

/// A class's row: its total share `s` split over the types it can run on.
fn split_class<'a>(
    class: &'a JobClass,
    capacity: &'a [u32],
    s: f64,
) -> impl Iterator<Item = f64> + 'a {
    split_where(capacity, (0..capacity.len()).map(|t| class.runs_on(t)), s)
}

/// Max-min fair total shares: the largest level L with sum_j min(gpus_j, L * weight_j) <= total GPUs,
/// then s_j = min(1, L * weight_j / gpus_j).
pub fn max_min_shares(jobs: &[JobView<'_>], total_gpus: f64) -> Vec<f64> {
    let demand: f64 = jobs.iter().map(|v| f64::from(v.job.gpus)).sum();
    if demand <= total_gpus {
        return vec![1.0; jobs.len()];
    }
    // Each job saturates (s_j = 1) at level gpus_j / weight_j. Walk the saturation points in order.
    let mut points: Vec<(f64, f64, f64)> = jobs
        .iter()
        .map(|v| {
            (
                f64::from(v.job.gpus) / v.job.weight,
                f64::from(v.job.gpus),
                v.job.weight,
            )
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut saturated_gpus = 0.0;
    let mut open_weight: f64 = points.iter().map(|p| p.2).sum();
    let mut level = 0.0;
    for &(at, gpus, weight) in &points {
        // Below `at`, the unsaturated jobs use L * open_weight GPUs.
        let needed = saturated_gpus + at * open_weight;
        if needed > total_gpus {
            break;
        }
        level = at;
        saturated_gpus += gpus;
        open_weight -= weight;
    }
    if open_weight > 0.0 {
        level = ((total_gpus - saturated_gpus) / open_weight).max(level);
    }
    jobs.iter()
        .map(|v| (level * v.job.weight / f64::from(v.job.gpus)).min(1.0))
        .collect()
}

/// [`max_min_shares`] by class: each live class's total share, or `None` where the per-job form's
/// float sums could come out otherwise by class (a weight that is not a whole number, sums past 2^53),
/// or where jobs of different gang sizes or weights saturate at the same level (the per-job walk
/// takes them in arrival order, which classes do not keep). Elsewhere the answer is the per-job
/// form's, float for float: its sums of gang sizes and weights are sums of whole numbers below 2^53,
/// exact in any order, and jobs of one gang size and weight are interchangeable in its walk. The walk
/// takes one job at a time, as the per-job form does, and stops at the first that does not saturate:
/// each saturated job adds at least a GPU, so it takes at most the cluster's GPUs plus one steps.
fn max_min_by_class(classes: &[ClassCount], total_gpus: f64) -> Option<Vec<f64>> {
    const EXACT: f64 = (1u64 << 53) as f64;
    let live = || classes.iter().filter(|c| c.jobs > 0);
    let whole = |x: f64| x.fract() == 0.0 && x <= EXACT;
    // Sums of whole numbers below 2^53 are exact in any order, and so is a class's count times a
    // whole number when the total stays below 2^53.
    let sum = |of: &dyn Fn(&ClassCount) -> f64| {
        live().try_fold(0.0, |sum: f64, c| {
            let x = of(c);
            let next = sum + c.jobs as f64 * x;
            (whole(x) && next <= EXACT).then_some(next)
        })
    };
    let demand = sum(&|c| f64::from(c.class.gpus))?;
    if demand <= total_gpus {
        return Some(vec![1.0; classes.len()]);
    }
    let mut open_weight = sum(&|c| c.class.weight())?;
    // Saturation points, lowest first; equal points must be one gang size and weight.
    let mut points: Vec<(f64, &ClassCount)> = live()
        .map(|c| (f64::from(c.class.gpus) / c.class.weight(), c))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let alike = |a: &ClassCount, b: &ClassCount| {
        a.class.gpus == b.class.gpus && a.class.weight() == b.class.weight()
    };
    if points
        .windows(2)
        .any(|w| w[0].0.total_cmp(&w[1].0).is_eq() && !alike(w[0].1, w[1].1))
    {
        return None;
    }
    let mut saturated_gpus = 0.0;
    let mut level = 0.0;
    'walk: for &(at, c) in &points {
        let (gpus, weight) = (f64::from(c.class.gpus), c.class.weight());
        for _ in 0..c.jobs {
            // Below `at`, the unsaturated jobs use L * open_weight GPUs.
            let needed = saturated_gpus + at * open_weight;
            if needed > total_gpus {
                break 'walk;
            }
            level = at;
            saturated_gpus += gpus;
            open_weight -= weight;
        }
    }
    if open_weight > 0.0 {
        level = ((total_gpus - saturated_gpus) / open_weight).max(level);
    }
    Some(
        classes
            .iter()
            .map(|c| (level * c.class.weight() / f64::from(c.class.gpus)).min(1.0))
            .collect(),
    )
}

/// Least attained service via max-min fair time shares (Gavel's heterogeneity-agnostic
/// `max_min_fairness`). It answers by class: a job's share depends only on its gang size, weight and
/// the types it runs on, and on the other jobs' classes.
#[derive(Default)]
pub struct MaxMinFairness;

impl TimeSharePolicy for MaxMinFairness {
    fn shares(&mut self, input: &RoundInput<'_>) -> TimeShares {
        shares_per_job(self, input)
    }

    fn by_class(&mut self) -> Option<&mut dyn ClassSharePolicy> {
        Some(self)
    }
}

impl ClassSharePolicy for MaxMinFairness {
    fn class_shares(&mut self, input: &RoundInput<'_>, classes: &[ClassCount]) -> ClassShares {
        let total: f64 = input.capacity.iter().map(|&n| f64::from(n)).sum();
        let shares = max_min_by_class(classes, total).unwrap_or_else(|| {
            // The per-job form, over every active job in arrival order; its shares are still alike
            // within a class.
            let all = input.backlog.map(|b| b.views());
            let views = all.as_deref().unwrap_or(input.jobs);
            let mut shares = vec![0.0; classes.len()];
            let index: IdMap<&JobClass, usize> = classes
                .iter()
                .enumerate()
                .map(|(k, c)| (&c.class, k))
                .collect();
            for (view, s) in views.iter().zip(max_min_shares(views, total)) {
                if let Some(&k) = index.get(&JobClass::of(view)) {
                    shares[k] = s;
                }
            }
            shares
        });
        let mut out = ClassShares::new(input.capacity.len(), TypePreference::Interchangeable);
        for (c, s) in classes.iter().zip(shares) {
            out.push(split_class(&c.class, input.capacity, s));
        }
        out
    }
}

/// Each job alone on 1/N of the cluster (Gavel's `isolated`): the reference for finish-time fairness.
/// It answers by class (a job's row depends only on its gang size, the types it runs on and N), so
/// that under a long backlog a round costs what it can start, not the backlog.
#[derive(Default)]
pub struct Isolated;

impl TimeSharePolicy for Isolated {
    fn shares(&mut self, input: &RoundInput<'_>) -> TimeShares {
        shares_per_job(self, input)
    }

    fn by_class(&mut self) -> Option<&mut dyn ClassSharePolicy> {
        Some(self)
    }
}

impl ClassSharePolicy for Isolated {
    /// 1/N of every type per job (N = active jobs), capped at one full gang.
    fn class_shares(&mut self, input: &RoundInput<'_>, classes: &[ClassCount]) -> ClassShares {
        let jobs: usize = classes.iter().map(|c| c.jobs).sum();
        let m = jobs.max(1) as f64;
        let mut out = ClassShares::new(input.capacity.len(), TypePreference::Interchangeable);
        for ClassCount { class, .. } in classes {
            let share = |(t, &n): (usize, &u32)| {
                if class.runs_on(t) {
                    f64::from(n) / m / f64::from(class.gpus)
                } else {
                    0.0
                }
            };
            let sum: f64 = input.capacity.iter().enumerate().map(share).sum();
            let scale = if sum > 1.0 { 1.0 / sum } else { 1.0 };
            out.push(input.capacity.iter().enumerate().map(|p| share(p) * scale));
        }
        out
    }
}

/// Enters this module's policies (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("max_min_fairness", |config: &PolicyConfig| {
            Box::new(Realize::new(MaxMinFairness, config.seed))
        })
        .alias("las")
        .summary(
            "least attained service: max-min fair time shares, GPU types treated as equal \
             (Gavel's LAS)",
        ),
    )?;
    registry.register(
        PolicyEntry::new("isolated", |config| match config.knob("realloc") {
            // Gavel's simulator reallocates on its cadence; without one, every round.
            interval if interval > 0.0 => {
                Box::new(Realize::new(Cadenced::new(Isolated, interval), config.seed))
            }
            _ => Box::new(Realize::new(Isolated, config.seed)),
        })
            .summary("each job on 1/N of every GPU type: the reference for finish-time fairness \
                      (rho)")
            .knob(Knob {
            name: "realloc",
            default: 0.0,
            range: super::KnobRange::SECONDS,
            help: "seconds between reallocations, at least (0: every round; Gavel's simulator: 1,920)",
        }),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Job, JobId};

    fn job(id: u32, gpus: u32, weight: f64) -> Job {
        Job::new(JobId(id), 0.0, gpus, 100.0).with_weight(weight)
    }

    #[test]
    fn water_filling_is_max_min_fair() {
        let jobs = [job(0, 1, 1.0), job(1, 4, 1.0), job(2, 1, 2.0)];
        let rates = [1.0];
        let views: Vec<JobView<'_>> = jobs.iter().map(|j| JobView::arrived(j, &rates)).collect();
        // Plenty of room: everyone runs all the time.
        assert_eq!(max_min_shares(&views, 6.0), vec![1.0, 1.0, 1.0]);
        // 3 GPUs: level L with min(1,L) + min(4,L) + min(1,2L) = 3 -> job 2 saturates at L = 0.5, then
        // L + L + 1 = 3 -> L = 1, so job 0 gets 1, job 1 gets 1/4, job 2 gets 1.
        let s = max_min_shares(&views, 3.0);
        assert!(
            (s[0] - 1.0).abs() < 1e-12 && (s[1] - 0.25).abs() < 1e-12 && s[2] == 1.0,
            "{s:?}"
        );
        let used: f64 = s
            .iter()
            .zip(&jobs)
            .map(|(s, j)| s * f64::from(j.gpus))
            .sum();
        assert!((used - 3.0).abs() < 1e-9);
    }

    #[test]
    fn max_min_by_class_is_the_per_job_answer_or_none() {
        // Gangs, weights and counts of many kinds: whole weights (where the class form answers) and
        // fractional ones (where it must not).
        let rates = [1.0];
        let mut answered = 0;
        for seed in 0u32..400 {
            let pick = |k: u32, n: u32| (seed.wrapping_mul(2_654_435_761) >> (k * 3)) % n;
            // Weights 1 and 3 never make unlike classes saturate together (1 GPU at weight 2 and 2
            // at weight 4 would; the last assertions see to those).
            let weights: &[f64] = if pick(0, 3) == 0 {
                &[1.0, 0.1, 3.0]
            } else {
                &[1.0, 3.0, 3.0]
            };
            let mut jobs = Vec::new();
            for k in 0..(1 + pick(1, 40)) {
                let gpus = [1, 2, 4, 8][((k + seed) % 4) as usize];
                let weight = weights[((k * 7 + seed) % 3) as usize];
                jobs.push(job(k, gpus, weight));
            }
            let views: Vec<JobView<'_>> =
                jobs.iter().map(|j| JobView::arrived(j, &rates)).collect();
            let total = f64::from(1 + pick(2, 64));
            let per_job = max_min_shares(&views, total);
            let mut classes: Vec<ClassCount> = Vec::new();
            for view in &views {
                let class = JobClass::of(view);
                match classes.iter_mut().find(|c| c.class == class) {
                    Some(c) => c.jobs += 1,
                    None => classes.push(ClassCount { class, jobs: 1 }),
                }
            }
            let Some(by_class) = max_min_by_class(&classes, total) else {
                continue;
            };
            answered += 1;
            for (view, s) in views.iter().zip(&per_job) {
                let c = classes
                    .iter()
                    .position(|c| c.class == JobClass::of(view))
                    .unwrap();
                assert_eq!(
                    by_class[c].to_bits(),
                    s.to_bits(),
                    "seed {seed}: job {:?}",
                    view.id()
                );
            }
        }
        assert!(
            answered > 100,
            "the class form answered only {answered} times"
        );
        // Two unlike classes that saturate together (1 GPU at weight 1, 2 at weight 2), and a weight
        // that is not whole: the per-job form's order or sums decide, so the class form declines.
        let class = |gpus, weight| {
            let j = job(0, gpus, weight);
            JobClass::of(&JobView::arrived(&j, &rates))
        };
        let count = |class, jobs| ClassCount { class, jobs };
        assert!(
            max_min_by_class(&[count(class(1, 1.0), 9), count(class(2, 2.0), 9)], 4.0).is_none()
        );
        assert!(max_min_by_class(&[count(class(1, 0.1), 10)], 4.0).is_none());
        assert!(
            max_min_by_class(&[count(class(1, 1.0), 9), count(class(2, 1.0), 9)], 4.0).is_some()
        );
    }

    #[test]
    fn shares_split_by_type_size_and_skip_types_a_job_cannot_use() {
        let j = job(0, 1, 1.0);
        let v = JobView::arrived(&j, &[2.0, 0.0, 1.0]);
        assert_eq!(
            split(&v, &[30, 50, 10], 0.8).collect::<Vec<_>>(),
            vec![0.6, 0.0, 0.2]
        );
    }
}
