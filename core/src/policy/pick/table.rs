//! The exact pick by dynamic programming over the GPUs used of each type: after each job, the least
//! cost at which the jobs so far can use exactly `u[t]` GPUs of each type `t`. Goodput programs are
//! small (a median of 4 jobs under `sia` and 9 under `pollux` on Sia's 64-GPU cluster), so the table
//! answers in a fraction of what setting up and presolving a MILP costs HiGHS, and it is exact, where
//! HiGHS stops within its relative gap. It also breaks ties the same way every time: among picks of
//! equal cost, the one using the fewest GPUs, and between alike jobs the one earlier in the program
//! runs (the jobs go into the table last first, and of equal costs into a state the one from the
//! lower state wins, whatever order the table is filled in and whichever states were pruned).

use super::{Choices, cost, fits, priced, prices};
use crate::solver::SolveError;

/// Most cells (states times each job's choices, leaving it out included) a table may visit, about
/// 25 ms at a few ns a cell: what HiGHS took on Sia's largest 64-GPU program (160 jobs, 3,200
/// options).
pub(super) const MOST_CELLS: usize = 8_000_000;

/// Marks a job left out in the table of choices.
const LEFT_OUT: u16 = u16::MAX;

/// The pick of least total cost within `capacity`, or `None` where its table would be larger than
/// [`MOST_CELLS`] (or a job has more options than a choice can name).
pub(super) fn solve(
    jobs: &[Choices],
    capacity: &[u32],
) -> Option<Result<Vec<Option<usize>>, SolveError>> {
    solve_pruning_from(jobs, capacity, PRUNE_FROM)
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
) -> Option<Result<Vec<Option<usize>>, SolveError>> {
    let cells = cells(jobs)?;
    let space = Space::new(jobs, capacity, MOST_CELLS / cells.max(1))?;
    let states = space.states;
    let bound = (states * cells >= prune_from).then(|| Bound::new(jobs, capacity));
    // The least cost of reaching each state (infinite: not reached), and per job the choice that
    // reached each state at that cost.
    let mut value = vec![f64::INFINITY; states];
    value[0] = 0.0;
    let mut next = vec![f64::INFINITY; states];
    let mut choice = vec![LEFT_OUT; states * jobs.len()];
    // The highest state reached: a job only adds GPUs, so none above it is.
    let mut top = 0;
    // Last job first: where alike jobs tie, the one that comes first in the program gets its option.
    for (j, job) in jobs.iter().enumerate().rev() {
        let chose = &mut choice[j * states..(j + 1) * states];
        // Of two equal costs into a state, the one from the lower state wins, then leaving the job
        // out, then its options in order: the same answer whatever order the table is filled in and
        // whichever states were pruned.
        let rank = |to: usize, k: u16| {
            if k == LEFT_OUT {
                (to, 0)
            } else {
                let option = job.options[usize::from(k)];
                let from = space.remove(to, option.gpu_type.0 as usize, option.gpus);
                (from, u32::from(k) + 1)
            }
        };
        if let Some(cost) = job.left_out {
            for (s, &v) in value[..=top].iter().enumerate() {
                next[s] = v + cost;
            }
        }
        let mut next_top = if job.left_out.is_some() { top } else { 0 };
        for (k, option) in job.options.iter().enumerate() {
            let t = option.gpu_type.0 as usize;
            let g = option.gpus as usize;
            let Some(&len) = space.axis.get(t).filter(|&&len| g < len) else {
                continue;
            };
            // A state with room for `g` more of type `t` has its digit for `t` below `len - g`:
            // runs of `stride * (len - g)` states at the start of every `stride * len`.
            let (stride, k) = (space.stride[t], k as u16);
            let (offset, block, run) = (g * stride, len * stride, (len - g) * stride);
            let mut start = 0;
            while start <= top {
                let end = (start + run).min(top + 1);
                for (s, &v) in value[start..end].iter().enumerate() {
                    if v == f64::INFINITY {
                        continue;
                    }
                    let s = start + s;
                    let (to, total) = (s + offset, v + option.cost);
                    let held = next[to];
                    if total < held
                        || (total == held && (s, u32::from(k) + 1) < rank(to, chose[to]))
                    {
                        next[to] = total;
                        chose[to] = k;
                        next_top = next_top.max(to);
                    }
                }
                start += block;
            }
        }
        if let Some(bound) = &bound {
            for (s, v) in next[..=next_top].iter_mut().enumerate() {
                if *v != f64::INFINITY && bound.hopeless(&space, j, s, *v) {
                    *v = f64::INFINITY;
                }
            }
        }
        value[..=top].fill(f64::INFINITY);
        std::mem::swap(&mut value, &mut next);
        top = next_top;
    }
    let reached = (0..=top).filter(|&s| value[s] != f64::INFINITY);
    let Some(end) = reached.min_by(|&a, &b| {
        value[a]
            .total_cmp(&value[b])
            .then(space.gpus(a).cmp(&space.gpus(b)))
            .then(a.cmp(&b))
    }) else {
        // Some job that must run fits nowhere with the others that must.
        return Some(Err(SolveError::Infeasible));
    };
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
    Some(Ok(picked))
}

/// Tables of at least this many cells are pruned by [`Bound`]: on smaller ones finding the prices
/// costs more than it saves.
const PRUNE_FROM: usize = 20_000;

/// Sweeps over the types and halvings per type of the price search for a bound: any prices give
/// a valid bound, and these come within about 1e-5 of the search's range of the balancing ones.
const BOUND_SEARCH: (usize, usize) = (1, 16);

/// A lower bound on what the jobs still to come into the table can cost from a state, and a pick
/// known to fit: a state whose bound exceeds that pick's cost can lead to no optimum, and is dropped.
/// The bound is Lagrangian: with a price `p[t]` per GPU of each type, the jobs to come cost at
/// least the sum of their cheapest priced choices less the price of the GPUs the state leaves free.
struct Bound {
    /// Per job `j`, the least priced cost of jobs `0..j` (those still to come after `j`).
    to_come: Vec<f64>,
    /// The price per GPU of each type.
    prices: Vec<f64>,
    /// The price of all the GPUs.
    all_free: f64,
    /// The cost of the pick that fits, with room for rounding (infinite if prices found none).
    known: f64,
}

impl Bound {
    fn new(jobs: &[Choices], capacity: &[u32]) -> Self {
        let prices = prices(jobs, capacity, BOUND_SEARCH);
        let pick = priced(jobs, capacity, &prices);
        let known = if fits(jobs, &pick, capacity) {
            let total = cost(jobs, &pick);
            total + 1e-9 * total.abs().max(1.0)
        } else {
            f64::INFINITY
        };
        let mut to_come = Vec::with_capacity(jobs.len());
        let mut sum = 0.0;
        for job in jobs {
            to_come.push(sum);
            let cheapest = job
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
            sum += cheapest;
        }
        let all_free = prices
            .iter()
            .zip(capacity)
            .map(|(p, &c)| p * f64::from(c))
            .sum();
        Self {
            to_come,
            prices,
            all_free,
            known,
        }
    }

    /// Whether state `s` of `space`, reached at `value` once job `j` is in, can lead to no optimum.
    fn hopeless(&self, space: &Space, j: usize, s: usize, value: f64) -> bool {
        let taken: f64 = (0..self.prices.len())
            .map(|t| self.prices[t] * f64::from(space.used[t * space.states + s]))
            .sum();
        value + self.to_come[j] - (self.all_free - taken) > self.known
    }
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
