//! What a policy keeps of each job between rounds, found by the job's slot.
//!
//! A round shows a policy every running job (but those it is to look at later): thousands at the
//! scale of a large cluster, each looked up in the policy's own state. In a map keyed by job id, each lookup is a miss in the cache; in
//! [`PerJob`], the state sits in a vector at the job's [`JobView::slot`], which the engine gives
//! out densely (in arrival order, until it reuses the slots of jobs that left), so that a round
//! reads it in the order the jobs are shown, most of it in sequence.

use super::JobView;
use crate::job::{IdMap, JobId};

/// How far past twice the entries ever made a slot may be and still go in the vector: the engine's
/// slots are below the jobs it holds, which a policy has been shown; a view built by hand may carry
/// any slot, and the vector must not grow to it.
const SLACK: usize = 4096;

/// State of type `V` per job, found by [`JobView::slot`] (and the job's id, checked), kept between
/// rounds.
///
/// Correct whatever the slots: a job whose slot another job's state holds (a slot given to a new job
/// before the policy heard that its last holder left, or views built by hand, which share slot 0) is
/// kept in a map by id instead, only slower to find.
#[derive(Clone, Debug)]
pub struct PerJob<V> {
    /// By slot: the job whose state it is, and the state.
    by_slot: Vec<Option<(JobId, V)>>,
    /// Where each job's state is: its slot in `by_slot`, or `None` for `spilled`.
    at: IdMap<JobId, Option<usize>>,
    /// The state of jobs whose slot was taken, or too large.
    spilled: IdMap<JobId, V>,
    /// Entries made so far, removed ones included: what bounds the vector's growth.
    made: usize,
}

impl<V> Default for PerJob<V> {
    fn default() -> Self {
        PerJob {
            by_slot: Vec::new(),
            at: IdMap::default(),
            spilled: IdMap::default(),
            made: 0,
        }
    }
}

impl<V> PerJob<V> {
    /// Nothing kept yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Jobs with state kept.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Whether no job has state kept.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// The state of the job `view` shows, if kept.
    pub fn get(&self, view: &JobView<'_>) -> Option<&V> {
        self.get_at(view.id(), view.slot)
    }

    /// The state of the job `view` shows, to change, if kept.
    pub fn get_mut(&mut self, view: &JobView<'_>) -> Option<&mut V> {
        self.get_at_mut(view.id(), view.slot)
    }

    /// The state of job `id`, which a view showed at `slot`, if kept.
    pub fn get_at(&self, id: JobId, slot: usize) -> Option<&V> {
        match self.by_slot.get(slot) {
            Some(Some((held, v))) if *held == id => Some(v),
            _ => self.find(id),
        }
    }

    /// The state of job `id`, which a view showed at `slot`, to change, if kept.
    pub fn get_at_mut(&mut self, id: JobId, slot: usize) -> Option<&mut V> {
        if !self.holds_at(id, slot) {
            return self.find_mut(id);
        }
        self.by_slot[slot].as_mut().map(|(_, v)| v)
    }

    /// The state of job `id`, by id alone (a map lookup: for a job whose view is not at hand).
    pub fn find(&self, id: JobId) -> Option<&V> {
        match *self.at.get(&id)? {
            Some(slot) => self.by_slot[slot].as_ref().map(|(_, v)| v),
            None => self.spilled.get(&id),
        }
    }

    /// The state of job `id`, by id alone, to change.
    pub fn find_mut(&mut self, id: JobId) -> Option<&mut V> {
        match *self.at.get(&id)? {
            Some(slot) => self.by_slot[slot].as_mut().map(|(_, v)| v),
            None => self.spilled.get_mut(&id),
        }
    }

    /// Whether `slot` holds job `id`'s state.
    fn holds_at(&self, id: JobId, slot: usize) -> bool {
        matches!(self.by_slot.get(slot), Some(Some((held, _))) if *held == id)
    }

    /// The state of the job `view` shows, made by `make` if none is kept.
    pub fn entry(&mut self, view: &JobView<'_>, make: impl FnOnce() -> V) -> &mut V {
        self.entry_at(view.id(), view.slot, make)
    }

    /// The state of job `id`, which a view showed at `slot`, made by `make` if none is kept.
    pub fn entry_at(&mut self, id: JobId, slot: usize, make: impl FnOnce() -> V) -> &mut V {
        if !self.holds_at(id, slot) {
            let free = self.free(slot);
            match self.at.get(&id).copied() {
                // In the map, and its slot is free now: moved there.
                Some(None) if free => {
                    let v = self.spilled.remove(&id).expect("kept where `at` says");
                    self.put(id, slot, v);
                }
                // Kept elsewhere: in the map, or (a view built by hand) at another slot.
                Some(_) => return self.find_mut(id).expect("kept where `at` says"),
                None if free => {
                    self.made += 1;
                    self.put(id, slot, make());
                }
                None => {
                    self.made += 1;
                    self.at.insert(id, None);
                    return self.spilled.entry(id).or_insert_with(make);
                }
            }
        }
        match &mut self.by_slot[slot] {
            Some((_, v)) => v,
            None => unreachable!("the slot was just checked or filled"),
        }
    }

    /// Whether `slot` can take a job's state: empty, and not so far past the entries made that the
    /// vector would grow out of proportion (the engine gives slots out densely; a view built by hand
    /// may carry any).
    fn free(&self, slot: usize) -> bool {
        let reach = self.made.saturating_mul(2).saturating_add(SLACK);
        slot < reach && self.by_slot.get(slot).is_none_or(Option::is_none)
    }

    /// Puts job `id`'s state at `slot`, which is [`PerJob::free`].
    fn put(&mut self, id: JobId, slot: usize, v: V) {
        if slot >= self.by_slot.len() {
            self.by_slot.resize_with(slot + 1, || None);
        }
        self.by_slot[slot] = Some((id, v));
        self.at.insert(id, Some(slot));
    }

    /// Drops the state of job `id` (which left); returns it.
    pub fn remove(&mut self, id: JobId) -> Option<V> {
        match self.at.remove(&id)? {
            Some(slot) => self.by_slot[slot].take().map(|(_, v)| v),
            None => self.spilled.remove(&id),
        }
    }

    /// Keeps only the jobs for which `keep` says so (a policy not told which jobs left drops them
    /// here). It visits them in no particular order (one that differs from run to run).
    pub fn retain(&mut self, mut keep: impl FnMut(JobId, &mut V) -> bool) {
        let ids: Vec<JobId> = self.at.keys().copied().collect();
        for id in ids {
            if let Some(v) = self.find_mut(id)
                && !keep(id, v)
            {
                self.remove(id);
            }
        }
    }

    /// Whether job `id` has state kept.
    pub fn contains(&self, id: JobId) -> bool {
        self.at.contains_key(&id)
    }

    /// The jobs with state kept, in no particular order.
    pub fn ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.at.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Job;

    fn view(job: &Job, slot: usize) -> JobView<'_> {
        JobView {
            slot,
            ..JobView::arrived(job, &[])
        }
    }

    #[test]
    fn state_is_found_by_slot_and_id_and_survives_shared_or_reused_slots() {
        let jobs: Vec<Job> = (0..4).map(|k| Job::new(JobId(k), 0.0, 1, 1.0)).collect();
        let mut kept: PerJob<u32> = PerJob::new();
        *kept.entry(&view(&jobs[0], 0), || 0) += 10;
        *kept.entry(&view(&jobs[1], 1), || 0) += 11;
        // Job 2 shown at job 0's slot (views built by hand): kept apart, neither overwritten.
        *kept.entry(&view(&jobs[2], 0), || 0) += 12;
        assert_eq!(kept.get(&view(&jobs[0], 0)), Some(&10));
        assert_eq!(kept.get(&view(&jobs[1], 1)), Some(&11));
        assert_eq!(kept.get(&view(&jobs[2], 0)), Some(&12));
        assert_eq!(kept.len(), 3);
        assert_eq!(kept.at[&JobId(2)], None, "in the map: its slot was taken");
        // Job 0 leaves: job 2, shown at its slot again, moves there; job 3, at the same slot, starts
        // afresh in the map.
        assert_eq!(kept.remove(JobId(0)), Some(10));
        assert_eq!(*kept.entry(&view(&jobs[2], 0), || 0), 12);
        assert_eq!(kept.at[&JobId(2)], Some(0));
        assert_eq!(kept.get(&view(&jobs[3], 0)), None);
        assert_eq!(*kept.entry(&view(&jobs[3], 0), || 7), 7);
        assert_eq!(kept.find_mut(JobId(2)).copied(), Some(12));
        assert_eq!(kept.find_mut(JobId(3)).copied(), Some(7));
        assert_eq!(kept.get_at(JobId(3), 0), Some(&7));
        // Found by id wherever it is kept, the slot shown notwithstanding (a view built by hand
        // that moved).
        assert_eq!(kept.get_at(JobId(1), 3), Some(&11));
        *kept.get_at_mut(JobId(1), 3).unwrap() += 100;
        assert_eq!(kept.get(&view(&jobs[1], 1)), Some(&111));
        *kept.get_mut(&view(&jobs[1], 1)).unwrap() -= 100;
        // A slot far past the jobs held is not a vector that long.
        *kept.entry(&view(&jobs[1], 1), || 0) += 1;
        let far = Job::new(JobId(9), 0.0, 1, 1.0);
        *kept.entry(&view(&far, usize::MAX / 2), || 0) += 5;
        assert_eq!(kept.get(&view(&far, usize::MAX / 2)), Some(&5));
        assert!(kept.by_slot.len() < SLACK + 8);
        let mut ids: Vec<u32> = kept.ids().map(|j| j.0).collect();
        ids.sort_unstable();
        assert_eq!(ids, [1, 2, 3, 9]);
        assert_eq!(kept.remove(JobId(9)), Some(5));
        assert_eq!(kept.remove(JobId(9)), None);
        assert_eq!(kept.len(), 3);
        kept.retain(|id, _| id != JobId(2));
        assert_eq!((kept.len(), kept.find(JobId(2))), (2, None));
        assert_eq!(kept.find(JobId(3)), Some(&7));
    }

    #[test]
    fn crafted_slots_grow_the_vector_with_the_entries_made_not_with_itself() {
        let jobs: Vec<Job> = (0..64).map(|k| Job::new(JobId(k), 0.0, 1, 1.0)).collect();
        let mut kept: PerJob<u8> = PerJob::new();
        // Each slot just within reach of the last vector's length: the vector may not double each
        // time.
        let mut slot = SLACK - 1;
        for job in &jobs {
            kept.entry(&view(job, slot), || 1);
            slot = 2 * kept.by_slot.len() + SLACK - 1;
        }
        assert_eq!(kept.len(), jobs.len());
        assert!(kept.by_slot.len() <= 2 * jobs.len() + SLACK);
        assert!(jobs.iter().all(|j| kept.find(j.id) == Some(&1)));
    }
}
