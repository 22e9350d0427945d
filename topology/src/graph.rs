//! The hardware graph: vertices are hosts, CPU sockets, PCIe switches, GPUs, NVSwitches, NICs and network
//! switches; edges are links with a kind, a bandwidth and a latency.

use petgraph::graph::{NodeIndex, UnGraph};
use serde::{Deserialize, Serialize};

/// What a vertex is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Vertex {
    Host {
        name: String,
    },
    /// A CPU socket (one NUMA node).
    Socket {
        host: usize,
        index: u32,
    },
    PcieSwitch {
        host: usize,
        index: u32,
    },
    Gpu {
        host: usize,
        index: u32,
        model: String,
        memory_gb: u32,
    },
    NvSwitch {
        host: usize,
        index: u32,
    },
    Nic {
        host: usize,
        index: u32,
    },
    /// A network switch: a rack (top-of-rack) switch or a spine.
    NetworkSwitch {
        name: String,
        level: u32,
    },
}

/// What a link is, with the details that set its speed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LinkKind {
    /// NVLink of a generation (1 = P100, 2 = V100, 3 = A100, 4 = H100) and a number of bonded links.
    NvLink {
        generation: u8,
        links: u8,
    },
    Pcie {
        generation: u8,
        lanes: u8,
    },
    /// The link between CPU sockets (QPI, UPI, Infinity Fabric).
    InterSocket,
    InfiniBand,
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
    pub kind: LinkKind,
    pub bandwidth_gbps: f64,
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
    pub graph: Graph,
    pub gpus: Vec<NodeIndex>,
    pub hosts: Vec<NodeIndex>,
}

impl GraphBuilder {
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

    pub fn link(&mut self, a: NodeIndex, b: NodeIndex, link: Link) {
        self.graph.add_edge(a, b, link);
    }
}
