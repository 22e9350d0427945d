//! A job's moves from phase to phase, as the control plane publishes them on its event stream (the
//! state machine itself is [`crate::lifecycle::Phase`]; the cluster actor checks every move).

use gangway_core::job::JobId;
use serde::Serialize;

use crate::lifecycle::Phase;

/// A job moved, at this (control-plane) time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobEvent {
    /// The job.
    pub job: JobId,
    /// The phase it left.
    pub from: Phase,
    /// The phase it entered.
    pub to: Phase,
    /// When, in control-plane seconds.
    pub at: f64,
}
