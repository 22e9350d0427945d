//! Which GPUs are free, indexed so that a placer finds a fitting node in O(GPUs per node).

use gangway_topology::placement::full_mask;

use crate::cluster::{Cluster, GpuId, GpuTypeId, NodeId};

/// Free GPUs per node and per type. Every GPU is either free or held by exactly one job.
///
/// Nodes are kept in buckets by their free-GPU count (`buckets[type][count]`), with each node's position
/// remembered, so that taking or releasing a GPU moves its node between buckets in O(1).
#[derive(Clone, Debug)]
pub struct FreeGpus {
    /// Per GPU: is it free?
    free: Vec<bool>,
    /// Per node: how many of its GPUs are free.
    node_free: Vec<u32>,
    /// Per node: its free GPUs as a bit mask of local positions (nodes of up to 64 GPUs).
    node_mask: Vec<u64>,
    /// Per node: its index inside its bucket.
    slot: Vec<usize>,
    /// Per GPU type, per free count (1..=max GPUs per node): the nodes with exactly that many free.
    buckets: Vec<Vec<Vec<NodeId>>>,
    /// Per GPU type: free GPUs in total.
    type_free: Vec<u32>,
}

impl FreeGpus {
    /// Every GPU of `cluster` free.
    pub fn new(cluster: &Cluster) -> Self {
        let mut buckets = vec![Vec::new(); cluster.num_gpu_types()];
        for node in cluster.nodes() {
            let per_type: &mut Vec<Vec<NodeId>> = &mut buckets[node.gpu_type.0 as usize];
            if per_type.len() <= node.gpus as usize {
                per_type.resize(node.gpus as usize + 1, Vec::new());
            }
        }
        let mut slot = Vec::with_capacity(cluster.nodes().len());
        for (i, node) in cluster.nodes().iter().enumerate() {
            let bucket = &mut buckets[node.gpu_type.0 as usize][node.gpus as usize];
            slot.push(bucket.len());
            bucket.push(NodeId(i as u32));
        }
        FreeGpus {
            free: vec![true; cluster.num_gpus() as usize],
            node_free: cluster.nodes().iter().map(|n| n.gpus).collect(),
            node_mask: cluster
                .nodes()
                .iter()
                .map(|n| full_mask(n.gpus as usize))
                .collect(),
            slot,
            buckets,
            type_free: cluster.capacity().to_vec(),
        }
    }

    /// Free GPUs of type `t`, on all its nodes together.
    pub fn free_of_type(&self, t: GpuTypeId) -> u32 {
        self.type_free[t.0 as usize]
    }

    /// Free GPUs of each type, indexed by [`GpuTypeId`].
    pub fn free_per_type(&self) -> &[u32] {
        &self.type_free
    }

    /// Free GPUs on `node`.
    pub fn node_free(&self, node: NodeId) -> u32 {
        self.node_free[node.0 as usize]
    }

    /// A node's free GPUs as a bit mask of local positions.
    pub fn node_mask(&self, node: NodeId) -> u64 {
        self.node_mask[node.0 as usize]
    }

    /// Whether `gpu` is free: held by no job (nor, in the engine, out of service).
    pub fn is_free(&self, gpu: GpuId) -> bool {
        self.free[gpu.0 as usize]
    }

    /// Nodes of type `t` with exactly `count` free GPUs (`count >= 1`).
    pub fn nodes_with_exactly(&self, t: GpuTypeId, count: u32) -> &[NodeId] {
        self.buckets[t.0 as usize]
            .get(count as usize)
            .map_or(&[], Vec::as_slice)
    }

    /// The largest free count any node of type `t` can have.
    pub fn widest(&self, t: GpuTypeId) -> u32 {
        self.buckets[t.0 as usize].len().saturating_sub(1) as u32
    }

    /// The free GPUs of `node`, lowest id first.
    pub fn free_gpus_of<'a>(
        &'a self,
        cluster: &Cluster,
        node: NodeId,
    ) -> impl Iterator<Item = GpuId> + 'a {
        cluster
            .gpus_of(node)
            .filter(move |g| self.free[g.0 as usize])
    }

    /// A copy in which each node shows at most `keep(node, free there)` of its free GPUs (the lowest;
    /// the rest are hidden), or `None` when every node keeps all of them: the view a gang is placed on
    /// when its servers can feed only some of their free GPUs with CPUs and memory.
    pub fn keeping(
        &self,
        cluster: &Cluster,
        keep: impl Fn(NodeId, u32) -> u32,
    ) -> Option<FreeGpus> {
        let mut hidden = Vec::new();
        for n in 0..cluster.nodes().len() {
            let node = NodeId(n as u32);
            let available = self.node_free(node);
            if available > 0 {
                hidden.extend(
                    self.free_gpus_of(cluster, node)
                        .skip(keep(node, available) as usize),
                );
            }
        }
        if hidden.is_empty() {
            return None;
        }
        let mut view = self.clone();
        view.take(cluster, &hidden);
        Some(view)
    }

    /// Marks `gpus` as held. Panics if one is already held: that is a simulator bug, not bad input.
    pub fn take(&mut self, cluster: &Cluster, gpus: &[GpuId]) {
        for &gpu in gpus {
            assert!(self.free[gpu.0 as usize], "GPU {} allocated twice", gpu.0);
            self.free[gpu.0 as usize] = false;
            self.flip(cluster, gpu);
            self.adjust(cluster, cluster.node_of(gpu), false);
        }
    }

    /// Marks `gpus` as free again.
    pub fn release(&mut self, cluster: &Cluster, gpus: &[GpuId]) {
        for &gpu in gpus {
            assert!(
                !self.free[gpu.0 as usize],
                "GPU {} released while free",
                gpu.0
            );
            self.free[gpu.0 as usize] = true;
            self.flip(cluster, gpu);
            self.adjust(cluster, cluster.node_of(gpu), true);
        }
    }

    fn flip(&mut self, cluster: &Cluster, gpu: GpuId) {
        let local = cluster.local_index(gpu);
        if local < 64 {
            self.node_mask[cluster.node_of(gpu).0 as usize] ^= 1u64 << local;
        }
    }

    fn adjust(&mut self, cluster: &Cluster, node: NodeId, freed: bool) {
        let t = cluster.node(node).gpu_type.0 as usize;
        let n = node.0 as usize;
        let before = self.node_free[n];
        let after = if freed { before + 1 } else { before - 1 };
        if before > 0 {
            let bucket = &mut self.buckets[t][before as usize];
            let at = self.slot[n];
            bucket.swap_remove(at);
            if let Some(&moved) = bucket.get(at) {
                self.slot[moved.0 as usize] = at;
            }
        }
        if after > 0 {
            let bucket = &mut self.buckets[t][after as usize];
            self.slot[n] = bucket.len();
            bucket.push(node);
        }
        self.node_free[n] = after;
        if freed {
            self.type_free[t] += 1;
        } else {
            self.type_free[t] -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_takes_and_releases() {
        let cluster = Cluster::from_nodes([
            ("v100", 4, 12, 1.0),
            ("v100", 4, 12, 1.0),
            ("k80", 2, 6, 1.0),
        ]);
        let mut free = FreeGpus::new(&cluster);
        let v100 = GpuTypeId(0);
        assert_eq!(free.nodes_with_exactly(v100, 4).len(), 2);
        free.take(&cluster, &[GpuId(0), GpuId(1)]);
        assert_eq!(free.nodes_with_exactly(v100, 2), &[NodeId(0)]);
        assert_eq!(free.nodes_with_exactly(v100, 4), &[NodeId(1)]);
        assert_eq!(free.free_of_type(v100), 6);
        free.take(&cluster, &[GpuId(2), GpuId(3)]);
        assert!(free.nodes_with_exactly(v100, 2).is_empty());
        assert_eq!(free.node_free(NodeId(0)), 0);
        free.release(&cluster, &[GpuId(3)]);
        assert_eq!(free.nodes_with_exactly(v100, 1), &[NodeId(0)]);
        assert_eq!(free.free_per_type(), &[5, 2]);
        assert_eq!(free.node_mask(NodeId(0)), 0b1000);
        assert_eq!(free.node_mask(NodeId(1)), 0b1111);
        assert_eq!(free.widest(GpuTypeId(1)), 2);
    }

    #[test]
    #[should_panic(expected = "allocated twice")]
    fn double_allocation_is_caught() {
        let cluster = Cluster::from_nodes([("v100", 2, 6, 1.0)]);
        let mut free = FreeGpus::new(&cluster);
        free.take(&cluster, &[GpuId(0)]);
        free.take(&cluster, &[GpuId(0)]);
    }
}
