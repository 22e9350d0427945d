//! A sketch of the round's packing: what each server has left as the mechanism walks the grants, so
//! that it sizes CPUs and memory for the servers the gangs will run on. Gangs are placed on a scratch
//! copy of the GPUs in service by the engine's own placer (the round's
//! [`PlacementProbe`](crate::placement::PlacementProbe)), on the GPUs their servers can feed, as the
//! engine will place them; the sketch adds only what Synergy adds to placement: CPUs and memory.

use smallvec::SmallVec;

use crate::cluster::{Cluster, GpuId, NodeId};
use crate::placement::{PlaceRequest, Scratch};
use crate::resources::Allotment;

/// GPUs of a gang per server.
pub(super) type Spread = SmallVec<[(NodeId, u32); 4]>;

/// A gang sketched onto servers.
#[derive(Clone, Debug)]
pub(super) struct Sketched {
    /// Index of its grant.
    pub grant: usize,
    pub nodes: Spread,
    /// Per GPU; `None`: each server's own share.
    pub allotment: Option<Allotment>,
}

/// What the servers have left.
pub(super) struct Shadow<'a> {
    cluster: &'a Cluster,
    /// The GPUs in service, free or held, placed on by the engine's placer.
    gpus: Scratch<'a>,
    cpus: Vec<f64>,
    memory: Vec<f64>,
    pub sketched: Vec<Sketched>,
    /// Per server: the gangs sketched on it, in order.
    on_node: Vec<Vec<usize>>,
}

/// `wanted`, or the share where it asks for more than the share of either resource (Synergy's fallback
/// to proportional: all of the vector, not the part that is over).
pub(super) fn fair(wanted: Allotment, share: Allotment) -> Allotment {
    if wanted.exceeds(&share) {
        share
    } else {
        wanted
    }
}

impl<'a> Shadow<'a> {
    /// Every server with all its CPUs and memory, and the GPUs of `gpus` (a scratch of the round's
    /// probe: those in service).
    pub fn new(cluster: &'a Cluster, gpus: Scratch<'a>) -> Self {
        let nodes = cluster.nodes();
        Shadow {
            cluster,
            gpus,
            cpus: nodes.iter().map(|n| f64::from(n.cpus)).collect(),
            memory: nodes.iter().map(|n| n.memory_gb).collect(),
            sketched: Vec::new(),
            on_node: vec![Vec::new(); nodes.len()],
        }
    }

    /// Free GPUs in service on `node`: not held by a kept run nor sketched for a gang.
    pub fn free_on(&self, node: NodeId) -> u32 {
        self.gpus.free().node_free(node)
    }

    /// GPUs a run keeps, before any allotment is sized.
    pub fn hold(&mut self, gpus: &[GpuId]) {
        self.gpus.hold(gpus);
    }

    /// How many GPUs of a gang at `allotment` `node` can feed with CPUs and memory.
    fn feeds(&self, node: NodeId, allotment: &Allotment) -> u32 {
        feeds(&self.cpus, &self.memory, node, allotment)
    }

    /// Whether `nodes` (GPUs already counted as taken) can feed `allotment`.
    pub fn feeds_all(&self, nodes: &Spread, allotment: &Allotment) -> bool {
        nodes
            .iter()
            .all(|&(node, count)| self.feeds(node, allotment) >= count)
    }

    /// Places `request`'s gang at `allotment` as the engine will, on the free GPUs its servers can
    /// feed, and holds them; `None` when it would wait. `allotment` `None` counts GPUs only.
    pub fn find(
        &mut self,
        request: &PlaceRequest<'_>,
        allotment: Option<&Allotment>,
    ) -> Option<Spread> {
        let placed = match allotment {
            Some(a) => {
                let (cpus, memory) = (&self.cpus, &self.memory);
                self.gpus
                    .place_within(request, |node, free| free.min(feeds(cpus, memory, node, a)))
            }
            None => self.gpus.place(request),
        };
        Some(spread_of(self.cluster, &placed.ok()?.gpus))
    }

    /// What a gang at `allotment` takes per GPU on `node`.
    fn amount(&self, node: NodeId, allotment: Option<&Allotment>) -> Allotment {
        allotment
            .copied()
            .unwrap_or_else(|| Allotment::share(self.cluster.node(node)))
    }

    /// Sketches grant `grant`'s gang on `nodes` (whose GPUs are held: kept, or found) at `allotment`
    /// (`None`: each server's share).
    pub fn commit(&mut self, grant: usize, nodes: Spread, allotment: Option<Allotment>) {
        let k = self.sketched.len();
        for &(node, count) in &nodes {
            let n = node.0 as usize;
            let each = self.amount(node, allotment.as_ref());
            self.cpus[n] -= f64::from(count) * each.cpus;
            self.memory[n] -= f64::from(count) * each.memory_gb;
            self.on_node[n].push(k);
        }
        self.sketched.push(Sketched {
            grant,
            nodes,
            allotment,
        });
    }

    /// Synergy's peer adjustment: gangs on `node` holding more than their share give it back, until
    /// `gpus` more GPUs at `allotment` fit there. Peers that span fewer servers go first, then those
    /// with the most CPUs per GPU, then the most memory per GPU.
    /// A peer's cut never goes below its servers' shares, so that after every peer on a server is cut,
    /// a gang at that server's share fits (`allotment` `None`).
    pub fn cut_peers(&mut self, node: NodeId, gpus: u32, allotment: Option<&Allotment>) {
        let wanted = self.amount(node, allotment);
        let per_gpu = |s: &Sketched| s.allotment.unwrap_or(Allotment::new(0.0, 0.0));
        let mut peers = self.on_node[node.0 as usize].clone();
        peers.sort_by(|&a, &b| {
            let (a, b) = (&self.sketched[a], &self.sketched[b]);
            a.nodes
                .len()
                .cmp(&b.nodes.len())
                .then(per_gpu(b).cpus.total_cmp(&per_gpu(a).cpus))
                .then(per_gpu(b).memory_gb.total_cmp(&per_gpu(a).memory_gb))
        });
        for k in peers {
            if self.feeds(node, &wanted) >= gpus {
                return;
            }
            let peer = self.sketched[k].clone();
            let Some(held) = peer.allotment else {
                continue;
            };
            // Cut to its servers' shares where it holds more than any of them.
            let over = peer
                .nodes
                .iter()
                .any(|&(n, _)| held.exceeds(&Allotment::share(self.cluster.node(n))));
            if !over {
                continue;
            }
            for &(n, count) in &peer.nodes {
                let share = Allotment::share(self.cluster.node(n));
                let i = n.0 as usize;
                self.cpus[i] += f64::from(count) * (held.cpus - share.cpus);
                self.memory[i] += f64::from(count) * (held.memory_gb - share.memory_gb);
            }
            self.sketched[k].allotment = None;
        }
    }
}

/// How many GPUs of a gang at `allotment` `node` can feed with `cpus` and `memory` left per server.
fn feeds(cpus: &[f64], memory: &[f64], node: NodeId, allotment: &Allotment) -> u32 {
    let n = node.0 as usize;
    allotment.gpus_fed(cpus[n], memory[n])
}

/// GPUs per server of a gang on `gpus`, servers in id order.
pub(super) fn spread_of(cluster: &Cluster, gpus: &[GpuId]) -> Spread {
    let mut nodes: SmallVec<[u32; 8]> = gpus.iter().map(|&g| cluster.node_of(g).0).collect();
    nodes.sort_unstable();
    let mut spread = Spread::new();
    for n in nodes {
        match spread.last_mut() {
            Some((last, count)) if last.0 == n => *count += 1,
            _ => spread.push((NodeId(n), 1)),
        }
    }
    spread
}
