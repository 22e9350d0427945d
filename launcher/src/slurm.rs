//! The Slurm backend: a job across nodes is one `srun` step that starts one torchrun agent per node,
//! with c10d rendezvous hosted on the first node. Slurm, an existing engine, does the remote launching,
//! the GPU binding (`--gres`, which sets `CUDA_VISIBLE_DEVICES` on every node) and the cleanup
//! (`scancel`); gangway picks the nodes and plans the parallel layout.
//!
//! Checkpoints and the stop file must be on storage every node sees, as for any multi-node training.

use std::process::{Command, Stdio};

use gangway_elastic::{HostOffer, Plan};

/// Why Slurm could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// A Slurm command could not be run, or failed.
    #[error("running `{command}`: {cause}")]
    Command {
        /// The command line.
        command: String,
        /// Why: the error starting it, or what it wrote to stderr.
        cause: String,
    },
    /// Slurm has no nodes that fit the job (too few, too small, or not the ones named).
    #[error("{0}")]
    Placement(String),
}

/// A node, as `scontrol show node` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmNode {
    /// Its `NodeName`.
    pub name: String,
    /// Where its services listen (the c10d store on the first node binds here).
    pub addr: String,
    /// GPUs its GRES declares.
    pub gpus: u32,
    /// The GPUs' type from its GRES (`gpu:a100:8` is `a100`), or `gpu` where the GRES names none.
    pub gpu_type: String,
    /// Its `CPUTot`: CPUs Slurm counts on it.
    pub cpus: u32,
    /// Its `RealMemory`, in MB.
    pub memory_mb: u64,
    /// The partitions it is in.
    pub partitions: Vec<String>,
    /// Slurm's state, as `IDLE`, `MIXED`, `ALLOCATED`, `IDLE+DRAIN` or `DOWN*`.
    pub state: String,
}

/// State flags that take a node out of service.
const OUT_OF_SERVICE: [&str; 6] = [
    "DRAIN",
    "RESERVED",
    "POWER",
    "MAINT",
    "FAIL",
    "NOT_RESPONDING",
];

impl SlurmNode {
    /// Idle, and not draining, reserved, powered down or unreachable (`*`).
    pub fn is_free(&self) -> bool {
        self.in_service() && self.state.to_ascii_uppercase().split('+').next() == Some("IDLE")
    }

    /// Up and taking work (idle, or running some), not draining, reserved for others, powered down
    /// or unreachable (`*`): what a scheduler that owns the node may place on.
    pub fn in_service(&self) -> bool {
        let state = self.state.to_ascii_uppercase();
        let mut flags = state.split('+');
        let base = flags.next().unwrap_or("");
        ["IDLE", "MIXED", "ALLOCATED", "ALLOC", "COMPLETING"].contains(&base)
            && !state.ends_with('*')
            && flags.all(|f| !OUT_OF_SERVICE.iter().any(|bad| f.contains(bad)))
    }
}

fn run(program: &str, args: &[&str]) -> Result<String, SlurmError> {
    let failed = |cause: String| SlurmError::Command {
        command: format!("{program} {}", args.join(" ")),
        cause,
    };
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| failed(format!("{e} (is Slurm installed, and SLURM_CONF set?)")))?;
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every node Slurm knows, in its order.
pub fn nodes() -> Result<Vec<SlurmNode>, SlurmError> {
    Ok(parse_nodes(&run(
        "scontrol",
        &["show", "node", "--oneliner"],
    )?))
}

/// Parses `scontrol show node --oneliner`: one `Key=Value ...` line per node.
pub fn parse_nodes(text: &str) -> Vec<SlurmNode> {
    text.lines()
        .filter_map(|line| {
            let field = |key: &str| {
                line.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            };
            let name = field("NodeName")?.to_owned();
            Some(SlurmNode {
                addr: field("NodeAddr").unwrap_or(&name).to_owned(),
                gpus: field("Gres").map_or(0, gpu_count),
                gpu_type: field("Gres").and_then(gpu_type).unwrap_or("gpu").to_owned(),
                cpus: field("CPUTot").and_then(|c| c.parse().ok()).unwrap_or(0),
                memory_mb: field("RealMemory")
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(0),
                partitions: field("Partitions")
                    .filter(|p| *p != "(null)")
                    .map(|p| p.split(',').map(str::to_owned).collect())
                    .unwrap_or_default(),
                state: field("State").unwrap_or("UNKNOWN").to_owned(),
                name,
            })
        })
        .collect()
}

/// GPUs in a `Gres=` value: `gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:2,shard:8` (0 for `(null)`).
fn gpu_count(gres: &str) -> u32 {
    gres.split(',')
        .filter(|g| g.starts_with("gpu:"))
        .filter_map(|g| g.split('(').next()?.rsplit(':').next()?.parse::<u32>().ok())
        .sum()
}

/// The type of the first GPU GRES with one: `gpu:a100:4(S:0-1)` is `a100`; `gpu:4` has none.
fn gpu_type(gres: &str) -> Option<&str> {
    gres.split(',').find_map(|g| {
        let mut parts = g.split('(').next()?.split(':');
        (parts.next()? == "gpu").then_some(())?;
        let (kind, count) = (parts.next()?, parts.next()?);
        count.parse::<u32>().ok().map(|_| kind)
    })
}

/// The nodes of `partition` (every node without one), in Slurm's order.
pub fn partition_nodes(partition: Option<&str>) -> Result<Vec<SlurmNode>, SlurmError> {
    let all = nodes()?;
    Ok(match partition {
        None => all,
        Some(p) => {
            let nodes: Vec<SlurmNode> = all
                .into_iter()
                .filter(|n| n.partitions.iter().any(|q| q == p))
                .collect();
            if nodes.is_empty() {
                return Err(SlurmError::Placement(format!(
                    "Slurm's partition {p} has no nodes (sinfo lists the partitions)"
                )));
            }
            nodes
        }
    })
}

/// Every user's Slurm jobs: (job id, name). A root daemon's attempts of another user run as them.
pub fn queue() -> Result<Vec<(String, String)>, SlurmError> {
    Ok(run("squeue", &["--noheader", "--format=%i %j"])?
        .lines()
        .filter_map(|l| {
            let (id, name) = l.trim().split_once(' ')?;
            Some((id.to_owned(), name.trim().to_owned()))
        })
        .collect())
}

/// The names in a Slurm host list (`node[1-3],gpu7`), as `scontrol show hostnames` expands them.
pub fn expand(list: &str) -> Result<Vec<String>, SlurmError> {
    Ok(run("scontrol", &["show", "hostnames", list])?
        .split_whitespace()
        .map(str::to_owned)
        .collect())
}

/// The nodes a job runs on, each giving it the same number of GPUs (torchrun starts the same number
/// of workers on every node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The nodes, in order: the first hosts the c10d rendezvous.
    pub nodes: Vec<SlurmNode>,
    /// GPUs the job uses on each node.
    pub gpus_per_node: u32,
}

/// Picks `count` nodes with `gpus_per_node` GPUs each: the nodes of `wanted`, in that order, or else
/// the first free ones.
pub fn choose(
    all: &[SlurmNode],
    wanted: Option<&[String]>,
    count: u32,
    gpus_per_node: u32,
) -> Result<Allocation, SlurmError> {
    let fits = |n: &&SlurmNode| n.gpus >= gpus_per_node;
    let nodes: Vec<SlurmNode> = match wanted {
        Some(names) => {
            let mut nodes = Vec::new();
            for name in names {
                let node = all
                    .iter()
                    .find(|n| &n.name == name)
                    .ok_or_else(|| SlurmError::Placement(format!("Slurm has no node {name}")))?;
                if !fits(&node) {
                    return Err(SlurmError::Placement(format!(
                        "node {name} has {} GPUs; the job needs {gpus_per_node} per node",
                        node.gpus
                    )));
                }
                nodes.push(node.clone());
            }
            nodes
        }
        None => all
            .iter()
            .filter(|n| n.is_free())
            .filter(fits)
            .take(count as usize)
            .cloned()
            .collect(),
    };
    if nodes.len() != count as usize {
        return Err(SlurmError::Placement(format!(
            "the job needs {count} nodes with {gpus_per_node} GPUs each; {} {}",
            nodes.len(),
            if wanted.is_some() {
                "were named"
            } else {
                "are free"
            }
        )));
    }
    Ok(Allocation {
        nodes,
        gpus_per_node,
    })
}

impl Allocation {
    /// What the planner may use: every node's first `gpus_per_node` local GPUs.
    pub fn offer(&self) -> Vec<HostOffer> {
        self.nodes
            .iter()
            .map(|n| HostOffer::new(n.name.clone(), 0..self.gpus_per_node))
            .collect()
    }

    /// The nodes `plan` uses and the workers on each; an error when they differ between nodes.
    pub fn used(&self, plan: &Plan) -> Result<(Vec<&SlurmNode>, u32), SlurmError> {
        let per_host = plan.cuda_visible_devices();
        let workers = per_host
            .first()
            .map_or(0, |(_, devices)| devices.split(',').count() as u32);
        if let Some((host, devices)) = per_host
            .iter()
            .find(|(_, d)| d.split(',').count() as u32 != workers)
        {
            return Err(SlurmError::Placement(format!(
                "the plan puts {} workers on {host} but {workers} on the first node; torchrun needs \
                 the same number on every node",
                devices.split(',').count()
            )));
        }
        let nodes = per_host
            .iter()
            .filter_map(|(host, _)| self.nodes.iter().find(|n| &n.name == host))
            .collect();
        Ok((nodes, workers))
    }

    /// `srun` for one torchrun agent on each node `plan` uses, named `name` (for `scancel --name`).
    /// The caller appends `python -m torch.distributed.run` and its arguments, which must include
    /// [`Allocation::torchrun_options`].
    pub fn srun(&self, plan: &Plan, name: &str) -> Result<Command, SlurmError> {
        let (nodes, workers) = self.used(plan)?;
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let mut command = Command::new("srun");
        command
            .arg(format!("--job-name={name}"))
            .arg(format!("--nodes={}", nodes.len()))
            .arg(format!("--ntasks={}", nodes.len()))
            .arg("--ntasks-per-node=1")
            .arg(format!("--nodelist={}", names.join(",")))
            .arg(format!("--gres=gpu:{workers}"))
            // One agent failing ends the others: gangway decides what happens next.
            .arg("--kill-on-bad-exit=1")
            .arg("--export=ALL");
        Ok(command)
    }

    /// torchrun's options for a multi-node launch: c10d rendezvous on the first node, under a new id.
    pub fn torchrun_options(
        &self,
        plan: &Plan,
        rdzv_id: &str,
        port: u16,
    ) -> Result<Vec<String>, SlurmError> {
        let (nodes, workers) = self.used(plan)?;
        Ok(vec![
            format!("--nnodes={}", nodes.len()),
            format!("--nproc-per-node={workers}"),
            "--max-restarts=0".into(),
            "--rdzv-backend=c10d".into(),
            format!("--rdzv-endpoint={}:{port}", nodes[0].addr),
            format!("--rdzv-id={rdzv_id}"),
        ])
    }

    /// A port for the rendezvous store: a free one when the first node is this machine, else one
    /// derived from `seed` in 29500..30500 (the range torchrun users expect to be open).
    pub fn rendezvous_port(&self, seed: &str) -> u16 {
        let addr = self.nodes.first().map_or("", |n| n.addr.as_str());
        if (addr == "127.0.0.1" || addr == "localhost")
            && let Ok(port) =
                std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr())
        {
            return port.port();
        }
        let hash = seed
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        29500 + (hash % 1000) as u16
    }
}

/// Cancels the Slurm jobs named `name` (best effort: at worst they have ended already).
pub fn cancel(name: &str) {
    let _ = scancel(&format!("--name={name}")).status();
}

/// Starts cancelling the Slurm jobs named `name`, without waiting for `scancel`: a
/// controller that does not answer holds `scancel` for its message timeout and retries, and the
/// daemon's control plane must not wait that long. The caller reaps the child.
pub fn start_cancel(name: &str) -> std::io::Result<std::process::Child> {
    started(scancel(&format!("--name={name}")))
}

/// Starts cancelling the Slurm job `id`, as [`start_cancel`] does.
pub fn start_cancel_id(id: &str) -> std::io::Result<std::process::Child> {
    started(scancel(id))
}

/// `scancel` of `jobs` (an id, or `--name=NAME`), whoever's they are: a root daemon's attempt of
/// another user runs as them (an attempt's name is its daemon's alone: see
/// `executor::slurm_job_name`; as another user, `scancel` can cancel only that user's).
fn scancel(jobs: &str) -> Command {
    let mut command = Command::new("scancel");
    command.args(["--quiet", jobs]);
    command
}

/// `command` started without waiting for it, nothing to read from it.
fn started(mut command: Command) -> std::io::Result<std::process::Child> {
    command.stdin(Stdio::null()).stdout(Stdio::null()).spawn()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_elastic::{JobSpec, plan};

    const SCONTROL: &str = "\
NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 NodeAddr=10.0.0.1 NodeHostName=vm Gres=gpu:4 State=IDLE ThreadsPerCore=1
NodeName=node2 Arch=x86_64 NodeAddr=10.0.0.2 Gres=gpu:a100:4(S:0-1) State=MIXED
NodeName=node3 NodeAddr=10.0.0.3 Gres=gpu:4 State=IDLE+DRAIN
NodeName=node4 NodeAddr=10.0.0.4 Gres=gpu:2,shard:8 State=IDLE
NodeName=node5 NodeAddr=10.0.0.5 Gres=(null) State=IDLE
NodeName=node6 NodeAddr=10.0.0.6 Gres=gpu:4 State=DOWN*
NodeName=node7 NodeAddr=10.0.0.7 Gres=gpu:4 State=IDLE+RESERVED
NodeName=node8 NodeAddr=10.0.0.8 Gres=gpu:4 State=IDLE+CLOUD
";

    #[test]
    fn nodes_say_their_gpu_type_resources_partitions_and_whether_they_serve() {
        let nodes = parse_nodes(&SCONTROL.replace(
            "NodeHostName=vm",
            "NodeHostName=vm CPUTot=2 RealMemory=2000 Partitions=gpu,debug",
        ));
        let node1 = &nodes[0];
        assert_eq!(
            (node1.gpu_type.as_str(), node1.cpus, node1.memory_mb),
            ("gpu", 2, 2000)
        );
        assert_eq!(node1.partitions, ["gpu", "debug"]);
        assert_eq!(nodes[1].gpu_type, "a100");
        let serving: Vec<bool> = nodes.iter().map(SlurmNode::in_service).collect();
        // MIXED serves (its other GPUs are free); drained, down, reserved do not.
        assert_eq!(serving, [true, true, false, true, true, false, false, true]);
    }

    #[test]
    fn nodes_are_read_from_scontrol_with_their_gpus_and_state() {
        let nodes = parse_nodes(SCONTROL);
        let summary: Vec<(&str, &str, u32, bool)> = nodes
            .iter()
            .map(|n| (n.name.as_str(), n.addr.as_str(), n.gpus, n.is_free()))
            .collect();
        assert_eq!(
            summary,
            [
                ("node1", "10.0.0.1", 4, true),
                ("node2", "10.0.0.2", 4, false),
                ("node3", "10.0.0.3", 4, false),
                ("node4", "10.0.0.4", 2, true),
                ("node5", "10.0.0.5", 0, true),
                ("node6", "10.0.0.6", 4, false),
                ("node7", "10.0.0.7", 4, false),
                ("node8", "10.0.0.8", 4, true),
            ]
        );
    }

    #[test]
    fn free_nodes_with_enough_gpus_are_chosen_unless_named() {
        let nodes = parse_nodes(SCONTROL);
        let names = |a: &Allocation| a.nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(&choose(&nodes, None, 2, 2).unwrap()),
            ["node1", "node4"]
        );
        let err = choose(&nodes, None, 3, 4).unwrap_err().to_string();
        assert!(
            err.contains("needs 3 nodes with 4 GPUs each; 2 are free"),
            "{err}"
        );
        let wanted = ["node6".to_owned(), "node2".to_owned()];
        assert_eq!(names(&choose(&nodes, Some(&wanted), 2, 4).unwrap()), wanted);
        let err = choose(&nodes, Some(&["node9".into()]), 1, 1).unwrap_err();
        assert_eq!(err.to_string(), "Slurm has no node node9");
    }

    #[test]
    fn srun_starts_one_agent_per_node_and_torchrun_meets_on_the_first() {
        let nodes = parse_nodes(SCONTROL);
        let alloc = choose(&nodes, Some(&["node2".into(), "node1".into()]), 2, 2).unwrap();
        let spec = JobSpec {
            tp: 1,
            pp: 1,
            min_gpus: 1,
            max_gpus: 4,
            global_batch: 8,
            max_micro_batch: 8,
            rescale_batch: true,
        };
        let plan = plan(&spec, &alloc.offer()).unwrap();
        let args = |c: &Command| {
            c.get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            args(&alloc.srun(&plan, "job-a").unwrap()),
            [
                "--job-name=job-a",
                "--nodes=2",
                "--ntasks=2",
                "--ntasks-per-node=1",
                "--nodelist=node2,node1",
                "--gres=gpu:2",
                "--kill-on-bad-exit=1",
                "--export=ALL"
            ]
        );
        assert_eq!(
            alloc.torchrun_options(&plan, "job-a-0", 29400).unwrap(),
            [
                "--nnodes=2",
                "--nproc-per-node=2",
                "--max-restarts=0",
                "--rdzv-backend=c10d",
                "--rdzv-endpoint=10.0.0.2:29400",
                "--rdzv-id=job-a-0"
            ]
        );
        let port = alloc.rendezvous_port("job-a");
        assert!((29500..30500).contains(&port), "{port}");
    }
}
