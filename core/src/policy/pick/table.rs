//! The exact pick by dynamic programming over the GPUs used of each type: after each job, the least
//! cost at which the jobs so far can use exactly `u[t]` GPUs of each type `t`. Goodput programs are
//! small (a median of 4 jobs under `sia` and 9 under `pollux` on Sia's 64-GPU cluster), so the table
//! answers in a fraction of what setting up and presolving a MILP costs HiGHS, and it is exact, where
//! HiGHS stops within its relative gap. It also breaks ties the same way every time: among picks of
//! equal cost, the one using the fewest GPUs, and between alike jobs the one earlier in the program
//! runs (the jobs go into the table last first, and of equal costs into a state the one from the
//! lower state wins, whatever order the table is filled in and whichever states were pruned).
//!
//! Only the states reached are visited, and large tables are pruned: a state whose cost, with a
//! lower bound on what the jobs still to come cost ([`Bound`]), exceeds a cutoff is dropped. The
//! cutoff is first set a little above the bound on the whole program, where most optima lie and
//! nearly everything is pruned; where nothing is found there, a narrow table (the most promising
//! states after each job) finds a pick near the optimum, and its cost, or the cheapest pick known
//! before (a priced one, a greedy one, or the caller's: a policy's pick of the round before), is
//! the cutoff.

use super::{Choices, cost, fits, priced, prices, repair, repaired};
use crate::solver::SolveError;

/// Most cells (states times each job's choices, leaving it out included) a table may visit, about
/// 25 ms at a few ns a cell: what HiGHS took on Sia's largest 64-GPU program (160 jobs, 3,200
/// options).
pub(super) const MOST_CELLS: usize = 8_000_000;

/// Marks a job left out in the table of choices.
const LEFT_OUT: u16 = u16::MAX;

/// The pick of least total cost within `capacity`, or `None` where its table would be larger than
/// [`MOST_CELLS`] (or a job has more options than a choice can name). `near`, a pick that may cost
/// little more (see [`super::pick_near`]), prunes the table sooner; it changes no answer.
pub(super) fn solve(
    jobs: &[Choices],
    capacity: &[u32],
    near: &[Option<usize>],
) -> Option<Result<Vec<Option<usize>>, SolveError>> {
    solve_pruning_from(jobs, capacity, PRUNE_FROM, near)
}

/// Whether [`solve`] takes the program: its table has at most [`MOST_CELLS`] cells.
pub(super) fn takes(jobs: &[Choices], capacity: &[u32]) -> bool {
    cells(jobs)
        .is_some_and(|cells| Space::shape(jobs, capacity, MOST_CELLS / cells.max(1)).is_some())
}

/// The cells each state of a table of `jobs` has (each job's options and leaving it out), or `None`
/// where a job has more options than a choice can name.
fn cells(jobs: &[Choices]) -> Option<usize> {
    jobs.iter()
        .map(|j| j.options.len())
        .try_fold(0, |cells, options| {
            (options < usize::from(LEFT_OUT)).then_some(cells + options + 1)
        })
}

/// [`solve`], pruning tables of at least `prune_from` cells.
pub(super) fn solve_pruning_from(
    jobs: &[Choices],
    capacity: &[u32],
    prune_from: usize,
    near: &[Option<usize>],
) -> Option<Result<Vec<Option<usize>>, SolveError>> {
    let cells = cells(jobs)?;
    let mut table = Table::new(jobs, capacity, MOST_CELLS / cells.max(1))?;
    let picked = if table.space.states * cells < prune_from {
        table.fill(jobs, None, usize::MAX)
    } else {
        let bound = Bound::new(jobs, capacity, near);
        // Most optima lie a small part of the way from the lower bound to the known pick: a
        // table cut off that low prunes nearly everything and still finds the optimum.
        let low = bound
            .low_cutoffs(&table.space)
            .find_map(|cutoff| table.fill(jobs, Some((&bound, cutoff)), usize::MAX));
        low.or_else(|| {
            // Higher: a narrow table (the most promising states of each job) finds a pick
            // near the optimum, and the whole table is cut off at its cost.
            let near = table
                .fill(jobs, Some((&bound, bound.known)), NARROW)
                .map_or(f64::INFINITY, |pick| with_slack(cost(jobs, &pick)));
            table.fill(jobs, Some((&bound, near.min(bound.known))), usize::MAX)
        })
    };
    // Without one: some job that must run fits nowhere with the others that must.
    Some(picked.ok_or(SolveError::Infeasible))
}

/// The fractions of the way from [`Bound`]'s lower bound on the whole program to the known pick's
/// cost at which a table is cut off first. On Pollux's 960-job trace on Sia's 64-GPU cluster the
/// optimum lies a median 0.8% of the way, and at most 13% in nine programs of ten; under Sia it
/// lies higher (the bound is a median 4.5% below it), and these mostly find nothing, at little cost.
const LOW_CUTOFFS: [f64; 2] = [1.0 / 64.0, 1.0 / 8.0];

/// The states a narrow table keeps after each job, the most promising by their cost and bound: its
/// pick comes closer to the optimum than the greedy ones, to cut the whole table off at.
const NARROW: usize = 32;

/// The least cost of reaching each state, filled one job at a time, and the choices that reach them.
struct Table {
    space: Space,
    /// The least cost of reaching each state with the jobs so far (infinite: not reached).
    value: Vec<f64>,
    /// The same with the next job in, as it is filled.
    next: Vec<f64>,
    /// Per job, the choice that reached each state at its least cost (`choice[j * states + s]`).
    choice: Vec<u16>,
    /// The states reached so far: a job only adds GPUs, and once pruning starts few are.
    live: Vec<usize>,
}

impl Table {
    /// A table of `jobs` within `capacity`; `None` if it would have more than `most_states`.
    fn new(jobs: &[Choices], capacity: &[u32], most_states: usize) -> Option<Self> {
        let space = Space::new(jobs, capacity, most_states)?;
        let states = space.states;
        Some(Self {
            space,
            value: vec![f64::INFINITY; states],
            next: vec![f64::INFINITY; states],
            choice: vec![LEFT_OUT; states * jobs.len()],
            live: Vec::new(),
        })
    }

    /// The pick of least cost, or `None` if none fits; with `prune`, states whose cost with a
    /// lower bound on the jobs still to come exceeds the cutoff are dropped, and so is any pick
    /// dearer than it. Past `widest` states after a job, only the `widest` with the least cost
    /// and bound are kept: then the pick is only near the least.
    fn fill(
        &mut self,
        jobs: &[Choices],
        prune: Option<(&Bound, f64)>,
        widest: usize,
    ) -> Option<Vec<Option<usize>>> {
        let Self {
            space,
            value,
            next,
            choice,
            live,
        } = self;
        let states = space.states;
        for &s in live.iter() {
            value[s] = f64::INFINITY;
        }
        value[0] = 0.0;
        live.clear();
        live.push(0);
        let mut digits = vec![0u32; space.axis.len()];
        let mut moves: Vec<(usize, u32, usize, f64, u16)> = Vec::new();
        // Last job first: where alike jobs tie, the one that comes first in the program gets its
        // option.
        for (j, job) in jobs.iter().enumerate().rev() {
            let chose = &mut choice[j * states..(j + 1) * states];
            // Of two equal costs into a state, the one from the lower state wins, then leaving
            // the job out, then its options in order: the same answer whatever order the table is
            // filled in and whichever states were pruned.
            let rank = |to: usize, k: u16| {
                if k == LEFT_OUT {
                    (to, 0)
                } else {
                    let option = job.options[usize::from(k)];
                    let from = space.remove(to, option.gpu_type.0 as usize, option.gpus);
                    (from, u32::from(k) + 1)
                }
            };
            let mut top = 0;
            if let Some(cost) = job.left_out {
                for &s in live.iter() {
                    next[s] = value[s] + cost;
                    chose[s] = LEFT_OUT;
                    top = top.max(s);
                }
            }
            // Each option as a move in the table: the type whose digit must stay below `below`
            // for it to fit, and how far on it takes a state.
            moves.clear();
            moves.extend(job.options.iter().enumerate().filter_map(|(k, option)| {
                let t = option.gpu_type.0 as usize;
                let below = space.axis.get(t)?.checked_sub(option.gpus as usize)?;
                let offset = option.gpus as usize * space.stride[t];
                Some((t, below as u32, offset, option.cost, k as u16))
            }));
            for &s in live.iter() {
                let v = value[s];
                for (t, d) in digits.iter_mut().enumerate() {
                    *d = space.used[t * states + s];
                }
                for &(t, below, offset, cost, k) in &moves {
                    if digits[t] >= below {
                        continue;
                    }
                    let (to, total) = (s + offset, v + cost);
                    let held = next[to];
                    if total < held
                        || (total == held && (s, u32::from(k) + 1) < rank(to, chose[to]))
                    {
                        next[to] = total;
                        chose[to] = k;
                        top = top.max(to);
                    }
                }
            }
            for &s in live.iter() {
                value[s] = f64::INFINITY;
            }
            live.clear();
            for (s, v) in next[..=top].iter_mut().enumerate() {
                if *v == f64::INFINITY {
                    continue;
                }
                match prune {
                    Some((bound, cutoff)) if *v + bound.to_come(space, j, s) > cutoff => {
                        *v = f64::INFINITY;
                    }
                    _ => live.push(s),
                }
            }
            if live.len() > widest
                && let Some((bound, _)) = prune
            {
                let key = |s: usize| next[s] + bound.to_come(space, j, s);
                live.select_nth_unstable_by(widest, |&a, &b| key(a).total_cmp(&key(b)));
                for &s in &live[widest..] {
                    next[s] = f64::INFINITY;
                }
                live.truncate(widest);
            }
            std::mem::swap(value, next);
        }
        let end = live.iter().copied().min_by(|&a, &b| {
            value[a]
                .total_cmp(&value[b])
                .then(space.gpus(a).cmp(&space.gpus(b)))
                .then(a.cmp(&b))
        })?;
        let mut picked = vec![None; jobs.len()];
        let mut s = end;
        for (j, job) in jobs.iter().enumerate() {
            let k = choice[j * states + s];
            if k != LEFT_OUT {
                let option = job.options[usize::from(k)];
                s = space.remove(s, option.gpu_type.0 as usize, option.gpus);
                picked[j] = Some(usize::from(k));
            }
        }
        Some(picked)
    }
}

/// Tables of at least this many cells are pruned by [`Bound`]: on smaller ones finding the prices
/// costs more than it saves.
const PRUNE_FROM: usize = 20_000;

/// Sweeps over the types and halvings per type of the price search for a bound: any prices give
/// a valid bound, and these come within about 1e-5 of the search's range of the balancing ones.
const BOUND_SEARCH: (usize, usize) = (1, 16);

/// A lower bound on what the jobs still to come into the table can cost from a state, and the cost
/// of the cheapest pick known to fit (the priced one, a greedy one, and the caller's near one):
/// a state whose cost and bound together exceed that can lead to no optimum.
/// Two bounds, the higher counting. One is Lagrangian: with a price `p[t]` per GPU of each type, the
/// jobs to come cost at least the sum of their cheapest priced choices less the price of the GPUs
/// the state leaves free. The other pools the types: the jobs to come cost at least their least
/// cost on as many GPUs as the state leaves free, of whichever types (a table over one axis).
struct Bound {
    /// Per count `j` of jobs to come (`0..j`), the least priced cost of those jobs.
    priced: Vec<f64>,
    /// The price per GPU of each type.
    prices: Vec<f64>,
    /// The price of all the GPUs.
    all_free: f64,
    /// Per count `j` of jobs to come and count `f` of GPUs free, the least cost of those jobs on
    /// at most `f` GPUs of any types (`pooled[j * width + f]`).
    pooled: Vec<f64>,
    /// One more than the most GPUs the jobs could use together, of all types.
    width: usize,
    /// The GPUs of all types.
    gpus: usize,
    /// The cost of the cheapest pick known that fits (the priced one, the greedy one, the caller's
    /// near one; infinite if none does), with room for rounding.
    known: f64,
}

impl Bound {
    fn new(jobs: &[Choices], capacity: &[u32], near: &[Option<usize>]) -> Self {
        let prices = prices(jobs, capacity, BOUND_SEARCH);
        let by_prices = priced(jobs, capacity, &prices);
        // Greedy from nothing: the jobs that may be left out are, the others get their fewest
        // GPUs (the cheapest such option), then the spare GPUs are spent. It often beats the
        // priced pick where many jobs share few GPUs.
        let mut greedy: Vec<Option<usize>> = jobs
            .iter()
            .map(|job| match job.left_out {
                Some(_) => None,
                None => (0..job.options.len()).min_by(|&a, &b| {
                    let (a, b) = (job.options[a], job.options[b]);
                    a.gpus.cmp(&b.gpus).then(a.cost.total_cmp(&b.cost))
                }),
            })
            .collect();
        repair(jobs, capacity, &mut greedy);
        let near = repaired(jobs, capacity, near);
        let known = [Some(by_prices), Some(greedy), near]
            .iter()
            .flatten()
            .filter(|pick| fits(jobs, pick, capacity))
            .map(|pick| cost(jobs, pick))
            .fold(f64::INFINITY, f64::min);
        let mut priced = Vec::with_capacity(jobs.len() + 1);
        let mut sum = 0.0;
        priced.push(sum);
        for job in jobs {
            sum += job
                .options
                .iter()
                .map(|o| {
                    o.cost
                        + prices
                            .get(o.gpu_type.0 as usize)
                            .map_or(0.0, |p| p * f64::from(o.gpus))
                })
                .chain(job.left_out)
                .fold(f64::INFINITY, f64::min);
            priced.push(sum);
        }
        let all_free = prices
            .iter()
            .zip(capacity)
            .map(|(p, &c)| p * f64::from(c))
            .sum();
        // Past what the jobs could use together, more free GPUs change nothing.
        let gpus = capacity.iter().map(|&c| c as usize).sum::<usize>();
        let most: usize = jobs
            .iter()
            .map(|job| {
                job.options
                    .iter()
                    .map(|o| o.gpus as usize)
                    .max()
                    .unwrap_or(0)
            })
            .sum();
        let width = gpus.min(most) + 1;
        // No jobs cost nothing on any GPUs; each job more is left out or takes one of its options
        // from the GPUs free.
        let mut pooled = vec![0.0; width * (jobs.len() + 1)];
        for (j, job) in jobs.iter().enumerate() {
            let (fewer, more) = pooled.split_at_mut(width * (j + 1));
            let (fewer, more) = (&fewer[width * j..], &mut more[..width]);
            for (f, least) in more.iter_mut().enumerate() {
                *least = job
                    .options
                    .iter()
                    .filter(|o| o.gpus as usize <= f)
                    .map(|o| fewer[f - o.gpus as usize] + o.cost)
                    .chain(job.left_out.map(|cost| fewer[f] + cost))
                    .fold(f64::INFINITY, f64::min);
            }
        }
        Self {
            priced,
            prices,
            all_free,
            pooled,
            width,
            gpus,
            known: with_slack(known),
        }
    }

    /// At least what jobs `0..j` cost from state `s` of `space`.
    fn to_come(&self, space: &Space, j: usize, s: usize) -> f64 {
        let mut taken = 0.0;
        let mut used = 0;
        for (t, price) in self.prices.iter().enumerate() {
            let u = space.used[t * space.states + s];
            taken += price * f64::from(u);
            used += u as usize;
        }
        let lagrangian = self.priced[j] - (self.all_free - taken);
        let free = (self.gpus - used).min(self.width - 1);
        lagrangian.max(self.pooled[j * self.width + free])
    }

    /// The cutoffs below the known pick's cost to try a table at first ([`LOW_CUTOFFS`]): above
    /// the bound on the whole program, every job still to come from the empty state.
    fn low_cutoffs(&self, space: &Space) -> impl Iterator<Item = f64> + '_ {
        let lower = self.to_come(space, self.priced.len() - 1, 0);
        let gap = self.known - lower;
        LOW_CUTOFFS
            .iter()
            .filter(move |_| gap.is_finite() && gap > 0.0)
            .map(move |f| with_slack(lower + f * gap))
    }
}

/// `cost` and room for rounding: a cutoff at a pick's cost keeps that pick.
fn with_slack(cost: f64) -> f64 {
    cost + 1e-9 * cost.abs().max(1.0)
}

/// The states: a count of GPUs used per type, numbered in mixed radix (type 0 the lowest digit).
struct Space {
    /// Per type, one more than the most GPUs of it a state can hold.
    axis: Vec<usize>,
    /// Per type, the step in state number of one more GPU of it.
    stride: Vec<usize>,
    /// Per type, each state's GPUs of it (`used[t * states + s]`): read rather than divided out in
    /// the inner loop.
    used: Vec<u32>,
    states: usize,
}

impl Space {
    /// The states of `capacity`, each type's axis no longer than what the jobs could use of it at
    /// once; `None` if there would be more than `most_states`.
    fn new(jobs: &[Choices], capacity: &[u32], most_states: usize) -> Option<Self> {
        let (axis, stride, states) = Self::shape(jobs, capacity, most_states)?;
        // Counted up like an odometer, type 0 the fastest digit.
        let mut used = vec![0u32; states * axis.len()];
        let mut digits = vec![0u32; axis.len()];
        for s in 0..states {
            for (t, &d) in digits.iter().enumerate() {
                used[t * states + s] = d;
            }
            for (d, &a) in digits.iter_mut().zip(&axis) {
                *d += 1;
                if (*d as usize) < a {
                    break;
                }
                *d = 0;
            }
        }
        Some(Self {
            axis,
            stride,
            used,
            states,
        })
    }

    /// Each type's axis and stride, and the number of states; `None` if more than `most_states`.
    fn shape(
        jobs: &[Choices],
        capacity: &[u32],
        most_states: usize,
    ) -> Option<(Vec<usize>, Vec<usize>, usize)> {
        let mut most = vec![0u64; capacity.len()];
        let mut largest = vec![0u32; capacity.len()];
        for job in jobs {
            largest.fill(0);
            for option in &job.options {
                if let Some(l) = largest.get_mut(option.gpu_type.0 as usize) {
                    *l = (*l).max(option.gpus);
                }
            }
            for (m, &l) in most.iter_mut().zip(&largest) {
                *m += u64::from(l);
            }
        }
        let axis: Vec<usize> = most
            .iter()
            .zip(capacity)
            .map(|(&m, &c)| usize::try_from(m.min(u64::from(c))).map(|a| a + 1))
            .collect::<Result<_, _>>()
            .ok()?;
        let mut stride = Vec::with_capacity(axis.len());
        let mut states = 1usize;
        for &a in &axis {
            stride.push(states);
            states = states.checked_mul(a).filter(|&n| n <= most_states)?;
        }
        Some((axis, stride, states))
    }

    /// State `s` with `gpus` fewer of type `t` (which it holds).
    fn remove(&self, s: usize, t: usize, gpus: u32) -> usize {
        s - gpus as usize * self.stride[t]
    }

    /// The GPUs state `s` uses, all types together.
    fn gpus(&self, s: usize) -> u64 {
        (0..self.axis.len())
            .map(|t| u64::from(self.used[t * self.states + s]))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::pick::any_candidate;
    use proptest::prelude::*;

    /// Up to 12 kinds of job, each twice or more (alike jobs tie), with 1 to 6 options over three
    /// types; some must run.
    fn program() -> impl Strategy<Value = (Vec<Choices>, Vec<u32>)> {
        let job = (
            prop::collection::vec(any_candidate(3), 1..7),
            prop::option::weighted(0.9, 1.0f64..2.0),
            2usize..4,
        )
            .prop_map(|(options, left_out, copies)| vec![Choices { options, left_out }; copies]);
        (
            prop::collection::vec(job, 1..12).prop_map(|kinds| kinds.concat()),
            prop::collection::vec(4u32..24, 3),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Pruning (low cutoffs, then a narrow table's pick) changes no answer where alike jobs
        /// tie, over three types.
        #[test]
        fn pruning_changes_no_answer_among_alike_jobs((jobs, capacity) in program()) {
            let pruned = solve_pruning_from(&jobs, &capacity, 0, &[]).expect("a small program");
            let whole = solve_pruning_from(&jobs, &capacity, usize::MAX, &[]).expect("small");
            prop_assert_eq!(pruned.ok(), whole.ok());
        }

        /// A near pick changes no answer, ties included: any pick of the jobs' options (one that
        /// does not fit, or leaves out a job that must run, is repaired first), the optimum itself,
        /// or one of another length (not used).
        #[test]
        fn a_near_pick_changes_no_answer(
            ((jobs, capacity), raw) in (program(), prop::collection::vec(0usize..8, 0..40))
        ) {
            let whole = solve_pruning_from(&jobs, &capacity, usize::MAX, &[]).expect("small").ok();
            let near: Vec<Option<usize>> = raw
                .iter()
                .zip(&jobs)
                .map(|(&r, job)| (r % (job.options.len() + 1) < job.options.len())
                    .then_some(r % (job.options.len() + 1)))
                .collect();
            let optimum = whole.clone().unwrap_or_default();
            let first = vec![Some(0); jobs.len()];
            for near in [&near[..], &optimum[..], &first[..]] {
                let from_near = solve_pruning_from(&jobs, &capacity, 0, near).expect("small");
                prop_assert_eq!(from_near.ok(), whole.clone());
            }
        }

        /// Along the optimum's own path, a state's cost and its bound never exceed the optimum's
        /// cost: the bound is a lower bound on what the jobs still to come cost.
        #[test]
        fn the_bound_stays_below_the_optimum((jobs, capacity) in program()) {
            let Some(Ok(best)) = solve_pruning_from(&jobs, &capacity, usize::MAX, &[]) else {
                return Ok(());
            };
            let total = cost(&jobs, &best);
            let bound = Bound::new(&jobs, &capacity, &[]);
            prop_assert!(bound.known >= total - 1e-9);
            let space = Space::new(&jobs, &capacity, usize::MAX).expect("small");
            let (mut state, mut so_far) = (0, 0.0);
            for j in (0..jobs.len()).rev() {
                match best[j] {
                    Some(k) => {
                        let option = jobs[j].options[k];
                        state += option.gpus as usize * space.stride[option.gpu_type.0 as usize];
                        so_far += option.cost;
                    }
                    None => so_far += jobs[j].left_out.expect("left out"),
                }
                let bounded = so_far + bound.to_come(&space, j, state);
                prop_assert!(bounded <= total + 1e-9, "job {}: {} over {}", j, bounded, total);
            }
        }

        /// A narrow table's pick, where it finds one, fits and costs no less than the optimum.
        #[test]
        fn a_narrow_table_finds_a_pick_that_fits((jobs, capacity) in program()) {
            let Some(Ok(best)) = solve_pruning_from(&jobs, &capacity, usize::MAX, &[]) else {
                return Ok(());
            };
            let bound = Bound::new(&jobs, &capacity, &[]);
            let mut table = Table::new(&jobs, &capacity, usize::MAX).expect("small");
            if let Some(near) = table.fill(&jobs, Some((&bound, f64::INFINITY)), 2) {
                prop_assert!(fits(&jobs, &near, &capacity));
                prop_assert!(cost(&jobs, &near) >= cost(&jobs, &best) - 1e-9);
            }
        }
    }
}
