//! Persistence: the journal (every decision, fsynced before it is acted on), the ledger it folds into,
//! and the snapshots that compact it.

use std::collections::BTreeMap;
use std::path::Path;

use gangway_core::job::JobId;
use gangway_core::throughput::goodput::Learned;
use gangway_journal::{Journal, JournalError};

use crate::ledger::{Ledger, Record, Violation};

/// The durable state and where it is written.
pub(super) struct Store {
    journal: Option<Journal<Record>>,
    pub ledger: Ledger,
    /// What each live job's workers measured, folded from `Learned` records: its goodput model.
    /// Not in the ledger's snapshots (their format stays the ledger's): after each snapshot the
    /// records are written again, so that the journal always holds them.
    pub learned: BTreeMap<JobId, Learned>,
    /// Sequence numbers when there is no journal.
    memory_seq: u64,
    records_since_snapshot: u64,
    snapshot_every: u64,
}

impl Store {
    /// Opens (or creates) the journal in `dir` and replays it; without a directory, keeps the ledger in
    /// memory only. Returns the store and how many records were replayed.
    pub fn open(dir: Option<&Path>, snapshot_every: u64) -> Result<(Store, u64), JournalError> {
        let (journal, ledger, records, replayed) = match dir {
            Some(dir) => {
                let (journal, recovered) = Journal::<Record>::open::<Ledger>(dir)?;
                if let Some(torn) = &recovered.torn {
                    tracing::warn!("{}", crate::ledger::torn_tail_report(torn));
                }
                let ledger = recovered.snapshot.unwrap_or_default();
                let replayed = recovered.records.len() as u64;
                (Some(journal), ledger, recovered.records, replayed)
            }
            None => (None, Ledger::default(), Vec::new(), 0),
        };
        let mut store = Store {
            journal,
            ledger,
            learned: BTreeMap::new(),
            memory_seq: 0,
            records_since_snapshot: replayed,
            snapshot_every,
        };
        for (seq, record) in &records {
            if let Err(v) = store.fold(*seq, record) {
                tracing::error!(%v, "journal record breaks an invariant; skipped");
            }
        }
        Ok((store, replayed))
    }

    /// Folds one record into the ledger and, when the ledger takes it, into what was learned.
    fn fold(&mut self, seq: u64, record: &Record) -> Result<(), Violation> {
        self.ledger.apply(seq, record)?;
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
            }
            Record::Finished { job, .. }
            | Record::Cancelled { job, .. }
            | Record::Failed { job, .. } => {
                self.learned.remove(job);
            }
            _ => {}
        }
        Ok(())
    }

    /// What was learned, as records: written again after each snapshot.
    fn learned_records(&self) -> Vec<Record> {
        self.learned
            .iter()
            .flat_map(|(&job, learned)| {
                learned
                    .observations()
                    .map(move |(gpu_type, &observation)| Record::Learned {
                        job,
                        gpu_type,
                        observation,
                        grad: learned.grad,
                    })
            })
            .collect()
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
        if self.records_since_snapshot >= self.snapshot_every
            && let Some(journal) = self.journal.as_mut()
        {
            match journal.snapshot(&self.ledger) {
                Ok(_) => {
                    self.records_since_snapshot = 0;
                    self.carry_learned_forward();
                }
                Err(e) => tracing::warn!(error = %e, "snapshot failed; the journal keeps growing"),
            }
        }
        violations
    }

    /// Writes what was learned again, after a snapshot that covers its records. A crash between
    /// the two loses it (the jobs measure again); it never loses the ledger.
    fn carry_learned_forward(&mut self) {
        let records = self.learned_records();
        if let Some(journal) = self.journal.as_mut().filter(|_| !records.is_empty()) {
            append_or_stop(journal, &records);
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
