//! Splitting a global batch over data-parallel replicas.

use serde::{Deserialize, Serialize};

use crate::PlanError;

/// How one optimizer step's samples are split: each of `dp` replicas runs `accum_steps`
/// micro-batches of `micro_batch` samples, so `micro_batch * accum_steps * dp == global_batch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BatchPlan {
    /// The global batch the job asked for.
    pub requested: u32,
    /// The global batch actually run; differs from `requested` only when rescaled.
    pub global_batch: u32,
    /// Data-parallel degree.
    pub dp: u32,
    /// Samples per micro-batch on one replica.
    pub micro_batch: u32,
    /// Micro-batches accumulated per optimizer step.
    pub accum_steps: u32,
}

impl BatchPlan {
    /// Splits `global_batch` over `dp` replicas.
    ///
    /// The rule: if `dp` divides `global_batch`, it is kept exactly. Otherwise, when
    /// `allow_rescale`, the global batch becomes the nearest multiple of `dp` (ties round down, and
    /// never below `dp`), else it is an error. The per-replica batch is then split into the largest
    /// micro-batch that divides it and is at most `max_micro_batch` (fewest accumulation steps,
    /// best GPU use), times the accumulation steps.
    pub fn fit(
        global_batch: u32,
        dp: u32,
        max_micro_batch: u32,
        allow_rescale: bool,
    ) -> Result<Self, PlanError> {
        if global_batch == 0 || dp == 0 || max_micro_batch == 0 {
            return Err(PlanError::InvalidSpec(
                "global batch, dp and max micro-batch must be at least 1",
            ));
        }
        let run = if global_batch.is_multiple_of(dp) {
            global_batch
        } else if allow_rescale {
            nearest_multiple(global_batch, dp)
        } else {
            return Err(PlanError::BatchIndivisible {
                global_batch,
                dps: vec![dp],
            });
        };
        let per_replica = run / dp;
        let micro_batch = largest_divisor_at_most(per_replica, max_micro_batch);
        let accum_steps = per_replica / micro_batch;
        Ok(Self {
            requested: global_batch,
            global_batch: run,
            dp,
            micro_batch,
            accum_steps,
        })
    }

    /// Whether the global batch differs from the one requested.
    pub fn rescaled(&self) -> bool {
        self.global_batch != self.requested
    }
}

/// The multiple of `dp` nearest `n`, at least `dp`. Ties go down, so a rescale grows the batch the
/// learning rate was tuned for only when that is strictly nearer.
fn nearest_multiple(n: u32, dp: u32) -> u32 {
    let down = n / dp * dp;
    match down.checked_add(dp) {
        Some(up) if down == 0 || up - n < n - down => up,
        _ => down,
    }
}

/// The largest divisor of `n` that is at most `cap`; 1 always qualifies. Walks divisor pairs up to
/// sqrt(n), so a huge prime batch costs thousands of steps, not billions.
fn largest_divisor_at_most(n: u32, cap: u32) -> u32 {
    let n = u64::from(n);
    (1..)
        .take_while(|d| d * d <= n)
        .filter(|&d| n.is_multiple_of(d))
        .flat_map(|d| [d, n / d])
        .filter(|&d| d <= u64::from(cap))
        .max()
        .map_or(1, |d| d as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_split_prefers_large_micro_batches() {
        let b = BatchPlan::fit(64, 4, 8, false).unwrap();
        assert_eq!((b.micro_batch, b.accum_steps, b.global_batch), (8, 2, 64));
        assert!(!b.rescaled());
        // Per-replica 12 with a cap of 5: 4 divides 12, 5 does not.
        let b = BatchPlan::fit(48, 4, 5, false).unwrap();
        assert_eq!((b.micro_batch, b.accum_steps), (4, 3));
    }

    #[test]
    fn indivisible_batch_errors_or_rescales_to_nearest() {
        let err = BatchPlan::fit(60, 8, 8, false).unwrap_err();
        assert_eq!(
            err,
            PlanError::BatchIndivisible {
                global_batch: 60,
                dps: vec![8]
            }
        );
        // 60 sits halfway between 56 and 64: ties go down.
        assert_eq!(BatchPlan::fit(60, 8, 8, true).unwrap().global_batch, 56);
        let b = BatchPlan::fit(62, 8, 8, true).unwrap();
        assert_eq!(
            (b.global_batch, b.micro_batch, b.accum_steps, b.rescaled()),
            (64, 8, 1, true)
        );
        // Fewer samples than replicas: one sample each.
        assert_eq!(BatchPlan::fit(3, 8, 8, true).unwrap().global_batch, 8);
    }

    #[test]
    fn divisor_search() {
        assert_eq!(largest_divisor_at_most(36, 10), 9);
        assert_eq!(largest_divisor_at_most(97, 96), 1);
        assert_eq!(
            largest_divisor_at_most(4_294_967_291, u32::MAX),
            4_294_967_291
        );
    }
}
