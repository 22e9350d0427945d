//! Gavel's heterogeneity-agnostic finish-time fairness (`finish_time_fairness`), after Themis (Mahajan et
//! al., NSDI'20): each job's rho is its projected finish time divided by the finish time it would have
//! alone on 1/N of the cluster, and the allocation minimizes the largest rho.
//!
//! For job i with throughput r_i (on its fastest GPU type, as agnostic policies see every type alike),
//! age t_i, remaining steps R_i and total share s_i:
//! - rho_i(s_i) = (t_i + R_i / (r_i s_i)) / (T_iso_i + R_i / (r_i s_iso_i)), where s_iso_i is the isolated
//!   share min(1, N / (m gpus_i)) and T_iso_i the time the job would have needed so far at that share;
//! - the smallest level rho* with sum_i s_i(rho*) gpus_i <= N and s_i <= 1 is found by bisection;
//! - capacity left over is handed out evenly (capped at a full share), to stay work-conserving.

use super::effective::{best_rate, effective_throughput, proportional_row};
use super::fair_share::split;
use super::{
    PolicyConfig, PolicyEntry, Realize, Registry, RegistryError, RoundInput, TimeSharePolicy,
    TimeShares, TypePreference,
};
use crate::job::{IdMap, JobId};

#[derive(Clone, Copy, Debug, Default)]
struct Isolated {
    /// Time the job would have needed, alone on 1/N of the cluster, for the steps it has done.
    time: f64,
    steps_done: f64,
    /// Its isolated throughput at the last round.
    rate: f64,
}

/// One job's finish-time-fairness inputs at a round.
#[derive(Clone, Copy, Debug)]
pub(super) struct FtfRow {
    /// Seconds since it arrived.
    pub age: f64,
    pub remaining: f64,
    /// Steps per second on its fastest type, with its whole gang.
    pub rate: f64,
    pub gpus: f64,
    /// Seconds it would have needed so far, alone on 1/N of the cluster.
    pub iso_time: f64,
    /// Its rate on 1/N of the cluster now.
    pub iso_rate: f64,
}

impl FtfRow {
    /// Its finish time alone on 1/N of the cluster (Themis' T_ideal), as seen from its arrival.
    pub fn ideal(&self) -> f64 {
        self.iso_time + self.remaining / self.iso_rate
    }

    /// rho if it ran at `rate` from `now + wait` to the end.
    pub fn rho_at(&self, rate: f64, wait: f64) -> f64 {
        (self.age + wait + self.remaining / rate) / self.ideal()
    }
}

/// What "alone on 1/N of the cluster" means for a job's isolated rate.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) enum IsolatedShare {
    /// 1/N of the GPUs, all as fast as its fastest type: the heterogeneity-agnostic view (Themis, and
    /// Gavel's agnostic FTF, to which every type looks alike).
    #[default]
    FastestType,
    /// 1/N of every type, at each type's own rate: Gavel's isolated policy, the reference of its
    /// heterogeneity-aware FTF (`IsolatedPolicy.get_throughputs`).
    EveryType,
}

impl IsolatedShare {
    /// The rate of a job (`rates` per type, for its gang of `gpus`) alone on 1/m of the cluster.
    fn rate(self, rates: &[f64], gpus: u32, capacity: &[u32], m: usize) -> f64 {
        match self {
            IsolatedShare::FastestType => {
                let total: f64 = capacity.iter().map(|&n| f64::from(n)).sum();
                best_rate(rates) * (total / (m as f64 * f64::from(gpus))).min(1.0)
            }
            IsolatedShare::EveryType => {
                effective_throughput(rates, &proportional_row(capacity, m, gpus))
            }
        }
    }
}

/// Tracks, per job, the time it would have needed on 1/N of the cluster (N = active jobs) for the
/// steps it has done: the isolated reference rho divides by, advanced round by round as N changes.
#[derive(Default)]
pub(super) struct IsolatedClock {
    share: IsolatedShare,
    isolated: IdMap<JobId, Isolated>,
}

impl IsolatedClock {
    pub fn new(share: IsolatedShare) -> Self {
        IsolatedClock {
            share,
            isolated: IdMap::default(),
        }
    }

    /// Brings every job's isolated time up to date and returns its row, in `input.jobs` order.
    pub fn rows(&mut self, input: &RoundInput<'_>) -> Vec<FtfRow> {
        let m = input.jobs.len().max(1);
        let mut rows = Vec::with_capacity(input.jobs.len());
        for v in input.jobs {
            let iso_rate = self.share.rate(v.rates, v.job.gpus, input.capacity, m);
            let state = self.isolated.entry(v.id()).or_default();
            // Credit the steps done since the last round at the isolated rate of that round.
            if state.rate > 0.0 {
                state.time += (v.steps_done - state.steps_done) / state.rate;
            }
            state.steps_done = v.steps_done;
            state.rate = iso_rate;
            rows.push(FtfRow {
                age: input.now - v.job.arrival,
                remaining: v.remaining_steps,
                rate: best_rate(v.rates),
                gpus: f64::from(v.job.gpus),
                iso_time: state.time,
                iso_rate,
            });
        }
        // A paused job keeps its isolated clock: it comes back.
        let active = input.not_ended();
        self.isolated.retain(|j, _| active.contains(j));
        rows
    }
}

/// Gavel's heterogeneity-agnostic finish-time fairness (`finish_time_fairness`): time shares that
/// minimize the largest rho, handed to the round mechanism.
#[derive(Default)]
pub struct FinishTimeFairness {
    clock: IsolatedClock,
}

impl FinishTimeFairness {
    /// Total shares minimizing the largest rho.
    fn total_shares(jobs: &[FtfRow], total_gpus: f64) -> Vec<f64> {
        // Room for every gang: every job runs all the time, and no rho can be lowered.
        if jobs.iter().map(|j| j.gpus).sum::<f64>() <= total_gpus {
            return vec![1.0; jobs.len()];
        }
        let needed = |rho: f64| -> Option<Vec<f64>> {
            let mut used = 0.0;
            let mut out = Vec::with_capacity(jobs.len());
            for job in jobs {
                let (remaining, rate, gpus) = (job.remaining, job.rate, job.gpus);
                // A job with nothing left needs no share (it finishes this round).
                if remaining <= 0.0 {
                    out.push(0.0);
                    continue;
                }
                let slack = rho * job.ideal() - job.age;
                if slack <= 0.0 {
                    return None;
                }
                let s = (remaining / (rate * slack)).max(0.0);
                if s > 1.0 + 1e-12 {
                    return None;
                }
                used += s * gpus;
                out.push(s.min(1.0));
            }
            (used <= total_gpus * (1.0 + 1e-12)).then_some(out)
        };
        // Bracket rho*, then bisect.
        let mut hi = 1.0;
        while needed(hi).is_none() && hi < 1e12 {
            hi *= 2.0;
        }
        let mut lo = 0.0;
        // 50 halvings of a bracket below 1e12 leave an error far below a second of finish time.
        for _ in 0..50 {
            let mid = 0.5 * (lo + hi);
            if needed(mid).is_some() {
                hi = mid
            } else {
                lo = mid
            }
        }
        let mut s = needed(hi).unwrap_or_else(|| vec![0.0; jobs.len()]);
        // Hand out what is left evenly, capped at a full share.
        let mut left = total_gpus - s.iter().zip(jobs).map(|(s, j)| s * j.gpus).sum::<f64>();
        for _ in 0..jobs.len() {
            let open: Vec<usize> = (0..s.len()).filter(|&i| s[i] < 1.0).collect();
            if left <= 1e-9 || open.is_empty() {
                break;
            }
            let weight: f64 = open.iter().map(|&i| jobs[i].gpus).sum();
            let raise = left / weight;
            for &i in &open {
                let add = raise.min(1.0 - s[i]);
                s[i] += add;
                left -= add * jobs[i].gpus;
            }
        }
        s
    }
}

impl TimeSharePolicy for FinishTimeFairness {
    fn shares(&mut self, input: &RoundInput<'_>) -> TimeShares {
        let total: f64 = input.capacity.iter().map(|&n| f64::from(n)).sum();
        let rows = self.clock.rows(input);
        let shares = Self::total_shares(&rows, total);
        let mut out = TimeShares::new(input.capacity.len(), TypePreference::Interchangeable);
        for (v, s) in input.jobs.iter().zip(shares) {
            out.push(v.id(), split(v, input.capacity, s));
        }
        out
    }
}

/// Enters this module's policies (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("finish_time_fairness", |config: &PolicyConfig| {
            Box::new(Realize::new(FinishTimeFairness::default(), config.seed))
        })
        .alias("ftf")
        .summary(
            "minimize the largest finish-time fairness rho, GPU types treated as equal \
             (Gavel's, after Themis)",
        ),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-GPU job of `age` seconds with `remaining` steps at 1 step/s, on half a GPU when isolated.
    fn row(age: f64, remaining: f64) -> FtfRow {
        FtfRow {
            age,
            remaining,
            rate: 1.0,
            gpus: 1.0,
            iso_time: 0.0,
            iso_rate: 0.5,
        }
    }

    #[test]
    fn the_isolated_rate_is_the_fastest_type_or_every_type_at_its_own_speed() {
        let rates = [2.0, 1.0, 0.5];
        let capacity = [4, 4, 4];
        let rate = |share: IsolatedShare, gpus, m| share.rate(&rates, gpus, &capacity, m);
        // 24 jobs on 12 GPUs: half a GPU each.
        assert_eq!(rate(IsolatedShare::FastestType, 1, 24), 1.0);
        // A sixth of a GPU of each type, each at its own rate (Gavel's isolated policy).
        assert!((rate(IsolatedShare::EveryType, 1, 24) - 3.5 / 6.0).abs() < 1e-12);
        // 2 jobs: a whole GPU, on the fastest type or a third of the time on each.
        assert_eq!(rate(IsolatedShare::FastestType, 1, 2), 2.0);
        assert!((rate(IsolatedShare::EveryType, 1, 2) - 3.5 / 3.0).abs() < 1e-12);
        // A 2-GPU gang among 24 jobs gets half the time a single GPU does.
        assert!((rate(IsolatedShare::EveryType, 2, 24) - 3.5 / 12.0).abs() < 1e-12);
    }

    #[test]
    fn a_finished_job_does_not_break_the_others() {
        let jobs = [row(10.0, 0.0), row(1000.0, 3600.0), row(0.0, 3600.0)];
        let s = FinishTimeFairness::total_shares(&jobs, 1.0);
        assert!(
            s[1] > s[2],
            "the job that waited longer still gets more: {s:?}"
        );
    }

    #[test]
    fn the_job_furthest_behind_gets_the_larger_share() {
        // Two equal jobs on one GPU; job 0 has waited 1,000 s longer, so its rho is worse.
        let jobs = [row(1000.0, 3600.0), row(0.0, 3600.0)];
        let s = FinishTimeFairness::total_shares(&jobs, 1.0);
        assert!(s[0] > s[1], "{s:?}");
        assert!((s[0] + s[1] - 1.0).abs() < 1e-6, "work-conserving: {s:?}");
        // Plenty of room: everyone runs all the time.
        assert_eq!(FinishTimeFairness::total_shares(&jobs, 4.0), vec![1.0, 1.0]);
    }
}
