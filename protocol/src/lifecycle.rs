//! A job's lifecycle as an explicit state machine. Every move is checked; an illegal one is a typed
//! error, never a silent overwrite.

use serde::{Deserialize, Serialize};

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Submitted, waiting for the policy to give it GPUs.
    Pending,
    /// The policy gave it GPUs; its gang is being leased.
    Placing,
    /// Its GPUs are leased; its workers are being launched.
    Starting,
    /// Its workers run.
    Running,
    /// Its workers were asked to save a checkpoint and exit.
    Checkpointing,
    /// Stopped with a checkpoint, waiting for GPUs again.
    Preempted,
    /// Stopped with a checkpoint, to be relaunched at another world size.
    Resizing,
    /// Stopped with a checkpoint, to be relaunched on other GPUs.
    Migrating,
    /// Its workers completed its work (terminal).
    Finished,
    /// Its workers failed with a user error, could not be launched (their command was refused, or
    /// its starts kept failing), or crashed more often than the restart budget allows (terminal).
    Failed,
    /// Cancelled before it ended (`DELETE /jobs/{id}`, or the embedded plane's `cancel`; terminal).
    Cancelled,
}

impl Phase {
    /// Every phase, in the order of a job's life.
    pub const ALL: [Phase; 11] = [
        Phase::Pending,
        Phase::Placing,
        Phase::Starting,
        Phase::Running,
        Phase::Checkpointing,
        Phase::Preempted,
        Phase::Resizing,
        Phase::Migrating,
        Phase::Finished,
        Phase::Failed,
        Phase::Cancelled,
    ];

    /// A job in a terminal phase never moves again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Finished | Phase::Failed | Phase::Cancelled)
    }

    /// Whether the job holds GPUs in this phase.
    pub fn holds_gpus(self) -> bool {
        matches!(
            self,
            Phase::Starting | Phase::Running | Phase::Checkpointing
        )
    }

    /// Whether the state machine allows `self -> to`.
    pub fn allows(self, to: Phase) -> bool {
        use Phase::*;
        if self.is_terminal() {
            return false;
        }
        match to {
            // Anything alive can be cancelled.
            Cancelled => true,
            // Back to the queue: a lease or launch that failed, or workers lost in a crash.
            Pending => matches!(self, Placing | Starting | Running | Resizing | Migrating),
            Placing => matches!(self, Pending | Preempted),
            Starting => matches!(self, Placing | Resizing | Migrating),
            Running => self == Starting,
            Checkpointing => self == Running,
            Preempted | Resizing | Migrating => self == Checkpointing,
            Finished => self == Running,
            // Its workers failed, or (waiting) its starts kept failing.
            Failed => matches!(self, Pending | Starting | Running | Checkpointing),
        }
    }

    /// Moves to `to`, or says why it cannot.
    pub fn advance(&mut self, to: Phase) -> Result<(), IllegalTransition> {
        if !self.allows(to) {
            return Err(IllegalTransition { from: *self, to });
        }
        *self = to;
        Ok(())
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = serde_json::to_value(self).ok();
        let name = name.as_ref().and_then(|v| v.as_str()).unwrap_or("?");
        f.write_str(name)
    }
}

/// A move the state machine forbids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("illegal job transition {from} -> {to}")]
pub struct IllegalTransition {
    /// The phase the job was in.
    pub from: Phase,
    /// The phase it was asked to move to.
    pub to: Phase,
}

#[cfg(test)]
mod tests {
    use super::Phase::*;
    use super::*;

    const ALL: [Phase; 11] = [
        Pending,
        Placing,
        Starting,
        Running,
        Checkpointing,
        Preempted,
        Resizing,
        Migrating,
        Finished,
        Failed,
        Cancelled,
    ];

    #[test]
    fn the_usual_lives_are_legal() {
        let lives: [&[Phase]; 5] = [
            // Its starts failed until it gave up.
            &[
                Placing, Starting, Pending, Placing, Starting, Pending, Failed,
            ],
            &[Placing, Starting, Running, Finished],
            &[
                Placing,
                Starting,
                Running,
                Checkpointing,
                Preempted,
                Placing,
                Starting,
                Running,
                Finished,
            ],
            &[
                Placing,
                Starting,
                Running,
                Checkpointing,
                Migrating,
                Starting,
                Running,
                Failed,
            ],
            &[
                Placing,
                Starting,
                Running,
                Checkpointing,
                Resizing,
                Starting,
                Running,
                Cancelled,
            ],
        ];
        for life in lives {
            let mut phase = Pending;
            for &to in life {
                phase.advance(to).unwrap();
            }
        }
    }

    #[test]
    fn terminal_phases_never_move() {
        for from in [Finished, Failed, Cancelled] {
            for to in ALL {
                let mut phase = from;
                assert_eq!(phase.advance(to), Err(IllegalTransition { from, to }));
                assert_eq!(phase, from, "a refused move leaves the phase alone");
            }
        }
    }

    #[test]
    fn a_job_cannot_skip_its_gang_lease_or_its_checkpoint() {
        assert!(!Pending.allows(Running));
        assert!(!Pending.allows(Starting));
        assert!(
            !Running.allows(Preempted),
            "preemption goes through a checkpoint"
        );
        assert!(!Running.allows(Migrating));
        assert!(
            !Preempted.allows(Starting),
            "a preempted job leases a gang again"
        );
        assert_eq!(
            Running.to_string() + "/" + &Checkpointing.to_string(),
            "running/checkpointing"
        );
    }

    #[test]
    fn gpus_are_held_only_between_lease_and_checkpoint() {
        let holding: Vec<Phase> = ALL.into_iter().filter(|p| p.holds_gpus()).collect();
        assert_eq!(holding, [Starting, Running, Checkpointing]);
    }
}
