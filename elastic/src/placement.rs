//! World-size choice and rank placement.

use std::cmp::Reverse;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{BatchPlan, PlanError};

/// Degrees of data, tensor and pipeline parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ParallelPlan {
    /// Data-parallel degree: model replicas.
    pub dp: u32,
    /// Tensor-parallel degree: GPUs sharing each layer.
    pub tp: u32,
    /// Pipeline-parallel degree: stages.
    pub pp: u32,
}

impl ParallelPlan {
    /// GPUs used: `dp * tp * pp`.
    pub fn world_size(&self) -> u32 {
        self.dp * self.tp * self.pp
    }
}

impl fmt::Display for ParallelPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dp={} tp={} pp={}", self.dp, self.tp, self.pp)
    }
}

/// What the model and the user fix about a job; planning chooses only `dp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Fewest GPUs the job may run on.
    pub min_gpus: u32,
    /// Most GPUs the job may use.
    pub max_gpus: u32,
    /// Samples per optimizer step, over all replicas.
    pub global_batch: u32,
    /// Largest micro-batch one replica fits in memory.
    pub max_micro_batch: u32,
    /// Whether the global batch may move to the nearest value the new `dp` can split exactly.
    pub rescale_batch: bool,
}

impl JobSpec {
    /// Checks the spec and returns the smallest world size it allows.
    pub fn validate(&self) -> Result<u32, PlanError> {
        if self.tp == 0 || self.pp == 0 {
            return Err(PlanError::InvalidSpec("tp and pp must be at least 1"));
        }
        if self.global_batch == 0 || self.max_micro_batch == 0 {
            return Err(PlanError::InvalidSpec(
                "global_batch and max_micro_batch must be at least 1",
            ));
        }
        if self.min_gpus > self.max_gpus {
            return Err(PlanError::InvalidSpec("min_gpus exceeds max_gpus"));
        }
        let unit = self
            .tp
            .checked_mul(self.pp)
            .ok_or(PlanError::InvalidSpec("tp*pp overflows"))?;
        // u64: rounding min_gpus up to a multiple of unit may pass u32::MAX.
        let needed = u64::from(self.min_gpus.max(1)).div_ceil(u64::from(unit)) * u64::from(unit);
        match u32::try_from(needed) {
            Ok(needed) if needed <= self.max_gpus => Ok(needed),
            _ => Err(PlanError::NoWorldSizeInRange {
                unit,
                min: self.min_gpus,
                max: self.max_gpus,
            }),
        }
    }
}

/// The GPUs a scheduler offers on one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostOffer {
    /// Host name, as the launcher addresses it.
    pub host: String,
    /// Local GPU indices (as `CUDA_VISIBLE_DEVICES` numbers them), in any order.
    pub gpus: Vec<u32>,
}

impl HostOffer {
    /// An offer of `gpus` on `host`.
    pub fn new(host: impl Into<String>, gpus: impl IntoIterator<Item = u32>) -> Self {
        Self {
            host: host.into(),
            gpus: gpus.into_iter().collect(),
        }
    }
}

/// Where one rank runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuSlot {
    /// Host name.
    pub host: String,
    /// Local GPU index on that host.
    pub gpu: u32,
}

/// A complete launch plan: degrees, batch split and placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Parallel degrees.
    pub parallel: ParallelPlan,
    /// Batch split for `parallel.dp`.
    pub batch: BatchPlan,
    /// `ranks[r]` is where rank `r` runs.
    pub ranks: Vec<GpuSlot>,
}

impl Plan {
    /// GPUs used.
    pub fn world_size(&self) -> u32 {
        self.parallel.world_size()
    }

    /// `(host, CUDA_VISIBLE_DEVICES)` per used host, in rank order. Each host holds a contiguous
    /// range of ranks, so local rank `i` on a host runs on the `i`-th device listed for it.
    pub fn cuda_visible_devices(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for slot in &self.ranks {
            match out.last_mut() {
                Some((host, devices)) if *host == slot.host => {
                    devices.push(',');
                    devices.push_str(&slot.gpu.to_string());
                }
                _ => out.push((slot.host.clone(), slot.gpu.to_string())),
            }
        }
        out
    }
}

/// Plans `spec` on `offer`: the largest valid world size, its batch split, and a placement that keeps
/// each tensor-parallel group on one host. See the crate docs for the rules.
pub fn plan(spec: &JobSpec, offer: &[HostOffer]) -> Result<Plan, PlanError> {
    let needed = spec.validate()?;
    let (tp, pp) = (spec.tp, spec.pp);
    let mut hosts = merge_hosts(offer)?;
    // Roomiest hosts first: fewer hosts means fewer slow links. The sort is stable, so ties keep
    // the offer's order.
    hosts.sort_by_key(|h| Reverse(h.gpus.len() / tp as usize));

    let offered: u32 = hosts.iter().map(|h| h.gpus.len() as u32).sum();
    let largest = hosts.iter().map(|h| h.gpus.len() as u32).max().unwrap_or(0);
    if offered > 0 && largest < tp {
        return Err(PlanError::TpGroupTooLarge { tp, largest });
    }
    let groups: u32 = hosts.iter().map(|h| h.gpus.len() as u32 / tp).sum();

    // Tensor-parallel groups to use: a whole number of pipelines, within max_gpus, largest first.
    let top = groups.min(spec.max_gpus / tp) / pp * pp;
    let mut tried = Vec::new();
    for n in (pp..=top)
        .rev()
        .step_by(pp as usize)
        .take_while(|n| n * tp >= needed)
    {
        let dp = n / pp;
        match BatchPlan::fit(
            spec.global_batch,
            dp,
            spec.max_micro_batch,
            spec.rescale_batch,
        ) {
            Ok(batch) => {
                let parallel = ParallelPlan { dp, tp, pp };
                return Ok(Plan {
                    parallel,
                    batch,
                    ranks: assign(&hosts, tp, n),
                });
            }
            Err(_) => tried.push(dp),
        }
    }
    Err(if tried.is_empty() {
        let usable = groups * tp;
        PlanError::TooFewGpus {
            needed,
            usable,
            offered,
            tp,
        }
    } else {
        PlanError::BatchIndivisible {
            global_batch: spec.global_batch,
            dps: tried,
        }
    })
}

/// Merges entries that name the same host, sorts each host's GPUs and rejects a GPU offered twice.
fn merge_hosts(offer: &[HostOffer]) -> Result<Vec<HostOffer>, PlanError> {
    let mut hosts: Vec<HostOffer> = Vec::new();
    for entry in offer {
        match hosts.iter_mut().find(|h| h.host == entry.host) {
            Some(h) => h.gpus.extend(&entry.gpus),
            None => hosts.push(entry.clone()),
        }
    }
    for h in &mut hosts {
        h.gpus.sort_unstable();
        if let Some(pair) = h.gpus.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(PlanError::DuplicateGpu {
                host: h.host.clone(),
                gpu: pair[0],
            });
        }
    }
    Ok(hosts)
}

/// Gives `groups` tensor-parallel groups to `hosts` in order, whole groups only. Rank 0 starts a
/// group and every host takes a multiple of `tp` ranks, so no group straddles two hosts.
fn assign(hosts: &[HostOffer], tp: u32, groups: u32) -> Vec<GpuSlot> {
    let (tp, mut left) = (tp as usize, groups as usize);
    let mut ranks = Vec::with_capacity(tp * left);
    for h in hosts {
        let take = (h.gpus.len() / tp).min(left);
        let slots = h.gpus[..take * tp].iter().map(|&gpu| GpuSlot {
            host: h.host.clone(),
            gpu,
        });
        ranks.extend(slots);
        left -= take;
    }
    ranks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(tp: u32, pp: u32, min_gpus: u32, max_gpus: u32) -> JobSpec {
        JobSpec {
            tp,
            pp,
            min_gpus,
            max_gpus,
            global_batch: 64,
            max_micro_batch: 8,
            rescale_batch: true,
        }
    }

    fn hosts(of: &[(&str, &[u32])]) -> Vec<HostOffer> {
        of.iter()
            .map(|(h, g)| HostOffer::new(*h, g.iter().copied()))
            .collect()
    }

    #[test]
    fn tp2_on_four_gpus_gives_only_world_two_or_four() {
        // Every subset of four GPUs, split across two hosts at every point, under every range.
        for mask in 0..16u32 {
            let gpus: Vec<u32> = (0..4).filter(|g| mask & (1 << g) != 0).collect();
            for split in 0..=gpus.len() {
                let offer = hosts(&[("a", &gpus[..split]), ("b", &gpus[split..])]);
                let groups = split / 2 + (gpus.len() - split) / 2;
                for (min, max) in
                    (0..=4).flat_map(|min| (min.max(2)..=8).map(move |max| (min, max)))
                {
                    let world = plan(&spec(2, 1, min, max), &offer).map(|p| p.world_size());
                    let fits = (groups * 2).min(max as usize / 2 * 2) as u32;
                    match world {
                        Ok(w) => assert!(
                            w == fits && (w == 2 || w == 4),
                            "{offer:?} [{min},{max}]: {w}"
                        ),
                        Err(_) => assert!(fits < min.max(1), "{offer:?} [{min},{max}] fits {fits}"),
                    }
                }
            }
        }
        let whole_host = hosts(&[("node1", &[0, 1, 2, 3])]);
        assert_eq!(
            plan(&spec(2, 1, 1, 4), &whole_host).unwrap().world_size(),
            4
        );
        assert_eq!(
            plan(&spec(2, 1, 1, 3), &whole_host).unwrap().world_size(),
            2
        );
    }

    #[test]
    fn tp_groups_stay_on_one_host_pipeline_spans_hosts() {
        let offer = hosts(&[("a", &[0, 1, 2]), ("b", &[4, 5, 6]), ("c", &[7])]);
        let p = plan(&spec(2, 2, 1, 16), &offer).unwrap();
        assert_eq!(
            p.parallel,
            ParallelPlan {
                dp: 1,
                tp: 2,
                pp: 2
            }
        );
        for group in p.ranks.chunks(2) {
            assert_eq!(group[0].host, group[1].host);
        }
        let visible = p.cuda_visible_devices();
        assert_eq!(
            visible,
            [("a".into(), "0,1".into()), ("b".into(), "4,5".into())]
        );
    }

    #[test]
    fn roomiest_host_fills_first_and_gpus_sort() {
        let offer = hosts(&[("small", &[0, 1]), ("big", &[7, 3, 5, 1])]);
        let p = plan(&spec(2, 1, 1, 4), &offer).unwrap();
        assert_eq!(p.cuda_visible_devices(), [("big".into(), "1,3,5,7".into())]);
        assert_eq!(
            p.ranks[2],
            GpuSlot {
                host: "big".into(),
                gpu: 5
            }
        );
    }

    #[test]
    fn errors_say_why() {
        let one_each = hosts(&[("a", &[0]), ("b", &[0])]);
        let err = plan(&spec(2, 1, 1, 8), &one_each).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tp=2 needs 2 GPUs on one host; largest host offers 1"
        );

        let err = plan(&spec(2, 2, 8, 8), &hosts(&[("a", &[0, 1, 2, 3, 4])])).unwrap_err();
        assert_eq!(
            err,
            PlanError::TooFewGpus {
                needed: 8,
                usable: 4,
                offered: 5,
                tp: 2
            }
        );

        let err = plan(&spec(2, 2, 5, 7), &hosts(&[("a", &[0, 1, 2, 3])])).unwrap_err();
        assert_eq!(
            err,
            PlanError::NoWorldSizeInRange {
                unit: 4,
                min: 5,
                max: 7
            }
        );

        let twice = hosts(&[("a", &[0, 1]), ("a", &[1])]);
        let err = plan(&spec(1, 1, 1, 8), &twice).unwrap_err();
        assert_eq!(
            err,
            PlanError::DuplicateGpu {
                host: "a".into(),
                gpu: 1
            }
        );
    }

    #[test]
    fn fixed_batch_falls_back_to_a_dividing_dp() {
        let fixed = JobSpec {
            global_batch: 6,
            rescale_batch: false,
            ..spec(1, 1, 1, 8)
        };
        let p = plan(&fixed, &hosts(&[("a", &[0, 1, 2, 3])])).unwrap();
        assert_eq!(p.world_size(), 3);
        assert_eq!(p.batch.global_batch, 6);

        let prime = JobSpec {
            global_batch: 7,
            min_gpus: 2,
            ..fixed
        };
        let err = plan(&prime, &hosts(&[("a", &[0, 1, 2, 3])])).unwrap_err();
        assert_eq!(
            err,
            PlanError::BatchIndivisible {
                global_batch: 7,
                dps: vec![4, 3, 2]
            }
        );
    }
}
