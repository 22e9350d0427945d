//! A durable, crash-safe journal for gangway's control plane.
//!
//! The control plane appends every decision and state change here *before* acting on it.
//! After a crash (a panic, `SIGKILL` mid-write, or a power cut) [`Journal::open`] rebuilds
//! what was committed: the latest snapshot plus every record appended after it.
//!
//! The I/O is synchronous `std::fs`; async callers should run the journal on a blocking
//! thread.
//!
//! ```
//! use gangway_journal::Journal;
//!
//! let dir = tempfile::tempdir()?;
//! let (mut journal, recovered) = Journal::<String>::open::<Vec<String>>(dir.path())?;
//! assert!(recovered.records.is_empty());
//! journal.append(&"job 1 submitted".to_owned())?;
//! drop(journal); // a crash, say
//! let (_, recovered) = Journal::<String>::open::<Vec<String>>(dir.path())?;
//! assert_eq!(recovered.records, [(1, "job 1 submitted".to_owned())]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # On-disk format
//!
//! A journal is a directory:
//!
//! ```text
//! LOCK                       a copy of the manifest; locked, with the directory, by the one writer
//! MANIFEST                   the manifest: the newest segment, and how much of it was committed
//! segment-<FIRST>.log        frames, append-only; FIRST = sequence number of its first record
//! snapshot-<SEQ>.snap        one frame: the caller's state after applying records 1..=SEQ
//! snapshot-<SEQ>.tmp         a snapshot being written; never trusted, deleted on open
//! ```
//!
//! Numbers in names are zero-padded to 20 digits. Every frame is
//!
//! ```text
//! len: u32 LE | crc: u32 LE, CRC-32 of payload | payload: len bytes of postcard
//! ```
//!
//! A segment frame's payload is `(first_seq: u64, records: [R])`; a snapshot's is
//! `(seq: u64, state: S)`. Each [`Journal::append`] or [`Journal::append_batch`] call
//! writes exactly one frame and then `fsync`s, so a batch is atomic: after a crash it is
//! either all there or not at all. Sequence numbers start at 1 and are consecutive.
//! They are stored in the frames and checked on replay, so they survive restarts and
//! compaction. `last_seq() == 0` means nothing has been appended yet.
//!
//! The manifest is one line, kept in both `LOCK` and `MANIFEST` so that deleting either (a
//! "stale" lock file, say) takes no check away:
//!
//! ```text
//! gangway-journal 2 tail <FIRST> len <BYTES> last <SEQ> crc <CRC-32 of the rest, hex>
//! ```
//!
//! It is rewritten in place (always the same length) after every frame is committed: fsynced
//! when a segment is started and when its first frame is committed, and otherwise written
//! without an fsync of its own. The segment is fsynced first, so a copy that a power cut left
//! behind says less than was committed, never more. Journals written before it said
//! `gangway-journal tail <FIRST> empty|written` in `LOCK` alone, which is still read.
//!
//! Every file is created 0600 and the directory is 0700, whatever the umask: records hold what
//! jobs were submitted with. `open` makes an older journal's files and directory so, and says so once.
//!
//! # Recovery rules
//!
//! Recovery is exact or loud: it returns every committed record, or it fails with an error
//! that names the file (and byte offset) where committed records would be lost. Only a write
//! that was never acknowledged is dropped, with a warning.
//!
//! 1. The newest `.snap` is loaded. It was fsynced before it was renamed into place, so
//!    any damage to it is real corruption and a hard error. `.tmp` files are deleted:
//!    the rename that would have committed them never happened.
//! 2. Segments are replayed in order. Each frame's sequence number must continue the
//!    previous one, including across files. A gap means a file went missing and is a
//!    hard error. Records before the oldest segment must be in a snapshot: without it, the
//!    error names the snapshot that must exist.
//! 3. A *bad* frame (short, zero length, or failing its CRC) stops the replay. If it is
//!    in the last segment, beyond what the manifest says was committed, and no valid frame
//!    follows it, it is what is left of the one write that never completed. That write was
//!    never acknowledged, so it is truncated away with a warning. Anywhere else it is damage
//!    to committed records, and `open` fails with the file and byte offset instead of
//!    dropping them. So does a segment that ends, even between two frames, before the bytes
//!    the manifest says were committed: a cut that leaves only whole frames is no torn write.
//!    One write is one frame, so a torn write leaves exactly one bad frame at the very end.
//! 4. A frame that passes its CRC but does not decode was written in full. It is never
//!    treated as torn, because that would silently drop a committed record. It signals a
//!    schema mismatch and is a hard error.
//! 5. Segments whose records the snapshot fully covers are deleted, along with older
//!    snapshots. This finishes any compaction that a crash interrupted.
//! 6. A segment that must exist but is missing or empty is a hard error naming it, never an
//!    empty history. The segment the manifest names, or a newer one, must exist, so a
//!    directory whose segments are gone but whose `LOCK` or `MANIFEST` remains is an error,
//!    not a new journal. A snapshot at `SEQ` must be followed by a segment (one starts at
//!    `SEQ + 1` before older ones are deleted). A copy of the manifest that is not one (its
//!    CRC fails) is a hard error naming it; an empty or missing one leaves the other to stand.
//!    Without either (a journal from before the manifest), only the snapshot's rule is checked.
//! 7. A torn tail that was truncated is returned in [`Recovered::torn`]: where it was, how many
//!    records its frame held (when its header survived), and the records that can still be
//!    read from it, so that the caller can say which of its objects they touched.
//!
//! Apart from creating the directory and its `LOCK` file and making the journal private,
//! `open` changes nothing on disk unless recovery succeeds, so a failed open can be inspected
//! and retried. Directory entries are made durable by `fsync`ing the directory, so this crate
//! expects a Unix filesystem.
#![deny(missing_docs)]

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::marker::PhantomData;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Serialize, de::DeserializeOwned};
use tracing::{debug, warn};

mod manifest;
mod private;
#[cfg(test)]
mod tests;

use manifest::{Claim, Manifest};

/// Bytes in a frame header: `len` then `crc`, both u32 LE.
const HEADER: usize = 8;

/// Default size at which the active segment is sealed and a new one started.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// Tuning knobs for [`Journal::open_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// A new segment is started before a frame would push the active one past this size.
    /// A single larger frame still gets a segment to itself.
    pub segment_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
        }
    }
}

/// What [`Journal::open`] recovered: the latest snapshot and the records after it.
#[derive(Debug)]
pub struct Recovered<S, R> {
    /// The state from the latest snapshot, if one was ever taken.
    pub snapshot: Option<S>,
    /// The last sequence number `snapshot` covers (0 without a snapshot).
    pub snapshot_seq: u64,
    /// Records after the snapshot, in order, with their sequence numbers.
    pub records: Vec<(u64, R)>,
    /// The torn tail that recovery truncated, if there was one.
    pub torn: Option<TornTail<R>>,
}

/// A frame at the end of the last segment that never completed (or was cut short), truncated away at
/// recovery. Its records were never acknowledged by [`Journal::append`], so they are dropped, but the
/// caller should say what they were.
#[derive(Debug)]
pub struct TornTail<R> {
    /// The segment it was truncated from.
    pub path: PathBuf,
    /// Where the valid prefix ends, and the torn frame began.
    pub offset: u64,
    /// Bytes dropped.
    pub bytes: u64,
    /// The sequence numbers the frame held, when its header and record count survived.
    pub seqs: Option<Range<u64>>,
    /// The frame's records that can still be decoded, in order. Unverified (the frame failed its
    /// check): for reports only, never to act on.
    pub readable: Vec<R>,
    /// The bytes of the first record that could not be decoded, up to the cut.
    pub cut: Vec<u8>,
}

impl<R> TornTail<R> {
    /// The leading whole numbers (up to `n`) of the record that was cut short. The encoding writes
    /// an enum as its variant's index, then its fields in order, each integer as a varint; so a
    /// record cut after its first fields still says what kind it was and, say, which object it was
    /// about.
    pub fn cut_varints(&self, n: usize) -> Vec<u64> {
        let mut out = Vec::new();
        let mut rest = &self.cut[..];
        while out.len() < n {
            match postcard::take_from_bytes::<u64>(rest) {
                Ok((value, after)) => {
                    out.push(value);
                    rest = after;
                }
                Err(_) => break,
            }
        }
        out
    }

    /// How many records were dropped: the frame's count, else those still readable.
    pub fn dropped(&self) -> u64 {
        self.seqs
            .as_ref()
            .map_or(self.readable.len() as u64, |s| s.end - s.start)
    }
}

/// Everything that can go wrong. Every message names the file, and the byte offset
/// where there is one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// A file or the directory could not be created, opened, read, written, synced, renamed or
    /// deleted. The I/O error is part of the message, not a separate cause, so that it is said once.
    #[error("{}: {error}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        error: io::Error,
    },
    /// A segment or snapshot that must exist is missing, or holds no complete frame though records
    /// were committed to it.
    #[error(
        "{}: {why}; its records would be lost, so recovery stops (restore the file, or move the journal aside to start afresh)",
        .path.display()
    )]
    Missing {
        /// The file that must exist.
        path: PathBuf,
        /// Why it must, and what was found instead.
        why: String,
    },
    /// Committed records that recovery cannot find: the segment was cut short or damaged where
    /// the manifest says records were committed.
    #[error(
        "{}: {reason} at byte {offset}, but {} says {committed} bytes were committed to it: {} would be lost, so recovery stops (restore the file, or move the journal aside to start afresh)",
        .path.display(),
        .manifest.file_name().unwrap_or_default().to_string_lossy(),
        .last.map_or("the records from there on".to_owned(), |last| format!("records {from}..={last}"))
    )]
    Lost {
        /// The segment.
        path: PathBuf,
        /// Where its valid frames end, in bytes from the start of the file.
        offset: u64,
        /// What stopped the replay there (a bad frame, or the end of the file).
        reason: String,
        /// Bytes of the segment the manifest says were committed.
        committed: u64,
        /// The first sequence number not recovered.
        from: u64,
        /// The last sequence number it says was committed, where it counted them.
        last: Option<u64>,
        /// The copy of the manifest that said so.
        manifest: PathBuf,
    },
    /// Damage to committed data: a bad frame in a sealed segment or followed by a valid one, a
    /// snapshot that fails its check or its name, or a copy of the manifest that is not one.
    #[error("{}: corrupt frame at byte {offset}: {reason}", .path.display())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Where the bad frame starts, in bytes from the start of the file (0 for a snapshot or
        /// manifest).
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A frame that passed its CRC, so was written in full, does not decode as the records or state
    /// asked for: most likely a schema mismatch, never treated as a torn write.
    #[error("{}: frame at byte {offset} passed its CRC but does not decode (schema mismatch?): {reason}", .path.display())]
    Decode {
        /// The segment or snapshot.
        path: PathBuf,
        /// Where the frame starts, in bytes.
        offset: u64,
        /// What the decoder said.
        reason: String,
    },
    /// A frame's sequence number does not continue the previous one: records between are missing.
    #[error("{}: expected sequence number {expected} at byte {offset}, found {found}{context}", .path.display())]
    Sequence {
        /// The segment.
        path: PathBuf,
        /// Where the frame starts, in bytes.
        offset: u64,
        /// The sequence number that would continue the journal.
        expected: u64,
        /// The one the frame holds.
        found: u64,
        /// What the gap means, where it is between two files: empty, or starts with "; ".
        context: String,
    },
    /// The journal's directory, one above it, or one of its files is one another user could
    /// change (or a link, or not a file): what the journal holds is what the daemon runs, so
    /// nothing in it is read.
    #[error(
        "{}: {why}: another user could change the journal, whose records this daemon runs; keep the journal where only this user (and root) may change it, such as /var/lib/gangway/journal or a directory of this user's own",
        .path.display()
    )]
    Unsafe {
        /// The directory or file.
        path: PathBuf,
        /// Who may change it.
        why: String,
    },
    /// A file that cannot be this journal's: recovery stops rather than trust it over the
    /// committed records.
    #[error(
        "{}: {why}: it is not this journal's, so recovery stops rather than trust it over the committed records (move the file aside)",
        .path.display()
    )]
    Stray {
        /// The file.
        path: PathBuf,
        /// What it holds, and what says it cannot.
        why: String,
    },
    /// A record or snapshot could not be serialized; nothing was written.
    #[error("cannot encode a record or snapshot: {0}")]
    Encode(#[from] postcard::Error),
    /// A frame's payload, in bytes, is 4 GiB or more and does not fit the frame header's length;
    /// nothing was written.
    #[error("a frame payload of {0} bytes does not fit the u32 length field")]
    TooLarge(usize),
    /// Another writer (in this process or another) holds the directory's lock.
    #[error("{}: the journal is already open in another writer", .path.display())]
    Locked {
        /// The journal's directory.
        path: PathBuf,
    },
    /// An earlier write or fsync failed, so the segment may end in a partial frame: this handle
    /// refuses to append or snapshot, and reopening the journal recovers.
    #[error(
        "an earlier write or fsync failed, so the file state is unknown; reopen the journal to recover"
    )]
    Poisoned,
}

/// A result whose error is a [`JournalError`] unless said otherwise.
pub type Result<T, E = JournalError> = std::result::Result<T, E>;

/// Attaches the path to an `io::Error`.
trait At<T> {
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> At<T> for io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|error| JournalError::Io {
            path: path.to_owned(),
            error,
        })
    }
}

/// An append-only, fsynced journal of `R` records with snapshots. See the crate docs.
pub struct Journal<R> {
    dir: PathBuf,
    opts: Options,
    tail: File,
    tail_path: PathBuf,
    /// The first sequence number of the tail segment.
    tail_first: u64,
    tail_len: u64,
    next_seq: u64,
    /// Set while a write is in flight. If it is still set, the tail may hold a partial
    /// frame, and appending after that would turn a torn tail into mid-file corruption.
    poisoned: bool,
    /// `LOCK`, locked, which holds a copy of the manifest.
    lock: File,
    /// The journal's directory, locked too: the one writer's claim ([`lock_dir`]).
    _held: File,
    /// `MANIFEST`, the other copy.
    manifest_file: File,
    /// What the manifest says now.
    manifest: Manifest,
    _records: PhantomData<fn(&R)>,
}

impl<R: Serialize + DeserializeOwned> Journal<R> {
    /// Opens (or creates) the journal in `dir` with default [`Options`] and recovers it.
    pub fn open<S: DeserializeOwned>(dir: impl AsRef<Path>) -> Result<(Self, Recovered<S, R>)> {
        Self::open_with(dir, Options::default())
    }

    /// Opens (or creates) the journal in `dir` and recovers it by the rules in the crate docs.
    pub fn open_with<S: DeserializeOwned>(
        dir: impl AsRef<Path>,
        opts: Options,
    ) -> Result<(Self, Recovered<S, R>)> {
        let dir = dir.as_ref().to_path_buf();
        private::prepare_dir(&dir)?;
        let (lock, held) = lock_dir(&dir)?;
        let claim = read_claim(&dir, &lock)?;
        let (segments, snapshots) = list(&dir)?;

        // A snapshot is begun on a segment the manifest named durably, with every record it
        // covers: one past the manifest's last record is of records never committed here (a
        // stray file, another journal's), and trusting it would compact the committed ones away.
        if let (Some(claim), Some(&seq)) = (&claim, snapshots.last())
            && let Some(last) = claim.manifest.last.filter(|&last| seq > last)
        {
            return Err(JournalError::Stray {
                path: dir.join(snapshot_name(seq)),
                why: format!(
                    "a snapshot of records up to {seq}, but {} says the last record committed is {last}",
                    claim.name()
                ),
            });
        }
        let (snapshot, snap) = match snapshots.last() {
            Some(&seq) => (Some(read_snapshot(&dir, seq)?), seq),
            None => (None, 0),
        };
        // Rule 6: a segment that the manifest or the snapshot says exists must exist.
        if let Some(claim) = &claim
            && segments
                .last()
                .is_none_or(|&newest| newest < claim.manifest.tail)
        {
            return Err(JournalError::Missing {
                path: dir.join(segment_name(claim.manifest.tail)),
                why: format!(
                    "missing, but {} names it as the newest segment",
                    claim.name()
                ),
            });
        }
        if snapshots.last().is_some() && segments.is_empty() {
            return Err(JournalError::Missing {
                path: dir.join(segment_name(snap + 1)),
                why: format!("missing, but the snapshot at {snap} says the journal goes on there"),
            });
        }
        // A segment is fully covered if the next one starts at or before snap + 1. Those
        // are skipped unread, so damage to them does not matter: they are about to go.
        let live = &segments[segments
            .partition_point(|&f| f <= snap + 1)
            .saturating_sub(1)..];

        let mut next = live.first().copied().unwrap_or(snap + 1);
        if next == 0 {
            return Err(sequence_error(dir.join(segment_name(0)), 0, snap + 1, 0));
        }
        if next > snap + 1 {
            // The records before the oldest segment can only be in a snapshot: name the one that
            // must exist.
            return Err(JournalError::Missing {
                path: dir.join(snapshot_name(next - 1)),
                why: format!(
                    "missing, but the oldest segment, {}, starts at record {next}: records {}..={} are in no segment, so a snapshot of them must exist",
                    segment_name(next),
                    snap + 1,
                    next - 1
                ),
            });
        }
        let mut records = Vec::new();
        let mut tail_len = 0;
        let mut torn = None;
        for (i, &first) in live.iter().enumerate() {
            let path = dir.join(segment_name(first));
            if first != next {
                // The gap is between two files (the first one starts at `next`): either may be
                // where the records went.
                let before = segment_name(live[i.saturating_sub(1)]);
                return Err(JournalError::Sequence {
                    path,
                    offset: 0,
                    expected: next,
                    found: first,
                    context: format!(
                        "; records {next}..={} are missing: {before}, before it, was cut short after record {}, or a segment between them was deleted",
                        first - 1,
                        next - 1
                    ),
                });
            }
            let is_tail = i + 1 == live.len();
            let replayed = replay(&path, is_tail, &mut next, &mut records)?;
            // What must be there: every segment but the newest had a frame committed before the
            // next one started, and the one the manifest names holds all it says was committed.
            let named = claim.as_ref().filter(|c| c.manifest.tail == first);
            let committed = named.map_or(0, |c| c.manifest.len);
            if (!is_tail || committed > 0) && replayed.valid == 0 {
                let why = if replayed.len == 0 {
                    "empty, but records were committed to it".to_owned()
                } else {
                    format!(
                        "holds no complete frame in its {} bytes, but records were committed to it",
                        replayed.len
                    )
                };
                return Err(JournalError::Missing { path, why });
            }
            if let Some(claim) = named
                && replayed.valid < committed
            {
                return Err(JournalError::Lost {
                    path,
                    offset: replayed.valid,
                    reason: replayed.stop.unwrap_or("the file ends").to_owned(),
                    committed,
                    from: next,
                    last: claim.manifest.last,
                    manifest: claim.from.clone(),
                });
            }
            tail_len = replayed.valid;
            if replayed.valid < replayed.len {
                torn = Some(torn_tail(path, replayed.valid, replayed.len, next));
            }
        }
        records.retain(|(seq, _)| *seq > snap);

        // Only mutate the directory after everything above has validated.
        if let Some(torn) = &torn {
            let what = match &torn.seqs {
                Some(seqs) => format!(
                    "{} records (sequence numbers {}..={})",
                    seqs.end - seqs.start,
                    seqs.start,
                    seqs.end - 1
                ),
                None => "a frame whose header did not survive".to_owned(),
            };
            warn!(
                "{}: dropped a torn tail of {} bytes at byte {}: {what}, a write that never completed",
                torn.path.display(),
                torn.bytes,
                torn.offset,
            );
            let path = &torn.path;
            let file = OpenOptions::new().write(true).open(path).at(path)?;
            file.set_len(torn.offset).at(path)?;
            file.sync_all().at(path)?;
        }
        // If the tail holds only records the snapshot covers (a crash between writing a snapshot
        // and starting a new segment, in the order journals before `begin_snapshot` took) or
        // nothing exists yet, start a fresh segment at snap + 1.
        let tail_covered = live.last().is_none_or(|&f| f <= snap && next <= snap + 1);
        let next_seq = next.max(snap + 1);
        let (tail, tail_path, tail_first, keep_from) = if tail_covered {
            tail_len = 0;
            let (file, path) = create_segment(&dir, next_seq)?;
            (file, path, next_seq, next_seq)
        } else {
            let first = *live.last().expect("not covered");
            let path = dir.join(segment_name(first));
            let file = OpenOptions::new().append(true).open(&path).at(&path)?;
            (file, path, first, live[0])
        };
        let manifest_path = dir.join(manifest::MANIFEST);
        let manifest_file = private::open(
            &manifest_path,
            OpenOptions::new().read(true).write(true).create(true),
        )?;
        let manifest = Manifest {
            tail: tail_first,
            len: tail_len,
            last: Some(next_seq - 1),
        };
        let mut journal = Self {
            dir,
            opts,
            tail,
            tail_path,
            tail_first,
            tail_len,
            next_seq,
            poisoned: false,
            lock,
            _held: held,
            manifest_file,
            manifest,
            _records: PhantomData,
        };
        // The manifest names the tail before anything older is deleted. Both copies are written
        // afresh: one may be missing, or in an older form.
        journal.write_manifest(manifest, true)?;
        compact(&journal.dir, keep_from, snap)?;

        let snapshot_seq = snap;
        Ok((
            journal,
            Recovered {
                snapshot,
                snapshot_seq,
                records,
                torn,
            },
        ))
    }

    /// Appends one record durably and returns its sequence number.
    pub fn append(&mut self, record: &R) -> Result<u64> {
        Ok(self.append_batch(std::slice::from_ref(record))?.start)
    }

    /// Appends `records` as one atomic frame with one fsync and returns their sequence
    /// numbers. An empty batch writes nothing.
    pub fn append_batch(&mut self, records: &[R]) -> Result<Range<u64>> {
        if self.poisoned {
            return Err(JournalError::Poisoned);
        }
        let first = self.next_seq;
        if records.is_empty() {
            return Ok(first..first);
        }
        let frame = encode_frame(first, records)?;
        self.poisoned = true;
        if self.tail_len > 0 && self.tail_len + frame.len() as u64 > self.opts.segment_bytes {
            self.rotate()?;
        }
        self.tail.write_all(&frame).at(&self.tail_path)?;
        // Until this returns the record is not committed, and the caller must not act on it.
        self.tail.sync_data().at(&self.tail_path)?;
        self.poisoned = false;
        self.tail_len += frame.len() as u64;
        self.next_seq += records.len() as u64;
        // The manifest counts what is committed, so that recovery can tell a cut or damaged
        // segment from a write that never completed. The first frame of a segment is said durably
        // (losing them all, a truncation to nothing, is then always an error); the others without
        // an fsync of their own, which a power cut can only leave saying less.
        let first_frame = self.manifest.len == 0;
        self.write_manifest(
            Manifest {
                tail: self.tail_first,
                len: self.tail_len,
                last: Some(self.next_seq - 1),
            },
            first_frame,
        )?;
        Ok(first..self.next_seq)
    }

    /// Records `state` as the result of applying every record up to [`last_seq`](Self::last_seq)
    /// and deletes the segments it makes redundant. Returns the sequence number it covers.
    ///
    /// Steps: (1) encode `state` and start a new segment, so that every older one is fully
    /// covered; (2) write `snapshot-N.tmp` and fsync it; (3) rename it to `snapshot-N.snap` and
    /// fsync the directory, which is the commit point; (4) delete covered segments and older
    /// snapshots. A crash before step 3 leaves the old state intact. A crash after it is finished
    /// by `open`. [`Journal::begin_snapshot`] does step 1 and leaves the rest to be done elsewhere.
    pub fn snapshot<S: Serialize>(&mut self, state: &S) -> Result<u64> {
        self.begin_snapshot(state)?.finish()
    }

    /// Step 1 of [`Journal::snapshot`]: encodes `state` (what applying every record up to
    /// [`last_seq`](Self::last_seq) made) and starts a new segment. The file writes, fsyncs and
    /// deletions are left to [`SnapshotWrite::finish`], which may run on another thread while
    /// this journal appends on: a large state's snapshot then costs its appender only the
    /// encoding. One snapshot at a time: finish one before beginning the next (finishing deletes
    /// any other snapshot's temporary file), and before the journal is dropped (opening it again
    /// deletes the temporary file of one still being written, which then fails, harmlessly).
    pub fn begin_snapshot<S: Serialize>(&mut self, state: &S) -> Result<SnapshotWrite> {
        if self.poisoned {
            return Err(JournalError::Poisoned);
        }
        let seq = self.last_seq();
        let frame = encode_frame(seq, state)?;
        if self.tail_len > 0 {
            self.poisoned = true;
            self.rotate()?;
            self.poisoned = false;
        }
        Ok(SnapshotWrite {
            dir: self.dir.clone(),
            seq,
            frame,
        })
    }

    /// The sequence number of the last committed record (0 if there is none yet). Apply
    /// only records above the last one your state reflects.
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    fn rotate(&mut self) -> Result<()> {
        let (file, path) = create_segment(&self.dir, self.next_seq)?;
        debug!("{}: starting new segment", path.display());
        (self.tail, self.tail_path, self.tail_len) = (file, path, 0);
        self.tail_first = self.next_seq;
        self.write_manifest(
            Manifest {
                tail: self.next_seq,
                len: 0,
                last: Some(self.next_seq - 1),
            },
            true,
        )
    }

    /// Writes `manifest` to both copies; `durable` fsyncs them (see [`Manifest::write`]).
    fn write_manifest(&mut self, manifest: Manifest, durable: bool) -> Result<()> {
        for (file, name) in [
            (&self.manifest_file, manifest::MANIFEST),
            (&self.lock, manifest::LOCK),
        ] {
            manifest.write(file, durable).at(&self.dir.join(name))?;
        }
        self.manifest = manifest;
        Ok(())
    }
}

/// What the two copies of the manifest say: the newer, and which copy said it. `None` for a new
/// journal, or one written before there was a manifest.
fn read_claim(dir: &Path, lock: &File) -> Result<Option<Claim>> {
    let lock_path = dir.join(manifest::LOCK);
    let in_lock = Manifest::read(lock, &lock_path)?.map(|manifest| Claim {
        manifest,
        from: lock_path,
    });
    let path = dir.join(manifest::MANIFEST);
    let in_manifest = match File::open(&path) {
        Ok(file) => Manifest::read(&file, &path)?.map(|manifest| Claim {
            manifest,
            from: path,
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(error) => return Err(JournalError::Io { path, error }),
    };
    Ok(Manifest::newer(in_lock, in_manifest))
}

/// Describes the torn frame at `offset` of the segment at `path` (`file_len` bytes), which should
/// have held sequence numbers from `next`.
fn torn_tail<R: DeserializeOwned>(
    path: PathBuf,
    offset: u64,
    file_len: u64,
    next: u64,
) -> TornTail<R> {
    let (seqs, readable, cut) = fs::read(&path)
        .ok()
        .and_then(|buf| buf.get(offset as usize..).map(|torn| read_torn(torn, next)))
        .unwrap_or_default();
    TornTail {
        path,
        offset,
        bytes: file_len - offset,
        seqs,
        readable,
        cut,
    }
}

/// What [`read_torn`] finds: the sequence numbers, the readable records, the cut record's bytes.
type TornParts<R> = (Option<Range<u64>>, Vec<R>, Vec<u8>);

/// What can be read from a torn frame that should start at sequence number `next`: the range of
/// sequence numbers its header gives, the records that decode before the cut, and the bytes of the
/// one the cut went through.
fn read_torn<R: DeserializeOwned>(frame: &[u8], next: u64) -> TornParts<R> {
    let nothing = || (None, Vec::new(), Vec::new());
    let Some(header) = frame.get(..HEADER) else {
        return nothing();
    };
    let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let payload = &frame[HEADER..];
    let payload = &payload[..payload.len().min(len)];
    // (seq, count) as postcard writes them: two varints.
    let Ok((seq, rest)) = postcard::take_from_bytes::<u64>(payload) else {
        return nothing();
    };
    let Ok((count, mut rest)) = postcard::take_from_bytes::<u64>(rest) else {
        return nothing();
    };
    // A header that does not continue the sequence, or counts more records than the frame has
    // bytes, is not a frame this journal wrote.
    if seq != next || count == 0 || count > len as u64 {
        return nothing();
    }
    let mut readable = Vec::new();
    while (readable.len() as u64) < count {
        match postcard::take_from_bytes::<R>(rest) {
            Ok((record, after)) => {
                readable.push(record);
                rest = after;
            }
            Err(_) => break,
        }
    }
    let cut = if (readable.len() as u64) < count {
        rest.to_vec()
    } else {
        Vec::new()
    };
    (Some(seq..seq + count), readable, cut)
}

fn segment_name(first: u64) -> String {
    format!("segment-{first:020}.log")
}

fn snapshot_name(seq: u64) -> String {
    format!("snapshot-{seq:020}.snap")
}

fn sequence_error(path: PathBuf, offset: usize, expected: u64, found: u64) -> JournalError {
    let offset = offset as u64;
    JournalError::Sequence {
        path,
        offset,
        expected,
        found,
        context: String::new(),
    }
}

/// Encodes `(seq, body)` as one frame.
fn encode_frame<T: Serialize + ?Sized>(seq: u64, body: &T) -> Result<Vec<u8>> {
    let mut buf = postcard::to_extend(&(seq, body), vec![0; HEADER])?;
    let len = buf.len() - HEADER;
    let len32 = u32::try_from(len).map_err(|_| JournalError::TooLarge(len))?;
    let crc = crc32fast::hash(&buf[HEADER..]);
    buf[..4].copy_from_slice(&len32.to_le_bytes());
    buf[4..HEADER].copy_from_slice(&crc.to_le_bytes());
    Ok(buf)
}

/// Parses the frame at `off` as `(seq, body, end offset)`, or says why it is bad.
fn frame_at(buf: &[u8], off: usize) -> Result<(u64, &[u8], usize), &'static str> {
    let rest = &buf[off..];
    let header = rest.get(..HEADER).ok_or("short frame header")?;
    let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
    // We never write empty payloads; rejecting them also catches zero-filled tails,
    // whose CRC of nothing (0) would otherwise match.
    if len == 0 {
        return Err("zero-length frame");
    }
    let payload = rest
        .get(HEADER..HEADER + len)
        .ok_or("short frame payload")?;
    if crc32fast::hash(payload) != crc {
        return Err("CRC mismatch");
    }
    let (seq, body) = postcard::take_from_bytes(payload).map_err(|_| "no sequence number")?;
    Ok((seq, body, off + HEADER + len))
}

/// The frame decoder on bytes in memory, for fuzzing: what recovery does with a segment or a
/// snapshot file, without the files. Not part of the stable API.
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    /// Replays `bytes` as the last segment of a journal whose next sequence number is `first`:
    /// the records it holds, then the torn tail it would truncate (if any), or the error.
    #[allow(clippy::type_complexity)]
    pub fn segment<R: DeserializeOwned>(
        bytes: &[u8],
        first: u64,
    ) -> Result<(Vec<(u64, R)>, Option<TornTail<R>>)> {
        let path = Path::new("segment");
        let mut next = first;
        let mut records = Vec::new();
        let Replayed { valid, len, .. } = replay_bytes(bytes, path, true, &mut next, &mut records)?;
        let torn = (valid < len).then(|| {
            let (seqs, readable, cut) = read_torn(&bytes[valid as usize..], next);
            TornTail {
                path: path.to_owned(),
                offset: valid,
                bytes: len - valid,
                seqs,
                readable,
                cut,
            }
        });
        Ok((records, torn))
    }

    /// Reads `bytes` as the snapshot file of sequence number `seq`.
    pub fn snapshot<S: DeserializeOwned>(bytes: &[u8], seq: u64) -> Result<S> {
        snapshot_bytes(bytes, PathBuf::from("snapshot"), seq)
    }

    /// A segment frame holding `records` from sequence number `first`, as `append_batch` writes it
    /// (for seeding a corpus).
    pub fn frame<R: Serialize>(first: u64, records: &[R]) -> Result<Vec<u8>> {
        encode_frame(first, records)
    }

    /// A snapshot file of `state` at sequence number `seq`, as [`Journal::snapshot`] writes it.
    pub fn snapshot_frame<S: Serialize>(seq: u64, state: &S) -> Result<Vec<u8>> {
        encode_frame(seq, state)
    }
}

/// Decodes a whole frame body; trailing bytes mean it was not written as `T`.
fn decode<T: DeserializeOwned>(body: &[u8], path: &Path, offset: usize) -> Result<T> {
    let err = |reason: String| JournalError::Decode {
        path: path.to_owned(),
        offset: offset as u64,
        reason,
    };
    match postcard::take_from_bytes(body) {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(err(format!("{} trailing bytes", rest.len()))),
        Err(e) => Err(err(e.to_string())),
    }
}

/// What replaying a segment found.
#[derive(Debug, Clone, Copy)]
struct Replayed {
    /// Bytes of whole, valid frames from the start.
    valid: u64,
    /// Bytes in the file.
    len: u64,
    /// Why the valid frames stop before the end of the file (a bad frame that no valid one follows).
    stop: Option<&'static str>,
}

/// Replays one segment into `records`, advancing `next`. Only the tail segment may be longer than
/// its valid prefix.
fn replay<R: DeserializeOwned>(
    path: &Path,
    is_tail: bool,
    next: &mut u64,
    records: &mut Vec<(u64, R)>,
) -> Result<Replayed> {
    let buf = fs::read(path).at(path)?;
    replay_bytes(&buf, path, is_tail, next, records)
}

/// [`replay`] of a segment's bytes.
fn replay_bytes<R: DeserializeOwned>(
    buf: &[u8],
    path: &Path,
    is_tail: bool,
    next: &mut u64,
    records: &mut Vec<(u64, R)>,
) -> Result<Replayed> {
    let mut off = 0;
    let mut stop = None;
    while off < buf.len() {
        let (seq, body, end) = match frame_at(buf, off) {
            Ok(frame) => frame,
            Err(reason) => {
                let corrupt = |reason: String| JournalError::Corrupt {
                    path: path.to_owned(),
                    offset: off as u64,
                    reason,
                };
                // Sealed segments were fully written before the next one was started.
                if !is_tail {
                    return Err(corrupt(format!("{reason} in a sealed segment")));
                }
                // A valid frame after the bad one must have been written after it, so
                // the bad one was committed, not torn. The cheap sequence check first
                // avoids computing CRCs over most garbage.
                let plausible = |at: usize| {
                    buf.get(at + HEADER..)
                        .and_then(|p| postcard::take_from_bytes::<u64>(p).ok())
                        .is_some_and(|(s, _)| s >= *next)
                        && frame_at(buf, at).is_ok_and(|(s, ..)| s >= *next)
                };
                if let Some(at) = (off + 1..buf.len()).find(|&at| plausible(at)) {
                    return Err(corrupt(format!(
                        "{reason}, followed by a valid frame at byte {at}"
                    )));
                }
                stop = Some(reason);
                break;
            }
        };
        if seq != *next {
            return Err(sequence_error(path.to_owned(), off, *next, seq));
        }
        for record in decode::<Vec<R>>(body, path, off)? {
            records.push((*next, record));
            *next += 1;
        }
        off = end;
    }
    Ok(Replayed {
        valid: off as u64,
        len: buf.len() as u64,
        stop,
    })
}

fn read_snapshot<S: DeserializeOwned>(dir: &Path, seq: u64) -> Result<S> {
    let path = dir.join(snapshot_name(seq));
    let buf = fs::read(&path).at(&path)?;
    snapshot_bytes(&buf, path, seq)
}

/// [`read_snapshot`] of a snapshot's bytes.
fn snapshot_bytes<S: DeserializeOwned>(buf: &[u8], path: PathBuf, seq: u64) -> Result<S> {
    let reason = match frame_at(buf, 0) {
        Ok((s, body, end)) if s == seq && end == buf.len() => return decode(body, &path, 0),
        Ok((s, ..)) if s != seq => format!("holds sequence number {s}, but its name says {seq}"),
        Ok((_, _, end)) => format!("{} bytes after the frame", buf.len() - end),
        Err(reason) => reason.to_owned(),
    };
    Err(JournalError::Corrupt {
        path,
        offset: 0,
        reason,
    })
}

/// A snapshot encoded, with its journal moved on to a new segment ([`Journal::begin_snapshot`]),
/// still to be made durable.
#[must_use = "a snapshot begun is not durable until it is finished"]
pub struct SnapshotWrite {
    dir: PathBuf,
    seq: u64,
    frame: Vec<u8>,
}

impl SnapshotWrite {
    /// The sequence number the snapshot covers.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Steps 2 to 4 of [`Journal::snapshot`]: writes and fsyncs the snapshot, renames it into
    /// place (the commit point), and deletes the segments and older snapshots it covers. Returns
    /// the sequence number it covers. Dropped unfinished, it leaves every record in the journal's
    /// segments (only the new segment it started remains of it); a crash in the middle leaves
    /// what `open` recovers from.
    pub fn finish(self) -> Result<u64> {
        write_snapshot(&self.dir, self.seq, &self.frame)?;
        compact(&self.dir, self.seq + 1, self.seq)?;
        Ok(self.seq)
    }
}

fn write_snapshot(dir: &Path, seq: u64, frame: &[u8]) -> Result<()> {
    let tmp = dir.join(format!("snapshot-{seq:020}.tmp"));
    // Afresh: a `.tmp` left by a crash is never trusted, and is deleted on open anyway.
    let _ = fs::remove_file(&tmp);
    let mut file = private::open(&tmp, OpenOptions::new().write(true).create_new(true))?;
    file.write_all(frame).at(&tmp)?;
    // The contents must be durable before a name that recovery trusts points at them.
    file.sync_all().at(&tmp)?;
    let path = dir.join(snapshot_name(seq));
    fs::rename(&tmp, &path).at(&path)?;
    sync_dir(dir)
}

fn create_segment(dir: &Path, first: u64) -> Result<(File, PathBuf)> {
    let path = dir.join(segment_name(first));
    let file = private::open(&path, OpenOptions::new().append(true).create_new(true))?;
    sync_dir(dir)?;
    Ok((file, path))
}

/// Deletes segments before `keep_from`, snapshots older than `snap`, and leftover temp
/// files, then makes the deletions durable.
fn compact(dir: &Path, keep_from: u64, snap: u64) -> Result<()> {
    let mut removed = 0;
    for entry in fs::read_dir(dir).at(dir)? {
        let path = entry.at(dir)?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let stale = parse(name, "segment-", ".log").is_some_and(|f| f < keep_from)
            || parse(name, "snapshot-", ".snap").is_some_and(|s| s < snap)
            || parse(name, "snapshot-", ".tmp").is_some();
        if stale {
            fs::remove_file(&path).at(&path)?;
            removed += 1;
        }
    }
    if removed > 0 {
        debug!("{}: compaction removed {removed} files", dir.display());
        sync_dir(dir)?;
    }
    Ok(())
}

/// Sorted first sequence numbers of the segments, and of the snapshots.
fn list(dir: &Path) -> Result<(Vec<u64>, Vec<u64>)> {
    let (mut segments, mut snapshots) = (Vec::new(), Vec::new());
    for entry in fs::read_dir(dir).at(dir)? {
        let name = entry.at(dir)?.file_name();
        let name = name.to_str().unwrap_or("");
        segments.extend(parse(name, "segment-", ".log"));
        snapshots.extend(parse(name, "snapshot-", ".snap"));
    }
    segments.sort_unstable();
    snapshots.sort_unstable();
    Ok((segments, snapshots))
}

fn parse(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?
        .strip_suffix(suffix)?
        .parse()
        .ok()
}

/// Creating, renaming and deleting files change the directory, which is durable only
/// once the directory itself is fsynced.
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

/// Makes `dir` ready to hold a journal, as [`Journal::open`] does first: created private if it is
/// missing, and refused ([`JournalError::Unsafe`]) if another user could change it or the journal's
/// files in it. For a program that keeps other files there, to call before it makes them.
pub fn prepare_dir(dir: impl AsRef<Path>) -> Result<()> {
    private::prepare_dir(dir.as_ref())
}

/// How long an open waits for a lock held elsewhere before it says the journal is open in another
/// writer. A process that starts another (a worker, a probe) shares every open file with the child
/// until the child's `exec`, the lock's included: a journal closed and opened again in that window
/// finds its own lock still held, usually for a few milliseconds (longer where a child runs code
/// before its `exec`, on a loaded machine). A writer that really holds the journal holds it for as
/// long as it runs.
pub const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(250);

/// Takes an advisory lock so that two writers can never interleave frames, and opens `LOCK` (the
/// manifest's second copy). Two locks, both held for as long as the journal is open: one on the
/// directory itself, since a lock on a file that someone deletes (a "stale" lock file, say) holds an
/// inode no later open finds, and a second writer would lock the new file beside the first; and one
/// on `LOCK`, since only a file's lock reaches an NFS server (a directory's stays on its host), and
/// a daemon of an older version locks only it. Returns `LOCK` and the directory's handle.
fn lock_dir(dir: &Path) -> Result<(File, File)> {
    let held = File::open(dir).at(dir)?;
    lock_within_patience(&held, dir)?;
    let path = dir.join(manifest::LOCK);
    let file = private::open(
        &path,
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true),
    )?;
    lock_within_patience(&file, dir)?;
    Ok((file, held))
}

/// Locks `file`, waiting up to [`LOCK_PATIENCE`] for another holder to let go; `Locked` names the
/// journal's directory `dir` otherwise.
fn lock_within_patience(file: &File, dir: &Path) -> Result<()> {
    let began = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) if began.elapsed() < LOCK_PATIENCE => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(JournalError::Locked {
                    path: dir.to_owned(),
                });
            }
            Err(TryLockError::Error(error)) => {
                return Err(JournalError::Io {
                    path: dir.to_owned(),
                    error,
                });
            }
        }
    }
}
