//! Where the control plane's GPUs are, and how `elastic-run` is told to run on them.

use gangway_protocol::ids::GpuId;

use super::launch::SpawnError;

/// Where the control plane's GPUs are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hosts {
    /// On this machine: the device index of each GPU id.
    Local(Vec<u32>),
    /// On Slurm's nodes: the node of each GPU id. Each start is an `elastic-run --backend slurm` on
    /// the nodes the placer chose, which Slurm launches and binds (`srun --gres`).
    Slurm(Vec<String>),
}

impl Hosts {
    /// `elastic-run`'s options for running on `gpus`.
    pub(super) fn placement_args(&self, gpus: &[GpuId]) -> Result<Vec<String>, SpawnError> {
        match self {
            Hosts::Local(devices) => {
                let mut listed = Vec::with_capacity(gpus.len());
                for gpu in gpus {
                    let device = devices.get(gpu.0 as usize).ok_or_else(|| {
                        SpawnError::Refused(format!("GPU {} has no device on this machine", gpu.0))
                    })?;
                    listed.push(device.to_string());
                }
                Ok(vec!["--devices".into(), listed.join(",")])
            }
            Hosts::Slurm(node_of) => {
                let mut nodes: Vec<(&str, u32)> = Vec::new();
                for gpu in gpus {
                    let node = node_of.get(gpu.0 as usize).ok_or_else(|| {
                        SpawnError::Refused(format!("GPU {} is on no Slurm node", gpu.0))
                    })?;
                    match nodes.iter_mut().find(|(n, _)| n == node) {
                        Some((_, count)) => *count += 1,
                        None => nodes.push((node, 1)),
                    }
                }
                // torchrun starts as many workers on every node. (The daemon's placer spreads gangs
                // evenly on Slurm; should one come uneven, it goes back to the queue and pauses,
                // counted as its own failed start: a placement that comes back uneven every round
                // would otherwise preempt others every round.)
                if nodes.iter().any(|&(_, c)| c != nodes[0].1) {
                    let shape: Vec<String> =
                        nodes.iter().map(|(n, c)| format!("{c} on {n}")).collect();
                    return Err(SpawnError::Failed(format!(
                        "its GPUs are spread unevenly ({}); torchrun needs as many on every node",
                        shape.join(", ")
                    )));
                }
                let names: Vec<&str> = nodes.iter().map(|&(n, _)| n).collect();
                Ok(vec![
                    "--backend".into(),
                    "slurm".into(),
                    "--nodes".into(),
                    nodes.len().to_string(),
                    "--nodelist".into(),
                    names.join(","),
                ])
            }
        }
    }
    /// How many machines `gpus` are on.
    pub(super) fn count(&self, gpus: &[GpuId]) -> usize {
        match self {
            Hosts::Local(_) => 1,
            Hosts::Slurm(node_of) => {
                let mut nodes: Vec<Option<&String>> =
                    gpus.iter().map(|g| node_of.get(g.0 as usize)).collect();
                nodes.sort_unstable();
                nodes.dedup();
                nodes.len()
            }
        }
    }
}

/// The Slurm job name of an attempt's step (`elastic-run` names its step after its [`super::ATTEMPT_VAR`]).
pub fn slurm_job_name(marker: &str) -> String {
    format!("gangway-{marker}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_gangs_run_on_their_nodes_and_only_evenly() {
        let hosts = Hosts::Slurm(["a", "a", "b", "b", "c"].map(String::from).to_vec());
        let gpus = |ids: &[u32]| ids.iter().map(|&g| GpuId(g)).collect::<Vec<_>>();
        let Ok(args) = hosts.placement_args(&gpus(&[0, 1, 2, 3])) else {
            panic!("an even gang runs")
        };
        assert_eq!(
            args,
            ["--backend", "slurm", "--nodes", "2", "--nodelist", "a,b"]
        );
        assert_eq!(hosts.count(&gpus(&[0, 1, 2, 3])), 2);
        // 2 on a, 1 on c: back to the queue, not a failure of the job.
        assert!(matches!(
            hosts.placement_args(&gpus(&[0, 1, 4])),
            Err(SpawnError::Failed(why)) if why.contains("2 on a, 1 on c")
        ));
        let local = Hosts::Local(vec![3, 5]);
        assert!(matches!(local.placement_args(&gpus(&[1])), Ok(a) if a == ["--devices", "5"]));
        assert!(matches!(
            local.placement_args(&gpus(&[2])),
            Err(SpawnError::Refused(_))
        ));
    }
}
