//! What a scheduler has learned about one job: the steps it measured on each GPU type (one per
//! configuration: nodes, replicas, per-replica batch; the first measurement of a configuration stands),
//! the step-time model fitted to them (refitted whenever a new configuration is measured), and the
//! job's gradient statistics at its current batch and epoch.

use std::collections::BTreeMap;

use super::perf::{Observation, PerfParams};

/// What a scheduler has learned about one job: its measured steps per GPU type, the step-time model
/// fitted to them, and its last gradient statistics.
#[derive(Clone, Debug, Default)]
pub struct Learned {
    /// By GPU type id: measurements by (nodes, replicas, per-replica batch).
    seen: BTreeMap<u16, BTreeMap<(u32, u32, u64), Observation>>,
    fitted: BTreeMap<u16, PerfParams>,
    /// Gradient statistics `(sqr, var)` last measured.
    pub grad: Option<(f64, f64)>,
}

impl Learned {
    /// Records a measurement on GPU type `gpu_type`; refits that type's model when the configuration is
    /// new. Returns whether it was new.
    pub fn observe(&mut self, gpu_type: u16, observation: Observation) -> bool {
        let key = key(&observation);
        let seen = self.seen.entry(gpu_type).or_default();
        if seen.contains_key(&key) {
            return false;
        }
        seen.insert(key, observation);
        let all: Vec<Observation> = seen.values().copied().collect();
        self.fitted.insert(gpu_type, PerfParams::fit(&all));
        true
    }

    /// Whether `observation`'s configuration on `gpu_type` is measured already (a new measurement of
    /// it would change nothing: the first stands).
    pub fn knows(&self, gpu_type: u16, observation: &Observation) -> bool {
        self.seen
            .get(&gpu_type)
            .is_some_and(|seen| seen.contains_key(&key(observation)))
    }

    /// Every measurement it holds, by GPU type.
    pub fn observations(&self) -> impl Iterator<Item = (u16, &Observation)> + '_ {
        self.seen
            .iter()
            .flat_map(|(&t, seen)| seen.values().map(move |o| (t, o)))
    }

    /// How many configurations it has measured on `gpu_type`.
    pub fn measured_on(&self, gpu_type: u16) -> usize {
        self.seen.get(&gpu_type).map_or(0, BTreeMap::len)
    }

    /// How many configurations it has measured, on all types: a new one means new models.
    pub fn measured(&self) -> usize {
        self.seen.values().map(BTreeMap::len).sum()
    }

    /// The model fitted on `gpu_type`, once the job has run there.
    pub fn params(&self, gpu_type: u16) -> Option<&PerfParams> {
        self.fitted.get(&gpu_type)
    }

    /// The GPU types it has a model for, in id order.
    pub fn types(&self) -> impl Iterator<Item = u16> + '_ {
        self.fitted.keys().copied()
    }

    /// The most replicas it has been measured with on `gpu_type` (0 if never).
    pub fn max_replicas_on(&self, gpu_type: u16) -> u32 {
        self.seen
            .get(&gpu_type)
            .and_then(|s| s.values().map(|o| o.replicas).max())
            .unwrap_or(0)
    }

    /// The most replicas it has been measured with on any type (0 if never).
    pub fn max_replicas(&self) -> u32 {
        self.seen
            .keys()
            .map(|&t| self.max_replicas_on(t))
            .max()
            .unwrap_or(0)
    }

    /// Whether it has run at all.
    pub fn has_run(&self) -> bool {
        !self.fitted.is_empty()
    }
}

/// A configuration: nodes, replicas, per-replica batch.
fn key(observation: &Observation) -> (u32, u32, u64) {
    (
        observation.nodes,
        observation.replicas,
        observation.local.to_bits(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(nodes: u32, replicas: u32, local: f64, step: f64) -> Observation {
        Observation {
            nodes,
            replicas,
            local,
            step_time: step,
            sync_time: step * 0.1,
        }
    }

    #[test]
    fn a_configuration_is_measured_once_and_refits_only_when_new() {
        let mut learned = Learned::default();
        assert!(!learned.has_run());
        assert!(learned.observe(0, obs(1, 1, 32.0, 0.1)));
        let first = *learned.params(0).unwrap();
        assert!(
            !learned.observe(0, obs(1, 1, 32.0, 0.5)),
            "the first stands"
        );
        assert_eq!(*learned.params(0).unwrap(), first);
        assert!(learned.observe(0, obs(1, 4, 32.0, 0.12)));
        assert_eq!(learned.max_replicas_on(0), 4);
        assert_eq!(learned.max_replicas_on(1), 0);
        assert!(learned.observe(1, obs(2, 8, 16.0, 0.2)));
        assert_eq!(learned.max_replicas(), 8);
        assert_eq!(learned.types().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(learned.measured(), 3);
        assert!(learned.knows(0, &obs(1, 4, 32.0, 9.0)));
        assert!(!learned.knows(1, &obs(1, 4, 32.0, 0.12)));
        assert_eq!((learned.measured_on(0), learned.measured_on(1)), (2, 1));
        assert_eq!(learned.observations().count(), 3);
    }

    #[test]
    fn a_live_measurement_is_a_step_without_accumulation() {
        let measured = gangway_protocol::worker::Measured {
            steps: 10,
            step_seconds: 1.0,
            sync_seconds: 0.2,
            replica_batch: 64,
            replicas: 4,
            accum_steps: 4,
            noise_scale: None,
            grad_sqr: None,
            grad_var: None,
        };
        let o = Observation::from_measured(2, &measured);
        // 0.8 s of compute over 4 micro-steps of 16: one of them, and the 0.2 s of sync.
        assert_eq!((o.nodes, o.replicas, o.local), (2, 4, 16.0));
        assert!((o.step_time - 0.4).abs() < 1e-12, "{o:?}");
        assert_eq!(o.sync_time, 0.2);
    }
}
