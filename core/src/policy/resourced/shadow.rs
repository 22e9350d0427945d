//! A sketch of the round's packing: what each server has left as the mechanism walks the grants, so
//! that it sizes CPUs and memory for the servers the gangs will run on.

use smallvec::SmallVec;

use crate::cluster::{Cluster, GpuTypeId, NodeId};
use crate::resources::{Allotment, EPSILON};

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
    gpus: Vec<u32>,
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
    pub fn new(cluster: &'a Cluster) -> Self {
        let nodes = cluster.nodes();
        Shadow {
            cluster,
            gpus: nodes.iter().map(|n| n.gpus).collect(),
            cpus: nodes.iter().map(|n| f64::from(n.cpus)).collect(),
            memory: nodes.iter().map(|n| n.memory_gb).collect(),
            sketched: Vec::new(),
            on_node: vec![Vec::new(); nodes.len()],
        }
    }

    /// GPUs a run keeps, before any allotment is sized.
    pub fn hold_gpus(&mut self, nodes: &Spread) {
        for &(node, count) in nodes {
            let left = &mut self.gpus[node.0 as usize];
            *left = left.saturating_sub(count);
        }
    }

    /// How many GPUs of a gang at `allotment` `node` can feed with CPUs and memory.
    fn feeds(&self, node: NodeId, allotment: &Allotment) -> u32 {
        let n = node.0 as usize;
        let fit = |left: f64, each: f64| {
            if each <= EPSILON {
                u32::MAX
            } else {
                ((left + EPSILON) / each)
                    .floor()
                    .clamp(0.0, f64::from(u32::MAX)) as u32
            }
        };
        fit(self.cpus[n], allotment.cpus).min(fit(self.memory[n], allotment.memory_gb))
    }

    /// Whether `nodes` (GPUs already counted as taken) can feed `allotment`.
    pub fn feeds_all(&self, nodes: &Spread, allotment: &Allotment) -> bool {
        nodes
            .iter()
            .all(|&(node, count)| self.feeds(node, allotment) >= count)
    }

    /// Where `gpus` GPUs of `gpu_type` at `allotment` would go, as the engine's best-fit placer puts
    /// them: the server with the fewest free GPUs that holds the gang, else spread over the emptiest.
    /// `allotment` `None` counts GPUs only.
    pub fn find(
        &self,
        gpu_type: GpuTypeId,
        gpus: u32,
        allotment: Option<&Allotment>,
    ) -> Option<Spread> {
        let room = |node: NodeId| {
            let free = self.gpus[node.0 as usize];
            allotment.map_or(free, |a| free.min(self.feeds(node, a)))
        };
        let of_type = || {
            (0..self.cluster.nodes().len() as u32)
                .map(NodeId)
                .filter(|&n| self.cluster.node(n).gpu_type == gpu_type)
        };
        let single = of_type()
            .filter(|&n| room(n) >= gpus)
            .min_by_key(|&n| (self.gpus[n.0 as usize], n));
        if let Some(node) = single {
            return Some(SmallVec::from_slice(&[(node, gpus)]));
        }
        let mut nodes: Vec<NodeId> = of_type().filter(|&n| room(n) > 0).collect();
        nodes.sort_by_key(|&n| (std::cmp::Reverse(room(n)), n));
        let mut spread = Spread::new();
        let mut left = gpus;
        for node in nodes {
            let take = room(node).min(left);
            spread.push((node, take));
            left -= take;
            if left == 0 {
                return Some(spread);
            }
        }
        None
    }

    /// What a gang at `allotment` takes per GPU on `node`.
    fn amount(&self, node: NodeId, allotment: Option<&Allotment>) -> Allotment {
        allotment
            .copied()
            .unwrap_or_else(|| Allotment::share(self.cluster.node(node)))
    }

    /// Sketches grant `grant`'s gang on `nodes` at `allotment` (`None`: each server's share);
    /// `reserved`: its GPUs are already held.
    pub fn commit(
        &mut self,
        grant: usize,
        nodes: Spread,
        allotment: Option<Allotment>,
        reserved: bool,
    ) {
        let k = self.sketched.len();
        for &(node, count) in &nodes {
            let n = node.0 as usize;
            if !reserved {
                self.gpus[n] = self.gpus[n].saturating_sub(count);
            }
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
