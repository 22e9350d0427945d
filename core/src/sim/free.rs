//! Which GPUs are free, indexed so that a placer finds a fitting node in O(log nodes).

use std::collections::BTreeSet;

use crate::cluster::{Cluster, GpuId, GpuTypeId, NodeId};

/// Free GPUs per node and per type. Every GPU is either free or held by exactly one job.
#[derive(Clone, Debug)]
pub struct FreeGpus {
    /// Per GPU: is it free?
    free: Vec<bool>,
    /// Per node: how many of its GPUs are free.
    node_free: Vec<u32>,
    /// Per GPU type: (free GPUs, node) for nodes with at least one free GPU.
    by_type: Vec<BTreeSet<(u32, NodeId)>>,
    /// Per GPU type: free GPUs in total.
    type_free: Vec<u32>,
}

impl FreeGpus {
    pub fn new(cluster: &Cluster) -> Self {
        let mut by_type = vec![BTreeSet::new(); cluster.num_gpu_types()];
        for (i, node) in cluster.nodes().iter().enumerate() {
            by_type[node.gpu_type.0 as usize].insert((node.gpus, NodeId(i as u32)));
        }
        FreeGpus {
            free: vec![true; cluster.num_gpus() as usize],
            node_free: cluster.nodes().iter().map(|n| n.gpus).collect(),
            by_type,
            type_free: cluster.capacity().to_vec(),
        }
    }

    pub fn free_of_type(&self, t: GpuTypeId) -> u32 {
        self.type_free[t.0 as usize]
    }

    pub fn free_per_type(&self) -> &[u32] {
        &self.type_free
    }

    pub fn node_free(&self, node: NodeId) -> u32 {
        self.node_free[node.0 as usize]
    }

    pub fn is_free(&self, gpu: GpuId) -> bool {
        self.free[gpu.0 as usize]
    }

    /// Nodes of type `t` with free GPUs, ordered by (free count, node id).
    pub fn nodes_with_free(&self, t: GpuTypeId) -> &BTreeSet<(u32, NodeId)> {
        &self.by_type[t.0 as usize]
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

    /// Marks `gpus` as held. Panics if one is already held: that is a simulator bug, not bad input.
    pub fn take(&mut self, cluster: &Cluster, gpus: &[GpuId]) {
        for &gpu in gpus {
            assert!(self.free[gpu.0 as usize], "GPU {} allocated twice", gpu.0);
            self.free[gpu.0 as usize] = false;
            self.adjust(cluster, cluster.node_of(gpu), -1);
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
            self.adjust(cluster, cluster.node_of(gpu), 1);
        }
    }

    fn adjust(&mut self, cluster: &Cluster, node: NodeId, delta: i32) {
        let t = cluster.node(node).gpu_type.0 as usize;
        let before = self.node_free[node.0 as usize];
        let after = before
            .checked_add_signed(delta)
            .expect("free count underflow");
        if before > 0 {
            self.by_type[t].remove(&(before, node));
        }
        if after > 0 {
            self.by_type[t].insert((after, node));
        }
        self.node_free[node.0 as usize] = after;
        self.type_free[t] = self.type_free[t]
            .checked_add_signed(delta)
            .expect("type count underflow");
    }
}
