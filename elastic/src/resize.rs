//! Whether a resize pays for its restart.

use std::fmt;

use serde::{Deserialize, Serialize};

/// When to accept a resize.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ResizePolicy {
    /// Extra fraction of the restart cost the saving must beat: 0.2 asks for 20% more. Restart
    /// costs and throughput estimates are noisy, and a resize that only breaks even is churn.
    pub margin: f64,
}

impl Default for ResizePolicy {
    fn default() -> Self {
        Self { margin: 0.2 }
    }
}

impl ResizePolicy {
    /// Decides whether to move from `current` to `new` throughput (any unit, the same for both),
    /// given a checkpoint-and-relaunch cost of `restart_cost_s` seconds and `remaining_s` seconds of
    /// work left at the current throughput.
    ///
    /// The work left takes `remaining_s * current / new` seconds after the resize; the difference to
    /// `remaining_s` is the time saved. Resize iff `saved_s > restart_cost_s * (1 + margin)`.
    /// Invalid inputs (NaN, zero or negative new throughput) make the comparison false: stay put.
    pub fn worth_resizing(
        &self,
        current: f64,
        new: f64,
        restart_cost_s: f64,
        remaining_s: f64,
    ) -> Decision {
        let work_after_s = if new > 0.0 {
            remaining_s * current / new
        } else {
            f64::INFINITY
        };
        let saved_s = remaining_s - work_after_s;
        let threshold_s = restart_cost_s * (1.0 + self.margin);
        Decision {
            resize: saved_s > threshold_s,
            remaining_s,
            after_resize_s: restart_cost_s + work_after_s,
            saved_s,
            restart_cost_s,
            threshold_s,
        }
    }
}

/// A resize decision with the numbers behind it, for logging.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Whether to resize.
    pub resize: bool,
    /// Seconds to finish without resizing.
    pub remaining_s: f64,
    /// Seconds to finish when resizing: restart plus the work at the new throughput.
    pub after_resize_s: f64,
    /// Seconds of work saved by the new throughput, before paying the restart.
    pub saved_s: f64,
    /// Seconds the checkpoint and relaunch cost.
    pub restart_cost_s: f64,
    /// Seconds `saved_s` had to exceed: the restart cost plus the margin.
    pub threshold_s: f64,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: saves {:.1}s of {:.1}s remaining; restart costs {:.1}s, needs > {:.1}s with margin",
            if self.resize { "resize" } else { "stay" },
            self.saved_s,
            self.remaining_s,
            self.restart_cost_s,
            self.threshold_s,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resizes_only_when_saving_beats_restart_and_margin() {
        let policy = ResizePolicy { margin: 0.5 };
        // Doubling throughput halves 1000s: saves 500s against a 300s restart (450s with margin).
        let d = policy.worth_resizing(10.0, 20.0, 300.0, 1000.0);
        assert!(d.resize);
        assert_eq!(
            (d.saved_s, d.threshold_s, d.after_resize_s),
            (500.0, 450.0, 800.0)
        );
        assert_eq!(
            d.to_string(),
            "resize: saves 500.0s of 1000.0s remaining; restart costs 300.0s, needs > 450.0s with margin"
        );
        // The same resize near the end of training does not pay.
        assert!(!policy.worth_resizing(10.0, 20.0, 300.0, 800.0).resize);
        // Without a margin, 400s saved beats a 300s restart.
        assert!(
            ResizePolicy { margin: 0.0 }
                .worth_resizing(10.0, 20.0, 300.0, 800.0)
                .resize
        );
    }

    #[test]
    fn shrinking_or_bad_inputs_stay() {
        let policy = ResizePolicy::default();
        let d = policy.worth_resizing(20.0, 10.0, 0.0, 1000.0);
        assert!(!d.resize && d.saved_s == -1000.0);
        assert!(!policy.worth_resizing(10.0, 0.0, 0.0, 1000.0).resize);
        assert!(!policy.worth_resizing(10.0, f64::NAN, 0.0, 1000.0).resize);
    }
}
