//! A job's GPU history (`GET /gpu-history`): where its count of GPUs changed, its last
//! [`GPU_HISTORY_POINTS`] points.

use std::sync::Arc;

use gangway_protocol::api::{GPU_HISTORY_POINTS, GpuCount};
use smallvec::SmallVec;

/// The newest points, held apart from the older ones: at most this many are copied when a point is
/// added while a view shares the history.
const RECENT: usize = 8;

/// A job's GPU history, shared between its handle and the views that show it (copied on write).
/// It is kept in two parts, so that a point added while a view shares it copies at most the
/// [`RECENT`] newest points rather than all of them: a las round at 16,384 GPUs preempts and
/// resumes thousands of jobs, and copying each one's whole history was a fifteenth of the round.
/// An empty part holds no allocation (most jobs that never ran).
#[derive(Clone, Default)]
pub(super) struct GpuHistory {
    /// The older points, oldest first (at most [`GPU_HISTORY_POINTS`]).
    earlier: Option<Arc<Vec<GpuCount>>>,
    /// The newer points, oldest first (at most [`RECENT`]).
    recent: Option<Arc<SmallVec<[GpuCount; RECENT]>>>,
}

impl GpuHistory {
    /// Adds "`gpus` from `at` on": a point only where the count changes; one at the same second as
    /// the last replaces it (a move decided and carried out at once is not a stop), or removes it
    /// where that undoes the point before.
    pub fn note(&mut self, at: f64, gpus: u32) {
        let point = GpuCount { at, gpus };
        match self.nth_back(0) {
            Some(last) if last.at == at => {
                self.pop();
                if self.nth_back(0).is_none_or(|before| before.gpus != gpus) {
                    self.push(point);
                }
            }
            Some(last) if last.gpus == gpus => {}
            _ => self.push(point),
        }
    }

    /// The count it ends on, if it has a point.
    pub fn last_gpus(&self) -> Option<u32> {
        self.nth_back(0).map(|p| p.gpus)
    }

    /// Its last [`GPU_HISTORY_POINTS`] points, oldest first.
    pub fn points(&self) -> Vec<GpuCount> {
        let (earlier, recent) = (self.earlier(), self.recent());
        let all = earlier.len() + recent.len();
        let skip = all.saturating_sub(GPU_HISTORY_POINTS);
        (earlier.iter().chain(recent)).skip(skip).copied().collect()
    }

    /// Whether `other` holds the same points without a copy (a view that shares this history).
    #[cfg(test)]
    pub fn shares(&self, other: &GpuHistory) -> bool {
        fn same<T>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
            match (a, b) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
        }
        same(&self.earlier, &other.earlier) && same(&self.recent, &other.recent)
    }

    fn earlier(&self) -> &[GpuCount] {
        self.earlier.as_deref().map_or(&[], Vec::as_slice)
    }

    fn recent(&self) -> &[GpuCount] {
        self.recent.as_deref().map_or(&[], SmallVec::as_slice)
    }

    /// The `n`th point from the newest.
    fn nth_back(&self, n: usize) -> Option<GpuCount> {
        let newest_first = self
            .recent()
            .iter()
            .rev()
            .chain(self.earlier().iter().rev());
        newest_first.copied().nth(n)
    }

    fn push(&mut self, point: GpuCount) {
        if self.recent().len() == RECENT {
            // The recent points join the older ones, of which the last GPU_HISTORY_POINTS stay.
            let (earlier, recent) = (self.earlier(), self.recent());
            let skip = (earlier.len() + recent.len()).saturating_sub(GPU_HISTORY_POINTS);
            let kept = earlier.iter().chain(recent).skip(skip).copied().collect();
            self.earlier = Some(Arc::new(kept));
            self.recent = None;
        }
        Arc::make_mut(self.recent.get_or_insert_with(Arc::default)).push(point);
    }

    fn pop(&mut self) {
        if !self.recent().is_empty() {
            self.recent.as_mut().map(|r| Arc::make_mut(r).pop());
        } else if !self.earlier().is_empty() {
            self.earlier.as_mut().map(|e| Arc::make_mut(e).pop());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(history: &GpuHistory) -> Vec<(f64, u32)> {
        history.points().iter().map(|p| (p.at, p.gpus)).collect()
    }

    #[test]
    fn a_jobs_gpu_history_keeps_changes_only_and_its_last_points() {
        let mut history = GpuHistory::default();
        history.note(10.0, 4);
        history.note(20.0, 4);
        assert_eq!(counts(&history), [(10.0, 4)], "no change, no point");
        // Stopped and restarted on 4 others in the same instant: not a stop.
        history.note(30.0, 0);
        history.note(30.0, 4);
        assert_eq!(counts(&history), [(10.0, 4)]);
        // Resized at once: one point.
        history.note(40.0, 0);
        history.note(40.0, 8);
        history.note(50.0, 0);
        assert_eq!(counts(&history), [(10.0, 4), (40.0, 8), (50.0, 0)]);
        for k in 0..GPU_HISTORY_POINTS {
            history.note(100.0 + k as f64, 1 + k as u32 % 2);
        }
        let points = history.points();
        assert_eq!(points.len(), GPU_HISTORY_POINTS);
        let last = GPU_HISTORY_POINTS - 1;
        assert_eq!(points[last].at, 100.0 + last as f64, "the newest kept");
        assert_eq!(points[0].at, 100.0, "the oldest dropped");
        assert_eq!(history.last_gpus(), Some(1 + last as u32 % 2));
    }

    /// The same points, whichever part holds them: against a plain list noted the same way, over
    /// many notes (moves, stops, resizes at once and apart) that fold the recent points in again
    /// and again, and one that undoes a point held among the older ones.
    #[test]
    fn its_points_are_those_a_plain_list_would_keep() {
        let mut plain: Vec<GpuCount> = Vec::new();
        let mut history = GpuHistory::default();
        let mut seed = 7u64;
        for step in 0..2_000u32 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = f64::from(step / 2);
            let gpus = (seed >> 61) as u32;
            history.note(at, gpus);
            match plain.last().copied() {
                Some(last) if last.at == at => {
                    plain.pop();
                    if plain.last().is_none_or(|before| before.gpus != gpus) {
                        plain.push(GpuCount { at, gpus });
                    }
                }
                Some(last) if last.gpus == gpus => {}
                _ => plain.push(GpuCount { at, gpus }),
            }
            let skip = plain.len().saturating_sub(GPU_HISTORY_POINTS);
            assert_eq!(history.points(), plain[skip..], "after step {step}");
            assert!(history.earlier().len() <= GPU_HISTORY_POINTS);
            assert!(history.recent().len() <= RECENT);
        }
        // A point that undoes the last while the recent part is empty reaches into the older one.
        let mut history = GpuHistory::default();
        for k in 0..=RECENT as u32 {
            history.note(f64::from(k), k % 2);
        }
        history.pop();
        assert!(history.recent().is_empty());
        // Back to 0 GPUs at the second the last point (1 GPU) began: that point was never held.
        history.note(f64::from(RECENT as u32 - 1), 0);
        let expect: Vec<u32> = (0..RECENT as u32 - 1).map(|k| k % 2).collect();
        let got: Vec<u32> = history.points().iter().map(|p| p.gpus).collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn a_point_added_while_shared_leaves_the_older_points_shared() {
        let mut history = GpuHistory::default();
        for k in 0..=RECENT as u32 {
            history.note(f64::from(k), k % 3);
        }
        let shown = history.clone();
        history.note(100.0, 7);
        assert!(!history.shares(&shown));
        assert!(Arc::ptr_eq(
            history.earlier.as_ref().unwrap(),
            shown.earlier.as_ref().unwrap()
        ));
        assert_eq!(
            shown.last_gpus(),
            Some(RECENT as u32 % 3),
            "the view's copy kept"
        );
    }
}
