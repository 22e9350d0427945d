//! Themis (Mahajan et al., "Themis: Fair and Efficient GPU Cluster Scheduling", NSDI'20): finish-time
//! fairness through leases and a partial-allocation auction.
//!
//! A job's finish-time fairness is rho = T_shared / T_ideal: its projected finish time (its age plus its
//! remaining work at the rate it would get) over its finish time alone on 1/N of the cluster (N = active
//! jobs; an isolated clock, shared with [`finish_time`](super::finish_time), keeps that reference
//! as N changes). Every round:
//! 1. **Leases.** A job keeps the GPUs it won until its lease ends; GPUs whose lease ended are offered.
//! 2. **Filter.** The jobs without a lease are ranked by rho if they wait one more lease; the worst
//!    `floor((1 - f) * n)` of them bid, where `f` is the fairness knob. f = 0 lets everyone bid (the
//!    auction's efficiency decides); f = 1 lets no one bid, and the GPUs go strictly to the worst rho.
//! 3. **Partial-allocation auction.** A bidder values its gang on a GPU type at v = rho(no GPUs this
//!    lease) / rho(gang from now); the auction picks the winners that maximize the product of the v's
//!    (proportional fairness), greedily by log v per GPU, each on the fastest type with room. Winner i
//!    pays a hidden price: it keeps its GPUs for a fraction c_i of the lease, c_i = prod_{j != i}
//!    v_j(PF) / prod_{j != i} v_j(PF without i) <= 1, the share of value its presence costs the others.
//!    A gang cannot be split, so the partial allocation is one of time: a shorter lease.
//! 4. **Leftover.** GPUs nobody won go to the remaining jobs, worst rho first, for one round, so that the
//!    cluster stays work-conserving.
//!
//! Knobs and defaults: the fairness knob f = 0.8 and a 5-minute lease. These are the defaults of the
//! Themis authors' YARN prototype (`ThemisConfiguration`: lease 5 min, knob 0.2, the knob there being the
//! share of jobs that bids, 1 - f in the paper's notation). With gangway's default 6-minute rounds, a
//! lease is never shorter than one round.

use super::effective::best_rate;
use super::finish_time::{FtfRow, IsolatedClock};
use super::{Grant, JobView, Knob, Policy, PolicyEntry, Registry, RegistryError, RoundInput};
use crate::cluster::GpuTypeId;
use crate::job::{IdMap, JobId};

/// Enters this module's policies (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("themis", |config| {
            Box::new(Themis::new(config.knob("f"), config.knob("lease")))
        })
        .summary(
            "Themis: leases, worst-rho filter (fairness knob f = 0.8), partial-allocation \
             auction, leftover to the rest",
        )
        .knob(Knob {
            name: "f",
            default: 0.8,
            range: super::KnobRange::Between(0.0, 1.0),
            help: "fairness knob: the share of jobs, best rho first, kept out of the auction",
        })
        .knob(Knob {
            name: "lease",
            default: 300.0,
            range: super::KnobRange::SECONDS,
            help: "seconds a won allocation lasts before its GPUs are offered again",
        }),
    )?;
    Ok(())
}

#[derive(Clone, Copy, Debug)]
struct Lease {
    gpu_type: GpuTypeId,
    gpus: u32,
    until: f64,
}

/// Themis: leases, a worst-rho filter and a partial-allocation auction (see the module docs).
pub struct Themis {
    /// The fairness knob f in [0, 1]: the share of jobs (best rho first) kept out of the auction.
    pub fairness: f64,
    /// Seconds a won allocation lasts before its GPUs are offered again (before the hidden payment).
    pub lease_seconds: f64,
    clock: IsolatedClock,
    leases: IdMap<JobId, Lease>,
}

/// A bidder: its index in `RoundInput::jobs`, its gang, and what it values.
struct Bid<'a> {
    job: usize,
    view: &'a JobView<'a>,
    row: FtfRow,
    /// rho if it gets nothing this lease.
    rho_waiting: f64,
}

impl Bid<'_> {
    /// log v on type `t`: how much a gang there lowers its rho; `None` where it cannot run or gains nothing.
    fn gain(&self, t: usize) -> Option<f64> {
        let rate = self.view.rates[t];
        (rate > 0.0)
            .then(|| (self.rho_waiting / self.row.rho_at(rate, 0.0)).ln())
            .filter(|g| *g > 0.0)
    }

    /// The fastest type with room for its gang, and the gain there.
    fn best_fit(&self, pool: &[u32]) -> Option<(usize, f64)> {
        let gpus = self.view.job.gpus;
        (0..pool.len())
            .filter(|&t| pool[t] >= gpus && self.view.rates[t] > 0.0)
            .max_by(|&a, &b| self.view.rates[a].total_cmp(&self.view.rates[b]))
            .and_then(|t| Some((t, self.gain(t)?)))
    }
}

impl Themis {
    /// Themis with fairness knob `fairness` (clamped to 0..=1) and leases of `lease_seconds`.
    pub fn new(fairness: f64, lease_seconds: f64) -> Self {
        Themis {
            fairness: fairness.clamp(0.0, 1.0),
            lease_seconds,
            clock: IsolatedClock::default(),
            leases: IdMap::default(),
        }
    }

    /// Proportional-fair winners among `bids[from..]` (in density order) for `pool`, skipping
    /// `excluded`: (bid, type, gain, the pool just before it won).
    fn auction(
        bids: &[Bid<'_>],
        smallest_after: &[u32],
        from: usize,
        pool: &[u32],
        excluded: Option<usize>,
    ) -> Vec<Win> {
        let mut pool = pool.to_vec();
        let mut winners = Vec::new();
        for (k, bid) in bids.iter().enumerate().skip(from) {
            // Past this position no gang is small enough for what is left.
            if pool.iter().all(|&left| left < smallest_after[k]) {
                break;
            }
            if Some(k) == excluded {
                continue;
            }
            if let Some((t, gain)) = bid.best_fit(&pool) {
                winners.push(Win {
                    bid: k,
                    gpu_type: t,
                    gain,
                    pool_before: pool.clone(),
                });
                pool[t] -= bid.view.job.gpus;
            }
        }
        winners
    }
}

/// An auction winner.
struct Win {
    bid: usize,
    gpu_type: usize,
    gain: f64,
    pool_before: Vec<u32>,
}

/// `out[k]` = the minimum of `values[k..]` (`u32::MAX` past the end).
fn suffix_min(values: impl DoubleEndedIterator<Item = u32> + ExactSizeIterator) -> Vec<u32> {
    let mut out = vec![u32::MAX; values.len() + 1];
    for (k, v) in values.enumerate().rev() {
        out[k] = v.min(out[k + 1]);
    }
    out
}

impl Policy for Themis {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let rows = self.clock.rows(input);
        let now = input.now;
        let mut pool = input.capacity.to_vec();
        let mut grants = Vec::new();
        let mut open = Vec::new();
        // Live leases hold their GPUs; everyone else competes for what is left.
        for (k, view) in input.jobs.iter().enumerate() {
            let lease = self.leases.get(&view.id()).copied();
            match (lease, view.running) {
                (Some(lease), Some(run))
                    if lease.until > now + 1e-6 && run.gpu_type == lease.gpu_type =>
                {
                    pool[lease.gpu_type.0 as usize] -= lease.gpus;
                    grants.push(Grant::new(view.id(), lease.gpu_type, lease.gpus));
                }
                _ => {
                    self.leases.remove(&view.id());
                    let row = rows[k];
                    let rate = best_rate(view.rates);
                    if rate > 0.0 && row.remaining > 0.0 {
                        let rho_waiting =
                            row.rho_at(rate, self.lease_seconds.max(input.round_length));
                        open.push(Bid {
                            job: k,
                            view,
                            row,
                            rho_waiting,
                        });
                    }
                }
            }
        }
        let present: IdMap<JobId, ()> = input.jobs.iter().map(|v| (v.id(), ())).collect();
        self.leases.retain(|j, _| present.contains_key(j));

        // Worst rho first; the worst (1 - f) bid, rounded down (with few jobs open, none bids and the
        // GPUs go to the worst rho first, below).
        open.sort_by(|a, b| {
            b.rho_waiting
                .total_cmp(&a.rho_waiting)
                .then(a.job.cmp(&b.job))
        });
        let bidding = ((1.0 - self.fairness) * open.len() as f64 + 1e-9).floor() as usize;
        let mut rest = open.split_off(bidding.min(open.len()));
        let mut bids = open;
        // Greedy proportional fairness: highest log-value per GPU first.
        let mut by_density: Vec<(f64, Bid<'_>)> = bids
            .into_iter()
            .map(|b| {
                let best = (0..pool.len())
                    .filter_map(|t| b.gain(t))
                    .fold(0.0, f64::max);
                (best / f64::from(b.view.job.gpus), b)
            })
            .collect();
        by_density.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.job.cmp(&b.1.job)));
        bids = by_density.into_iter().map(|(_, b)| b).collect();
        let smallest_after = suffix_min(bids.iter().map(|b| b.view.job.gpus));
        let winners = Self::auction(&bids, &smallest_after, 0, &pool, None);
        let mut won = vec![false; bids.len()];
        for (w, win) in winners.iter().enumerate() {
            let (k, t) = (win.bid, win.gpu_type);
            // Hidden payment: what i's presence costs the others, in the product of their values. The
            // greedy runs identically up to i, so only the winners after it are compared. A lease no
            // longer than a round cannot be shortened, so the payment is then not worth computing.
            let keep = if self.lease_seconds > input.round_length {
                let others_with_i: f64 = winners[w + 1..].iter().map(|x| x.gain).sum();
                let others_without_i: f64 =
                    Self::auction(&bids, &smallest_after, k, &win.pool_before, Some(k))
                        .iter()
                        .map(|x| x.gain)
                        .sum();
                (others_with_i - others_without_i).exp().min(1.0)
            } else {
                1.0
            };
            let view = bids[k].view;
            let gpus = view.job.gpus;
            pool[t] -= gpus;
            won[k] = true;
            let lease = (keep * self.lease_seconds).max(input.round_length);
            self.leases.insert(
                view.id(),
                Lease {
                    gpu_type: GpuTypeId(t as u16),
                    gpus,
                    until: now + lease,
                },
            );
            grants.push(Grant::new(view.id(), GpuTypeId(t as u16), gpus));
        }
        // Leftover, worst rho first, for one round: losers and those filtered out alike.
        rest.extend(
            bids.into_iter()
                .zip(won)
                .filter(|(_, w)| !w)
                .map(|(b, _)| b),
        );
        rest.sort_by(|a, b| {
            b.rho_waiting
                .total_cmp(&a.rho_waiting)
                .then(a.job.cmp(&b.job))
        });
        for bid in &rest {
            let gpus = bid.view.job.gpus;
            let fit = (0..pool.len())
                .filter(|&t| pool[t] >= gpus && bid.view.rates[t] > 0.0)
                .max_by(|&a, &b| bid.view.rates[a].total_cmp(&bid.view.rates[b]));
            if let Some(t) = fit {
                pool[t] -= gpus;
                grants.push(Grant::new(bid.view.id(), GpuTypeId(t as u16), gpus));
            }
        }
        grants
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffix_minima() {
        assert_eq!(
            suffix_min([4, 1, 8, 2].into_iter()),
            vec![1, 1, 2, 2, u32::MAX]
        );
    }
}
