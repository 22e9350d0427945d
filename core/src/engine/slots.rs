//! Each job's slot in the engine, found by the job's id, with neighbouring ids side by side.
//!
//! A pass finds every grant's job by id: thousands a round on a large cluster. In a hash map each
//! id lands in a bucket of its own, a miss in the cache per lookup (a tenth of a tiresias pass at
//! 16,384 GPUs). Ids are mostly handed out in order (a trace's numbering, the control plane's
//! counter) and a round's grants come mostly in arrival order, so here an id's slot sits in a page
//! beside its neighbours' and a round's lookups stay in a few cache lines. Pages are found by hash:
//! ids of any spread cost at most a page each.

use crate::job::{IdMap, JobId};

/// Ids per page: a page's slots fill about four cache lines.
const PAGE: u32 = 64;
/// An id without a job.
const NONE: u32 = u32::MAX;

/// The slots of the jobs whose ids fall in one range of [`PAGE`] ids.
#[derive(Clone, Debug)]
struct Page {
    slots: [u32; PAGE as usize],
    /// How many of `slots` name a job: an empty page is dropped.
    used: u32,
}

/// Job slots by job id.
#[derive(Clone, Debug, Default)]
pub(super) struct SlotIndex {
    /// By `id / PAGE`.
    pages: IdMap<u32, Page>,
}

impl SlotIndex {
    /// Job `id`'s slot, if it has one.
    pub(super) fn get(&self, id: JobId) -> Option<usize> {
        let slot = self.pages.get(&(id.0 / PAGE))?.slots[(id.0 % PAGE) as usize];
        (slot != NONE).then_some(slot as usize)
    }

    /// Whether job `id` has a slot.
    pub(super) fn contains(&self, id: JobId) -> bool {
        self.get(id).is_some()
    }

    /// Gives job `id` slot `slot`, replacing any it had.
    pub(super) fn insert(&mut self, id: JobId, slot: usize) {
        let slot = u32::try_from(slot)
            .ok()
            .filter(|&s| s != NONE)
            .expect("an engine holds at most 2^32 - 1 jobs");
        let page = self.pages.entry(id.0 / PAGE).or_insert_with(|| Page {
            slots: [NONE; PAGE as usize],
            used: 0,
        });
        let at = &mut page.slots[(id.0 % PAGE) as usize];
        if *at == NONE {
            page.used += 1;
        }
        *at = slot;
    }

    /// Takes job `id`'s slot away, returning it.
    pub(super) fn remove(&mut self, id: JobId) -> Option<usize> {
        let key = id.0 / PAGE;
        let page = self.pages.get_mut(&key)?;
        let slot = std::mem::replace(&mut page.slots[(id.0 % PAGE) as usize], NONE);
        if slot == NONE {
            return None;
        }
        page.used -= 1;
        if page.used == 0 {
            self.pages.remove(&key);
        }
        Some(slot as usize)
    }

    /// Pages held: what the index costs (tests).
    #[cfg(test)]
    fn pages(&self) -> usize {
        self.pages.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn ids_far_apart_and_at_the_ends_of_a_page() {
        let mut index = SlotIndex::default();
        for (id, slot) in [(0, 5), (63, 6), (64, 7), (u32::MAX, 8)] {
            index.insert(JobId(id), slot);
        }
        assert_eq!(index.pages(), 3);
        assert_eq!(index.get(JobId(0)), Some(5));
        assert_eq!(index.get(JobId(63)), Some(6));
        assert_eq!(index.get(JobId(64)), Some(7));
        assert_eq!(index.get(JobId(u32::MAX)), Some(8));
        assert_eq!(index.get(JobId(1)), None);
        assert!(!index.contains(JobId(65)));
        // A page goes with its last id.
        assert_eq!(index.remove(JobId(0)), Some(5));
        assert_eq!(index.pages(), 3);
        assert_eq!(index.remove(JobId(0)), None);
        assert_eq!(index.remove(JobId(63)), Some(6));
        assert_eq!(index.pages(), 2);
        // A slot replaced is not counted twice: one removal empties its page.
        index.insert(JobId(64), 9);
        assert_eq!(index.get(JobId(64)), Some(9));
        assert_eq!(index.remove(JobId(64)), Some(9));
        assert_eq!(index.pages(), 1);
    }

    proptest! {
        /// Whatever the ids and the order of the changes, it answers as a map does, and holds no
        /// page without a job.
        #[test]
        fn answers_as_a_map_does(
            changes in prop::collection::vec((0u32..300, prop::option::of(0usize..1000)), 0..200),
            far in prop::collection::vec(any::<u32>(), 0..8),
        ) {
            let mut index = SlotIndex::default();
            let mut map = HashMap::new();
            let ids = changes.iter().map(|&(id, _)| id).chain(far.iter().copied());
            let changes = changes.iter().copied().chain(far.iter().map(|&id| (id, Some(1))));
            for (id, change) in changes {
                match change {
                    Some(slot) => {
                        index.insert(JobId(id), slot);
                        map.insert(id, slot);
                    }
                    None => prop_assert_eq!(index.remove(JobId(id)), map.remove(&id)),
                }
            }
            for id in ids {
                prop_assert_eq!(index.get(JobId(id)), map.get(&id).copied());
            }
            let pages: std::collections::HashSet<u32> = map.keys().map(|id| id / PAGE).collect();
            prop_assert_eq!(index.pages(), pages.len());
        }
    }
}
