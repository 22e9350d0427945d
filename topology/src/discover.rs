//! Discovery of this machine's GPUs through NVML (nvml-wrapper): index, UUID, name, memory, PCI bus id,
//! NVLink peers with link counts, the common PCIe ancestor of every pair (what `nvidia-smi topo -m`
//! prints), and NUMA/CPU affinity.
//!
//! Without an NVIDIA driver, [`discover`] returns [`DiscoveryError::NoDriver`] within a millisecond and
//! never panics; callers then fall back to a preset or a topology file.

use std::fmt::Write as _;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TopologyLevel;
use nvml_wrapper::error::NvmlError;
use serde::Serialize;

/// NVML's limit on NVLinks per GPU (`NVML_NVLINK_MAX_LINKS`).
const MAX_NVLINKS: u32 = 18;

/// One discovered GPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiscoveredGpu {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_mib: u64,
    pub pci_bus_id: String,
    /// (peer GPU index, active NVLinks to it).
    pub nvlink_peers: Vec<(u32, u32)>,
    pub numa_node: Option<u32>,
    /// CPUs this GPU is closest to, as CPU numbers.
    pub cpu_affinity: Vec<u32>,
}

/// What NVML reported.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Discovery {
    pub driver_version: String,
    pub gpus: Vec<DiscoveredGpu>,
    /// `nvidia-smi topo -m` codes between GPU i and j: X, NV#, PIX, PXB, PHB, NODE, SYS.
    pub paths: Vec<Vec<String>>,
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("no NVIDIA driver on this machine ({0}); use --preset or --file instead")]
    NoDriver(String),
    #[error("NVML failed: {0}")]
    Nvml(String),
}

fn nvml_err(e: NvmlError) -> DiscoveryError {
    DiscoveryError::Nvml(e.to_string())
}

/// Reads this machine's GPUs.
pub fn discover() -> Result<Discovery, DiscoveryError> {
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
            if let Some(peer) = bus_ids.iter().position(|b| *b == remote) {
                match peers.iter_mut().find(|p| p.0 == peer as u32) {
                    Some(p) => p.1 += 1,
                    None => peers.push((peer as u32, 1)),
                }
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
            numa_node: d.numa_node_id().ok(),
            cpu_affinity,
        });
    }
    let mut paths = Vec::with_capacity(devices.len());
    for (i, device) in devices.iter().enumerate() {
        let mut row = Vec::with_capacity(devices.len());
        for j in 0..devices.len() {
            row.push(if i == j {
                "X".into()
            } else if let Some(&(_, links)) = gpus[i].nvlink_peers.iter().find(|p| p.0 == j as u32)
            {
                format!("NV{links}")
            } else {
                let other = nvml.device_by_index(j as u32).map_err(nvml_err)?;
                match device.topology_common_ancestor(other) {
                    Ok(TopologyLevel::Internal | TopologyLevel::Single) => "PIX".into(),
                    Ok(TopologyLevel::Multiple) => "PXB".into(),
                    Ok(TopologyLevel::HostBridge) => "PHB".into(),
                    Ok(TopologyLevel::Node) => "NODE".into(),
                    Ok(TopologyLevel::System) | Err(_) => "SYS".into(),
                }
            });
        }
        paths.push(row);
    }
    Ok(Discovery {
        driver_version,
        gpus,
        paths,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs everywhere: without a driver discovery says so, quickly and without panicking; with one, the
    /// report is consistent.
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
