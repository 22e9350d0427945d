//! `gangway serve --slurm`: the cluster is a Slurm partition's nodes, and a watcher keeps their state.
//!
//! Slurm stays the engine that runs processes on the nodes (each start is `elastic-run --backend slurm`
//! on the nodes the placer chose; see `gangway_launcher::executor::Hosts::Slurm`); gangway owns the
//! partition's scheduling. A node that goes down, drains or is reserved for others takes its GPUs out
//! of service through their health probes, and the control plane moves its jobs off them, as it does
//! for a cordon.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Result, bail};
use gangway_actors::health::{Health, HealthProbe};
use gangway_core::cluster::{Cluster, GpuId};
use gangway_launcher::slurm::{self, SlurmNode};
use gangway_topology::topology::ClusterSpec;

/// The partition's nodes with GPUs, as a cluster, and the node name of each GPU id.
pub fn cluster(partition: Option<&str>) -> Result<(Cluster, Vec<SlurmNode>, Vec<String>)> {
    let nodes: Vec<SlurmNode> = slurm::partition_nodes(partition)?
        .into_iter()
        .filter(|n| n.gpus > 0)
        .collect();
    if nodes.is_empty() {
        bail!(
            "Slurm lists no node with GPUs{} (their GRES, `Gres=gpu:4` in slurm.conf)",
            partition.map_or(String::new(), |p| format!(" in partition {p}"))
        );
    }
    let cluster = Cluster::try_from_nodes(nodes.iter().map(|n| {
        (
            n.gpu_type.as_str(),
            n.gpus,
            n.cpus,
            n.memory_mb as f64 / 1000.0,
        )
    }))?;
    let node_of = (0..cluster.num_gpus())
        .map(|g| nodes[cluster.node_of(GpuId(g)).0 as usize].name.clone())
        .collect();
    Ok((cluster, nodes, node_of))
}

/// A topology file for the partition's nodes: one server per node, in Slurm's order, each with the
/// node's GPUs. Errors name the file and the first node that differs.
pub fn matching_topology(path: &Path, nodes: &[SlurmNode]) -> Result<ClusterSpec> {
    let spec = crate::scenario::topology_file(path)?;
    let servers: Vec<usize> = spec
        .groups
        .iter()
        .flat_map(|(design, count)| std::iter::repeat_n(design.gpus() as usize, *count))
        .collect();
    if servers.len() != nodes.len() {
        bail!(
            "{}: {} servers, but Slurm lists {} nodes with GPUs ({}): one server per node, in that order",
            path.display(),
            servers.len(),
            nodes.len(),
            nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some((i, (gpus, node))) = servers
        .iter()
        .zip(nodes)
        .enumerate()
        .find(|(_, (gpus, node))| **gpus != node.gpus as usize)
    {
        bail!(
            "{}: server {i} has {gpus} GPUs, but its node, {} (in Slurm's order), has {}",
            path.display(),
            node.name,
            node.gpus
        );
    }
    Ok(spec)
}

/// What Slurm last said of each node: its state, and whether it takes work.
#[derive(Default)]
pub struct NodeStates {
    states: RwLock<HashMap<String, (String, bool)>>,
}

impl NodeStates {
    fn update(&self, nodes: &[SlurmNode]) {
        let fresh = nodes
            .iter()
            .map(|n| (n.name.clone(), (n.state.clone(), n.in_service())))
            .collect();
        *self.states.write().expect("node states") = fresh;
    }

    /// Whether `node` takes work, and why not.
    fn health(&self, node: &str) -> Health {
        match self.states.read().expect("node states").get(node) {
            Some((_, true)) => Health::healthy(),
            Some((state, false)) => Health::unhealthy(format!("Slurm node {node} is {state}")),
            None => Health::unhealthy(format!("Slurm no longer lists node {node}")),
        }
    }
}

/// Reads the nodes' state now and then every `every`, on a thread of its own (`scontrol` is a
/// process: never on an actor's thread). The cluster is read once, at start: a node with GPUs that
/// joins `partition` later is reported, once, and left alone until the daemon restarts.
pub fn watch(first: &[SlurmNode], partition: Option<String>, every: Duration) -> Arc<NodeStates> {
    let states = Arc::new(NodeStates::default());
    states.update(first);
    let mut known: HashSet<String> = first.iter().map(|n| n.name.clone()).collect();
    let watched = Arc::clone(&states);
    std::thread::Builder::new()
        .name("slurm-nodes".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                match slurm::nodes() {
                    Ok(nodes) => {
                        for node in joined(&mut known, &nodes, partition.as_deref()) {
                            tracing::warn!(
                                node = %node.name,
                                gpus = node.gpus,
                                "a Slurm node joined after start; gangway schedules it once `gangway serve` restarts (on its journal)"
                            );
                        }
                        watched.update(&nodes);
                    }
                    Err(e) => tracing::warn!(error = %e, "reading Slurm's nodes"),
                }
            }
        })
        .expect("a thread");
    states
}

/// The nodes with GPUs in `partition` (any, for `None`) that are not `known` yet; they become known.
fn joined<'a>(
    known: &mut HashSet<String>,
    nodes: &'a [SlurmNode],
    partition: Option<&str>,
) -> Vec<&'a SlurmNode> {
    nodes
        .iter()
        .filter(|n| n.gpus > 0)
        .filter(|n| partition.is_none_or(|p| n.partitions.iter().any(|q| q == p)))
        .filter(|n| known.insert(n.name.clone()))
        .collect()
}

/// A GPU's health is its node's.
pub struct SlurmProbe {
    states: Arc<NodeStates>,
    node: String,
}

impl SlurmProbe {
    /// One probe per GPU id.
    pub fn for_all_gpus(states: &Arc<NodeStates>, node_of: &[String]) -> Vec<SlurmProbe> {
        node_of
            .iter()
            .map(|node| SlurmProbe {
                states: Arc::clone(states),
                node: node.clone(),
            })
            .collect()
    }
}

impl HealthProbe for SlurmProbe {
    fn check(&mut self, _gpu: GpuId) -> Health {
        self.states.health(&self.node)
    }

    /// A read of the states the watcher's thread keeps.
    fn quick(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topology_file_must_have_a_server_per_node_with_its_gpus() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("racks.toml");
        std::fs::write(
            &file,
            "hosts_per_rack = 2\n[[servers]]\npreset = \"philly-4gpu\"\ncount = 2\n",
        )
        .unwrap();
        let nodes = slurm::parse_nodes(
            "NodeName=n1 Gres=gpu:4 State=IDLE\nNodeName=n2 Gres=gpu:4 State=IDLE\n",
        );
        let spec = matching_topology(&file, &nodes).unwrap();
        assert_eq!(spec.hosts_per_rack, 2);
        let three = slurm::parse_nodes(
            "NodeName=n1 Gres=gpu:4\nNodeName=n2 Gres=gpu:8\nNodeName=n3 Gres=gpu:4\n",
        );
        let e = matching_topology(&file, &three).unwrap_err().to_string();
        assert!(
            e.contains("racks.toml: 2 servers, but Slurm lists 3 nodes with GPUs (n1, n2, n3)"),
            "{e}"
        );
        let e = matching_topology(&file, &three[..2])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "racks.toml: server 1 has 4 GPUs, but its node, n2 (in Slurm's order), has 8"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_node_that_joins_the_partition_is_reported_once() {
        let mut known: HashSet<String> = ["n1".to_owned()].into();
        let nodes = slurm::parse_nodes(
            "NodeName=n1 Gres=gpu:4 Partitions=gpu\nNodeName=n2 Gres=gpu:4 Partitions=gpu\n\
             NodeName=n3 Gres=gpu:4 Partitions=other\nNodeName=n4 Gres=(null) Partitions=gpu\n",
        );
        let names = |v: Vec<&SlurmNode>| v.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(joined(&mut known, &nodes, Some("gpu"))), ["n2"]);
        assert!(joined(&mut known, &nodes, Some("gpu")).is_empty(), "once");
        assert_eq!(names(joined(&mut known, &nodes, None)), ["n3"]);
    }

    #[test]
    fn a_gpu_is_as_healthy_as_its_node() {
        let nodes = slurm::parse_nodes(
            "NodeName=n1 Gres=gpu:4 State=MIXED\nNodeName=n2 Gres=gpu:4 State=DOWN*\n",
        );
        let states = Arc::new(NodeStates::default());
        states.update(&nodes);
        let names = ["n1".to_owned(), "n2".to_owned(), "n3".to_owned()];
        let mut probes = SlurmProbe::for_all_gpus(&states, &names);
        let seen: Vec<Health> = probes.iter_mut().map(|p| p.check(GpuId(0))).collect();
        assert!(seen[0].healthy);
        assert_eq!(seen[1].reason.as_deref(), Some("Slurm node n2 is DOWN*"));
        assert_eq!(
            seen[2].reason.as_deref(),
            Some("Slurm no longer lists node n3")
        );
    }
}
