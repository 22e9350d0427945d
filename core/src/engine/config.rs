//! What the engine is told: round length, costs, and when to schedule between rounds.

use serde::{Deserialize, Serialize};

/// Engine settings, shared by the simulator (inside its `SimConfig`) and the live plane.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EngineConfig {
    /// Seconds per round (Gavel: 360).
    pub round_length: f64,
    /// Seconds to checkpoint a preempted job.
    pub preempt_cost: f64,
    /// Seconds to restore a job from its checkpoint when it starts again.
    pub restore_cost: f64,
    /// Seconds lost when a running job moves to other GPUs.
    pub migrate_cost: f64,
    /// Run a scheduling pass when a job arrives, not only at round boundaries.
    pub schedule_on_arrival: bool,
    /// Run a scheduling pass when a job finishes, not only at round boundaries.
    pub schedule_on_completion: bool,
    /// Check the invariants after every scheduling pass and panic on a violation (for tests).
    #[serde(default)]
    pub audit: bool,
}

impl EngineConfig {
    /// The shortest round the engine accepts, in seconds: shorter rounds only spin.
    pub const MIN_ROUND_SECONDS: f64 = 1.0;
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            round_length: 360.0,
            preempt_cost: 0.0,
            restore_cost: 0.0,
            migrate_cost: 0.0,
            schedule_on_arrival: false,
            schedule_on_completion: false,
            audit: false,
        }
    }
}
