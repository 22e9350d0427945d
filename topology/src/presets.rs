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

/// A named server design from the table above.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Preset {
    /// NVIDIA DGX-1 with 8 V100s in a hybrid cube-mesh (`dgx1-v100`).
    #[serde(rename = "dgx1-v100")]
    Dgx1V100,
    /// NVIDIA DGX A100: 8 A100s on NVSwitches (`dgx-a100`).
    #[serde(rename = "dgx-a100")]
    DgxA100,
    /// NVIDIA DGX H100: 8 H100s on NVSwitches (`dgx-h100`).
    #[serde(rename = "dgx-h100")]
    DgxH100,
    /// A dual-socket server of 8 PCIe GPUs, no NVLink (`pcie-8gpu`).
    #[serde(rename = "pcie-8gpu")]
    Pcie8Gpu,
    /// AWS g4dn.12xlarge: 4 T4s on PCIe (`g4dn.12xlarge`, Pollux's testbed).
    #[serde(rename = "g4dn.12xlarge")]
    G4dn12xlarge,
    /// A 2-GPU server of Microsoft's Philly cluster (`philly-2gpu`).
    #[serde(rename = "philly-2gpu")]
    Philly2Gpu,
    /// A 4-GPU server of Philly, over 2 sockets (`philly-4gpu`).
    #[serde(rename = "philly-4gpu")]
    Philly4Gpu,
    /// An 8-GPU server of Philly, over 2 sockets (`philly-8gpu`).
    #[serde(rename = "philly-8gpu")]
    Philly8Gpu,
}

/// The network a server's NICs speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// InfiniBand.
    Infiniband,
    /// Ethernet.
    Ethernet,
}

/// A server design: what presets are made of, and what topology files may declare.
///
/// GPUs hang in order under PCIe switches (`gpus_per_switch` each), switches under sockets
/// (`switches_per_socket` each); NICs are spread over the switches. NVLinks are either direct pairs
/// (`nvlinks`: `[gpu a, gpu b, bonded links]`) or every GPU into one NVSwitch fabric (`nvswitch_links`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Design {
    /// Its name: the preset's, or the one a topology file's servers refer to it by; its hosts are named
    /// `<name>-<index>`.
    pub name: String,
    /// The GPUs' model (`V100`, `A100`): every GPU of a server is the same.
    pub gpu_model: String,
    /// Each GPU's memory, in GB.
    pub gpu_memory_gb: u32,
    /// CPU sockets (1 to 16).
    pub sockets: u32,
    /// PCIe switches under each socket (1 to 16).
    pub switches_per_socket: u32,
    /// GPUs under each PCIe switch (1 to 16; the server's GPUs, the product of the three, at most 16).
    pub gpus_per_switch: u32,
    /// The PCIe generation of every PCIe link (x16 each).
    pub pcie_generation: u8,
    /// The NVLink generation (1 = P100 to 4 = H100); 0, the default, without NVLink.
    #[serde(default)]
    pub nvlink_generation: u8,
    /// Direct NVLinks as `[gpu a, gpu b, bonded links]`, local GPU indices (empty by default).
    #[serde(default)]
    pub nvlinks: Vec<[u32; 3]>,
    /// NVLinks from each GPU into the server's NVSwitch fabric (0, the default: no NVSwitch).
    #[serde(default)]
    pub nvswitch_links: u8,
    /// Network cards (1 to 64), spread over the PCIe switches.
    pub nics: u32,
    /// GB/s per NIC.
    pub nic_gbps: f64,
    /// The network the NICs speak.
    pub network: Network,
}

/// Largest server a design may describe (the exact placement search enumerates subsets of a server).
pub const MAX_DESIGN_GPUS: u32 = 16;

/// Most NICs a design may describe (real servers have up to about ten).
pub const MAX_DESIGN_NICS: u32 = 64;

/// The vertices of one server that the rest of the graph connects to.
pub struct HostParts {
    /// The server's host vertex.
    pub host: NodeIndex,
    /// Its GPU vertices, in local order.
    pub gpus: Vec<NodeIndex>,
    /// Its NIC vertices, in order.
    pub nics: Vec<NodeIndex>,
}

impl Preset {
    /// Every preset, in the order of the table above.
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

    /// The preset's name (`dgx1-v100`), as `--preset`, topology files and serde spell it.
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

    /// The preset named `name` (as [`Preset::name`] spells it), if there is one.
    pub fn parse(name: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.name() == name)
    }

    /// GPUs per server of this preset.
    pub fn gpus(self) -> u32 {
        self.design().gpus()
    }

    /// The design this preset stands for.
    pub fn design(self) -> Design {
        // (GPU, GB, sockets, switches per socket, GPUs per switch, PCIe gen, NICs, NIC GB/s, network)
        let (model, memory, sockets, switches, per_switch, pcie, nics, nic_gbps, network) =
            match self {
                Preset::Dgx1V100 => ("V100", 32, 2, 2, 2, 3, 4, 12.5, Network::Infiniband), // 4x EDR
                Preset::DgxA100 => ("A100", 80, 2, 2, 2, 4, 8, 25.0, Network::Infiniband), // 8x HDR
                Preset::DgxH100 => ("H100", 80, 2, 2, 2, 5, 8, 50.0, Network::Infiniband), // 8x NDR
                Preset::Pcie8Gpu => ("V100-PCIE", 32, 2, 2, 2, 3, 1, 12.5, Network::Ethernet), // 100 GbE
                Preset::G4dn12xlarge => ("T4", 16, 1, 1, 4, 3, 1, 6.25, Network::Ethernet), // 50 Gb/s
                Preset::Philly2Gpu => ("P100", 16, 1, 1, 2, 3, 1, 12.5, Network::Infiniband),
                Preset::Philly4Gpu => ("P100", 16, 2, 1, 2, 3, 1, 12.5, Network::Infiniband),
                Preset::Philly8Gpu => ("P100", 16, 2, 2, 2, 3, 1, 12.5, Network::Infiniband),
            };
        let (nvlink_generation, nvlinks, nvswitch_links) = match self {
            // Hybrid cube-mesh: (a, b, links), as `nvidia-smi topo -m` shows on a DGX-1V.
            Preset::Dgx1V100 => (
                2,
                vec![
                    [0, 1, 1],
                    [0, 2, 1],
                    [0, 3, 2],
                    [1, 2, 2],
                    [1, 3, 1],
                    [2, 3, 2],
                    [4, 5, 1],
                    [4, 6, 1],
                    [4, 7, 2],
                    [5, 6, 2],
                    [5, 7, 1],
                    [6, 7, 2],
                    [0, 4, 2],
                    [1, 5, 2],
                    [2, 6, 1],
                    [3, 7, 1],
                ],
                0,
            ),
            // Each GPU spreads its links over all 6 (A100) or 4 (H100) NVSwitches; modelled as one
            // aggregate fabric with the GPU's full NVLink bandwidth, which all-to-all traffic sees.
            Preset::DgxA100 => (3, Vec::new(), 12),
            Preset::DgxH100 => (4, Vec::new(), 18),
            _ => (0, Vec::new(), 0),
        };
        Design {
            name: self.name().to_owned(),
            gpu_model: model.to_owned(),
            gpu_memory_gb: memory,
            sockets,
            switches_per_socket: switches,
            gpus_per_switch: per_switch,
            pcie_generation: pcie,
            nvlink_generation,
            nvlinks,
            nvswitch_links,
            nics,
            nic_gbps,
            network,
        }
    }
}

impl Design {
    /// GPUs per server: sockets x switches per socket x GPUs per switch (saturating, so that a design
    /// too large to build never wraps around to a small one; [`Design::validate`] refuses it).
    pub fn gpus(&self) -> u32 {
        self.sockets
            .saturating_mul(self.switches_per_socket)
            .saturating_mul(self.gpus_per_switch)
    }

    /// The kind of link its NICs make to the network.
    pub fn nic_kind(&self) -> LinkKind {
        match self.network {
            Network::Infiniband => LinkKind::InfiniBand,
            Network::Ethernet => LinkKind::Ethernet,
        }
    }

    /// Checks that the design describes a server gangway can build and search.
    pub fn validate(&self) -> Result<(), String> {
        // Each factor is bounded before the product is taken, so that no product wraps around.
        for (field, value) in [
            ("sockets", self.sockets),
            ("switches_per_socket", self.switches_per_socket),
            ("gpus_per_switch", self.gpus_per_switch),
        ] {
            if value == 0 || value > MAX_DESIGN_GPUS {
                return Err(format!(
                    "design `{}`: {field} = {value} is out of range (1 to {MAX_DESIGN_GPUS})",
                    self.name
                ));
            }
        }
        let gpus = self.gpus();
        if gpus > MAX_DESIGN_GPUS {
            return Err(format!(
                "design `{}` has {gpus} GPUs; 1 to {MAX_DESIGN_GPUS} are supported",
                self.name
            ));
        }
        if self.nics == 0 || self.nics > MAX_DESIGN_NICS {
            return Err(format!(
                "design `{}`: nics = {} is out of range (1 to {MAX_DESIGN_NICS})",
                self.name, self.nics
            ));
        }
        if !(self.nic_gbps.is_finite() && self.nic_gbps > 0.0) {
            return Err(format!(
                "design `{}` needs a positive, finite nic_gbps",
                self.name
            ));
        }
        if let Some(bad) = self.nvlinks.iter().find(|[a, b, links]| {
            *a >= gpus || *b >= gpus || a == b || *links == 0 || *links > u32::from(u8::MAX)
        }) {
            return Err(format!(
                "design `{}`: NVLink {bad:?} is not [gpu a, gpu b, links] among {gpus} GPUs, with 1 to {} links",
                self.name,
                u8::MAX
            ));
        }
        Ok(())
    }

    /// Adds one server of this design to `b` as host number `host`.
    pub fn add_host(&self, b: &mut GraphBuilder, host: usize, name: &str) -> HostParts {
        let host_vertex = b.vertex(Vertex::Host {
            name: name.to_owned(),
        });
        let pcie = Link::of(LinkKind::Pcie {
            generation: self.pcie_generation,
            lanes: 16,
        });
        let member = Link::of(LinkKind::Membership);
        let mut socket_vertices = Vec::new();
        let mut switch_vertices = Vec::new();
        let mut gpus = Vec::new();
        for s in 0..self.sockets {
            let socket = b.vertex(Vertex::Socket { host, index: s });
            b.link(host_vertex, socket, member);
            if let Some(&previous) = socket_vertices.last() {
                b.link(previous, socket, Link::of(LinkKind::InterSocket));
            }
            socket_vertices.push(socket);
            for _ in 0..self.switches_per_socket {
                let index = switch_vertices.len() as u32;
                let switch = b.vertex(Vertex::PcieSwitch { host, index });
                b.link(socket, switch, pcie);
                switch_vertices.push(switch);
                for _ in 0..self.gpus_per_switch {
                    let index = gpus.len() as u32;
                    let gpu = b.vertex(Vertex::Gpu {
                        host,
                        index,
                        model: self.gpu_model.clone(),
                        memory_gb: self.gpu_memory_gb,
                    });
                    b.link(switch, gpu, pcie);
                    gpus.push(gpu);
                }
            }
        }
        let mut nics = Vec::new();
        for i in 0..self.nics {
            let nic = b.vertex(Vertex::Nic { host, index: i });
            // NICs hang off the PCIe switches, spread evenly (as in the DGX designs).
            let switch = switch_vertices[(i as usize * switch_vertices.len()) / self.nics as usize];
            b.link(switch, nic, pcie);
            nics.push(nic);
        }
        for &[a, c, links] in &self.nvlinks {
            let kind = LinkKind::NvLink {
                generation: self.nvlink_generation,
                links: u8::try_from(links).unwrap_or(u8::MAX),
            };
            b.link(gpus[a as usize], gpus[c as usize], Link::of(kind));
        }
        if self.nvswitch_links > 0 {
            let fabric = b.vertex(Vertex::NvSwitch { host, index: 0 });
            let kind = LinkKind::NvLink {
                generation: self.nvlink_generation,
                links: self.nvswitch_links,
            };
            for &gpu in &gpus {
                b.link(gpu, fabric, Link::of(kind));
            }
        }
        HostParts {
            host: host_vertex,
            gpus,
            nics,
        }
    }
}
