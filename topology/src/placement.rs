//! Placement search: the best set of free GPUs for a gang.
//!
//! - Inside a server the search is exact: every subset of the server's free GPUs of the gang's size is
//!   scored (at most 70 for 8 GPUs), and the answer is cached per (server design, free mask, size), so a
//!   10,000-GPU cluster costs one look-up per server.
//! - Across servers it is greedy: the fewest servers, in one rack if possible, fullest-free first.
//! - It is fragmentation-aware: among equally good sets it takes the server with the fewest free GPUs
//!   (best fit), and inside a server the subset that leaves the remaining free GPUs best connected.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::topology::Topology;

/// How strictly a gang is consolidated.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// YARN-CS style: a gang that fits in one server waits until one server can hold it.
    Consolidate,
    /// Take one server when one has room, otherwise spread over the fewest servers.
    Relaxed,
    /// Consolidate until the job has waited this many seconds, then relax (the Philly study's guideline).
    RelaxAfter(f64),
}

impl Strategy {
    /// Whether a gang that has waited `waited` seconds may be spread over servers.
    pub fn may_spread(self, waited: f64) -> bool {
        match self {
            Strategy::Consolidate => false,
            Strategy::Relaxed => true,
            Strategy::RelaxAfter(after) => waited >= after,
        }
    }
}

/// A chosen set of GPUs and how good it is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Placement {
    /// The GPUs, as indices into [`Topology::gpus`].
    pub gpus: Vec<usize>,
    /// Effective all-reduce bandwidth of the set, GB/s (infinite for one GPU).
    pub bandwidth_gbps: f64,
    /// 0..100 against the best set of this size on an empty cluster.
    pub score: f64,
}

/// A server's best subset: its mask, its (ring, tree) quality, and the quality of what stays free.
#[derive(Clone, Copy, Debug)]
struct Subset {
    mask: u64,
    quality: (f64, f64),
    left: (f64, f64),
}

impl Subset {
    /// How a server's best subset ranks against other servers' (greater is better): quality first, then
    /// best fit (fewer GPUs left free), then how well the GPUs left free connect.
    fn rank(&self, leftover: u32) -> (f64, f64, std::cmp::Reverse<u32>, f64, f64) {
        (
            self.quality.0,
            self.quality.1,
            std::cmp::Reverse(leftover),
            self.left.0,
            self.left.1,
        )
    }
}

/// Free GPUs as one bit mask per server (bit i = local GPU i).
pub type FreeMasks = Vec<u64>;

/// The mask of a server whose `gpus` GPUs are all free (servers of up to 64 GPUs).
pub fn full_mask(gpus: usize) -> u64 {
    if gpus >= 64 {
        u64::MAX
    } else {
        (1u64 << gpus) - 1
    }
}

/// The search, with its caches.
pub struct PlacementSearch {
    topology: Arc<Topology>,
    /// (design, free mask, size) -> the best subset.
    subsets: HashMap<(usize, u64, u32), Option<Subset>>,
    best_by_size: HashMap<usize, f64>,
}

impl PlacementSearch {
    /// A search over `topology`, with empty caches.
    pub fn new(topology: impl Into<Arc<Topology>>) -> Self {
        PlacementSearch {
            topology: topology.into(),
            subsets: HashMap::new(),
            best_by_size: HashMap::new(),
        }
    }

    /// Every GPU free.
    pub fn all_free(&self) -> FreeMasks {
        self.topology
            .hosts
            .iter()
            .map(|h| full_mask(h.num_gpus))
            .collect()
    }

    /// Score 0..100 of a set of GPUs: its bandwidth against the best set of its size.
    pub fn score(&mut self, gpus: &[usize]) -> f64 {
        let bandwidth = self.topology.set_bandwidth(gpus);
        self.normalize(gpus.len(), bandwidth)
    }

    fn normalize(&mut self, size: usize, bandwidth: f64) -> f64 {
        if size < 2 {
            return 100.0;
        }
        let best = self.best_bandwidth(size);
        if best <= 0.0 || !best.is_finite() {
            return 100.0;
        }
        (100.0 * bandwidth / best).clamp(0.0, 100.0)
    }

    /// Bandwidth of the best set of `size` GPUs on an empty cluster.
    pub fn best_bandwidth(&mut self, size: usize) -> f64 {
        if let Some(&b) = self.best_by_size.get(&size) {
            return b;
        }
        let free = self.all_free();
        let best = self
            .search(&free, size, Strategy::Relaxed)
            .map_or(
                0.0,
                |(gpus, bw)| if gpus.len() < 2 { f64::INFINITY } else { bw },
            );
        self.best_by_size.insert(size, best);
        best
    }

    /// The best placement of `size` GPUs among `free`, or `None` if the strategy forbids every option.
    pub fn find(
        &mut self,
        free: &FreeMasks,
        size: usize,
        strategy: Strategy,
        waited: f64,
    ) -> Option<Placement> {
        let effective = if strategy.may_spread(waited) {
            Strategy::Relaxed
        } else {
            Strategy::Consolidate
        };
        let (gpus, bandwidth) = self.search(free, size, effective)?;
        let score = self.normalize(size, bandwidth);
        Some(Placement {
            gpus,
            bandwidth_gbps: bandwidth,
            score,
        })
    }

    fn search(
        &mut self,
        free: &FreeMasks,
        size: usize,
        strategy: Strategy,
    ) -> Option<(Vec<usize>, f64)> {
        if size == 0 {
            return Some((Vec::new(), f64::INFINITY));
        }
        let topology = Arc::clone(&self.topology);
        let topology = topology.as_ref();
        // Exact inside one server. Ranked by quality, then best fit (fewest GPUs left free on the
        // server), then how well the GPUs left free connect, then server order.
        let mut best: Option<(Subset, u32, usize)> = None;
        for (h, &mask) in free.iter().enumerate() {
            let free_here = mask.count_ones();
            if (free_here as usize) < size {
                continue;
            }
            let Some(subset) = self.best_subset(h, mask, size as u32) else {
                continue;
            };
            let leftover = free_here - size as u32;
            let better = best.is_none_or(|(b, b_left, _)| {
                subset.rank(leftover).partial_cmp(&b.rank(b_left))
                    == Some(std::cmp::Ordering::Greater)
            });
            if better {
                best = Some((subset, leftover, h));
            }
        }
        if let Some((subset, _, h)) = best {
            return Some((gpus_of(topology, h, subset.mask), subset.quality.0));
        }
        let largest = topology.hosts.iter().map(|h| h.num_gpus).max().unwrap_or(0);
        if strategy == Strategy::Consolidate && size <= largest {
            return None;
        }
        self.spread(free, size)
    }

    /// Greedy across servers: prefer one rack; take servers with the most free GPUs first.
    fn spread(&mut self, free: &FreeMasks, size: usize) -> Option<(Vec<usize>, f64)> {
        let topology = Arc::clone(&self.topology);
        let topology = topology.as_ref();
        let racks = topology.rack_uplink.len();
        let mut by_rack: Vec<Vec<usize>> = vec![Vec::new(); racks];
        for (h, host) in topology.hosts.iter().enumerate() {
            if free[h] != 0 {
                by_rack[host.rack].push(h);
            }
        }
        let total = |hosts: &[usize]| {
            hosts
                .iter()
                .map(|&h| free[h].count_ones() as usize)
                .sum::<usize>()
        };
        // The rack that needs the fewest servers; ties to the rack with the least free (best fit).
        let mut chosen: Option<((usize, usize), Vec<usize>)> = None;
        for hosts in &mut by_rack {
            if total(hosts) < size {
                continue;
            }
            hosts.sort_by_key(|&h| (std::cmp::Reverse(free[h].count_ones()), h));
            let mut taken = 0;
            let mut used = Vec::new();
            for &h in hosts.iter() {
                used.push(h);
                taken += free[h].count_ones() as usize;
                if taken >= size {
                    break;
                }
            }
            let rank = (used.len(), total(hosts));
            if chosen.as_ref().is_none_or(|(best, _)| rank < *best) {
                chosen = Some((rank, used));
            }
        }
        let hosts = match chosen {
            Some((_, h)) => h,
            None => {
                let mut all: Vec<usize> = (0..topology.hosts.len())
                    .filter(|&h| free[h] != 0)
                    .collect();
                if total(&all) < size {
                    return None;
                }
                all.sort_by_key(|&h| (std::cmp::Reverse(free[h].count_ones()), h));
                let mut taken = 0;
                all.into_iter()
                    .take_while(|&h| {
                        let more = taken < size;
                        taken += free[h].count_ones() as usize;
                        more
                    })
                    .collect()
            }
        };
        let mut gpus = Vec::with_capacity(size);
        for h in hosts {
            let want = (size - gpus.len()).min(free[h].count_ones() as usize) as u32;
            let subset = self.best_subset(h, free[h], want)?;
            gpus.extend(gpus_of(topology, h, subset.mask));
        }
        let bw = topology.set_bandwidth(&gpus);
        Some((gpus, bw))
    }

    /// The best `size`-subset of a server's free GPUs, by quality, then by how well the rest connects.
    fn best_subset(&mut self, h: usize, free: u64, size: u32) -> Option<Subset> {
        let host = &self.topology.hosts[h];
        let key = (host.design, free, size);
        if let Some(cached) = self.subsets.get(&key) {
            return *cached;
        }
        let topology = Arc::clone(&self.topology);
        let topology = topology.as_ref();
        let local = |mask: u64| gpus_of(topology, h, mask);
        let mut best: Option<Subset> = None;
        if free.count_ones() >= size && size > 0 {
            for mask in subsets_of(free, size) {
                let quality = topology.set_quality(&local(mask));
                let rest = free & !mask;
                let left = if rest.count_ones() >= 2 {
                    topology.set_quality(&local(rest))
                } else {
                    (0.0, 0.0)
                };
                let better = best.is_none_or(|b| {
                    (quality.0, quality.1, left.0, left.1).partial_cmp(&(
                        b.quality.0,
                        b.quality.1,
                        b.left.0,
                        b.left.1,
                    )) == Some(std::cmp::Ordering::Greater)
                });
                if better {
                    best = Some(Subset {
                        mask,
                        quality,
                        left,
                    });
                }
            }
        }
        self.subsets.insert(key, best);
        best
    }
}

/// The cluster-wide GPU ids of a server's local mask.
fn gpus_of(topology: &Topology, h: usize, mask: u64) -> Vec<usize> {
    let first = topology.hosts[h].first_gpu;
    (0..64)
        .filter(|i| mask & (1u64 << i) != 0)
        .map(|i| first + i)
        .collect()
}

/// Largest server the exact in-server search handles (C(16, 8) = 12,870 subsets).
pub const MAX_EXACT_GPUS: usize = 16;

/// Every subset of the bits of `set` with exactly `k` bits, in increasing order. `set` has at most
/// [`MAX_EXACT_GPUS`] bits, so the counter below cannot overflow.
fn subsets_of(set: u64, k: u32) -> impl Iterator<Item = u64> {
    assert!(
        set.count_ones() as usize <= MAX_EXACT_GPUS,
        "exact search on a server of more than {MAX_EXACT_GPUS} GPUs"
    );
    let bits: Vec<u64> = (0..64)
        .filter(|i| set & (1u64 << i) != 0)
        .map(|i| 1u64 << i)
        .collect();
    let n = bits.len() as u32;
    // Gosper's hack over n positions, mapped back to the set's bits.
    let limit = if n >= 64 { u64::MAX } else { 1u64 << n };
    let mut combo: u64 = if k == 0 || k > n {
        limit
    } else {
        (1u64 << k) - 1
    };
    std::iter::from_fn(move || {
        if combo >= limit {
            return None;
        }
        let current = combo;
        let c = combo & combo.wrapping_neg();
        let r = combo + c;
        combo = (((r ^ combo) >> 2) / c) | r;
        Some(
            (0..n)
                .filter(|i| current & (1u64 << i) != 0)
                .fold(0u64, |m, i| m | bits[i as usize]),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsets_have_the_right_size_and_count() {
        let all: Vec<u64> = subsets_of(0b1011_0110, 3).collect();
        assert_eq!(all.len(), 10);
        assert!(
            all.iter()
                .all(|m| m.count_ones() == 3 && m & !0b1011_0110 == 0)
        );
        assert_eq!(subsets_of(0b111, 4).count(), 0);
    }
}
