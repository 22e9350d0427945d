//! Persistence: the journal (every decision, fsynced before it is acted on), the ledger it folds into,
//! and the snapshots that compact it.

use std::collections::BTreeMap;
use std::path::Path;

use gangway_core::job::JobId;
use gangway_core::throughput::goodput::{Learned, Reports};
use gangway_journal::{Journal, JournalError, Options};

use super::jobs::FailedStarts;
use crate::ledger::{Ledger, Record, Shape, Violation, open_journal_with};

/// One user's unfinished jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unfinished {
    /// How many.
    pub jobs: u32,
    /// The bytes of their commands.
    pub command_bytes: u64,
}

impl Unfinished {
    /// Counts `more` in.
    pub(super) fn add(&mut self, more: Unfinished) {
        self.jobs += more.jobs;
        self.command_bytes += more.command_bytes;
    }
}

/// Whom `spec` runs as, when that is another user than the daemon's, and what its command holds.
pub(super) fn load_of(spec: &crate::ledger::JobSpec) -> Option<(u32, Unfinished)> {
    let uid = spec.runs_as()?;
    let run = spec.run.as_ref()?;
    Some((
        uid,
        Unfinished {
            jobs: 1,
            command_bytes: run.bytes() as u64,
        },
    ))
}

/// The durable state and where it is written.
pub(super) struct Store {
    journal: Option<Journal<Record>>,
    pub ledger: Ledger,
    /// What each live job's workers measured, folded from `Learned` records: its goodput model.
    pub learned: BTreeMap<JobId, Learned>,
    /// What each live job asked beyond its GPUs, folded from `Shaped` records.
    pub shapes: BTreeMap<JobId, Shape>,
    /// Live jobs whose starts failed since they last started, folded from `StartFailed` records.
    pub failed_starts: BTreeMap<JobId, FailedStarts>,
    /// Where each job's learned model is published, as it changes.
    reports: Reports,
    /// Unfinished jobs by the user their commands run as, where that is another user than the
    /// daemon's (`run.user`, on a root daemon): what [`super::Settings::max_jobs_per_user`] and
    /// [`super::Settings::max_command_bytes_per_user`] limit.
    pub unfinished_by_user: crate::IdMap<u32, Unfinished>,
    /// Sequence numbers when there is no journal.
    memory_seq: u64,
    records_since_snapshot: u64,
    snapshot_every: u64,
    /// The snapshot being made durable on a thread of its own, while decisions are journaled on.
    snapshotting: Option<std::thread::JoinHandle<()>>,
}

impl Store {
    /// Opens (or creates) the journal in `dir` and replays it; without a directory, keeps the ledger in
    /// memory only. Returns the store and how many records were replayed.
    pub fn open(
        dir: Option<&Path>,
        options: Options,
        snapshot_every: u64,
        reports: Reports,
    ) -> Result<(Store, u64), JournalError> {
        let (journal, ledger, beside, records, replayed) = match dir {
            Some(dir) => {
                let (journal, recovered) = open_journal_with(dir, options)?;
                if let Some(torn) = &recovered.torn {
                    tracing::warn!("{}", crate::ledger::torn_tail_report(torn));
                }
                let (mut ledger, beside) = recovered.snapshot.unwrap_or_default();
                ledger.count_ended_by_user();
                let replayed = recovered.records.len() as u64;
                (Some(journal), ledger, beside, recovered.records, replayed)
            }
            None => (None, Ledger::default(), Vec::new(), Vec::new(), 0),
        };
        let mut store = Store {
            journal,
            ledger,
            learned: BTreeMap::new(),
            shapes: BTreeMap::new(),
            failed_starts: BTreeMap::new(),
            reports,
            unfinished_by_user: crate::IdMap::default(),
            memory_seq: 0,
            records_since_snapshot: replayed,
            snapshot_every,
            snapshotting: None,
        };
        let loads: Vec<(u32, Unfinished)> = (store.ledger.jobs.values())
            .filter(|entry| !entry.standing.is_terminal())
            .filter_map(|entry| load_of(&entry.spec))
            .collect();
        for (uid, load) in loads {
            store.count(uid, load, true);
        }
        // What the snapshot kept beside the ledger, which the ledger has already taken.
        for record in &beside {
            store.fold_beside(record);
        }
        for (seq, record) in &records {
            if let Err(v) = store.fold(*seq, record) {
                tracing::error!(%v, "journal record breaks an invariant; skipped");
            }
        }
        // What the replay forgot, nothing has seen yet.
        store.ledger.take_forgotten();
        Ok((store, replayed))
    }

    /// Folds one record into the ledger and, when the ledger takes it, into what the store keeps
    /// beside it.
    fn fold(&mut self, seq: u64, record: &Record) -> Result<(), Violation> {
        // Read before the ledger takes the record: an ending forgets the job's command.
        let counted = match record {
            Record::Submitted(spec) => load_of(spec).map(|(uid, load)| (uid, load, true)),
            ended if ended.ends_job() => (ended.job())
                .and_then(|job| self.ledger.jobs.get(&job))
                .filter(|entry| !entry.standing.is_terminal())
                .and_then(|entry| load_of(&entry.spec))
                .map(|(uid, load)| (uid, load, false)),
            _ => None,
        };
        self.ledger.apply(seq, record)?;
        if let Some((uid, load, submitted)) = counted {
            self.count(uid, load, submitted);
        }
        self.fold_beside(record);
        Ok(())
    }

    /// Counts a job of `uid`'s in (`submitted`) or out of their unfinished ones.
    fn count(&mut self, uid: u32, load: Unfinished, submitted: bool) {
        let theirs = self.unfinished_by_user.entry(uid).or_default();
        if submitted {
            theirs.add(load);
        } else {
            theirs.jobs = theirs.jobs.saturating_sub(load.jobs);
            theirs.command_bytes = theirs.command_bytes.saturating_sub(load.command_bytes);
            if theirs.jobs == 0 {
                self.unfinished_by_user.remove(&uid);
            }
        }
    }

    /// Folds one record into what the store keeps beside the ledger: learned models, sizes and
    /// failed starts.
    fn fold_beside(&mut self, record: &Record) {
        match record {
            Record::Learned {
                job,
                gpu_type,
                observation,
                grad,
            } => {
                let learned = self.learned.entry(*job).or_default();
                learned.observe(*gpu_type, *observation);
                if grad.is_some() {
                    learned.grad = *grad;
                }
                self.reports.set(*job, learned.clone());
            }
            Record::Shaped { job, shape } => {
                self.shapes.insert(*job, shape.clone());
            }
            Record::ShapedV2 { job, shape } => {
                self.shapes.insert(*job, Shape::from(*shape));
            }
            Record::ShapedV1 { job, shape } => {
                self.shapes.insert(*job, Shape::from(*shape));
            }
            Record::StartFailed { job, count: 0, .. } => {
                self.failed_starts.remove(job);
            }
            Record::StartFailed {
                job,
                at,
                count,
                why,
            } => {
                let failed = FailedStarts::recorded(*count, why, *at);
                self.failed_starts.insert(*job, failed);
            }
            Record::Finished { job, .. }
            | Record::Cancelled { job, .. }
            | Record::Failed { job, .. } => {
                self.learned.remove(job);
                self.shapes.remove(job);
                self.failed_starts.remove(job);
                self.reports.forget(*job);
            }
            _ => {}
        }
    }

    /// `job`'s last restart took `seconds`: its model's restart penalty (unjournaled: a restart of
    /// the control plane measures it again).
    pub fn restarted(&self, job: JobId, seconds: f64) {
        self.reports.restarted(job, seconds);
    }

    /// `job`'s workers estimated its gradient statistics afresh: its model takes them, unjournaled
    /// (the journal has them as of each new configuration; snapshots keep the latest).
    pub fn refresh_grad(&mut self, job: JobId, grad: (f64, f64)) {
        if let Some(learned) = self.learned.get_mut(&job)
            && learned.grad != Some(grad)
        {
            learned.grad = Some(grad);
            self.reports.set(job, learned.clone());
        }
    }

    /// What the store keeps beside the ledger, as the records that rebuild it: a snapshot holds them.
    fn beside_records(&self) -> Vec<Record> {
        let shapes = self.shapes.iter().map(|(&job, shape)| Record::Shaped {
            job,
            shape: shape.clone(),
        });
        let learned = self.learned.iter().flat_map(|(&job, learned)| {
            learned
                .observations()
                .map(move |(gpu_type, &observation)| Record::Learned {
                    job,
                    gpu_type,
                    observation,
                    grad: learned.grad,
                })
        });
        let failed_starts = (self.failed_starts.iter()).map(|(&job, failed)| failed.record(job));
        shapes.chain(learned).chain(failed_starts).collect()
    }

    /// Appends `records` to the journal (fsynced) and folds them into the ledger and what was
    /// learned; returns the invariant violations the ledger refused. Nothing is acted on before this returns.
    pub fn persist(&mut self, records: &[crate::ledger::Record]) -> Vec<Violation> {
        if records.is_empty() {
            return Vec::new();
        }
        let first = match self.journal.as_mut() {
            Some(journal) => append_or_stop(journal, records),
            None => self.memory_seq,
        };
        self.memory_seq = first + records.len() as u64;
        let mut violations = Vec::new();
        for (k, record) in records.iter().enumerate() {
            if let Err(v) = self.fold(first + k as u64, record) {
                tracing::error!(%v, "decision breaks an invariant");
                violations.push(v);
            }
        }
        self.records_since_snapshot += records.len() as u64;
        // One snapshot at a time: while the last is still being written, the next waits.
        let writing = (self.snapshotting.as_ref()).is_some_and(|t| !t.is_finished());
        if self.records_since_snapshot >= self.snapshot_every && self.journal.is_some() && !writing
        {
            self.snapshot();
        }
        violations
    }

    /// Snapshots the ledger: encoded here (the state as of the last record, which only this
    /// thread changes), then written, fsynced and compacted on a thread of its own, so that a
    /// round that takes a large ledger's snapshot does not wait for the disk (12-17 ms at 16,384
    /// GPUs). Until it is written, the journal's segments still hold every record it covers.
    fn snapshot(&mut self) {
        let beside = self.beside_records();
        let Some(journal) = self.journal.as_mut() else {
            return;
        };
        if let Some(done) = self.snapshotting.take() {
            let _ = done.join();
        }
        let write = match journal.begin_snapshot(&(&self.ledger, beside)) {
            Ok(write) => write,
            Err(e) => {
                tracing::warn!(error = %e, "snapshot failed; the journal keeps growing");
                return;
            }
        };
        self.records_since_snapshot = 0;
        let finish = move || {
            if let Err(e) = write.finish() {
                tracing::warn!(error = %e, "snapshot failed; the journal keeps growing");
            }
        };
        match std::thread::Builder::new()
            .name("gangway-snapshot".into())
            .spawn(finish)
        {
            Ok(thread) => self.snapshotting = Some(thread),
            Err(e) => tracing::warn!(error = %e, "no thread to write a snapshot on"),
        }
    }
}

impl Drop for Store {
    /// A snapshot being written is finished before the journal is let go (a store opened again
    /// on the same journal finds it written).
    fn drop(&mut self) {
        if let Some(writing) = self.snapshotting.take() {
            let _ = writing.join();
        }
    }
}

/// Appends `records` (fsynced) and returns the first one's sequence number. The control plane cannot
/// act on what it cannot record: where the journal fails, it stops, and a restart recovers from what
/// did reach the disk.
fn append_or_stop(journal: &mut Journal<Record>, records: &[Record]) -> u64 {
    match journal.append_batch(records) {
        Ok(seqs) => seqs.start,
        Err(e) => {
            // A panic would end only this actor and leave the API up; end the process.
            tracing::error!(error = %e, "journal append failed; stopping");
            eprintln!("gangway: journal append failed: {e}; stopping");
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::tests::spec;
    use crate::ledger::{ShapeV1, ShapeV2};
    use gangway_core::throughput::goodput::Observation;

    const PAIRS: gangway_core::job::Sizes = gangway_core::job::Sizes {
        min: 2,
        max: 8,
        multiple: 2,
    };

    /// Tensor-parallel pairs, in pipelines of 4 stages on `rtx`, adapting their batch.
    fn pipelines() -> Shape {
        Shape {
            sizes: PAIRS,
            batch: Some(64),
            min_batch: Some(16),
            tp: 2,
            pp_by_type: [("rtx".to_owned(), 4)].into(),
        }
    }

    /// The store on the journal in `dir`, with a snapshot every `snapshot_every` records.
    fn open(dir: &Path, snapshot_every: u64) -> (Store, u64) {
        Store::open(
            Some(dir),
            Options::default(),
            snapshot_every,
            Reports::default(),
        )
        .unwrap()
    }

    fn learned(job: u32) -> Record {
        Record::Learned {
            job: JobId(job),
            gpu_type: 0,
            observation: Observation {
                nodes: 1,
                replicas: 2,
                local: 16.0,
                step_time: 0.5,
                sync_time: 0.1,
            },
            grad: Some((1.0, 2.0)),
        }
    }

    #[test]
    fn sizes_and_models_survive_snapshots_and_go_when_their_job_ends() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut store, _) = open(dir.path(), 3);
            let shaped = |job| Record::Shaped {
                job: JobId(job),
                shape: pipelines(),
            };
            store.persist(&[spec(1), shaped(1), spec(2), shaped(2)]);
            // The fourth record took a snapshot: only the ones after it are in segments.
            store.persist(&[learned(1)]);
            store.persist(&[Record::Cancelled {
                job: JobId(2),
                at: 1.0,
            }]);
        }
        let (store, replayed) = open(dir.path(), 1000);
        assert_eq!(replayed, 2, "two records after the snapshot");
        assert_eq!(store.shapes, [(JobId(1), pipelines())].into());
        assert_eq!(store.learned[&JobId(1)].measured(), 1);
        assert_eq!(store.learned.len(), 1);
    }

    #[test]
    fn shapes_journaled_in_their_earlier_forms_still_read() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut store, _) = open(dir.path(), 1000);
            store.persist(&[
                spec(1),
                // Before jobs adapted their batch.
                Record::ShapedV1 {
                    job: JobId(1),
                    shape: ShapeV1 {
                        sizes: PAIRS,
                        batch: Some(64),
                    },
                },
                spec(2),
                // Before their stages could differ by GPU type.
                Record::ShapedV2 {
                    job: JobId(2),
                    shape: ShapeV2 {
                        sizes: PAIRS,
                        batch: Some(64),
                        min_batch: Some(16),
                    },
                },
            ]);
        }
        let (store, _) = open(dir.path(), 1000);
        let first = Shape {
            sizes: PAIRS,
            batch: Some(64),
            ..Shape::rigid(0)
        };
        let second = Shape {
            min_batch: Some(16),
            ..first.clone()
        };
        assert_eq!(
            store.shapes,
            [(JobId(1), first.clone()), (JobId(2), second)].into()
        );
        // Its snapshot writes the current form.
        assert!(matches!(
            &store.beside_records()[..],
            [Record::Shaped { shape, .. }, _] if *shape == first
        ));
    }

    /// The bytes a control plane wrote before pipelines' stages could differ by type: the encoding
    /// numbers variants, so the old `Shaped` (variant 12) must still decode as `ShapedV2`.
    #[test]
    fn an_old_shaped_record_decodes_from_its_bytes() {
        // Variant 12, job 1, sizes 2..=8 in pairs, batch Some(64), min_batch Some(16).
        let old: Record = postcard::from_bytes(&[12, 1, 2, 8, 2, 1, 64, 1, 16]).unwrap();
        let expected = ShapeV2 {
            sizes: PAIRS,
            batch: Some(64),
            min_batch: Some(16),
        };
        assert_eq!(
            old,
            Record::ShapedV2 {
                job: JobId(1),
                shape: expected
            }
        );
        let new = Record::Shaped {
            job: JobId(1),
            shape: pipelines(),
        };
        assert_eq!(postcard::to_allocvec(&new).unwrap()[0], 13);
    }

    #[test]
    fn a_snapshot_of_the_ledger_alone_still_opens() {
        let dir = tempfile::tempdir().unwrap();
        {
            // As a control plane wrote it before snapshots kept records beside the ledger.
            let (mut journal, _) = Journal::<Record>::open::<Ledger>(dir.path()).unwrap();
            let mut ledger = Ledger::default();
            journal.append(&spec(1)).unwrap();
            ledger.apply(1, &spec(1)).unwrap();
            journal.snapshot(&ledger).unwrap();
            journal.append(&learned(1)).unwrap();
        }
        let (mut store, replayed) = open(dir.path(), 2);
        assert_eq!(replayed, 1);
        assert!(store.ledger.jobs.contains_key(&JobId(1)));
        assert_eq!(store.learned[&JobId(1)].measured(), 1);
        // It goes on in the new form: the next snapshot keeps what was learned.
        store.persist(&[spec(2)]);
        drop(store);
        let (store, replayed) = open(dir.path(), 2);
        assert_eq!(replayed, 0, "all in the new snapshot");
        assert_eq!(store.ledger.jobs.len(), 2);
        assert_eq!(store.learned[&JobId(1)].measured(), 1);
    }
}
