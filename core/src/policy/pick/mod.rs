//! One configuration per job, GPUs per type within capacity, at the least total cost: the program that
//! goodput policies (Sia, Pollux) solve every round, a multiple-choice knapsack.
//!
//! Most programs are small (a few jobs to a few dozen, one capacity row per GPU type) and are solved
//! exactly by a table of the least cost per count of GPUs used of each type (the `table` module);
//! larger ones go to HiGHS as a MILP, up to [`EXACT_UP_TO`] candidates.
//!
//! A job's options are ways to run it (a GPU type and count) with a cost each; leaving it out costs its
//! `left_out` cost, or is not allowed. The costs stay in the objective as they are, with an explicit
//! "left out" variable per job, rather than as savings over leaving each job out: savings would add a
//! large constant that hides the differences between options from the solver's relative gap.
//!
//! Large programs (hundreds of jobs on thousands of GPUs) are priced instead of solved: only the
//! capacity rows couple the jobs, one per GPU type, so with a price per GPU of each type every job picks
//! its cheapest option alone. [`by_prices`] searches the prices at which each type's demand meets its
//! capacity, then repairs what is left over or short. It is not exact, and the program at this size is
//! a relaxation of placement anyway; HiGHS took over a second on 5,000 jobs, and at 2,048 GPUs its
//! cuts took most of a whole run on programs of a few thousand candidates. Where jobs that must run
//! have several options, no greedy repair can promise a pick that fits (deciding it is a partition
//! problem), so a priced pick that does not fit goes to the solver after all.

mod table;

use crate::cluster::GpuTypeId;
use crate::solver::{Program, Relation, SolveError};

/// One way to run a job: `gpus` GPUs of `gpu_type`, costing `cost`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// The GPU type it runs on.
    pub gpu_type: GpuTypeId,
    /// How many GPUs of that type it takes from the type's capacity.
    pub gpus: u32,
    /// What it costs, lower being better, in whatever unit the policy prices in (the same for every
    /// option and `left_out` of one program).
    pub cost: f64,
}

/// A job's options, and what leaving it out costs (`None`: it must get one of them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Choices {
    /// The ways it may run; a pick is an index into them.
    pub options: Vec<Candidate>,
    /// The cost of running it nowhere this round; `None`: it must get one of its options.
    pub left_out: Option<f64>,
}

/// Programs with more candidates than this are priced ([`by_prices`]) rather than solved exactly,
/// unless the table solves them. On 2,048 GPUs HiGHS's cuts took most of a whole `sia` run on
/// programs of 1,000 to 4,000 candidates (a day of arrivals: 81 s pricing past 4,000, 36 s past
/// 1,000); no run of Pollux's or Sia's 64-GPU workloads meets a program this large that the table
/// does not take.
pub const EXACT_UP_TO: usize = 1_000;

/// The option each job gets (an index into its options), or `None` for a job left out, minimizing the
/// total cost with at most `capacity[t]` GPUs of each type `t`: each job's cheapest where they all fit,
/// else exactly where the table takes the program or up to [`EXACT_UP_TO`] candidates, by prices
/// beyond (exactly where prices do not fit).
pub fn pick(jobs: &[Choices], capacity: &[u32]) -> Result<Vec<Option<usize>>, SolveError> {
    pick_near(jobs, capacity, &[])
}

/// [`pick`]'s answer, found sooner where `near` (an option index or `None` per job, in the jobs'
/// order) costs little more than the optimum: a policy's pick of the round before, which most jobs
/// keep, is such a pick. The exact table cuts off every partial pick that cannot beat the cheapest
/// pick it knows (on Sia's newtrace workload 1 the last round's pick cut the cells its tables
/// visited by 36% under `sia` and 48% under `ramp`). `near` is repaired to fit first; the answer
/// is the same whatever it is, and a `near` of another length, or naming an option a job lacks, is
/// not used.
pub fn pick_near(
    jobs: &[Choices],
    capacity: &[u32],
    near: &[Option<usize>],
) -> Result<Vec<Option<usize>>, SolveError> {
    let exact_up_to = if table::takes(jobs, capacity) {
        usize::MAX
    } else {
        EXACT_UP_TO
    };
    pick_priced_past(jobs, capacity, exact_up_to, near)
}

/// [`pick_near`], pricing programs of more than `exact_up_to` candidates.
fn pick_priced_past(
    jobs: &[Choices],
    capacity: &[u32],
    exact_up_to: usize,
    near: &[Option<usize>],
) -> Result<Vec<Option<usize>>, SolveError> {
    // Where every job's cheapest choice fits, the capacity rows do not bind: that is the optimum.
    let alone = cheapest(jobs, &vec![0.0; capacity.len()]);
    if fits(jobs, &alone, capacity) {
        return Ok(alone);
    }
    let candidates: usize = jobs.iter().map(|j| j.options.len()).sum();
    if candidates > exact_up_to {
        let priced = by_prices(jobs, capacity);
        if fits(jobs, &priced, capacity) {
            return Ok(priced);
        }
        tracing::debug!(
            jobs = jobs.len(),
            "the priced pick does not fit its capacity; solving exactly"
        );
    }
    exact(jobs, capacity, near)
}

/// `near` repaired to fit `capacity`, where it names one choice a job has for each job.
fn repaired(
    jobs: &[Choices],
    capacity: &[u32],
    near: &[Option<usize>],
) -> Option<Vec<Option<usize>>> {
    let named = near.len() == jobs.len()
        && jobs
            .iter()
            .zip(near)
            .all(|(job, k)| k.is_none_or(|k| k < job.options.len()));
    named.then(|| {
        let mut picked = near.to_vec();
        repair(jobs, capacity, &mut picked);
        picked
    })
}

/// Whether `picked` uses at most `capacity[t]` GPUs of each type and leaves out no job that must run.
fn fits(jobs: &[Choices], picked: &[Option<usize>], capacity: &[u32]) -> bool {
    let within = demand(jobs, picked, capacity.len())
        .iter()
        .zip(capacity)
        .all(|(&used, &cap)| used <= u64::from(cap));
    within
        && jobs
            .iter()
            .zip(picked)
            .all(|(job, k)| k.is_some() || job.left_out.is_some())
}

/// The total cost of `picked` (left-out costs included; a required job left out costs infinity).
pub fn cost(jobs: &[Choices], picked: &[Option<usize>]) -> f64 {
    jobs.iter()
        .zip(picked)
        .map(|(job, k)| match k {
            Some(k) => job.options[*k].cost,
            None => job.left_out.unwrap_or(f64::INFINITY),
        })
        .sum()
}

/// GPUs of each type that `picked` uses.
fn demand(jobs: &[Choices], picked: &[Option<usize>], types: usize) -> Vec<u64> {
    let mut used = vec![0u64; types];
    for (job, k) in jobs.iter().zip(picked) {
        if let Some(option) = k.map(|k| job.options[k])
            && let Some(u) = used.get_mut(option.gpu_type.0 as usize)
        {
            *u += u64::from(option.gpus);
        }
    }
    used
}

/// Each job's cheapest choice when a GPU of type `t` costs `prices[t]` more (fewer GPUs on ties).
fn cheapest(jobs: &[Choices], prices: &[f64]) -> Vec<Option<usize>> {
    jobs.iter().map(|job| cheapest_of(job, prices)).collect()
}

/// `job`'s cheapest choice at `prices` (see [`cheapest`]).
fn cheapest_of(job: &Choices, prices: &[f64]) -> Option<usize> {
    let mut best = (job.left_out.unwrap_or(f64::INFINITY), 0u32, None);
    for (k, option) in job.options.iter().enumerate() {
        let price = prices
            .get(option.gpu_type.0 as usize)
            .copied()
            .unwrap_or(0.0);
        let total = option.cost + price * f64::from(option.gpus);
        if total < best.0 || (total == best.0 && option.gpus < best.1) {
            best = (total, option.gpus, Some(k));
        }
    }
    best.2
}

/// A near-optimal pick by prices (Lagrangian relaxation of the capacity rows): per GPU type in turn,
/// bisect the price at which the jobs' demand for it fits its capacity; a few sweeps over the types;
/// then give back GPUs where a type is still over (the job that loses least per GPU freed first), and
/// hand out what is left (the largest saving per GPU first).
pub fn by_prices(jobs: &[Choices], capacity: &[u32]) -> Vec<Option<usize>> {
    priced(jobs, capacity, &prices(jobs, capacity, (3, 40)))
}

/// Each job's cheapest choice at `prices`, repaired to fit `capacity` (see [`by_prices`]).
fn priced(jobs: &[Choices], capacity: &[u32], prices: &[f64]) -> Vec<Option<usize>> {
    let mut picked = cheapest(jobs, prices);
    repair(jobs, capacity, &mut picked);
    picked
}

/// A price per GPU of each type at which the jobs' cheapest choices about fit `capacity`: `sweeps`
/// over the types, bisecting each type's price in `halvings` steps.
fn prices(jobs: &[Choices], capacity: &[u32], (sweeps, halvings): (usize, usize)) -> Vec<f64> {
    let types = capacity.len();
    // No option saves more than its whole cost range per GPU: above that price nobody takes a GPU.
    let ceiling = jobs
        .iter()
        .flat_map(|j| {
            let top = j
                .left_out
                .into_iter()
                .chain(j.options.iter().map(|o| o.cost))
                .fold(0.0f64, f64::max);
            j.options.iter().map(move |o| top - o.cost + 1.0)
        })
        .fold(1.0f64, f64::max);
    let mut prices = vec![0.0; types];
    for _sweep in 0..sweeps {
        for t in 0..types {
            // The demand for type `t` alone, without building the pick.
            let fits = |prices: &[f64]| {
                let wanted: u64 = jobs
                    .iter()
                    .filter_map(|job| cheapest_of(job, prices).map(|k| job.options[k]))
                    .filter(|option| option.gpu_type.0 as usize == t)
                    .map(|option| u64::from(option.gpus))
                    .sum();
                wanted <= u64::from(capacity[t])
            };
            prices[t] = 0.0;
            if fits(&prices) {
                continue;
            }
            let (mut lo, mut hi) = (0.0, ceiling);
            for _ in 0..halvings {
                let mid = 0.5 * (lo + hi);
                prices[t] = mid;
                if fits(&prices) {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            prices[t] = hi;
        }
    }
    prices
}

/// Makes `picked` fit `capacity` and then spends what is left, greedily, each in one pass over the
/// possible changes sorted once (a change is re-checked against the current pick when its turn comes).
fn repair(jobs: &[Choices], capacity: &[u32], picked: &mut [Option<usize>]) {
    let types = capacity.len();
    let on = |job: &Choices, k: Option<usize>| {
        k.map(|k| job.options[k])
            .map(|o| (o.gpu_type.0 as usize, u64::from(o.gpus)))
    };
    let cost_of = |job: &Choices, k: Option<usize>| match k {
        Some(k) => job.options[k].cost,
        None => job.left_out.unwrap_or(f64::INFINITY),
    };
    let mut used = demand(jobs, picked, types);
    let over = |used: &[u64]| (0..types).any(|t| used[t] > u64::from(capacity[t]));
    // Moves `j` to `to` if that keeps every type it touches within capacity, or frees an over one.
    let apply = |j: usize, to: Option<usize>, picked: &mut [Option<usize>], used: &mut [u64]| {
        let (from, into) = (on(&jobs[j], picked[j]), on(&jobs[j], to));
        if let Some((t, g)) = from {
            used[t] -= g;
        }
        if let Some((t, g)) = into
            && used[t] + g > u64::from(capacity[t])
            && from.is_none_or(|(f, fg)| f != t || g > fg)
        {
            if let Some((t, g)) = from {
                used[t] += g;
            }
            return false;
        }
        if let Some((t, g)) = into {
            used[t] += g;
        }
        picked[j] = to;
        true
    };
    if over(&used) {
        // Give back GPUs of over types: the least extra cost per GPU freed first.
        let mut moves: Vec<(f64, usize, Option<usize>)> = Vec::new();
        for (j, job) in jobs.iter().enumerate() {
            let Some((t, held)) =
                on(job, picked[j]).filter(|&(t, _)| used[t] > u64::from(capacity[t]))
            else {
                continue;
            };
            let alternatives = (0..job.options.len())
                .map(Some)
                .chain(job.left_out.map(|_| None));
            for alt in alternatives {
                let kept = on(job, alt).filter(|&(s, _)| s == t).map_or(0, |(_, g)| g);
                if kept < held {
                    let loss = (cost_of(job, alt) - cost_of(job, picked[j])) / (held - kept) as f64;
                    moves.push((loss, j, alt));
                }
            }
        }
        moves.sort_by(|a, b| a.0.total_cmp(&b.0));
        for &(_, j, alt) in &moves {
            if !over(&used) {
                break;
            }
            let frees_an_over_type =
                on(&jobs[j], picked[j]).is_some_and(|(t, _)| used[t] > u64::from(capacity[t]));
            if frees_an_over_type {
                apply(j, alt, picked, &mut used);
            }
        }
        // A job that must run can leave an over type only for a full one: it makes room there by
        // leaving out jobs that may be left out, the least loss per GPU first.
        for &(_, j, alt) in &moves {
            if !over(&used) {
                break;
            }
            let from = on(&jobs[j], picked[j]).filter(|&(t, _)| used[t] > u64::from(capacity[t]));
            let Some((_, (s, g))) = from.zip(on(&jobs[j], alt)).filter(|(f, i)| f.0 != i.0) else {
                continue;
            };
            let short = (used[s] + g).saturating_sub(u64::from(capacity[s]));
            let mut optional: Vec<(f64, usize, u64)> = (0..jobs.len())
                .filter(|&k| k != j && jobs[k].left_out.is_some())
                .filter_map(|k| {
                    let (_, held) = on(&jobs[k], picked[k]).filter(|&(u, _)| u == s)?;
                    let loss =
                        (cost_of(&jobs[k], None) - cost_of(&jobs[k], picked[k])) / held as f64;
                    Some((loss, k, held))
                })
                .collect();
            optional.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut freed = 0;
            let evicted: Vec<usize> = optional
                .iter()
                .take_while(|&&(_, _, held)| {
                    let before = freed;
                    freed += held;
                    before < short
                })
                .map(|&(_, k, _)| k)
                .collect();
            if freed < short {
                continue;
            }
            for k in evicted {
                apply(k, None, picked, &mut used);
            }
            apply(j, alt, picked, &mut used);
        }
    }
    // Spend spare GPUs: the largest saving per extra GPU first.
    let mut moves: Vec<(f64, usize, usize)> = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        let now = cost_of(job, picked[j]);
        for (k, option) in job.options.iter().enumerate() {
            let saving = now - option.cost;
            if saving > 0.0 {
                moves.push((saving / f64::from(option.gpus.max(1)), j, k));
            }
        }
    }
    moves.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, j, k) in moves {
        if jobs[j].options[k].cost < cost_of(&jobs[j], picked[j]) {
            apply(j, Some(k), picked, &mut used);
        }
    }
}

/// The exact answer: by the table of [`table::solve`] where it is small, else by the LP solver.
fn exact(
    jobs: &[Choices],
    capacity: &[u32],
    near: &[Option<usize>],
) -> Result<Vec<Option<usize>>, SolveError> {
    table::solve(jobs, capacity, near).unwrap_or_else(|| solved(jobs, capacity))
}

/// The answer of the LP solver (HiGHS by default) to the program as a MILP: optimal within its
/// relative gap, and among picks of equal cost whichever its search meets.
fn solved(jobs: &[Choices], capacity: &[u32]) -> Result<Vec<Option<usize>>, SolveError> {
    let mut program = Program::new();
    let mut objective = Vec::new();
    let mut per_type = vec![Vec::new(); capacity.len()];
    let mut vars = Vec::with_capacity(jobs.len());
    for job in jobs {
        let row: Vec<_> = job
            .options
            .iter()
            .map(|option| {
                let x = program.integer(0.0, 1.0);
                objective.push((-option.cost, x));
                if let Some(terms) = per_type.get_mut(option.gpu_type.0 as usize) {
                    terms.push((f64::from(option.gpus), x));
                }
                x
            })
            .collect();
        let mut once: Vec<_> = row.iter().map(|&x| (1.0, x)).collect();
        if let Some(cost) = job.left_out {
            let out = program.var(0.0, 1.0);
            objective.push((-cost, out));
            once.push((1.0, out));
        }
        if !once.is_empty() {
            program.constrain(once, Relation::Equal, 1.0);
        }
        vars.push(row);
    }
    for (terms, &gpus) in per_type.into_iter().zip(capacity) {
        if !terms.is_empty() {
            program.constrain(terms, Relation::AtMost, f64::from(gpus));
        }
    }
    let solution = program.maximize(objective)?;
    Ok(vars
        .iter()
        .map(|row| row.iter().position(|&x| solution.value(x) > 0.5))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option(gpu_type: u16, gpus: u32, cost: f64) -> Candidate {
        Candidate {
            gpu_type: GpuTypeId(gpu_type),
            gpus,
            cost,
        }
    }

    #[test]
    fn cheapest_total_within_capacity() {
        // Four GPUs: both jobs on two beat one job on four and the other left out.
        let jobs = [
            Choices {
                options: vec![option(0, 2, 0.5), option(0, 4, 0.2)],
                left_out: Some(1.0),
            },
            Choices {
                options: vec![option(0, 2, 0.6)],
                left_out: Some(1.0),
            },
        ];
        assert_eq!(pick(&jobs, &[4]).unwrap(), [Some(0), Some(0)]);
        // With two GPUs only one runs: the one that saves more.
        assert_eq!(pick(&jobs, &[2]).unwrap(), [Some(0), None]);
    }

    #[test]
    fn a_job_that_must_run_displaces_a_cheaper_one() {
        let jobs = [
            Choices {
                options: vec![option(0, 2, 0.1)],
                left_out: Some(1.0),
            },
            Choices {
                options: vec![option(0, 2, 0.9)],
                left_out: None,
            },
        ];
        assert_eq!(pick(&jobs, &[2]).unwrap(), [None, Some(0)]);
    }

    /// Both jobs that must run have two options, and only one way of choosing fits: the second
    /// moves to type 1 and the fourth to type 0 (CI's proptest found it; prices put them the other
    /// way round, and no single move repairs that).
    #[test]
    fn a_priced_pick_that_cannot_be_repaired_is_solved() {
        let must = |options| Choices {
            options,
            left_out: None,
        };
        let jobs = [
            must(vec![option(0, 2, 0.01)]),
            must(vec![option(1, 6, 0.01), option(0, 6, 0.01)]),
            must(vec![option(0, 2, 0.01)]),
            must(vec![option(0, 1, 0.47), option(1, 7, 0.01)]),
            must(vec![option(0, 8, 0.01)]),
            must(vec![option(0, 3, 0.01)]),
        ];
        let picked = pick_priced_past(&jobs, &[16, 8], 0, &[]).unwrap();
        assert_eq!(
            picked,
            [Some(0), Some(0), Some(0), Some(0), Some(0), Some(0)]
        );
        assert_eq!(demand(&jobs, &picked, 2), [16, 6]);
    }

    /// Where two picks cost the same, the table takes the one using fewer GPUs, and between two
    /// alike jobs the first (here: the same cost on either type, or for either job).
    #[test]
    fn the_table_breaks_ties_the_same_way_every_time() {
        let either_type = Choices {
            options: vec![option(0, 2, 0.5), option(1, 2, 0.5), option(1, 4, 0.5)],
            left_out: Some(1.0),
        };
        assert_eq!(
            pick(std::slice::from_ref(&either_type), &[1, 8]).unwrap(),
            [Some(1)]
        );
        let alike = [either_type.clone(), either_type];
        let picked = pick(&alike, &[2, 2]).unwrap();
        assert_eq!(cost(&alike, &picked), 1.0);
        assert_eq!(demand(&alike, &picked, 2), [2, 2]);
        let one = Choices {
            options: vec![option(0, 1, 0.5)],
            left_out: Some(1.0),
        };
        assert_eq!(
            pick(&[one.clone(), one.clone(), one], &[2]).unwrap(),
            [Some(0), Some(0), None]
        );
    }

    #[test]
    fn capacity_is_per_type() {
        let jobs = [
            Choices {
                options: vec![option(0, 1, 0.1), option(1, 1, 0.5)],
                left_out: Some(1.0),
            },
            Choices {
                options: vec![option(0, 1, 0.2), option(1, 1, 0.3)],
                left_out: Some(1.0),
            },
        ];
        // One GPU of each type: job 0 gains more on type 0 (0.4 against 0.1).
        assert_eq!(pick(&jobs, &[1, 1]).unwrap(), [Some(0), Some(1)]);
    }
}

/// An option on one of `types` GPU types, of 1 to 8 GPUs, costing 0.01 to 1: for property tests.
#[cfg(test)]
fn any_candidate(types: u16) -> impl proptest::strategy::Strategy<Value = Candidate> {
    use proptest::strategy::Strategy;
    (0..types, 1u32..9, 0.01f64..1.0).prop_map(|(t, gpus, cost)| Candidate {
        gpu_type: GpuTypeId(t),
        gpus,
        cost,
    })
}

#[cfg(test)]
mod priced {
    use super::*;
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;

    /// Like [`program`], but a job that must run has one option, as in the programs Sia and Pollux
    /// build (a job pinned while it restarts keeps its configuration).
    fn pinned_program() -> impl Strategy<Value = (Vec<Choices>, Vec<u32>)> {
        program().prop_map(|(mut jobs, capacity)| {
            for job in jobs.iter_mut().filter(|job| job.left_out.is_none()) {
                job.options.truncate(1);
            }
            (jobs, capacity)
        })
    }

    /// Jobs with 1 to 4 options over 2 types and 1 to 8 GPUs; some must run.
    fn program() -> impl Strategy<Value = (Vec<Choices>, Vec<u32>)> {
        let job = (
            prop::collection::vec(any_candidate(2), 1..5),
            prop::option::weighted(0.9, 1.0f64..2.0),
        )
            .prop_map(|(options, left_out)| Choices { options, left_out });
        (
            prop::collection::vec(job, 1..40),
            prop::collection::vec(8u32..64, 2),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Where the jobs that must run have one option each, prices always give a pick within
        /// capacity that runs them, when the exact program finds one: the repair can leave out
        /// every other job.
        #[test]
        fn prices_fit_capacity((jobs, capacity) in pinned_program()) {
            let Ok(exact) = exact(&jobs, &capacity, &[]) else {
                // Jobs that must run do not fit: nothing to compare.
                return Ok(());
            };
            let priced = by_prices(&jobs, &capacity);
            let used = demand(&jobs, &priced, capacity.len());
            prop_assert!(fits(&jobs, &priced, &capacity), "{:?} over {:?}", used, capacity);
            prop_assert!(cost(&jobs, &priced) >= cost(&jobs, &exact) - 1e-9);
        }

        /// Through the priced path, `pick` fits whenever the solver does, also where jobs that must
        /// run have several options (there a priced pick that does not fit is solved exactly).
        #[test]
        fn the_priced_path_fits_whenever_the_solver_does((jobs, capacity) in program()) {
            let Ok(exact) = exact(&jobs, &capacity, &[]) else {
                return Ok(());
            };
            let picked = pick_priced_past(&jobs, &capacity, 0, &[]).unwrap();
            let used = demand(&jobs, &picked, capacity.len());
            prop_assert!(fits(&jobs, &picked, &capacity), "{:?} over {:?}", used, capacity);
            prop_assert!(cost(&jobs, &picked) >= cost(&jobs, &exact) - 1e-9);
        }

        /// The table finds a pick exactly when the solver does, within capacity, and never dearer
        /// (the solver stops within its relative gap).
        #[test]
        fn the_table_is_as_good_as_the_solver((jobs, capacity) in program()) {
            let table = table::solve(&jobs, &capacity, &[]).expect("a small program");
            let Ok(solved) = solved(&jobs, &capacity) else {
                prop_assert!(table.is_err());
                return Ok(());
            };
            let table = table.expect("the solver found a pick");
            prop_assert!(fits(&jobs, &table, &capacity));
            let (ours, theirs) = (cost(&jobs, &table), cost(&jobs, &solved));
            prop_assert!(ours <= theirs + 1e-9, "table {} against solver {}", ours, theirs);
            prop_assert!(ours >= theirs * (1.0 - 1e-4) - 1e-9, "below the solver's bound: {}", ours);
        }

        /// A near pick changes no answer, whether it is used (every job's first option, or none)
        /// or not (one naming an option a job lacks, or of another length); the table's property
        /// test holds it for any near pick of the table's programs.
        #[test]
        fn pick_near_gives_picks_answer((jobs, capacity) in program()) {
            let answer = pick(&jobs, &capacity).ok();
            let first = vec![Some(0); jobs.len()];
            let lacking: Vec<Option<usize>> = jobs.iter().map(|j| Some(j.options.len())).collect();
            let longer = vec![Some(0); jobs.len() + 1];
            for near in [first, vec![None; jobs.len()], lacking, longer] {
                prop_assert_eq!(pick_near(&jobs, &capacity, &near).ok(), answer.clone());
            }
        }

        /// Pruning the table by its bound changes no answer, ties included.
        #[test]
        fn pruning_the_table_changes_no_answer((jobs, capacity) in program()) {
            let pruned = table::solve_pruning_from(&jobs, &capacity, 0, &[]).expect("small");
            let whole =
                table::solve_pruning_from(&jobs, &capacity, usize::MAX, &[]).expect("small");
            prop_assert_eq!(pruned.ok(), whole.ok());
        }

        /// `pick` (each job's cheapest where all fit, else the solver) fits and costs no more than
        /// the solver's answer.
        #[test]
        fn pick_is_as_good_as_the_solver((jobs, capacity) in program()) {
            let Ok(exact) = exact(&jobs, &capacity, &[]) else {
                return Ok(());
            };
            let picked = pick(&jobs, &capacity).unwrap();
            let used = demand(&jobs, &picked, capacity.len());
            for (u, c) in used.iter().zip(&capacity) {
                prop_assert!(*u <= u64::from(*c), "{:?} over {:?}", used, capacity);
            }
            prop_assert!(cost(&jobs, &picked) <= cost(&jobs, &exact) + 1e-9);
        }
    }

    /// On a program of the size prices are for, they come close to the optimum: a few jobs' worth of
    /// difference among hundreds.
    #[test]
    fn on_many_jobs_prices_come_within_two_percent_of_the_optimum() {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        for _ in 0..4 {
            let jobs: Vec<Choices> = (0..400)
                .map(|_| {
                    let mut options: Vec<Candidate> = Vec::new();
                    for t in 0..2u16 {
                        // Sia-like: more GPUs cost less (higher goodput), with diminishing returns.
                        let speed = (0.5f64..2.0).new_tree(&mut runner).unwrap().current();
                        for gpus in [1u32, 2, 4, 8] {
                            let goodput = speed * f64::from(gpus).powf(0.7);
                            options.push(Candidate {
                                gpu_type: GpuTypeId(t),
                                gpus,
                                cost: goodput.powf(-0.5),
                            });
                        }
                    }
                    Choices {
                        options,
                        left_out: Some(1.1),
                    }
                })
                .collect();
            let capacity = [256, 192];
            let best = cost(&jobs, &exact(&jobs, &capacity, &[]).unwrap());
            let ours = cost(&jobs, &by_prices(&jobs, &capacity));
            assert!(
                ours >= best - 1e-9 && ours <= best * 1.02,
                "priced {ours} against exact {best}"
            );
        }
    }
}
