//! Persistence: the journal (every decision, fsynced before it is acted on), the ledger it folds into,
//! and the snapshots that compact it.

use std::path::Path;

use gangway_journal::{Journal, JournalError};

use crate::ledger::{Ledger, Record, Violation};

/// The durable state and where it is written.
pub(super) struct Store {
    journal: Option<Journal<Record>>,
    pub ledger: Ledger,
    /// Sequence numbers when there is no journal.
    memory_seq: u64,
    records_since_snapshot: u64,
    snapshot_every: u64,
}

impl Store {
    /// Opens (or creates) the journal in `dir` and replays it; without a directory, keeps the ledger in
    /// memory only. Returns the store and how many records were replayed.
    pub fn open(dir: Option<&Path>, snapshot_every: u64) -> Result<(Store, u64), JournalError> {
        let (journal, ledger, replayed) = match dir {
            Some(dir) => {
                let (journal, recovered) = Journal::<Record>::open::<Ledger>(dir)?;
                if let Some(torn) = &recovered.torn {
                    tracing::warn!("{}", crate::ledger::torn_tail_report(torn));
                }
                let mut ledger = recovered.snapshot.unwrap_or_default();
                let replayed = recovered.records.len() as u64;
                for (seq, record) in &recovered.records {
                    if let Err(v) = ledger.apply(*seq, record) {
                        tracing::error!(%v, "journal record breaks an invariant; skipped");
                    }
                }
                (Some(journal), ledger, replayed)
            }
            None => (None, Ledger::default(), 0),
        };
        let store = Store {
            journal,
            ledger,
            memory_seq: 0,
            records_since_snapshot: replayed,
            snapshot_every,
        };
        Ok((store, replayed))
    }

    /// Appends `records` to the journal (fsynced) and folds them into the ledger; returns the
    /// invariant violations the ledger refused. Nothing is acted on before this returns.
    pub fn persist(&mut self, records: &[crate::ledger::Record]) -> Vec<Violation> {
        if records.is_empty() {
            return Vec::new();
        }
        let first = match self.journal.as_mut() {
            // The control plane cannot act on what it cannot record: it stops, and a restart recovers
            // from what did reach the disk.
            Some(journal) => match journal.append_batch(records) {
                Ok(seqs) => seqs.start,
                Err(e) => {
                    // A panic would end only this actor and leave the API up; end the process.
                    tracing::error!(error = %e, "journal append failed; stopping");
                    eprintln!("gangway: journal append failed: {e}; stopping");
                    std::process::abort();
                }
            },
            None => self.memory_seq,
        };
        self.memory_seq = first + records.len() as u64;
        let mut violations = Vec::new();
        for (k, record) in records.iter().enumerate() {
            if let Err(v) = self.ledger.apply(first + k as u64, record) {
                tracing::error!(%v, "decision breaks an invariant");
                violations.push(v);
            }
        }
        self.records_since_snapshot += records.len() as u64;
        if self.records_since_snapshot >= self.snapshot_every
            && let Some(journal) = self.journal.as_mut()
        {
            match journal.snapshot(&self.ledger) {
                Ok(_) => self.records_since_snapshot = 0,
                Err(e) => tracing::warn!(error = %e, "snapshot failed; the journal keeps growing"),
            }
        }
        violations
    }
}
