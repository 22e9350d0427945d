//! Discovery of this machine's GPUs through NVML (nvml-wrapper): index, UUID, name, memory, PCI bus id,
//! NVLink peers with link counts, the common PCIe ancestor of every pair (what `nvidia-smi topo -m`
//! prints), and NUMA/CPU affinity.
//!
//! Without an NVIDIA driver, [`discover`] returns [`DiscoveryError::NoDriver`] within a millisecond and
//! never panics; callers then fall back to a preset or a topology file. NVML is behind this crate's
//! `nvml` feature (on by default): built without it, [`discover`] returns
//! [`DiscoveryError::Unavailable`], and the rest of this module (a [`Discovery`] made by hand, its
//! [`Discovery::design`]) works as before.

use std::fmt::Write as _;

#[cfg(feature = "nvml")]
use nvml_wrapper::Nvml;
#[cfg(feature = "nvml")]
use nvml_wrapper::enum_wrappers::device::TopologyLevel;
#[cfg(feature = "nvml")]
use nvml_wrapper::error::NvmlError;
use serde::Serialize;

use crate::presets::{Design, Network};

/// NVML's limit on NVLinks per GPU (`NVML_NVLINK_MAX_LINKS`).
#[cfg(feature = "nvml")]
const MAX_NVLINKS: u32 = 18;

/// One discovered GPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiscoveredGpu {
    /// NVML's index of the GPU, as `nvidia-smi` numbers it.
    pub index: u32,
    /// The GPU's UUID (`GPU-...`), stable across reboots.
    pub uuid: String,
    /// Its product name, as NVML gives it (`NVIDIA A100-SXM4-80GB`).
    pub name: String,
    /// Its total memory, in MiB.
    pub memory_mib: u64,
    /// Its PCI bus id, lower-case (`00000000:07:00.0`).
    pub pci_bus_id: String,
    /// (peer GPU index, active NVLinks to it).
    pub nvlink_peers: Vec<(u32, u32)>,
    /// Active NVLinks whose far end is not a GPU of this machine (an NVSwitch).
    pub nvswitch_links: u32,
    /// The GPU's PCIe generation, where NVML tells.
    pub pcie_generation: Option<u32>,
    /// The NUMA node it is attached to, where NVML tells.
    pub numa_node: Option<u32>,
    /// CPUs this GPU is closest to, as CPU numbers.
    pub cpu_affinity: Vec<u32>,
}

/// What NVML reported.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Discovery {
    /// The NVIDIA driver's version.
    pub driver_version: String,
    /// Every GPU NVML sees, by index.
    pub gpus: Vec<DiscoveredGpu>,
    /// `nvidia-smi topo -m` codes between GPU i and j: X, NV#, PIX, PXB, PHB, NODE, SYS.
    pub paths: Vec<Vec<String>>,
    /// The PCIe part alone (X, PIX, PXB, PHB, NODE, SYS), which NVLink codes hide in `paths`.
    pub pcie: Vec<Vec<String>>,
}

/// Why this machine's GPUs could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// NVML could not be loaded: no NVIDIA driver here.
    #[error("no NVIDIA driver on this machine ({0}); use --preset or --file instead")]
    NoDriver(String),
    /// NVML is there but a query failed.
    #[error("NVML failed: {0}")]
    Nvml(String),
    /// This build has no NVML at all (gangway-topology without its `nvml` feature).
    #[error(
        "GPU discovery is not in this build (built without the nvml feature); describe the GPUs \
         instead: fake GPUs, a preset, a topology file or a cluster spec"
    )]
    Unavailable,
}

#[cfg(feature = "nvml")]
fn nvml_err(e: NvmlError) -> DiscoveryError {
    DiscoveryError::Nvml(e.to_string())
}

/// Reads this machine's GPUs through NVML; [`DiscoveryError::Unavailable`] in a build without the `nvml`
/// feature.
pub fn discover() -> Result<Discovery, DiscoveryError> {
    #[cfg(feature = "nvml")]
    return with_nvml();
    #[cfg(not(feature = "nvml"))]
    Err(DiscoveryError::Unavailable)
}

#[cfg(feature = "nvml")]
fn with_nvml() -> Result<Discovery, DiscoveryError> {
    let nvml = Nvml::init().map_err(|e| match e {
        NvmlError::LibloadingError(_) | NvmlError::DriverNotLoaded | NvmlError::LibraryNotFound => {
            DiscoveryError::NoDriver(e.to_string())
        }
        other => nvml_err(other),
    })?;
    let driver_version = nvml.sys_driver_version().map_err(nvml_err)?;
    let count = nvml.device_count().map_err(nvml_err)?;
    let devices: Vec<_> = (0..count)
        .map(|i| nvml.device_by_index(i))
        .collect::<Result<_, _>>()
        .map_err(nvml_err)?;
    let mut bus_ids = Vec::new();
    for d in &devices {
        bus_ids.push(d.pci_info().map_err(nvml_err)?.bus_id.to_ascii_lowercase());
    }
    let mut gpus = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        let mut peers: Vec<(u32, u32)> = Vec::new();
        let mut nvswitch_links = 0;
        for link in 0..MAX_NVLINKS {
            let wrapper = d.link_wrapper_for(link);
            // Links that do not exist or are inactive answer an error or false: skip them.
            if !wrapper.is_active().unwrap_or(false) {
                continue;
            }
            let Ok(remote) = wrapper.remote_pci_info() else {
                continue;
            };
            let remote = remote.bus_id.to_ascii_lowercase();
            match bus_ids.iter().position(|b| *b == remote) {
                Some(peer) => match peers.iter_mut().find(|p| p.0 == peer as u32) {
                    Some(p) => p.1 += 1,
                    None => peers.push((peer as u32, 1)),
                },
                None => nvswitch_links += 1,
            }
        }
        peers.sort_unstable();
        let affinity = d.cpu_affinity(16).unwrap_or_default();
        let cpu_affinity = affinity
            .iter()
            .enumerate()
            .flat_map(|(w, word)| {
                (0..64)
                    .filter(move |b| word & (1 << b) != 0)
                    .map(move |b| (w * 64 + b) as u32)
            })
            .collect();
        gpus.push(DiscoveredGpu {
            index: i as u32,
            uuid: d.uuid().map_err(nvml_err)?,
            name: d.name().map_err(nvml_err)?,
            memory_mib: d.memory_info().map_err(nvml_err)?.total / (1024 * 1024),
            pci_bus_id: bus_ids[i].clone(),
            nvlink_peers: peers,
            nvswitch_links,
            pcie_generation: d.max_pcie_link_gen().ok(),
            numa_node: d.numa_node_id().ok(),
            cpu_affinity,
        });
    }
    let mut paths = Vec::with_capacity(devices.len());
    let mut pcie = Vec::with_capacity(devices.len());
    for (i, device) in devices.iter().enumerate() {
        let mut row = Vec::with_capacity(devices.len());
        let mut pcie_row = Vec::with_capacity(devices.len());
        for j in 0..devices.len() {
            let ancestor: String = if i == j {
                "X".into()
            } else {
                let other = nvml.device_by_index(j as u32).map_err(nvml_err)?;
                match device.topology_common_ancestor(other) {
                    Ok(TopologyLevel::Internal | TopologyLevel::Single) => "PIX".into(),
                    Ok(TopologyLevel::Multiple) => "PXB".into(),
                    Ok(TopologyLevel::HostBridge) => "PHB".into(),
                    Ok(TopologyLevel::Node) => "NODE".into(),
                    Ok(TopologyLevel::System) | Err(_) => "SYS".into(),
                }
            };
            row.push(
                match gpus[i].nvlink_peers.iter().find(|p| p.0 == j as u32) {
                    Some(&(_, links)) => format!("NV{links}"),
                    None => ancestor.clone(),
                },
            );
            pcie_row.push(ancestor);
        }
        paths.push(row);
        pcie.push(pcie_row);
    }
    Ok(Discovery {
        driver_version,
        gpus,
        paths,
        pcie,
    })
}

impl Discovery {
    /// The GPUs and the path matrix, as `nvidia-smi -L` and `nvidia-smi topo -m` show them.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "NVIDIA driver {}; {} GPUs",
            self.driver_version,
            self.gpus.len()
        );
        for g in &self.gpus {
            let numa = g.numa_node.map_or("-".into(), |n| n.to_string());
            let _ = writeln!(
                out,
                "GPU{} {} ({} MiB) {} bus {} NUMA {numa} NVLink peers {:?}",
                g.index, g.name, g.memory_mib, g.uuid, g.pci_bus_id, g.nvlink_peers
            );
        }
        let n = self.gpus.len();
        let header: String = (0..n)
            .map(|j| format!("{:>7}", format!("GPU{j}")))
            .collect();
        let _ = writeln!(out, "\n{:7}{header}", "");
        for (i, row) in self.paths.iter().enumerate() {
            let cells: String = row.iter().map(|c| format!("{c:>7}")).collect();
            let _ = writeln!(out, "{:<7}{cells}", format!("GPU{i}"));
        }
        out
    }
}

impl Discovery {
    /// A server design for this machine, so that it can be scored and placed on like a preset.
    ///
    /// Sockets are the GPUs' NUMA nodes, PCIe switches are the groups of GPUs whose common ancestor is one
    /// switch (PIX), NVLinks come from the peers found, and NVSwitch links from links that end elsewhere.
    /// NVML does not describe NICs, so the design gets one 100 Gb/s Ethernet NIC; edit the design in a
    /// topology file for anything else. Machines whose GPUs do not split evenly over sockets and switches
    /// are refused with a message that says so.
    pub fn design(&self, name: &str) -> Result<Design, String> {
        let n = self.gpus.len();
        let first = self.gpus.first().ok_or("no GPUs were discovered")?;
        let mut numa: Vec<u32> = self.gpus.iter().map(|g| g.numa_node.unwrap_or(0)).collect();
        numa.dedup();
        let sockets = numa.len();
        let ordered = self
            .gpus
            .windows(2)
            .all(|w| w[0].numa_node.unwrap_or(0) <= w[1].numa_node.unwrap_or(0));
        if !ordered || !n.is_multiple_of(sockets) {
            return Err(format!(
                "{n} GPUs do not split evenly over {sockets} NUMA nodes in index order"
            ));
        }
        // GPUs that share a PCIe switch with GPU 0 set the switch size.
        let per_switch = 1 + (1..n).filter(|&j| self.pcie[0][j] == "PIX").count();
        if !(n / sockets).is_multiple_of(per_switch) {
            return Err(format!(
                "{} GPUs per NUMA node do not split into switches of {per_switch}",
                n / sockets
            ));
        }
        let model = first.name.trim_start_matches("NVIDIA ").to_owned();
        let nvlink_generation = match model.to_ascii_uppercase() {
            m if m.contains("P100") => 1,
            m if m.contains("A100") => 3,
            m if m.contains("H100") || m.contains("H200") => 4,
            _ => 2,
        };
        let nvlinks = self
            .gpus
            .iter()
            .flat_map(|g| {
                g.nvlink_peers
                    .iter()
                    .filter(move |p| p.0 > g.index)
                    .map(move |p| [g.index, p.0, p.1])
            })
            .collect();
        let nvswitch_links = self
            .gpus
            .iter()
            .map(|g| g.nvswitch_links)
            .min()
            .unwrap_or(0)
            .min(u32::from(u8::MAX));
        let design = Design {
            name: name.to_owned(),
            gpu_model: model,
            gpu_memory_gb: ((first.memory_mib + 512) / 1024) as u32,
            sockets: sockets as u32,
            switches_per_socket: (n / sockets / per_switch) as u32,
            gpus_per_switch: per_switch as u32,
            pcie_generation: first.pcie_generation.unwrap_or(4).clamp(1, 6) as u8,
            nvlink_generation,
            nvlinks,
            nvswitch_links: nvswitch_links as u8,
            nics: 1,
            nic_gbps: 12.5,
            network: Network::Ethernet,
        };
        design.validate()?;
        Ok(design)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What NVML reports on a DGX-1V, written by hand from its `nvidia-smi topo -m`.
    fn dgx1_like() -> Discovery {
        let design = crate::presets::Preset::Dgx1V100.design();
        let t = crate::topology::ClusterSpec::single(crate::presets::Preset::Dgx1V100).build();
        let gpus = (0..8u32)
            .map(|i| DiscoveredGpu {
                index: i,
                uuid: format!("GPU-{i}"),
                name: "Tesla V100-SXM2-32GB".into(),
                memory_mib: 32 * 1024,
                pci_bus_id: format!("00000000:{i:02x}:00.0"),
                nvlink_peers: design
                    .nvlinks
                    .iter()
                    .filter_map(|&[a, b, l]| {
                        (a == i).then_some((b, l)).or((b == i).then_some((a, l)))
                    })
                    .collect(),
                nvswitch_links: 0,
                pcie_generation: Some(3),
                numa_node: Some(i / 4),
                cpu_affinity: Vec::new(),
            })
            .collect();
        let paths = (0..8)
            .map(|i| {
                (0..8)
                    .map(|j| t.hosts[0].path_kind[i * 8 + j].clone())
                    .collect()
            })
            .collect();
        // PCIe: pairs under one switch, then one socket, then across sockets.
        let code = |i: usize, j: usize| match (i == j, i / 2 == j / 2, i / 4 == j / 4) {
            (true, _, _) => "X",
            (_, true, _) => "PIX",
            (_, _, true) => "NODE",
            _ => "SYS",
        };
        let pcie = (0..8)
            .map(|i| (0..8).map(|j| code(i, j).to_owned()).collect())
            .collect();
        Discovery {
            pcie,
            driver_version: "test".into(),
            gpus,
            paths,
        }
    }

    #[test]
    fn a_discovered_dgx1_becomes_a_design_that_matches_the_preset() {
        let design = dgx1_like().design("this-machine").unwrap();
        assert_eq!(
            (
                design.sockets,
                design.switches_per_socket,
                design.gpus_per_switch
            ),
            (2, 2, 2)
        );
        assert_eq!(design.nvlinks.len(), 16);
        assert_eq!(design.gpu_memory_gb, 32);
        let mine = crate::topology::ClusterSpec {
            groups: vec![(design, 1)],
            hosts_per_rack: 1,
            uplink_factor: 1.0,
        }
        .build();
        let preset = crate::topology::ClusterSpec::single(crate::presets::Preset::Dgx1V100).build();
        assert_eq!(
            mine.hosts[0].intra, preset.hosts[0].intra,
            "same GPU-to-GPU bandwidths as the preset"
        );
        let mut uneven = dgx1_like();
        uneven.gpus[1].numa_node = Some(1);
        assert!(
            uneven
                .design("x")
                .unwrap_err()
                .contains("do not split evenly")
        );
    }

    /// A build without NVML says so instead of failing as if a driver were missing.
    #[cfg(not(feature = "nvml"))]
    #[test]
    fn discovery_without_the_nvml_feature_says_it_was_left_out() {
        let e = discover().unwrap_err();
        assert!(matches!(e, DiscoveryError::Unavailable), "{e:?}");
        assert!(e.to_string().contains("without the nvml feature"), "{e}");
    }

    /// Runs everywhere: without a driver discovery says so, quickly and without panicking; with one, the
    /// report is consistent.
    #[cfg(feature = "nvml")]
    #[test]
    fn discovery_reports_no_driver_or_consistent_gpus() {
        let started = std::time::Instant::now();
        match discover() {
            Err(DiscoveryError::NoDriver(why)) => {
                eprintln!("skipping the GPU checks: {why}");
                assert!(started.elapsed().as_secs() < 5);
            }
            Err(other) => panic!("NVML is present but failed: {other}"),
            Ok(d) => {
                assert!(!d.gpus.is_empty());
                for (i, g) in d.gpus.iter().enumerate() {
                    assert_eq!(g.index as usize, i);
                    assert!(g.uuid.starts_with("GPU-"), "{}", g.uuid);
                    assert!(g.memory_mib > 0);
                    for &(peer, links) in &g.nvlink_peers {
                        let back = d.gpus[peer as usize]
                            .nvlink_peers
                            .iter()
                            .find(|p| p.0 as usize == i);
                        assert_eq!(
                            back.map(|p| p.1),
                            Some(links),
                            "NVLink {i}-{peer} is symmetric"
                        );
                    }
                }
                for i in 0..d.gpus.len() {
                    assert_eq!(d.paths[i][i], "X");
                    for j in 0..d.gpus.len() {
                        assert_eq!(d.paths[i][j], d.paths[j][i]);
                    }
                }
                eprintln!("{}", d.text());
            }
        }
    }
}
