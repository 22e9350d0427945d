//! The engine's invariants, checked on demand (tests and `EngineConfig::audit`).

use super::Engine;
use crate::cluster::GpuTypeId;

impl Engine<'_> {
    /// Panics if an invariant does not hold: every running job holds exactly its gang, of one type it can
    /// run on; no GPU is held twice, except by two packing partners; the free count matches; nothing
    /// finished is running; no server holds more CPUs or memory than it has; the paused jobs are
    /// listed once each.
    pub fn audit(&self) {
        let cluster = &self.cluster;
        let mut holder: Vec<Option<usize>> = vec![None; cluster.num_gpus() as usize];
        let mut held_per_type = vec![0u32; self.types()];
        for &(order, i) in &self.active {
            assert_eq!(
                self.states[i].run.is_some(),
                self.running.contains(&(order, i)),
                "job {}: the running set disagrees with its run",
                self.jobs[i].id
            );
            let Some(run) = &self.states[i].run else {
                continue;
            };
            let job = &self.jobs[i];
            // Its requested gang, or a size its throughput model runs it at (a resized job): never a
            // partial gang.
            assert!(
                self.rate_at(i, run.gpu_type, run.gpus.len() as u32) > 0.0,
                "job {} holds {} GPUs, a gang it cannot run on",
                job.id,
                run.gpus.len()
            );
            assert!(
                self.records[i].finish.is_none(),
                "finished job {} still runs",
                job.id
            );
            for &g in &run.gpus {
                assert!(
                    run.mixed || cluster.gpu_type_of(g) == run.gpu_type,
                    "job {} spans GPU types without a mixed grant",
                    job.id
                );
                match holder[g.0 as usize].replace(i) {
                    None => held_per_type[cluster.gpu_type_of(g).0 as usize] += 1,
                    // Two jobs may share a GPU only as each other's packing partner.
                    Some(other)
                        if run.partner == Some(other)
                            && self.states[other].run.as_ref().and_then(|r| r.partner)
                                == Some(i) => {}
                    Some(other) => panic!(
                        "GPU {} held by jobs {} and {}",
                        g.0, self.jobs[other].id, job.id
                    ),
                }
                assert!(!self.free.is_free(g), "GPU {} is held but marked free", g.0);
            }
        }
        for (t, &held) in held_per_type.iter().enumerate() {
            let capacity = self.capacity[t];
            assert!(held <= capacity, "type {t}: {held} GPUs held of {capacity}");
            assert_eq!(
                held + self.free.free_of_type(GpuTypeId(t as u16)),
                capacity,
                "type {t}: free count drifted"
            );
        }
        if let Some((node, cpus, memory)) = self.ledger.overcommitted(cluster) {
            let n = cluster.node(node);
            panic!(
                "server {} holds {cpus} CPUs and {memory} GB of {} and {} GB",
                node.0, n.cpus, n.memory_gb
            );
        }
        // The ledger matches the runs' allotments.
        let mut expected = crate::placement::Ledger::new(cluster);
        assert!(
            self.running.iter().all(|r| self.active.contains(r)),
            "a job runs that is not active"
        );
        for &(_, i) in &self.active {
            if let Some(run) = &self.states[i].run {
                let weight = super::runs::pair_weight(run.partner.is_some());
                expected.charge(cluster, &run.gpus, run.allotment.as_ref(), weight, 1.0);
            }
        }
        for n in 0..cluster.nodes().len() {
            let node = crate::cluster::NodeId(n as u32);
            assert!(
                (expected.cpus_used(node) - self.ledger.cpus_used(node)).abs() < 1e-3
                    && (expected.memory_used(node) - self.ledger.memory_used(node)).abs() < 1e-3,
                "server {n}: CPUs and memory charged drifted from the runs' allotments"
            );
        }
        assert_eq!(
            held_per_type.iter().sum::<u32>(),
            self.busy.gpus,
            "busy count drifted"
        );
        // The paused jobs are listed once each, active and waiting: the policy's count of the jobs
        // it sees depends on it.
        let paused = (self.active.iter())
            .filter(|&&(_, i)| self.states[i].deferred_until.is_some())
            .count();
        assert!(
            paused == self.deferred.len()
                && self.deferred.iter().all(|&i| {
                    let state = &self.states[i];
                    state.active && state.run.is_none() && state.deferred_until.is_some()
                }),
            "the paused jobs drifted from their list"
        );
    }
}
