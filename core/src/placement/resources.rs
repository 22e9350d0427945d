//! CPUs and memory per server beside GPUs (Synergy, Mohan et al., OSDI'22): what each server has left,
//! and the free GPUs a gang with an allotment may use.
//!
//! Placers know only GPUs. A gang asking for CPUs and memory is placed by any placer on a view of the
//! free GPUs ([`Ledger::usable`]) from which the GPUs a server could not feed are hidden: a server with
//! 6 free GPUs but CPUs for 2 more of the gang's GPUs shows 2. So every placer respects the servers'
//! CPUs and memory without knowing of them, and no server is ever over capacity.

use super::FreeGpus;
use crate::cluster::{Cluster, GpuId, NodeId};
use crate::resources::{Allotment, EPSILON};
use gangway_protocol::worker::Resources;

/// CPUs and memory in use per server.
#[derive(Clone, Debug)]
pub struct Ledger {
    cpus: Vec<f64>,
    memory_gb: Vec<f64>,
    /// Runs holding more than their server's proportional share of either resource. While none does,
    /// every server feeds all its free GPUs at the share, and proportional gangs skip the masking.
    generous: usize,
    /// CPUs and memory in use on all servers.
    total: (f64, f64),
    /// Each server's proportional share per GPU (what a run without an allotment holds), kept
    /// because every start and stop charges it.
    shares: Vec<Allotment>,
}

impl Ledger {
    /// Nothing in use on any of `cluster`'s servers.
    pub fn new(cluster: &Cluster) -> Self {
        let n = cluster.nodes().len();
        Ledger {
            cpus: vec![0.0; n],
            memory_gb: vec![0.0; n],
            generous: 0,
            total: (0.0, 0.0),
            shares: cluster.nodes().iter().map(Allotment::share).collect(),
        }
    }

    /// CPUs and GB of memory in use on all servers.
    pub fn total(&self) -> (f64, f64) {
        (self.total.0.max(0.0), self.total.1.max(0.0))
    }

    /// CPUs in use on `node`.
    pub fn cpus_used(&self, node: NodeId) -> f64 {
        self.cpus[node.0 as usize]
    }

    /// GB of memory in use on `node`.
    pub fn memory_used(&self, node: NodeId) -> f64 {
        self.memory_gb[node.0 as usize]
    }

    /// CPUs and memory a gang on `gpus` holds in all at `allotment` per GPU (each server's share
    /// where `None`), scaled by `weight` (a packed pair splits one).
    pub fn held(
        &self,
        cluster: &Cluster,
        gpus: &[GpuId],
        allotment: Option<&Allotment>,
        weight: f64,
    ) -> Resources {
        let mut held = Resources::default();
        for &g in gpus {
            let each = allotment
                .copied()
                .unwrap_or(self.shares[cluster.node_of(g).0 as usize]);
            held.cpus += weight * each.cpus;
            held.memory_gb += weight * each.memory_gb;
        }
        held
    }

    /// Charges (`sign` 1) or refunds (`sign` -1) `allotment` (or each server's share, when `None`),
    /// scaled by `weight` (a packed pair splits one), for every GPU of `gpus`.
    pub fn charge(
        &mut self,
        cluster: &Cluster,
        gpus: &[GpuId],
        allotment: Option<&Allotment>,
        weight: f64,
        sign: f64,
    ) {
        let mut generous = false;
        for &g in gpus {
            let n = cluster.node_of(g).0 as usize;
            let share = self.shares[n];
            let each = allotment.copied().unwrap_or(share);
            generous |= allotment.is_some() && each.exceeds(&share);
            self.cpus[n] += sign * weight * each.cpus;
            self.memory_gb[n] += sign * weight * each.memory_gb;
            self.total.0 += sign * weight * each.cpus;
            self.total.1 += sign * weight * each.memory_gb;
            // Refunds in another order than the charges can leave a rounding residue below zero.
            if self.cpus[n].abs() < EPSILON {
                self.cpus[n] = 0.0;
            }
            if self.memory_gb[n].abs() < EPSILON {
                self.memory_gb[n] = 0.0;
            }
        }
        if generous && !gpus.is_empty() {
            if sign > 0.0 {
                self.generous += 1;
            } else {
                self.generous -= 1;
            }
        }
    }

    /// How many more GPUs of a gang at `allotment` per GPU `node` can feed, at most `free_gpus`.
    pub fn room(
        &self,
        cluster: &Cluster,
        node: NodeId,
        allotment: &Allotment,
        free_gpus: u32,
    ) -> u32 {
        let capacity = cluster.node(node);
        let n = node.0 as usize;
        let left_cpus = f64::from(capacity.cpus) - self.cpus[n];
        free_gpus.min(allotment.gpus_fed(left_cpus, capacity.memory_gb - self.memory_gb[n]))
    }

    /// The free GPUs a gang at `allotment` may be placed on: those its servers can feed, and only on
    /// the allotment's server when it names one. `None`: all of `free` (nothing to hide).
    pub fn usable(
        &self,
        cluster: &Cluster,
        free: &FreeGpus,
        allotment: Option<&Allotment>,
    ) -> Option<FreeGpus> {
        let share_only =
            allotment.is_none_or(|a| a.server.is_none() && self.within_shares(cluster, a));
        if share_only && self.generous == 0 {
            return None;
        }
        // Hide the highest free GPUs beyond what each server can feed.
        free.keeping(cluster, |id, available| match allotment {
            Some(a) if a.server.is_some_and(|s| s != id) => 0,
            Some(a) => self.room(cluster, id, a, available),
            None => self.room(cluster, id, &Allotment::share(cluster.node(id)), available),
        })
    }

    /// Whether `allotment` is within every server's share, so that a ledger with no generous run feeds
    /// every free GPU.
    fn within_shares(&self, cluster: &Cluster, allotment: &Allotment) -> bool {
        cluster
            .nodes()
            .iter()
            .all(|node| !allotment.exceeds(&Allotment::share(node)))
    }

    /// The first server over its CPUs or memory, with what it holds, if any (an invariant's check).
    pub fn overcommitted(&self, cluster: &Cluster) -> Option<(NodeId, f64, f64)> {
        cluster.nodes().iter().enumerate().find_map(|(n, node)| {
            let over = self.cpus[n] > f64::from(node.cpus) + EPSILON * 10.0
                || self.memory_gb[n] > node.memory_gb + EPSILON * 10.0;
            over.then_some((NodeId(n as u32), self.cpus[n], self.memory_gb[n]))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::GpuTypeId;

    fn cluster() -> Cluster {
        Cluster::from_nodes([("v100", 8, 24, 500.0), ("v100", 8, 24, 500.0)])
    }

    #[test]
    fn proportional_gangs_see_every_free_gpu() {
        let cluster = cluster();
        let mut ledger = Ledger::new(&cluster);
        let free = FreeGpus::new(&cluster);
        ledger.charge(&cluster, &[GpuId(0), GpuId(1)], None, 1.0, 1.0);
        assert!(ledger.usable(&cluster, &free, None).is_none());
        assert_eq!(ledger.cpus_used(NodeId(0)), 6.0);
    }

    #[test]
    fn a_hungry_gang_hides_gpus_its_server_cannot_feed() {
        let cluster = cluster();
        let mut ledger = Ledger::new(&cluster);
        let mut free = FreeGpus::new(&cluster);
        // One GPU of server 0 with 20 CPUs: 4 CPUs left there.
        free.take(&cluster, &[GpuId(0)]);
        ledger.charge(
            &cluster,
            &[GpuId(0)],
            Some(&Allotment::new(20.0, 100.0)),
            1.0,
            1.0,
        );
        let hungry = Allotment::new(2.0, 10.0);
        let view = ledger.usable(&cluster, &free, Some(&hungry)).unwrap();
        assert_eq!(view.node_free(NodeId(0)), 2);
        assert_eq!(view.node_free(NodeId(1)), 8);
        // Even proportional gangs now see only what the server can feed: 4 CPUs = 1 GPU at 3.
        let view = ledger.usable(&cluster, &free, None).unwrap();
        assert_eq!(view.node_free(NodeId(0)), 1);
        // Pinned to server 1: server 0 disappears.
        let view = ledger
            .usable(&cluster, &free, Some(&hungry.on(NodeId(1))))
            .unwrap();
        assert_eq!(view.node_free(NodeId(0)), 0);
        assert_eq!(view.free_of_type(GpuTypeId(0)), 8);
        assert!(ledger.overcommitted(&cluster).is_none());
        ledger.charge(
            &cluster,
            &[GpuId(1)],
            Some(&Allotment::new(5.0, 1.0)),
            1.0,
            1.0,
        );
        assert_eq!(ledger.overcommitted(&cluster).map(|o| o.0), Some(NodeId(0)));
    }
}
