//! The cluster: servers (nodes), each with GPUs of one type, CPUs and memory.
//!
//! GPUs are numbered densely across the cluster (`GpuId`), node by node, so that the simulator can keep
//! per-GPU state in flat vectors.

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::error::{InputError, Source};

pub use gangway_protocol::ids::{GpuId, GpuSet, GpuTypeId};

/// Index of a node in [`Cluster::nodes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub u32);

/// One server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The type of all its GPUs: a node holds GPUs of one type.
    pub gpu_type: GpuTypeId,
    /// How many GPUs it has, numbered consecutively from its first [`GpuId`].
    pub gpus: u32,
    /// CPU cores, shared among the jobs placed on it (Synergy's mechanisms allot them per GPU).
    pub cpus: u32,
    /// Memory in GB, shared as its CPUs are.
    pub memory_gb: f64,
}

/// Most GPUs a cluster may have (the topology's bound: every GPU costs per-GPU state).
pub const MAX_GPUS: u32 = gangway_topology::topology::MAX_CLUSTER_GPUS as u32;

/// Most GPU types a cluster may have. Policies keep per-type rows and solve programs over the types;
/// real clusters have a handful.
pub const MAX_GPU_TYPES: usize = 1024;

/// Most CPUs one node may have (a spec's default, 3 per GPU, stays below it at any GPU count).
pub const MAX_NODE_CPUS: u32 = 1 << 24;

/// Most memory one node may have, in GB (an exabyte): a spec's default, 62.5 GB per GPU, stays below
/// it at any GPU count; more is a unit mistake.
pub const MAX_NODE_MEMORY_GB: f64 = 1e9;

/// CPUs and memory per GPU when a spec does not say: Synergy's default server (8 GPUs, 24 CPUs, 500 GB).
pub const DEFAULT_CPUS_PER_GPU: u32 = 3;
/// Memory per GPU in GB when a spec does not say: Synergy's default server's 500 GB over 8 GPUs.
pub const DEFAULT_MEMORY_GB_PER_GPU: f64 = 62.5;

/// A set of nodes. Immutable once built; the simulator keeps what is free.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cluster {
    gpu_types: Vec<String>,
    nodes: Vec<Node>,
    #[serde(skip)]
    first_gpu: Vec<u32>,
    #[serde(skip)]
    gpu_node: Vec<NodeId>,
    #[serde(skip)]
    capacity: Vec<u32>,
}

/// One group of identical nodes in a cluster file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeGroup {
    gpu_type: String,
    /// Number of nodes in the group.
    #[serde(default = "one")]
    count: u32,
    /// GPUs per node.
    gpus: u32,
    cpus: Option<u32>,
    memory_gb: Option<f64>,
}

fn one() -> u32 {
    1
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    nodes: Vec<NodeGroup>,
}

impl Cluster {
    /// Builds a cluster from `(gpu type name, gpus, cpus, memory_gb)` nodes; type names are interned in
    /// first-seen order. Panics beyond [`MAX_GPUS`] or [`MAX_GPU_TYPES`]: for clusters built in code
    /// (tests, examples); user input goes through [`Cluster::try_from_nodes`] or the parsers.
    pub fn from_nodes<'a>(nodes: impl IntoIterator<Item = (&'a str, u32, u32, f64)>) -> Self {
        Self::try_from_nodes(nodes).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Cluster::from_nodes`], with an error beyond the limits.
    pub fn try_from_nodes<'a>(
        nodes: impl IntoIterator<Item = (&'a str, u32, u32, f64)>,
    ) -> Result<Self, InputError> {
        let source = Source("nodes".into());
        let mut builder = ClusterBuilder::default();
        for (name, gpus, cpus, memory_gb) in nodes {
            builder
                .add_nodes(name, 1, gpus, cpus, memory_gb)
                .map_err(|m| InputError::whole(&source, m))?;
        }
        Ok(builder.build())
    }

    /// The cluster of a topology: one node per server, typed by its GPU model (`v100`, `p100`, ...).
    pub fn from_topology(
        topology: &gangway_topology::topology::Topology,
    ) -> Result<Self, InputError> {
        let source = Source("topology".into());
        let mut builder = ClusterBuilder::default();
        for host in &topology.hosts {
            let gpus = u32::try_from(host.num_gpus).unwrap_or(u32::MAX);
            let model = topology.gpus[host.first_gpu].model.to_ascii_lowercase();
            builder
                .add_nodes(
                    &model,
                    1,
                    gpus,
                    gpus.saturating_mul(DEFAULT_CPUS_PER_GPU),
                    f64::from(gpus) * DEFAULT_MEMORY_GB_PER_GPU,
                )
                .map_err(|m| InputError::whole(&source, m))?;
        }
        Ok(builder.build())
    }

    /// Parses `TYPE=N` (N GPUs, `gpus_per_node` per node) and `TYPE=NxG` (N nodes of G GPUs) items,
    /// comma-separated: `v100=36,p100=36,k80=36` or `a100=4x8,t4=16x4`.
    pub fn parse_spec(spec: &str, gpus_per_node: u32) -> Result<Self, InputError> {
        let source = Source(format!("--cluster {spec}"));
        if gpus_per_node == 0 {
            return Err(InputError::whole(
                &source,
                "--gpus-per-node must be at least 1",
            ));
        }
        let mut builder = ClusterBuilder::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = |msg: &str| {
                InputError::whole(
                    &source,
                    format!("item `{item}`: {msg} (expected TYPE=N or TYPE=NxG)"),
                )
            };
            let (name, count) = item.split_once('=').ok_or_else(|| bad("missing `=`"))?;
            let name = name.trim();
            if name.is_empty() {
                return Err(bad("empty GPU type name"));
            }
            let parse = |s: &str| {
                s.trim()
                    .parse::<u32>()
                    .map_err(|_| bad("not a whole number"))
            };
            let (nodes, gpus) = match count.split_once(['x', 'X']) {
                Some((n, g)) => (parse(n)?, parse(g)?),
                None => {
                    let total = parse(count)?;
                    if total % gpus_per_node != 0 {
                        return Err(bad(&format!(
                            "{total} GPUs do not divide into nodes of {gpus_per_node}"
                        )));
                    }
                    (total / gpus_per_node, gpus_per_node)
                }
            };
            if nodes == 0 || gpus == 0 {
                return Err(bad("a group needs at least one node of at least one GPU"));
            }
            builder
                .add_nodes(
                    name,
                    nodes,
                    gpus,
                    gpus.saturating_mul(DEFAULT_CPUS_PER_GPU),
                    f64::from(gpus) * DEFAULT_MEMORY_GB_PER_GPU,
                )
                .map_err(|m| InputError::whole(&source, format!("item `{item}`: {m}")))?;
        }
        if builder.nodes.is_empty() {
            return Err(InputError::whole(&source, "the cluster has no GPUs"));
        }
        Ok(builder.build())
    }

    /// Parses a TOML cluster file: `[[nodes]] gpu_type = "v100", count = 36, gpus = 1, cpus = 3, memory_gb = 62.5`.
    pub fn parse_toml(source: &Source, text: &str) -> Result<Self, InputError> {
        let file: ClusterFile = toml_from_str(text).map_err(|e| InputError::whole(source, e))?;
        let mut builder = ClusterBuilder::default();
        for (i, group) in file.nodes.iter().enumerate() {
            if group.gpus == 0 || group.count == 0 || group.gpu_type.trim().is_empty() {
                return Err(InputError::whole(
                    source,
                    format!("nodes[{i}]: needs a gpu_type, count >= 1 and gpus >= 1"),
                ));
            }
            let memory_gb = group
                .memory_gb
                .unwrap_or(f64::from(group.gpus) * DEFAULT_MEMORY_GB_PER_GPU);
            builder
                .add_nodes(
                    &group.gpu_type,
                    group.count,
                    group.gpus,
                    group
                        .cpus
                        .unwrap_or(group.gpus.saturating_mul(DEFAULT_CPUS_PER_GPU)),
                    memory_gb,
                )
                .map_err(|m| InputError::whole(source, format!("nodes[{i}]: {m}")))?;
        }
        if builder.nodes.is_empty() {
            return Err(InputError::whole(source, "the cluster file lists no nodes"));
        }
        Ok(builder.build())
    }

    /// The GPU type names, lower-cased, in first-seen order: a [`GpuTypeId`] indexes this slice.
    pub fn gpu_types(&self) -> &[String] {
        &self.gpu_types
    }

    /// How many GPU types the cluster has (at most [`MAX_GPU_TYPES`]).
    pub fn num_gpu_types(&self) -> usize {
        self.gpu_types.len()
    }

    /// Every node, indexed by [`NodeId`]; a node's GPUs follow the previous node's.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node `id` names. Panics on an id outside the cluster.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0 as usize]
    }

    /// GPUs in all, of every type (at most [`MAX_GPUS`]); [`GpuId`]s run from 0 to one less.
    pub fn num_gpus(&self) -> u32 {
        self.gpu_node.len() as u32
    }

    /// Total GPUs of each type, indexed by `GpuTypeId`.
    pub fn capacity(&self) -> &[u32] {
        &self.capacity
    }

    /// The node that holds `gpu`. Panics on a GPU outside the cluster.
    pub fn node_of(&self, gpu: GpuId) -> NodeId {
        self.gpu_node[gpu.0 as usize]
    }

    /// The type of `gpu`, its node's type.
    pub fn gpu_type_of(&self, gpu: GpuId) -> GpuTypeId {
        self.node(self.node_of(gpu)).gpu_type
    }

    /// How many of `gpus` each node holds, in node order.
    pub fn gpus_per_node(&self, gpus: &[GpuId]) -> SmallVec<[(NodeId, u32); 8]> {
        let mut nodes: SmallVec<[NodeId; 8]> = gpus.iter().map(|&g| self.node_of(g)).collect();
        nodes.sort_unstable();
        let mut shape: SmallVec<[(NodeId, u32); 8]> = SmallVec::new();
        for node in nodes {
            match shape.last_mut() {
                Some((last, count)) if *last == node => *count += 1,
                _ => shape.push((node, 1)),
            }
        }
        shape
    }

    /// A GPU's position within its node (0 = the node's first GPU).
    pub fn local_index(&self, gpu: GpuId) -> u32 {
        gpu.0 - self.first_gpu[self.node_of(gpu).0 as usize]
    }

    /// The GPU at position `local` of `node`.
    pub fn gpu_at(&self, node: NodeId, local: u32) -> GpuId {
        GpuId(self.first_gpu[node.0 as usize] + local)
    }

    /// The GPUs of a node, as a range of ids.
    pub fn gpus_of(&self, node: NodeId) -> impl Iterator<Item = GpuId> + use<> {
        let first = self.first_gpu[node.0 as usize];
        (first..first + self.nodes[node.0 as usize].gpus).map(GpuId)
    }

    /// A one-line description, such as `36 v100 (36x1) + 36 p100 (36x1)`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (t, name) in self.gpu_types.iter().enumerate() {
            let nodes: Vec<&Node> = self
                .nodes
                .iter()
                .filter(|n| n.gpu_type.0 as usize == t)
                .collect();
            let mut shapes: Vec<u32> = nodes.iter().map(|n| n.gpus).collect();
            shapes.sort_unstable();
            shapes.dedup();
            let shapes: Vec<String> = shapes
                .iter()
                .map(|g| {
                    let count = nodes.iter().filter(|n| n.gpus == *g).count();
                    format!("{count}x{g}")
                })
                .collect();
            parts.push(format!(
                "{} {name} ({})",
                self.capacity[t],
                shapes.join(",")
            ));
        }
        parts.join(" + ")
    }
}

fn toml_from_str(text: &str) -> Result<ClusterFile, String> {
    toml::from_str(text).map_err(|e| e.to_string())
}

#[derive(Default)]
struct ClusterBuilder {
    gpu_types: Vec<String>,
    nodes: Vec<Node>,
    /// GPUs in `nodes`, at most [`MAX_GPUS`].
    gpus: u32,
}

impl ClusterBuilder {
    /// Adds `count` nodes of `gpus` GPUs each, or says which limit they would break (before allocating
    /// anything for them).
    fn add_nodes(
        &mut self,
        name: &str,
        count: u32,
        gpus: u32,
        cpus: u32,
        memory_gb: f64,
    ) -> Result<(), String> {
        let adding = u64::from(count) * u64::from(gpus);
        let total = u64::from(self.gpus) + adding;
        if total > u64::from(MAX_GPUS) {
            return Err(format!(
                "{count} nodes of {gpus} GPUs bring the cluster to {total} GPUs; at most {MAX_GPUS} are supported"
            ));
        }
        // After the GPUs: a count past their limit makes the default CPUs past this one.
        if cpus > MAX_NODE_CPUS {
            return Err(format!(
                "cpus = {cpus} is out of range: a node has at most {MAX_NODE_CPUS}"
            ));
        }
        if !(memory_gb.is_finite() && (0.0..=MAX_NODE_MEMORY_GB).contains(&memory_gb)) {
            return Err(format!(
                "memory_gb = {} is out of range: {}",
                crate::limits::number(memory_gb),
                crate::limits::Range::new(0.0, MAX_NODE_MEMORY_GB, crate::limits::Unit::NONE)
            ));
        }
        let name = name.trim().to_ascii_lowercase();
        let t = match self.gpu_types.iter().position(|n| *n == name) {
            Some(i) => i,
            None if self.gpu_types.len() >= MAX_GPU_TYPES => {
                return Err(format!(
                    "GPU type `{name}` would be type number {}; at most {MAX_GPU_TYPES} GPU types are supported",
                    self.gpu_types.len() + 1
                ));
            }
            None => {
                self.gpu_types.push(name);
                self.gpu_types.len() - 1
            }
        };
        self.gpus = total as u32;
        for _ in 0..count {
            self.nodes.push(Node {
                gpu_type: GpuTypeId(t as u16),
                gpus,
                cpus,
                memory_gb,
            });
        }
        Ok(())
    }

    fn build(self) -> Cluster {
        let mut first_gpu = Vec::with_capacity(self.nodes.len());
        let mut gpu_node = Vec::with_capacity(self.gpus as usize);
        let mut capacity = vec![0; self.gpu_types.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            first_gpu.push(gpu_node.len() as u32);
            gpu_node.extend(std::iter::repeat_n(NodeId(i as u32), node.gpus as usize));
            capacity[node.gpu_type.0 as usize] += node.gpus;
        }
        Cluster {
            gpu_types: self.gpu_types,
            nodes: self.nodes,
            first_gpu,
            gpu_node,
            capacity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_gpu_counts_and_node_shapes() {
        let c = Cluster::parse_spec("v100=36,p100=4x8", 1).unwrap();
        assert_eq!(c.gpu_types(), ["v100", "p100"]);
        assert_eq!(c.capacity(), [36, 32]);
        assert_eq!(c.nodes().len(), 40);
        assert_eq!(c.num_gpus(), 68);
        let last = NodeId(39);
        assert_eq!(c.gpus_of(last).collect::<Vec<_>>().len(), 8);
        assert_eq!(c.gpu_type_of(GpuId(67)), GpuTypeId(1));
        assert_eq!(c.describe(), "36 v100 (36x1) + 32 p100 (4x8)");
    }

    #[test]
    fn gpus_per_node_groups_plain_counts() {
        let c = Cluster::parse_spec("generic=16", 4).unwrap();
        assert_eq!(c.nodes().len(), 4);
        assert!(Cluster::parse_spec("generic=10", 4).is_err());
        // A gang's GPUs by node, in node order whatever their order.
        let gang = [GpuId(9), GpuId(1), GpuId(8), GpuId(0), GpuId(3)];
        let counts: Vec<(u32, u32)> = c
            .gpus_per_node(&gang)
            .iter()
            .map(|&(n, k)| (n.0, k))
            .collect();
        assert_eq!(counts, [(0, 3), (2, 2)]);
    }

    #[test]
    fn bad_specs_name_the_item() {
        for (spec, needle) in [
            ("v100", "missing `=`"),
            ("v100=abc", "not a whole number"),
            ("=4", "empty GPU type"),
            ("v100=0", "at least one"),
            ("", "no GPUs"),
        ] {
            let err = Cluster::parse_spec(spec, 1).unwrap_err().to_string();
            assert!(err.contains(needle), "{spec}: {err}");
        }
    }

    /// Sizes that once wrapped around (`65536x65536` made a cluster of 0 GPUs) or exhausted memory are
    /// refused before anything is allocated, naming the limit.
    #[test]
    fn oversized_clusters_name_the_limit() {
        for spec in [
            "v100=65536x65536",
            "v100=4294967295",
            "v100=1048577",
            "a=1048576,b=1",
        ] {
            let err = Cluster::parse_spec(spec, 1).unwrap_err().to_string();
            assert!(
                err.contains("at most 1048576 are supported"),
                "{spec}: {err}"
            );
        }
        assert_eq!(
            Cluster::parse_spec("v100=1024x1024", 1).unwrap().num_gpus(),
            MAX_GPUS
        );
        let err = Cluster::parse_toml(
            &Source("c.toml".into()),
            "[[nodes]]\ngpu_type = \"v100\"\ngpus = 2147483648\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("c.toml: nodes[0]: ") && err.contains("at most 1048576"),
            "{err}"
        );
        let err = Cluster::parse_toml(
            &Source("c.toml".into()),
            "[[nodes]]\ngpu_type = \"v100\"\ngpus = 1\nmemory_gb = nan\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("memory_gb = NaN"), "{err}");
        // Memory and CPUs past any server: a unit mistake, not a cluster.
        for (line, says) in [
            (
                "memory_gb = 1e300",
                "nodes[0]: memory_gb = 1e300 is out of range: must be at least 0 and at most 1e9",
            ),
            (
                "cpus = 4294967295",
                "nodes[0]: cpus = 4294967295 is out of range: a node has at most 16777216",
            ),
        ] {
            let err = Cluster::parse_toml(
                &Source("c.toml".into()),
                &format!("[[nodes]]\ngpu_type = \"v100\"\ngpus = 1\n{line}\n"),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains(says), "{line}: {err}");
        }
        let err = Cluster::try_from_nodes([("v100", 1, 1, f64::INFINITY)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("memory_gb = inf is out of range"), "{err}");
        // 65,537 types once wrapped the 16-bit type id around to type 0.
        let many: Vec<String> = (0..=MAX_GPU_TYPES).map(|t| format!("t{t}=1")).collect();
        let err = Cluster::parse_spec(&many.join(","), 1)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("item `t1024=1`") && err.contains("at most 1024 GPU types are supported"),
            "{err}"
        );
        let fits = Cluster::parse_spec(&many[..MAX_GPU_TYPES].join(","), 1).unwrap();
        assert_eq!(fits.gpu_types()[1023], "t1023");
        assert_eq!(fits.gpu_type_of(GpuId(1023)), GpuTypeId(1023));
    }

    #[test]
    fn reads_a_toml_cluster_file() {
        let text = "# a mixed cluster\n[[nodes]]\ngpu_type = \"v100\"\ncount = 2\ngpus = 8\ncpus = 48\n\n[[nodes]]\ngpu_type = \"t4\"\ngpus = 4\nmemory_gb = 192.5\n";
        let c = Cluster::parse_toml(&Source("c.toml".into()), text).unwrap();
        assert_eq!(c.capacity(), [16, 4]);
        assert_eq!(c.nodes()[0].cpus, 48);
        assert_eq!(c.nodes()[2].memory_gb, 192.5);
        assert_eq!(c.nodes()[2].cpus, 4 * DEFAULT_CPUS_PER_GPU);
        let err = Cluster::parse_toml(
            &Source("c.toml".into()),
            "[[nodes]]\ngpu_type = \"v100\"\nbogus = 1\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("c.toml") && err.contains("bogus"), "{err}");
    }
}
