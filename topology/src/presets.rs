//! Server presets, each written from public hardware documentation.
//!
//! | preset | GPUs | intra-server links | source |
//! |---|---|---|---|
//! | `dgx1-v100` | 8 V100 | hybrid cube-mesh NVLink 2: quads 0-3 and 4-7, each GPU to 4 peers (6 links), PCIe 3 switches per GPU pair, 2 sockets, 4 IB EDR | NVIDIA DGX-1 with Tesla V100 system architecture white paper (2017) |
//! | `dgx-a100` | 8 A100 | 12 NVLink 3 links per GPU into 6 NVSwitches (600 GB/s bidirectional), PCIe 4 switches per GPU pair, 2 sockets, 8 HDR IB | NVIDIA DGX A100 system architecture white paper (2020) |
//! | `dgx-h100` | 8 H100 | 18 NVLink 4 links per GPU into 4 NVSwitches (900 GB/s bidirectional), PCIe 5, 2 sockets, 8 NDR IB | NVIDIA DGX H100 user guide / architecture brief (2022) |
//! | `pcie-8gpu` | 8 GPUs | no NVLink; 2 sockets, 2 PCIe 3 switches per socket, 2 GPUs per switch; 100 Gb/s Ethernet | a common dual-socket 8-GPU server (e.g. Supermicro 4028GR) |
//! | `g4dn.12xlarge` | 4 T4 | PCIe 3 x16 each, 1 socket, 50 Gb/s network | AWS EC2 G4 instance documentation (Pollux's testbed) |
//! | `philly-2gpu`, `philly-4gpu`, `philly-8gpu` | 2/4/8 | PCIe 3; 4 and 8 GPUs span 2 sockets; 100 Gb/s IB | Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads" (ATC'19) |

use petgraph::graph::NodeIndex;
use serde::{Deserialize, Serialize};

use crate::graph::{GraphBuilder, Link, LinkKind, Vertex};

/// A named server design.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Preset {
    #[serde(rename = "dgx1-v100")]
    Dgx1V100,
    #[serde(rename = "dgx-a100")]
    DgxA100,
    #[serde(rename = "dgx-h100")]
    DgxH100,
    #[serde(rename = "pcie-8gpu")]
    Pcie8Gpu,
    #[serde(rename = "g4dn.12xlarge")]
    G4dn12xlarge,
    #[serde(rename = "philly-2gpu")]
    Philly2Gpu,
    #[serde(rename = "philly-4gpu")]
    Philly4Gpu,
    #[serde(rename = "philly-8gpu")]
    Philly8Gpu,
}

/// The vertices of one server that the rest of the graph connects to.
pub struct HostParts {
    pub host: NodeIndex,
    pub gpus: Vec<NodeIndex>,
    pub nics: Vec<NodeIndex>,
}

impl Preset {
    pub const ALL: [Preset; 8] = [
        Preset::Dgx1V100,
        Preset::DgxA100,
        Preset::DgxH100,
        Preset::Pcie8Gpu,
        Preset::G4dn12xlarge,
        Preset::Philly2Gpu,
        Preset::Philly4Gpu,
        Preset::Philly8Gpu,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Dgx1V100 => "dgx1-v100",
            Preset::DgxA100 => "dgx-a100",
            Preset::DgxH100 => "dgx-h100",
            Preset::Pcie8Gpu => "pcie-8gpu",
            Preset::G4dn12xlarge => "g4dn.12xlarge",
            Preset::Philly2Gpu => "philly-2gpu",
            Preset::Philly4Gpu => "philly-4gpu",
            Preset::Philly8Gpu => "philly-8gpu",
        }
    }

    pub fn parse(name: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.name() == name)
    }

    pub fn gpus(self) -> u32 {
        match self {
            Preset::G4dn12xlarge | Preset::Philly4Gpu => 4,
            Preset::Philly2Gpu => 2,
            _ => 8,
        }
    }

    /// The GPU model's name and memory in GB.
    pub fn gpu_model(self) -> (&'static str, u32) {
        match self {
            Preset::Dgx1V100 => ("V100", 32),
            Preset::DgxA100 => ("A100", 80),
            Preset::DgxH100 => ("H100", 80),
            Preset::Pcie8Gpu => ("V100-PCIE", 32),
            Preset::G4dn12xlarge => ("T4", 16),
            Preset::Philly2Gpu | Preset::Philly4Gpu | Preset::Philly8Gpu => ("P100", 16),
        }
    }

    /// Adds one server of this design to `b` as host number `host`.
    pub fn add_host(self, b: &mut GraphBuilder, host: usize, name: &str) -> HostParts {
        let host_vertex = b.vertex(Vertex::Host {
            name: name.to_owned(),
        });
        let (model, memory_gb) = self.gpu_model();
        // (sockets, PCIe switches per socket, GPUs per switch, PCIe generation)
        let (sockets, switches_per_socket, gpus_per_switch, pcie_gen) = match self {
            Preset::Dgx1V100 | Preset::Pcie8Gpu | Preset::Philly8Gpu => (2, 2, 2, 3),
            Preset::DgxA100 => (2, 2, 2, 4),
            Preset::DgxH100 => (2, 2, 2, 5),
            Preset::G4dn12xlarge => (1, 1, 4, 3),
            Preset::Philly2Gpu => (1, 1, 2, 3),
            Preset::Philly4Gpu => (2, 1, 2, 3),
        };
        let nics = self.nics();
        let pcie = Link::of(LinkKind::Pcie {
            generation: pcie_gen,
            lanes: 16,
        });
        let member = Link::of(LinkKind::Membership);
        let mut socket_vertices = Vec::new();
        let mut switch_vertices = Vec::new();
        let mut gpus = Vec::new();
        for s in 0..sockets {
            let socket = b.vertex(Vertex::Socket { host, index: s });
            b.link(host_vertex, socket, member);
            if let Some(&previous) = socket_vertices.last() {
                b.link(previous, socket, Link::of(LinkKind::InterSocket));
            }
            socket_vertices.push(socket);
            for _ in 0..switches_per_socket {
                let index = switch_vertices.len() as u32;
                let switch = b.vertex(Vertex::PcieSwitch { host, index });
                b.link(socket, switch, pcie);
                switch_vertices.push(switch);
                for _ in 0..gpus_per_switch {
                    let index = gpus.len() as u32;
                    let gpu = b.vertex(Vertex::Gpu {
                        host,
                        index,
                        model: model.to_owned(),
                        memory_gb,
                    });
                    b.link(switch, gpu, pcie);
                    gpus.push(gpu);
                }
            }
        }
        let mut nic_vertices = Vec::new();
        for i in 0..nics {
            let nic = b.vertex(Vertex::Nic { host, index: i });
            // NICs hang off the PCIe switches, spread evenly (as in the DGX designs).
            let switch = switch_vertices[(i as usize * switch_vertices.len()) / nics as usize];
            b.link(switch, nic, pcie);
            nic_vertices.push(nic);
        }
        match self {
            Preset::Dgx1V100 => {
                // Hybrid cube-mesh: (a, b, links), as `nvidia-smi topo -m` shows on a DGX-1V.
                const MESH: [(usize, usize, u8); 12] = [
                    (0, 1, 1),
                    (0, 2, 1),
                    (0, 3, 2),
                    (1, 2, 2),
                    (1, 3, 1),
                    (2, 3, 2),
                    (4, 5, 1),
                    (4, 6, 1),
                    (4, 7, 2),
                    (5, 6, 2),
                    (5, 7, 1),
                    (6, 7, 2),
                ];
                const CROSS: [(usize, usize, u8); 4] = [(0, 4, 2), (1, 5, 2), (2, 6, 1), (3, 7, 1)];
                for (a, c, links) in MESH.into_iter().chain(CROSS) {
                    b.link(
                        gpus[a],
                        gpus[c],
                        Link::of(LinkKind::NvLink {
                            generation: 2,
                            links,
                        }),
                    );
                }
            }
            Preset::DgxA100 | Preset::DgxH100 => {
                let (generation, links) = if self == Preset::DgxA100 {
                    (3, 12)
                } else {
                    (4, 18)
                };
                // Each GPU spreads its links over all 6 (A100) or 4 (H100) NVSwitches; modelled as one
                // aggregate switch vertex with the GPU's full NVLink bandwidth, which all-to-all traffic sees.
                let fabric = b.vertex(Vertex::NvSwitch { host, index: 0 });
                for &gpu in &gpus {
                    b.link(
                        gpu,
                        fabric,
                        Link::of(LinkKind::NvLink { generation, links }),
                    );
                }
            }
            _ => {}
        }
        HostParts {
            host: host_vertex,
            gpus,
            nics: nic_vertices,
        }
    }

    /// Bandwidth (GB/s) of one of this design's NICs.
    pub fn nic_bandwidth(self) -> f64 {
        match self {
            Preset::DgxA100 => 25.0,
            Preset::DgxH100 => 50.0,
            Preset::Pcie8Gpu => 12.5,
            Preset::G4dn12xlarge => 6.25,
            _ => LinkKind::InfiniBand.nominal_bandwidth(),
        }
    }

    /// Number of NICs.
    pub fn nics(self) -> u32 {
        match self {
            Preset::Dgx1V100 => 4,
            Preset::DgxA100 | Preset::DgxH100 => 8,
            _ => 1,
        }
    }

    pub fn nic_kind(self) -> LinkKind {
        match self {
            Preset::Pcie8Gpu | Preset::G4dn12xlarge => LinkKind::Ethernet,
            _ => LinkKind::InfiniBand,
        }
    }
}
