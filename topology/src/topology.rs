//! A cluster's topology: the graph, plus what scoring needs precomputed from it.
//!
//! Bandwidth between two GPUs is the widest path between them (the path whose weakest link is
//! strongest). Inside a server, paths may not pass through another GPU (as `nvidia-smi topo -m` reports
//! peer-to-peer paths); across servers, a GPU's traffic leaves through its best path to a NIC, then the
//! NIC's link to the rack switch, and, between racks, the racks' uplinks.

use std::collections::BinaryHeap;

use petgraph::graph::NodeIndex;
use petgraph::visit::EdgeRef;
use serde::Serialize;

use crate::graph::{Graph, GraphBuilder, Link, LinkKind, Vertex};
use crate::presets::{Design, Preset};

/// One server, with its bandwidths precomputed.
#[derive(Clone, Debug, Serialize)]
pub struct Host {
    /// Its name (`<design>-<index>`).
    pub name: String,
    /// Index of its design in [`Topology::designs`].
    pub design: usize,
    /// Index of its first GPU in [`Topology::gpus`]; its GPUs are consecutive.
    pub first_gpu: usize,
    /// How many GPUs it has.
    pub num_gpus: usize,
    /// Index of its rack (racks hold [`ClusterSpec::hosts_per_rack`] hosts each, in order).
    pub rack: usize,
    /// GB/s between local GPUs i and j: `intra[i * num_gpus + j]`.
    pub intra: Vec<f64>,
    /// GB/s from each local GPU out of the server (to its best NIC and onto the rack switch).
    pub egress: Vec<f64>,
    /// The most direct link kind between local GPUs i and j, for display.
    pub path_kind: Vec<String>,
}

/// One GPU.
#[derive(Clone, Debug, Serialize)]
pub struct Gpu {
    /// Index of its server in [`Topology::hosts`].
    pub host: usize,
    /// Its index within its server, from 0.
    pub local: usize,
    /// Its model (`V100`, `A100`).
    pub model: String,
    /// Its memory, in GB.
    pub memory_gb: u32,
    /// Its vertex in [`Topology::graph`].
    #[serde(skip)]
    pub vertex: NodeIndex,
}

/// The whole cluster.
#[derive(Clone, Debug)]
pub struct Topology {
    /// The hardware graph, with one spine switch over every rack's switch.
    pub graph: Graph,
    /// The server designs in use; hosts refer to them by index.
    pub designs: Vec<Design>,
    /// Every server, numbered from 0 in the spec's order.
    pub hosts: Vec<Host>,
    /// Every GPU, numbered densely server by server (the cluster's GPU ids).
    pub gpus: Vec<Gpu>,
    /// GB/s of each rack's uplink to the spine.
    pub rack_uplink: Vec<f64>,
}

/// Most GPUs a cluster may have: every GPU costs per-GPU state in the graph, the simulator and the control
/// plane, so a bound keeps a typo (`count = 1000000000000`) from exhausting memory.
pub const MAX_CLUSTER_GPUS: usize = 1 << 20;

/// Builds a cluster of servers under racks.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// (server design, number of servers), in order.
    pub groups: Vec<(Design, usize)>,
    /// Servers under each top-of-rack switch (a new rack starts every this many servers).
    pub hosts_per_rack: usize,
    /// Rack uplink bandwidth as a multiple of one server's NIC bandwidth (oversubscription shows here).
    pub uplink_factor: f64,
}

impl ClusterSpec {
    /// One server of `preset`, alone in its rack.
    pub fn single(preset: Preset) -> Self {
        ClusterSpec {
            groups: vec![(preset.design(), 1)],
            hosts_per_rack: 1,
            uplink_factor: 1.0,
        }
    }

    /// `hosts` servers of `preset`, `hosts_per_rack` to a rack (at least 1), with rack uplinks 4 times
    /// a server's NIC bandwidth.
    pub fn of(preset: Preset, hosts: usize, hosts_per_rack: usize) -> Self {
        ClusterSpec {
            groups: vec![(preset.design(), hosts)],
            hosts_per_rack: hosts_per_rack.max(1),
            uplink_factor: 4.0,
        }
    }

    /// GPUs in the cluster, or `None` when the count overflows.
    pub fn num_gpus(&self) -> Option<usize> {
        self.groups
            .iter()
            .try_fold(0usize, |total, (design, count)| {
                total.checked_add(count.checked_mul(design.gpus() as usize)?)
            })
    }

    /// Checks that the cluster can be built: at most [`MAX_CLUSTER_GPUS`] GPUs. [`ClusterSpec::build`]
    /// of a spec that fails this would exhaust memory.
    pub fn check(&self) -> Result<(), String> {
        match self.num_gpus() {
            Some(n) if n <= MAX_CLUSTER_GPUS => Ok(()),
            Some(n) => Err(format!(
                "the cluster has {n} GPUs; at most {MAX_CLUSTER_GPUS} are supported"
            )),
            None => Err(format!(
                "the cluster's GPU count overflows; at most {MAX_CLUSTER_GPUS} are supported"
            )),
        }
    }

    /// Builds the graph and precomputes what scoring needs. The spec must pass [`ClusterSpec::check`].
    pub fn build(&self) -> Topology {
        let mut b = GraphBuilder::default();
        let spine = b.vertex(Vertex::NetworkSwitch {
            name: "spine".into(),
            level: 1,
        });
        let mut hosts = Vec::new();
        let mut gpus = Vec::new();
        let mut rack_uplink: Vec<f64> = Vec::new();
        let mut rack_switch = None;
        let per_rack = self.hosts_per_rack.max(1);
        let mut designs: Vec<Design> = Vec::new();
        for (design, count) in &self.groups {
            let design_index = match designs.iter().position(|d| d == design) {
                Some(i) => i,
                None => {
                    designs.push(design.clone());
                    designs.len() - 1
                }
            };
            for _ in 0..*count {
                let h = hosts.len();
                if h % per_rack == 0 {
                    let r = rack_uplink.len();
                    let switch = b.vertex(Vertex::NetworkSwitch {
                        name: format!("rack{r}"),
                        level: 0,
                    });
                    let uplink = design.nic_gbps * self.uplink_factor;
                    b.link(
                        switch,
                        spine,
                        Link::with_bandwidth(design.nic_kind(), uplink),
                    );
                    rack_uplink.push(uplink);
                    rack_switch = Some(switch);
                }
                let rack_switch = rack_switch.expect("a rack exists");
                let name = format!("{}-{h}", design.name);
                let parts = design.add_host(&mut b, h, &name);
                for &nic in &parts.nics {
                    b.link(
                        nic,
                        rack_switch,
                        Link::with_bandwidth(design.nic_kind(), design.nic_gbps),
                    );
                }
                let first_gpu = gpus.len();
                for (local, &vertex) in parts.gpus.iter().enumerate() {
                    gpus.push(Gpu {
                        host: h,
                        local,
                        model: design.gpu_model.clone(),
                        memory_gb: design.gpu_memory_gb,
                        vertex,
                    });
                }
                hosts.push(Host {
                    name,
                    design: design_index,
                    first_gpu,
                    num_gpus: parts.gpus.len(),
                    rack: rack_uplink.len() - 1,
                    intra: Vec::new(),
                    egress: Vec::new(),
                    path_kind: Vec::new(),
                });
            }
        }
        let mut topology = Topology {
            designs,
            graph: b.graph,
            hosts,
            gpus,
            rack_uplink,
        };
        topology.precompute();
        topology
    }
}

impl Topology {
    /// Fills each host's bandwidth matrix and egress bandwidths from the graph.
    fn precompute(&mut self) {
        for h in 0..self.hosts.len() {
            let host = &self.hosts[h];
            let local: Vec<NodeIndex> = (0..host.num_gpus)
                .map(|i| self.gpus[host.first_gpu + i].vertex)
                .collect();
            let n = local.len();
            let mut intra = vec![0.0; n * n];
            let mut path_kind = vec![String::new(); n * n];
            let mut egress = vec![0.0; n];
            for i in 0..n {
                let widest = widest_paths(&self.graph, local[i], h);
                for j in 0..n {
                    intra[i * n + j] = if i == j {
                        f64::INFINITY
                    } else {
                        widest[local[j].index()]
                    };
                    path_kind[i * n + j] = if i == j {
                        "X".into()
                    } else {
                        self.path_code(local[i], local[j])
                    };
                }
                egress[i] = self
                    .graph
                    .node_indices()
                    .filter(|v| matches!(self.graph[*v], Vertex::Nic { host, .. } if host == h))
                    .map(|nic| {
                        let uplink = self
                            .graph
                            .edges(nic)
                            .filter(|e| {
                                matches!(self.graph[e.target()], Vertex::NetworkSwitch { .. })
                                    || matches!(
                                        self.graph[e.source()],
                                        Vertex::NetworkSwitch { .. }
                                    )
                            })
                            .map(|e| e.weight().bandwidth_gbps)
                            .fold(0.0, f64::max);
                        widest[nic.index()].min(uplink)
                    })
                    .fold(0.0, f64::max);
            }
            let host = &mut self.hosts[h];
            host.intra = intra;
            host.egress = egress;
            host.path_kind = path_kind;
        }
    }

    /// `nvidia-smi topo -m`'s code for the path between two GPUs of one host: NV# for a direct NVLink
    /// (or through an NVSwitch), PIX for one PCIe switch, PHB/NODE for one socket, SYS across sockets.
    fn path_code(&self, a: NodeIndex, b: NodeIndex) -> String {
        let direct = self
            .graph
            .edges_connecting(a, b)
            .next()
            .map(|e| e.weight().kind);
        if let Some(kind @ LinkKind::NvLink { .. }) = direct {
            return kind.short();
        }
        let neighbours = |v: NodeIndex| self.graph.neighbors(v).collect::<Vec<_>>();
        for shared in neighbours(a)
            .into_iter()
            .filter(|x| neighbours(b).contains(x))
        {
            match self.graph[shared] {
                Vertex::NvSwitch { .. } => {
                    if let Some(e) = self.graph.edges_connecting(a, shared).next() {
                        return e.weight().kind.short();
                    }
                }
                Vertex::PcieSwitch { .. } => return "PIX".into(),
                _ => {}
            }
        }
        let socket_of = |v: NodeIndex| {
            neighbours(v)
                .into_iter()
                .filter(|s| matches!(self.graph[*s], Vertex::PcieSwitch { .. }))
                .flat_map(neighbours)
                .find(|s| matches!(self.graph[*s], Vertex::Socket { .. }))
        };
        if socket_of(a).is_some() && socket_of(a) == socket_of(b) {
            "NODE".into()
        } else {
            "SYS".into()
        }
    }

    /// The design of host `h`.
    pub fn design_of(&self, h: usize) -> &Design {
        &self.designs[self.hosts[h].design]
    }

    /// GPUs in the cluster.
    pub fn num_gpus(&self) -> usize {
        self.gpus.len()
    }

    /// GB/s between two GPUs (infinite for a GPU with itself).
    pub fn pair_bandwidth(&self, a: usize, b: usize) -> f64 {
        let (ga, gb) = (&self.gpus[a], &self.gpus[b]);
        if ga.host == gb.host {
            let host = &self.hosts[ga.host];
            return host.intra[ga.local * host.num_gpus + gb.local];
        }
        let (ha, hb) = (&self.hosts[ga.host], &self.hosts[gb.host]);
        let mut bw = ha.egress[ga.local].min(hb.egress[gb.local]);
        if ha.rack != hb.rack {
            bw = bw
                .min(self.rack_uplink[ha.rack])
                .min(self.rack_uplink[hb.rack]);
        }
        bw
    }

    /// The pairwise bandwidth matrix of a set of GPUs (GB/s), row-major.
    pub fn bandwidth_matrix(&self, gpus: &[usize]) -> Vec<f64> {
        gpus.iter()
            .flat_map(|&a| gpus.iter().map(move |&b| self.pair_bandwidth(a, b)))
            .collect()
    }

    /// Effective all-reduce bandwidth of a set (GB/s): the weakest link of the best ring through it, as a
    /// ring all-reduce (NCCL's usual algorithm inside a server) runs at its slowest hop. Sets larger than
    /// [`RING_LIMIT`] span servers, where the network is the bottleneck and the tree bound is used.
    /// Infinite for a single GPU.
    pub fn set_bandwidth(&self, gpus: &[usize]) -> f64 {
        self.set_quality(gpus).0
    }

    /// (ring bottleneck, tree bottleneck) of a set, in GB/s. The tree bound breaks ties between sets
    /// whose rings are equally fast (a set with more fast links is better for tree all-reduce).
    pub fn set_quality(&self, gpus: &[usize]) -> (f64, f64) {
        let n = gpus.len();
        if n < 2 {
            return (f64::INFINITY, f64::INFINITY);
        }
        if n > RING_LIMIT {
            let bw = self.set_bandwidth_large(gpus);
            return (bw, bw);
        }
        let mut m = [[0.0f64; RING_LIMIT]; RING_LIMIT];
        for i in 0..n {
            for j in 0..n {
                m[i][j] = self.pair_bandwidth(gpus[i], gpus[j]);
            }
        }
        let tree = tree_bottleneck(&m, n);
        let ring = if n == 2 {
            m[0][1]
        } else {
            ring_bottleneck(&m, n, tree)
        };
        (ring, tree)
    }

    fn set_bandwidth_large(&self, gpus: &[usize]) -> f64 {
        // Large gangs span servers: the tree's weakest hop is the weakest server's egress (or a rack
        // uplink), since inside a server links are faster than the network.
        let mut bw = f64::INFINITY;
        let mut racks = std::collections::BTreeSet::new();
        for &g in gpus {
            let gpu = &self.gpus[g];
            bw = bw.min(self.hosts[gpu.host].egress[gpu.local]);
            racks.insert(self.hosts[gpu.host].rack);
        }
        if racks.len() > 1 {
            for r in racks {
                bw = bw.min(self.rack_uplink[r]);
            }
        }
        bw
    }
}

/// Largest set whose ring is searched exactly.
pub const RING_LIMIT: usize = 12;

/// Weakest link of the maximum spanning tree (Prim's algorithm).
fn tree_bottleneck(m: &[[f64; RING_LIMIT]; RING_LIMIT], n: usize) -> f64 {
    let mut in_tree = [false; RING_LIMIT];
    let mut best = [0.0f64; RING_LIMIT];
    in_tree[0] = true;
    best[1..n].copy_from_slice(&m[0][1..n]);
    let mut bottleneck = f64::INFINITY;
    for _ in 1..n {
        let mut pick = 0;
        let mut value = -1.0;
        for j in 1..n {
            if !in_tree[j] && best[j] > value {
                pick = j;
                value = best[j];
            }
        }
        in_tree[pick] = true;
        bottleneck = bottleneck.min(value);
        for j in 1..n {
            if !in_tree[j] {
                best[j] = best[j].max(m[pick][j]);
            }
        }
    }
    bottleneck
}

/// Weakest link of the best Hamiltonian cycle, by depth-first search with branch and bound. `upper` (the
/// tree bound) caps the answer, so the search stops as soon as a ring reaches it.
fn ring_bottleneck(m: &[[f64; RING_LIMIT]; RING_LIMIT], n: usize, upper: f64) -> f64 {
    struct Search<'a> {
        m: &'a [[f64; RING_LIMIT]; RING_LIMIT],
        n: usize,
        upper: f64,
        best: f64,
    }
    impl Search<'_> {
        fn extend(&mut self, last: usize, visited: u32, depth: usize, width: f64) {
            if self.best >= self.upper {
                return;
            }
            if depth == self.n {
                self.best = self.best.max(width.min(self.m[last][0]));
                return;
            }
            for next in 1..self.n {
                if visited & (1 << next) == 0 {
                    let w = width.min(self.m[last][next]);
                    if w > self.best {
                        self.extend(next, visited | (1 << next), depth + 1, w);
                    }
                }
            }
        }
    }
    let mut search = Search {
        m,
        n,
        upper,
        best: 0.0,
    };
    search.extend(0, 1, 1, f64::INFINITY);
    search.best
}

/// Widest-path bandwidth from `from` to every vertex, over host `h`'s vertices and the network, never
/// passing through another GPU (peer-to-peer paths do not route through GPUs).
fn widest_paths(graph: &Graph, from: NodeIndex, h: usize) -> Vec<f64> {
    #[derive(PartialEq)]
    struct Entry(f64, NodeIndex);
    impl Eq for Entry {}
    impl PartialOrd for Entry {
        fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Entry {
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
        }
    }
    let in_host = |v: &Vertex| match v {
        Vertex::Socket { host, .. }
        | Vertex::PcieSwitch { host, .. }
        | Vertex::Gpu { host, .. }
        | Vertex::NvSwitch { host, .. }
        | Vertex::Nic { host, .. } => *host == h,
        Vertex::Host { .. } | Vertex::NetworkSwitch { .. } => false,
    };
    let mut width = vec![0.0f64; graph.node_count()];
    width[from.index()] = f64::INFINITY;
    let mut heap = BinaryHeap::from([Entry(f64::INFINITY, from)]);
    while let Some(Entry(w, v)) = heap.pop() {
        if w < width[v.index()] {
            continue;
        }
        // Paths end at a GPU other than the source, and never leave the host.
        if v != from && matches!(graph[v], Vertex::Gpu { .. }) {
            continue;
        }
        for e in graph.edges(v) {
            let next = if e.source() == v {
                e.target()
            } else {
                e.source()
            };
            if e.weight().kind == LinkKind::Membership || !in_host(&graph[next]) {
                continue;
            }
            let through = w.min(e.weight().bandwidth_gbps);
            if through > width[next.index()] {
                width[next.index()] = through;
                heap.push(Entry(through, next));
            }
        }
    }
    width
}
