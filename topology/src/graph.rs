//! The hardware graph: vertices are hosts, CPU sockets, PCIe switches, GPUs, NVSwitches, NICs and network
//! switches; edges are links with a kind, a bandwidth and a latency.

use petgraph::graph::{NodeIndex, UnGraph};
use serde::{Deserialize, Serialize};

/// What a vertex is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Vertex {
    /// A server; its other vertices refer to it by its index among the hosts.
    Host {
        /// Its name (`<design>-<index>`).
        name: String,
    },
    /// A CPU socket (one NUMA node).
    Socket {
        /// Its server's index.
        host: usize,
        /// Its number in its server, from 0.
        index: u32,
    },
    /// A PCIe switch, under a socket.
    PcieSwitch {
        /// Its server's index.
        host: usize,
        /// Its number in its server, from 0.
        index: u32,
    },
    /// A GPU, under a PCIe switch.
    Gpu {
        /// Its server's index.
        host: usize,
        /// Its number in its server, from 0 (its local index).
        index: u32,
        /// Its model (`V100`, `A100`).
        model: String,
        /// Its memory, in GB.
        memory_gb: u32,
    },
    /// An NVSwitch fabric: one per server, standing for all its NVSwitches together.
    NvSwitch {
        /// Its server's index.
        host: usize,
        /// Its number in its server (0).
        index: u32,
    },
    /// A network card, under a PCIe switch, linked to its rack's switch.
    Nic {
        /// Its server's index.
        host: usize,
        /// Its number in its server, from 0.
        index: u32,
    },
    /// A network switch: a rack (top-of-rack) switch or a spine.
    NetworkSwitch {
        /// `spine`, or `rack<N>` for rack N's switch.
        name: String,
        /// 0 for a rack switch, 1 for the spine.
        level: u32,
    },
}

/// What a link is, with the details that set its speed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LinkKind {
    /// NVLink of a generation (1 = P100, 2 = V100, 3 = A100, 4 = H100) and a number of bonded links.
    NvLink {
        /// NVLink generation.
        generation: u8,
        /// Bonded links (each 20 or 25 GB/s per direction).
        links: u8,
    },
    /// PCIe, of a generation and a lane count.
    Pcie {
        /// PCIe generation (below 3 at gen 2's rate, above 5 at gen 5's).
        generation: u8,
        /// Lanes (16 for every link a design builds).
        lanes: u8,
    },
    /// The link between CPU sockets (QPI, UPI, Infinity Fabric).
    InterSocket,
    /// InfiniBand, between a NIC and a network switch (12.5 GB/s nominal; designs set their own).
    InfiniBand,
    /// Ethernet, between a NIC and a network switch (3.125 GB/s nominal; designs set their own).
    Ethernet,
    /// A host's attachment to its own vertices (no data crosses it).
    Membership,
}

impl LinkKind {
    /// Bandwidth in GB/s per direction, from public specifications.
    /// - NVLink: 20 GB/s per link for gen 1 (P100), 25 GB/s per link for gens 2-4 (V100, A100, H100).
    /// - PCIe x16: about 16, 32, 64 GB/s for gens 3, 4, 5 (about 1, 2, 4 GB/s per lane).
    pub fn nominal_bandwidth(self) -> f64 {
        match self {
            LinkKind::NvLink { generation, links } => {
                let per_link = if generation <= 1 { 20.0 } else { 25.0 };
                per_link * f64::from(links)
            }
            LinkKind::Pcie { generation, lanes } => {
                let per_lane = match generation {
                    0..=2 => 0.5,
                    3 => 0.985,
                    4 => 1.969,
                    _ => 3.938,
                };
                per_lane * f64::from(lanes)
            }
            // GPU peer-to-peer traffic across QPI/UPI is far slower than the link's nominal rate:
            // CUDA's p2pBandwidthLatencyTest typically measures 8-10 GB/s between sockets.
            LinkKind::InterSocket => 9.0,
            LinkKind::InfiniBand => 12.5,
            LinkKind::Ethernet => 3.125,
            LinkKind::Membership => 0.0,
        }
    }

    /// The short code `nvidia-smi topo -m` prints for a direct link of this kind.
    pub fn short(self) -> String {
        match self {
            LinkKind::NvLink { links, .. } => format!("NV{links}"),
            LinkKind::Pcie { .. } => "PIX".into(),
            LinkKind::InterSocket => "SYS".into(),
            LinkKind::InfiniBand => "IB".into(),
            LinkKind::Ethernet => "ETH".into(),
            LinkKind::Membership => "-".into(),
        }
    }
}

/// A link: its kind, bandwidth (GB/s per direction) and latency (microseconds).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// What the link is.
    pub kind: LinkKind,
    /// GB/s per direction.
    pub bandwidth_gbps: f64,
    /// Latency, in microseconds.
    pub latency_us: f64,
}

impl Link {
    /// A link of `kind` at its nominal bandwidth and a typical latency.
    pub fn of(kind: LinkKind) -> Self {
        let latency_us = match kind {
            LinkKind::NvLink { .. } => 1.0,
            LinkKind::Pcie { .. } => 2.0,
            LinkKind::InterSocket => 3.0,
            LinkKind::InfiniBand => 5.0,
            LinkKind::Ethernet => 20.0,
            LinkKind::Membership => 0.0,
        };
        Link {
            kind,
            bandwidth_gbps: kind.nominal_bandwidth(),
            latency_us,
        }
    }

    /// A link of `kind` at a given bandwidth.
    pub fn with_bandwidth(kind: LinkKind, bandwidth_gbps: f64) -> Self {
        Link {
            bandwidth_gbps,
            ..Link::of(kind)
        }
    }
}

/// The graph itself.
pub type Graph = UnGraph<Vertex, Link>;

/// Adds vertices and links, remembering the GPUs in order.
#[derive(Default)]
pub struct GraphBuilder {
    /// The graph built so far.
    pub graph: Graph,
    /// The GPU vertices, in the order they were added (a cluster's GPU numbering).
    pub gpus: Vec<NodeIndex>,
    /// The host vertices, in the order they were added.
    pub hosts: Vec<NodeIndex>,
}

impl GraphBuilder {
    /// Adds `v`, noting it in `gpus` or `hosts` if it is a GPU or a host, and returns its index.
    pub fn vertex(&mut self, v: Vertex) -> NodeIndex {
        let is_gpu = matches!(v, Vertex::Gpu { .. });
        let is_host = matches!(v, Vertex::Host { .. });
        let index = self.graph.add_node(v);
        if is_gpu {
            self.gpus.push(index);
        }
        if is_host {
            self.hosts.push(index);
        }
        index
    }

    /// Joins `a` and `b` with `link` (the graph is undirected).
    pub fn link(&mut self, a: NodeIndex, b: NodeIndex, link: Link) {
        self.graph.add_edge(a, b, link);
    }
}
