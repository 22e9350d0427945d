//! Topology-aware placement: the simulator's nodes are the servers of a `gangway_topology` graph, sets
//! are scored on it, and the score slows jobs down (see `throughput::locality`).

use std::sync::Arc;

use gangway_topology::placement::{FreeMasks, PlacementSearch, Strategy};
use gangway_topology::topology::Topology;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

use super::{FreeGpus, Locality, PlaceRequest, Placed, Placer, Unplaced, no_capacity};
use crate::cluster::{Cluster, GpuId, GpuSet, NodeId};

/// How a topology-aware placer chooses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PlacementMode {
    /// The best set, never spreading a gang that fits in one server (YARN-CS).
    Consolidate,
    /// The best set, spreading when no server has room.
    Relaxed,
    /// Consolidate until the job has waited this many seconds (the Philly study's guideline).
    RelaxAfter(f64),
    /// Consolidate only jobs whose model is placement-sensitive (Tiresias); relax the others.
    SensitiveOnly,
    /// Any free GPUs of the type, at random (a baseline that ignores locality).
    Random,
}

impl std::str::FromStr for PlacementMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "consolidate" => PlacementMode::Consolidate,
            "relaxed" => PlacementMode::Relaxed,
            "sensitive" => PlacementMode::SensitiveOnly,
            "random" => PlacementMode::Random,
            _ => match s.strip_prefix("relax-after:").map(str::parse::<f64>) {
                Some(Ok(seconds)) if seconds >= 0.0 => PlacementMode::RelaxAfter(seconds),
                _ => {
                    return Err(format!(
                        "unknown placement `{s}`; known: consolidate, relaxed, relax-after:SECONDS, sensitive, random"
                    ));
                }
            },
        })
    }
}

/// Places gangs on a topology whose servers match the cluster's nodes one to one.
pub struct TopologyPlacer {
    topology: Arc<Topology>,
    search: PlacementSearch,
    mode: PlacementMode,
    rng: ChaCha8Rng,
    masks: FreeMasks,
}

/// Sensitivity above which `PlacementMode::SensitiveOnly` consolidates a job.
const SENSITIVE: f64 = 0.4;

impl TopologyPlacer {
    /// Fails, naming the first difference, if the topology's servers do not match the cluster's nodes.
    pub fn new(
        topology: Arc<Topology>,
        cluster: &Cluster,
        mode: PlacementMode,
        seed: u64,
    ) -> Result<Self, String> {
        if topology.hosts.len() != cluster.nodes().len() {
            return Err(format!(
                "the topology has {} servers but the cluster has {} nodes",
                topology.hosts.len(),
                cluster.nodes().len()
            ));
        }
        for (i, (host, node)) in topology.hosts.iter().zip(cluster.nodes()).enumerate() {
            if host.num_gpus > gangway_topology::placement::MAX_EXACT_GPUS {
                return Err(format!(
                    "server {i} has {} GPUs; topology-aware placement handles servers of up to {}",
                    host.num_gpus,
                    gangway_topology::placement::MAX_EXACT_GPUS
                ));
            }
            if host.num_gpus != node.gpus as usize {
                return Err(format!(
                    "server {i} has {} GPUs but node {i} has {}",
                    host.num_gpus, node.gpus
                ));
            }
        }
        Ok(TopologyPlacer {
            search: PlacementSearch::new(Arc::clone(&topology)),
            topology,
            mode,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x706c_6163_6521),
            masks: Vec::new(),
        })
    }

    fn strategy(&self, request: &PlaceRequest<'_>) -> Strategy {
        if request.consolidate {
            return Strategy::Consolidate;
        }
        match self.mode {
            PlacementMode::Consolidate => Strategy::Consolidate,
            PlacementMode::Relaxed | PlacementMode::Random => Strategy::Relaxed,
            PlacementMode::RelaxAfter(seconds) => Strategy::RelaxAfter(seconds),
            PlacementMode::SensitiveOnly if request.sensitivity >= SENSITIVE => {
                Strategy::Consolidate
            }
            PlacementMode::SensitiveOnly => Strategy::Relaxed,
        }
    }
}

impl Placer for TopologyPlacer {
    fn place(
        &mut self,
        cluster: &Cluster,
        free: &FreeGpus,
        request: &PlaceRequest<'_>,
    ) -> Result<Placed, Unplaced> {
        if let Some(why) = no_capacity(free, request) {
            return Err(why);
        }
        self.masks.clear();
        self.masks
            .extend(cluster.nodes().iter().enumerate().map(|(n, node)| {
                if node.gpu_type == request.gpu_type {
                    free.node_mask(NodeId(n as u32))
                } else {
                    0
                }
            }));
        let topology = Arc::clone(&self.topology);
        let to_sim = |g: usize| {
            let gpu = &topology.gpus[g];
            cluster.gpu_at(NodeId(gpu.host as u32), gpu.local as u32)
        };
        if self.mode == PlacementMode::Random {
            let mut candidates: Vec<usize> = Vec::new();
            for (h, &mask) in self.masks.iter().enumerate() {
                let first = topology.hosts[h].first_gpu;
                candidates.extend(
                    (0..64)
                        .filter(|b| mask & (1u64 << b) != 0)
                        .map(|b| first + b),
                );
            }
            for k in 0..request.gpus as usize {
                let pick = k + (self.rng.next_u64() % (candidates.len() - k) as u64) as usize;
                candidates.swap(k, pick);
            }
            candidates.truncate(request.gpus as usize);
            let gpus: GpuSet = candidates.iter().map(|&g| to_sim(g)).collect();
            let locality = Locality::new(self.search.score(&candidates));
            return Ok(Placed { gpus, locality });
        }
        let strategy = self.strategy(request);
        let Some(placement) =
            self.search
                .find(&self.masks, request.gpus as usize, strategy, request.waited)
        else {
            let (gpu_type, wanted) = (request.gpu_type, request.gpus);
            let free = free.free_of_type(gpu_type);
            // A search that may not spread the gang waits for one server; otherwise no set scored well
            // enough on the graph.
            return Err(if strategy == Strategy::Relaxed {
                Unplaced::Fragmented {
                    gpu_type,
                    wanted,
                    free,
                }
            } else {
                Unplaced::Consolidation {
                    gpu_type,
                    wanted,
                    free,
                }
            });
        };
        let gpus: GpuSet = placement.gpus.iter().map(|&g| to_sim(g)).collect();
        Ok(Placed {
            gpus,
            locality: Locality::new(placement.score),
        })
    }

    fn changes_with_time(&self) -> bool {
        // Only a wait relaxes locality.
        matches!(self.mode, PlacementMode::RelaxAfter(_))
    }

    /// The same placer on a copy of its random stream, its search's cache started afresh (it is
    /// memoization only).
    fn fork(&self) -> Option<Box<dyn Placer>> {
        Some(Box::new(TopologyPlacer {
            search: PlacementSearch::new(Arc::clone(&self.topology)),
            topology: Arc::clone(&self.topology),
            mode: self.mode,
            rng: self.rng.clone(),
            masks: Vec::new(),
        }))
    }

    fn locality(&mut self, cluster: &Cluster, gpus: &[GpuId]) -> Locality {
        let on_graph: Vec<usize> = gpus
            .iter()
            .map(|&g| {
                let host = cluster.node_of(g).0 as usize;
                self.topology.hosts[host].first_gpu + cluster.local_index(g) as usize
            })
            .collect();
        Locality::new(self.search.score(&on_graph))
    }
}
