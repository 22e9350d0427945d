use super::*;
use proptest::prelude::*;
use serde::Deserialize;
use std::ops::RangeInclusive;
use tempfile::TempDir;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Decision {
    job: u64,
    gpus: Vec<u32>,
    note: Option<String>,
}

/// A temporary directory made 0700 whatever the umask: a test that sets the umask to 0 (under
/// `cargo test`, in the same process) would otherwise make others' directories writable by every
/// user, which the journal refuses to live under.
fn temp_dir() -> TempDir {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir()
        .unwrap()
}

fn d(job: u64) -> Decision {
    let note = job.is_multiple_of(2).then(|| format!("job {job}"));
    Decision {
        job,
        gpus: vec![job as u32, 7],
        note,
    }
}

/// The records `seqs` as `open` should return them.
fn ds(seqs: RangeInclusive<u64>) -> Vec<(u64, Decision)> {
    seqs.map(|i| (i, d(i))).collect()
}

type State = Vec<Decision>;
type J = Journal<Decision>;

fn open_small(dir: &Path, segment_bytes: u64) -> (J, Recovered<State, Decision>) {
    J::open_with(dir, Options { segment_bytes }).unwrap()
}

fn open(dir: &Path) -> (J, Recovered<State, Decision>) {
    open_small(dir, DEFAULT_SEGMENT_BYTES)
}

fn open_err(dir: &Path) -> JournalError {
    match J::open::<State>(dir) {
        Ok(_) => panic!("open should have failed"),
        Err(e) => e,
    }
}

/// Sorted paths in `dir` whose names end with `suffix`.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_str().unwrap().ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// Appends `d(i)` for each `i` in `seqs`, checking the sequence numbers handed out.
fn append_all(j: &mut J, seqs: RangeInclusive<u64>) {
    for i in seqs {
        assert_eq!(j.append(&d(i)).unwrap(), i);
    }
}

/// Empties both copies of the manifest, as in a journal written before there was one; returns what
/// they held, for [`restore`].
fn empty_manifests(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    ["LOCK", "MANIFEST"]
        .iter()
        .map(|name| {
            let path = dir.join(name);
            let bytes = fs::read(&path).unwrap();
            fs::write(&path, b"").unwrap();
            (path, bytes)
        })
        .collect()
}

fn restore(files: &[(PathBuf, Vec<u8>)]) {
    for (path, bytes) in files {
        fs::write(path, bytes).unwrap();
    }
}

fn frame_offsets(buf: &[u8]) -> Vec<usize> {
    let mut offsets = vec![0];
    while let Ok((.., end)) = frame_at(buf, *offsets.last().unwrap()) {
        offsets.push(end);
    }
    assert_eq!(offsets.pop(), Some(buf.len()), "whole file is frames");
    offsets
}

#[test]
fn round_trip() {
    fn movable_to_a_blocking_thread<T: Send + 'static>(_: &T) {}
    let tmp = temp_dir();
    let (mut j, rec) = open(tmp.path());
    movable_to_a_blocking_thread(&j);
    assert!(rec.snapshot.is_none() && rec.records.is_empty());
    assert_eq!((j.last_seq(), rec.snapshot_seq), (0, 0));
    assert_eq!(j.append(&d(1)).unwrap(), 1);
    assert_eq!(j.append_batch(&[d(2), d(3), d(4)]).unwrap(), 2..5);
    assert_eq!(j.append_batch(&[]).unwrap(), 5..5);
    assert_eq!(j.last_seq(), 4);
    drop(j);
    let (j, rec) = open(tmp.path());
    assert_eq!(rec.records, ds(1..=4));
    assert_eq!(j.last_seq(), 4);
    assert_eq!(files(tmp.path(), ".log").len(), 1);
}

#[test]
fn reopen_continues_the_sequence() {
    let tmp = temp_dir();
    append_all(&mut open(tmp.path()).0, 1..=2);
    let (mut j, rec) = open(tmp.path());
    assert_eq!(rec.records, ds(1..=2));
    append_all(&mut j, 3..=3);
    drop(j);
    assert_eq!(open(tmp.path()).1.records, ds(1..=3));
}

#[test]
fn a_second_writer_is_locked_out() {
    let tmp = temp_dir();
    let _first = open(tmp.path());
    assert!(matches!(open_err(tmp.path()), JournalError::Locked { .. }));
}

/// Deleting `LOCK` (a "stale" lock file, say) while a writer has the journal open does not let a
/// second writer in: the lock is on the directory, not on the file.
#[test]
fn a_second_writer_is_locked_out_when_lock_is_deleted() {
    let tmp = temp_dir();
    let (mut first, _) = open(tmp.path());
    append_all(&mut first, 1..=2);
    fs::remove_file(tmp.path().join("LOCK")).unwrap();
    let err = open_err(tmp.path());
    assert!(
        matches!(&err, JournalError::Locked { path } if path == tmp.path()),
        "{err}"
    );
    append_all(&mut first, 3..=3);
    drop(first);
    assert_eq!(open(tmp.path()).1.records, ds(1..=3));
}

/// A lock let go while an open waits for it (as a child process lets go of its parent's, at its
/// `exec`) is taken: the open does not fail for it.
#[test]
fn a_lock_let_go_within_the_patience_is_taken() {
    let tmp = temp_dir();
    let first = open(tmp.path());
    let letting_go = std::thread::spawn(move || {
        std::thread::sleep(crate::LOCK_PATIENCE / 10);
        drop(first);
    });
    let (_journal, _) = open(tmp.path());
    letting_go.join().unwrap();
}

#[test]
fn torn_tail_is_truncated_and_appends_continue() {
    let tmp = temp_dir();
    let p = tmp.path();
    append_all(&mut open(p).0, 1..=3);
    let seg = files(p, ".log")[0].clone();
    let committed = fs::read(&seg).unwrap();
    let frame = encode_frame(4, &[d(4)][..]).unwrap();
    // Every strict prefix of the next frame, plus a zero-filled extension (the file grew
    // but the data never reached the disk).
    let mut tails: Vec<Vec<u8>> = (1..frame.len()).map(|n| frame[..n].to_vec()).collect();
    tails.push(vec![0; 4096]);
    for tail in tails {
        fs::write(&seg, [&committed[..], &tail].concat()).unwrap();
        assert_eq!(open(p).1.records, ds(1..=3), "tail of {} bytes", tail.len());
        assert_eq!(fs::read(&seg).unwrap(), committed, "torn bytes removed");
    }
    fs::write(&seg, [&committed[..], &frame[..5]].concat()).unwrap();
    append_all(&mut open(p).0, 4..=5);
    assert_eq!(open(p).1.records, ds(1..=5));
}

#[test]
fn corruption_before_valid_frames_is_a_hard_error() {
    let tmp = temp_dir();
    let p = tmp.path();
    append_all(&mut open(p).0, 1..=4);
    let seg = files(p, ".log")[0].clone();
    let good = fs::read(&seg).unwrap();
    let offsets = frame_offsets(&good);
    let last = *offsets.last().unwrap();
    for byte in 0..good.len() {
        let mut bad = good.clone();
        bad[byte] ^= 0x40;
        fs::write(&seg, &bad).unwrap();
        if byte >= last {
            // The final frame was committed too, and the manifest says so: damage to it is not a
            // torn write, and dropping it would lose an acknowledged record.
            let err = open_err(p);
            assert!(
                matches!(&err, JournalError::Lost { path, offset, .. } if *path == seg && *offset == last as u64),
                "flip at {byte}: {err}"
            );
            assert_eq!(
                fs::read(&seg).unwrap(),
                bad,
                "a failed open must not touch the file"
            );
            // Without a manifest (a journal from before it counted the committed bytes) it looks
            // exactly like a torn write.
            let manifests = empty_manifests(p);
            assert_eq!(open(p).1.records, ds(1..=3), "flip at {byte}");
            restore(&manifests);
            continue;
        }
        let start = *offsets.iter().rfind(|&&o| o <= byte).unwrap();
        let err = open_err(p);
        assert!(
            matches!(&err, JournalError::Corrupt { path, offset, .. } if *path == seg && *offset == start as u64),
            "flip at {byte}: {err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("byte {start}")) && msg.contains(&segment_name(1)),
            "{msg}"
        );
        assert_eq!(
            fs::read(&seg).unwrap(),
            bad,
            "a failed open must not touch the file"
        );
    }
}

#[test]
fn damage_in_a_sealed_segment_or_a_missing_segment_is_a_hard_error() {
    let tmp = temp_dir();
    let p = tmp.path();
    // A 1-byte limit gives every frame its own segment.
    append_all(&mut open_small(p, 1).0, 1..=3);
    let segs = files(p, ".log");
    assert_eq!(segs.len(), 3);

    let good = fs::read(&segs[1]).unwrap();
    let mut bad = good.clone();
    *bad.last_mut().unwrap() ^= 1;
    fs::write(&segs[1], &bad).unwrap();
    let err = open_err(p);
    assert!(
        matches!(&err, JournalError::Corrupt { path, offset: 0, .. } if *path == segs[1]),
        "{err}"
    );

    fs::write(&segs[1], &good).unwrap();
    assert_eq!(open(p).1.records, ds(1..=3));
    fs::remove_file(&segs[1]).unwrap();
    let err = open_err(p);
    assert!(
        matches!(&err, JournalError::Sequence { path, expected: 2, found: 3, .. } if *path == segs[2]),
        "{err}"
    );
    // The segment before the gap may be where the records went (cut between two frames).
    assert!(
        err.to_string().contains(&format!(
            "records 2..=2 are missing: {}, before it, was cut short after record 1",
            segment_name(1)
        )),
        "{err}"
    );
}

/// A segment deleted after a snapshot once recovered as an empty history after the snapshot (a
/// finished job went back to pending), and a segment truncated to nothing as an empty journal.
#[test]
fn a_segment_that_must_exist_but_is_missing_or_empty_is_a_hard_error() {
    let tmp = temp_dir();
    let p = tmp.path();
    let (mut j, _) = open(p);
    append_all(&mut j, 1..=3);
    j.snapshot(&(1..=3).map(d).collect::<State>()).unwrap();
    append_all(&mut j, 4..=5);
    drop(j);
    let seg = p.join(segment_name(4));
    let saved = fs::read(&seg).unwrap();
    let lock = fs::read(p.join("LOCK")).unwrap();
    let said = Manifest {
        tail: 4,
        len: saved.len() as u64,
        last: Some(5),
    };
    assert_eq!(String::from_utf8_lossy(&lock), said.line());
    assert_eq!(fs::read(p.join("MANIFEST")).unwrap(), lock, "two copies");

    fs::remove_file(&seg).unwrap();
    let err = open_err(p);
    assert!(
        matches!(&err, JournalError::Missing { path, .. } if *path == seg),
        "{err}"
    );
    assert!(err.to_string().contains("LOCK names it"), "{err}");
    // Without a manifest (a journal from before LOCK named its tail), the snapshot still says so.
    fs::write(p.join("LOCK"), b"").unwrap();
    fs::remove_file(p.join("MANIFEST")).unwrap();
    let err = open_err(p);
    assert!(
        matches!(&err, JournalError::Missing { path, .. } if *path == seg),
        "{err}"
    );
    assert!(err.to_string().contains("snapshot at 3"), "{err}");
    assert!(files(p, ".log").is_empty(), "a failed open creates nothing");

    // Truncated to nothing, or to less than one frame.
    fs::write(p.join("LOCK"), &lock).unwrap();
    for keep in [0, 5] {
        fs::write(&seg, &saved[..keep]).unwrap();
        let err = open_err(p);
        assert!(
            matches!(&err, JournalError::Missing { path, .. } if *path == seg),
            "{keep} bytes: {err}"
        );
        assert!(err.to_string().contains("records were committed"), "{err}");
        assert_eq!(fs::read(&seg).unwrap(), &saved[..keep], "left as it was");
    }
    fs::write(&seg, &saved).unwrap();
    assert_eq!(open(p).1.records, ds(4..=5));
}

#[test]
fn new_and_freshly_rotated_segments_may_be_empty() {
    let tmp = temp_dir();
    let p = tmp.path();
    drop(open(p));
    assert!(open(p).1.records.is_empty());
    let (mut j, _) = open(p);
    append_all(&mut j, 1..=2);
    j.snapshot(&(1..=2).map(d).collect::<State>()).unwrap();
    drop(j);
    // The segment after the snapshot holds nothing yet: that is no loss.
    assert_eq!(fs::metadata(p.join(segment_name(3))).unwrap().len(), 0);
    let (j, rec) = open(p);
    assert_eq!((rec.snapshot_seq, j.last_seq()), (2, 2));
    // A LOCK that is not a manifest is damage, not a reason to skip the checks.
    drop(j);
    fs::write(p.join("LOCK"), b"hello").unwrap();
    let err = open_err(p);
    assert!(
        matches!(&err, JournalError::Corrupt { path, .. } if path.ends_with("LOCK")),
        "{err}"
    );
}

/// A torn tail is truncated, and recovery says what it held: how many records, and those that can
/// still be read, for the caller to name what they touched.
#[test]
fn a_torn_tail_reports_the_records_it_dropped() {
    let tmp = temp_dir();
    let p = tmp.path();
    append_all(&mut open(p).0, 1..=2);
    let seg = files(p, ".log")[0].clone();
    let committed = fs::read(&seg).unwrap();
    // The crash came while a batch of four was being written: its frame never completed.
    let batch: Vec<_> = (3..=6).map(d).collect();
    let full = [&committed[..], &encode_frame(3, &batch[..]).unwrap()].concat();
    let start = committed.len();
    // Cut inside the last record of the last frame (a batch of four).
    let one = postcard::to_allocvec(&d(3)).unwrap().len();
    let cut = full.len() - one / 2;
    fs::write(&seg, &full[..cut]).unwrap();
    let rec = open(p).1;
    assert_eq!(rec.records, ds(1..=2));
    let torn = rec.torn.expect("a torn tail");
    assert_eq!((&torn.path, torn.offset), (&seg, start as u64));
    assert_eq!(torn.bytes, (cut - start) as u64);
    assert_eq!((torn.seqs.clone(), torn.dropped()), (Some(3..7), 4));
    assert_eq!(torn.readable, (3..=5).map(d).collect::<Vec<_>>());
    // Only the header survived: the count is still known.
    fs::write(&seg, &full[..start + HEADER + 2]).unwrap();
    let torn = open(p).1.torn.expect("a torn tail");
    assert_eq!((torn.seqs, torn.readable.len()), (Some(3..7), 0));
    // Part of the header: nothing is known but the bytes.
    fs::write(&seg, &full[..start + 3]).unwrap();
    let torn = open(p).1.torn.expect("a torn tail");
    assert_eq!(
        (torn.seqs.clone(), torn.bytes, torn.dropped()),
        (None, 3, 0)
    );
    assert!(open(p).1.torn.is_none(), "truncated once");
}

#[test]
fn a_frame_that_passes_its_crc_but_does_not_decode_is_never_truncated() {
    let tmp = temp_dir();
    let p = tmp.path();
    append_all(&mut open(p).0, 1..=2);
    let seg = files(p, ".log")[0].clone();
    let committed = fs::read(&seg).unwrap();
    let alien = [&committed[..], &encode_frame(3, &"not a batch").unwrap()].concat();
    fs::write(&seg, &alien).unwrap();
    let err = open_err(p);
    assert!(
        matches!(&err, JournalError::Decode { offset, .. } if *offset == committed.len() as u64),
        "{err}"
    );
    assert_eq!(fs::read(&seg).unwrap(), alien);
}

#[test]
fn segments_rotate_by_size() {
    let tmp = temp_dir();
    let p = tmp.path();
    let (mut j, _) = open_small(p, 64);
    append_all(&mut j, 1..=20);
    let big: Vec<_> = (21..=30).map(d).collect();
    assert_eq!(j.append_batch(&big).unwrap(), 21..31);
    drop(j);
    let segs = files(p, ".log");
    assert!(segs.len() > 5, "{} segments", segs.len());
    for seg in &segs[..segs.len() - 1] {
        assert!(fs::metadata(seg).unwrap().len() <= 64, "{}", seg.display());
    }
    // The oversized batch got a segment of its own.
    assert_eq!(segs.last().unwrap(), &p.join(segment_name(21)));
    assert_eq!(open_small(p, 64).1.records, ds(1..=30));
}

#[test]
fn snapshot_compacts_and_recovery_returns_it_with_later_records() {
    let tmp = temp_dir();
    let p = tmp.path();
    let (mut j, _) = open_small(p, 64);
    append_all(&mut j, 1..=10);
    assert!(files(p, ".log").len() > 1);
    let state: State = (1..=10).map(d).collect();
    assert_eq!(j.snapshot(&state).unwrap(), 10);
    assert_eq!(files(p, ".log"), [p.join(segment_name(11))]);
    assert_eq!(files(p, ".snap"), [p.join(snapshot_name(10))]);
    append_all(&mut j, 11..=12);
    drop(j);

    let (mut j, rec) = open_small(p, 64);
    assert_eq!(
        (rec.snapshot.as_ref(), rec.snapshot_seq),
        (Some(&state), 10)
    );
    assert_eq!(rec.records, ds(11..=12));
    let state: State = (1..=12).map(d).collect();
    assert_eq!(j.snapshot(&state).unwrap(), 12);
    // Nothing new since: taking it again changes nothing.
    assert_eq!(j.snapshot(&state).unwrap(), 12);
    assert_eq!(files(p, ".snap"), [p.join(snapshot_name(12))]);
    assert_eq!(files(p, ".log"), [p.join(segment_name(13))]);
    drop(j);
    let (j, rec) = open(p);
    assert_eq!(
        (rec.snapshot, rec.snapshot_seq, j.last_seq()),
        (Some(state), 12, 12)
    );
    assert!(rec.records.is_empty());
}

#[test]
fn a_snapshot_finished_on_another_thread_while_segments_rotate_keeps_every_record() {
    let tmp = temp_dir();
    let p = tmp.path();
    let (mut j, _) = open_small(p, 64);
    append_all(&mut j, 1..=10);
    let state: State = (1..=10).map(d).collect();
    let write = j.begin_snapshot(&state).unwrap();
    assert_eq!(write.seq(), 10);
    // Nothing is durable or deleted yet; the journal appends on, in a segment of its own.
    assert!(files(p, ".snap").is_empty());
    let finishing = std::thread::spawn(move || write.finish());
    // Segments of 64 bytes: these records start several while the snapshot is written.
    append_all(&mut j, 11..=40);
    assert_eq!(finishing.join().unwrap().unwrap(), 10);
    assert_eq!(files(p, ".snap"), [p.join(snapshot_name(10))]);
    let segments = files(p, ".log");
    assert!(segments.len() > 2, "{} segments", segments.len());
    assert_eq!(segments.first(), Some(&p.join(segment_name(11))));
    drop(j);
    let (_, rec) = open_small(p, 64);
    assert_eq!((rec.snapshot, rec.snapshot_seq), (Some(state), 10));
    assert_eq!(rec.records, ds(11..=40));
}

#[test]
fn a_snapshot_begun_and_never_finished_loses_nothing() {
    let tmp = temp_dir();
    let p = tmp.path();
    let (mut j, _) = open_small(p, 64);
    append_all(&mut j, 1..=5);
    let unfinished = j
        .begin_snapshot(&(1..=5).map(d).collect::<State>())
        .unwrap();
    drop(unfinished);
    append_all(&mut j, 6..=7);
    drop(j);
    let (_, rec) = open_small(p, 64);
    assert_eq!((rec.snapshot, rec.records), (None, ds(1..=7)));
}

#[test]
fn crash_before_the_rename_ignores_the_temp_snapshot() {
    let tmp = temp_dir();
    let p = tmp.path();
    append_all(&mut open(p).0, 1..=3);
    let frame = encode_frame(3, &(1..=3).map(d).collect::<State>()).unwrap();
    // Partly written, and fully written but never renamed: neither is committed.
    for len in [frame.len() / 2, frame.len()] {
        let tmp_snap = p.join("snapshot-00000000000000000003.tmp");
        fs::write(&tmp_snap, &frame[..len]).unwrap();
        let (_, rec) = open(p);
        assert_eq!((rec.snapshot, rec.records), (None, ds(1..=3)));
        assert!(!tmp_snap.exists());
    }
}

#[test]
fn crash_after_the_rename_before_rotation_finishes_compaction() {
    let tmp = temp_dir();
    let p = tmp.path();
    let (mut j, _) = open(p);
    append_all(&mut j, 1..=3);
    let state: State = (1..=3).map(d).collect();
    // Renamed into place, no new segment started: what the journal's earlier order of steps (the
    // snapshot before the rotation) left after a crash between them.
    write_snapshot(p, 3, &encode_frame(3, &state).unwrap()).unwrap();
    drop(j);

    let (mut j, rec) = open(p);
    assert_eq!((rec.snapshot.as_ref(), rec.snapshot_seq), (Some(&state), 3));
    assert!(rec.records.is_empty());
    assert_eq!(files(p, ".log"), [p.join(segment_name(4))]);
    append_all(&mut j, 4..=4);
    drop(j);
    assert_eq!(open(p).1.records, ds(4..=4));
}

#[test]
fn crash_before_old_files_are_deleted_recovers_from_the_new_snapshot() {
    let tmp = temp_dir();
    let p = tmp.path();
    let (mut j, _) = open_small(p, 64);
    append_all(&mut j, 1..=3);
    j.snapshot(&(1..=3).map(d).collect::<State>()).unwrap();
    append_all(&mut j, 4..=8);
    let before: Vec<_> = [files(p, ".log"), files(p, ".snap")].concat();
    let saved: Vec<_> = before.iter().map(|f| (f, fs::read(f).unwrap())).collect();
    let state: State = (1..=8).map(d).collect();
    j.snapshot(&state).unwrap();
    append_all(&mut j, 9..=9);
    drop(j);
    // Put back what step 4 deleted, as if the crash came just before it.
    for (f, bytes) in saved {
        fs::write(f, bytes).unwrap();
    }
    assert!(files(p, ".log").len() > 2 && files(p, ".snap").len() == 2);

    let (_, rec) = open_small(p, 64);
    assert_eq!((rec.snapshot, rec.snapshot_seq), (Some(state), 8));
    assert_eq!(rec.records, ds(9..=9));
    assert_eq!(files(p, ".log"), [p.join(segment_name(9))]);
    assert_eq!(files(p, ".snap"), [p.join(snapshot_name(8))]);
}

#[test]
fn a_damaged_snapshot_is_a_hard_error() {
    let tmp = temp_dir();
    let p = tmp.path();
    let (mut j, _) = open(p);
    append_all(&mut j, 1..=2);
    j.snapshot(&(1..=2).map(d).collect::<State>()).unwrap();
    drop(j);
    let snap = p.join(snapshot_name(2));
    let mut bytes = fs::read(&snap).unwrap();
    bytes[HEADER] ^= 1;
    fs::write(&snap, bytes).unwrap();
    let err = open_err(p);
    assert!(
        matches!(&err, JournalError::Corrupt { path, offset: 0, .. } if *path == snap),
        "{err}"
    );
    assert!(err.to_string().contains(&snapshot_name(2)));
}

/// A snapshot past the last committed record (another journal's, copied in) is refused, and the
/// records it would have compacted away are still there once it is moved aside.
#[test]
fn a_snapshot_of_records_never_committed_is_refused_and_deletes_nothing() {
    let tmp = temp_dir();
    let (p, other) = (tmp.path().join("journal"), tmp.path().join("other"));
    append_all(&mut open(&p).0, 1..=5);
    let (mut j, _) = open(&other);
    append_all(&mut j, 1..=9);
    j.snapshot(&(1..=9).map(d).collect::<State>()).unwrap();
    drop(j);
    let stray = p.join(snapshot_name(9));
    fs::copy(other.join(snapshot_name(9)), &stray).unwrap();
    let err = open_err(&p);
    assert!(
        matches!(&err, JournalError::Stray { path, .. } if *path == stray),
        "{err}"
    );
    assert!(
        err.to_string().contains("last record committed is 5"),
        "{err}"
    );
    assert_eq!(files(&p, ".log"), [p.join(segment_name(1))]);
    fs::remove_file(&stray).unwrap();
    let (j, rec) = open(&p);
    assert_eq!(
        (rec.records, rec.snapshot_seq, j.last_seq()),
        (ds(1..=5), 0, 5)
    );
}

/// What another user could change is never read: a journal file that is a link or not a regular
/// file, one of another user's, a directory above the journal that every user may write, and (as
/// root, which CI runs as) a directory of another user's. Each is refused naming it, and nothing
/// is changed through it.
#[test]
fn a_journal_another_user_could_change_is_refused_naming_what() {
    use std::os::unix::fs::{PermissionsExt, chown, symlink};
    let unsafe_at = |dir: &Path| match open_err(dir) {
        JournalError::Unsafe { path, why } => (path, why),
        err => panic!("{err}"),
    };
    let tmp = temp_dir();
    let p = tmp.path().join("journal");
    append_all(&mut open(&p).0, 1..=3);
    let segment = p.join(segment_name(1));
    let saved = fs::read(&segment).unwrap();

    // A segment linked to a file elsewhere: neither read nor truncated through the link.
    let elsewhere = tmp.path().join("elsewhere");
    fs::write(&elsewhere, b"not a segment").unwrap();
    fs::remove_file(&segment).unwrap();
    symlink(&elsewhere, &segment).unwrap();
    let (path, why) = unsafe_at(&p);
    assert_eq!(
        (path, why.as_str()),
        (segment.clone(), "is a symbolic link")
    );
    assert_eq!(fs::read(&elsewhere).unwrap(), b"not a segment");

    // A FIFO: refused, where opening it would block.
    fs::remove_file(&segment).unwrap();
    let fifo = std::ffi::CString::new(segment.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert_eq!(
        unsafe_at(&p),
        (segment.clone(), "is not a regular file".to_owned())
    );
    fs::remove_file(&segment).unwrap();
    fs::write(&segment, &saved).unwrap();
    assert_eq!(open(&p).1.records, ds(1..=3), "put back, it opens");

    // Under a directory every user may write (not sticky): another could swap the journal.
    let shared = tmp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
    let (path, why) = unsafe_at(&shared.join("journal"));
    assert_eq!(
        (path, why.as_str()),
        (shared.clone(), "is writable by every user")
    );
    assert!(!shared.join("journal").exists(), "nothing is made there");
    // Sticky, as /tmp is, it is fine.
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    assert!(open(&shared.join("journal")).1.records.is_empty());

    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return; // Only root can give a file away; CI runs as root.
    }
    let other = 54_321;
    chown(&segment, Some(other), None).unwrap();
    let (path, why) = unsafe_at(&p);
    assert_eq!(path, segment);
    assert!(why.starts_with("belongs to uid 54321"), "{why}");
    chown(&segment, Some(0), None).unwrap();
    chown(&p, Some(other), None).unwrap();
    assert_eq!(unsafe_at(&p).0, p);
    chown(&p, Some(0), None).unwrap();
    assert_eq!(open(&p).1.records, ds(1..=3));
    // A link another user made (as `.gangway` in their directory), to a directory of root's: refused
    // for the link, whatever it names (they could point it elsewhere after the check).
    let roots = tmp.path().join("roots");
    fs::create_dir(&roots).unwrap();
    let link = tmp.path().join(".gangway");
    symlink(&roots, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(other), None).unwrap();
    let (path, why) = unsafe_at(&link.join("journal"));
    assert_eq!(path, link);
    assert!(why.starts_with("belongs to uid 54321"), "{why}");
    assert!(!roots.join("journal").exists(), "nothing is made there");
}

#[derive(Debug, Clone)]
enum Op {
    Append(u64),
    Batch(Vec<u64>),
    Snapshot,
    Reopen,
    /// Crash in the middle of writing a frame of this many bytes (capped below its length).
    Tear(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..1000u64).prop_map(Op::Append),
        2 => prop::collection::vec(0..1000u64, 0..5).prop_map(Op::Batch),
        1 => Just(Op::Snapshot),
        1 => Just(Op::Reopen),
        1 => (1..64usize).prop_map(Op::Tear),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn recovery_returns_exactly_the_committed_records(
        ops in prop::collection::vec(op(), 1..40),
        segment_bytes in 32..256u64,
    ) {
        let tmp = temp_dir();
        let p = tmp.path();
        let (mut j, _) = open_small(p, segment_bytes);
        let mut committed: Vec<Decision> = Vec::new();
        let mut snap: (u64, Option<State>) = (0, None);
        for op in ops.into_iter().chain([Op::Reopen]) {
            let next = committed.len() as u64 + 1;
            match op {
                Op::Append(job) => {
                    prop_assert_eq!(j.append(&d(job)).unwrap(), next);
                    committed.push(d(job));
                }
                Op::Batch(jobs) => {
                    let batch: Vec<_> = jobs.into_iter().map(d).collect();
                    let seqs = j.append_batch(&batch).unwrap();
                    prop_assert_eq!(seqs, next..next + batch.len() as u64);
                    committed.extend(batch);
                }
                Op::Snapshot => {
                    prop_assert_eq!(j.snapshot(&committed).unwrap(), next - 1);
                    snap = (next - 1, Some(committed.clone()));
                }
                Op::Reopen | Op::Tear(_) => {
                    if let Op::Tear(n) = op {
                        let frame = encode_frame(next, &[d(0)][..]).unwrap();
                        let tail = files(p, ".log").pop().unwrap();
                        let mut file = OpenOptions::new().append(true).open(tail).unwrap();
                        file.write_all(&frame[..n.min(frame.len() - 1)]).unwrap();
                    }
                    drop(j);
                    let rec;
                    (j, rec) = open_small(p, segment_bytes);
                    prop_assert_eq!(rec.snapshot_seq, snap.0);
                    prop_assert_eq!(&rec.snapshot, &snap.1);
                    let after: Vec<_> = (snap.0 + 1..).zip(committed[snap.0 as usize..].iter().cloned()).collect();
                    prop_assert_eq!(rec.records, after);
                    prop_assert_eq!(j.last_seq(), next - 1);
                    prop_assert!(files(p, ".snap").len() <= 1);
                }
            }
        }
    }
}

/// The permission bits of `path`.
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs `f` with the process's umask set to `mask` (each test is a process of its own under
/// nextest; under `cargo test` this can only loosen the modes other tests create meanwhile).
fn with_umask<T>(mask: u32, f: impl FnOnce() -> T) -> T {
    // SAFETY: umask(2) cannot fail.
    let old = unsafe { libc::umask(mask as libc::mode_t) };
    let out = f();
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    out
}

/// What `f` logs, at every level.
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8_lossy(&buffer.0.lock().unwrap()).into_owned();
    (out, text)
}

/// Journal files hold what jobs were submitted with (environment included): they were 0644 in a
/// 0755 directory under the usual umask, readable by every local user.
#[test]
fn every_journal_file_is_private_whatever_the_umask() {
    let tmp = temp_dir();
    let p = tmp.path().join("journal");
    with_umask(0, || {
        let (mut j, _) = open_small(&p, 64);
        append_all(&mut j, 1..=10);
        j.snapshot(&(1..=10).map(d).collect::<State>()).unwrap();
        append_all(&mut j, 11..=12);
    });
    assert_eq!(mode(&p), 0o700, "the directory");
    let names: Vec<String> = fs::read_dir(&p)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    for kind in ["LOCK", "MANIFEST", ".log", ".snap"] {
        assert!(
            names.iter().any(|n| n.ends_with(kind)),
            "{kind} in {names:?}"
        );
    }
    for name in &names {
        assert_eq!(mode(&p.join(name)), 0o600, "{name}");
    }
    // A snapshot's temporary file, while it is being written.
    let tmp_snap = p.join("snapshot-00000000000000000012.tmp");
    with_umask(0, || {
        let frame = encode_frame(12, &(1..=12).map(d).collect::<State>()).unwrap();
        write_snapshot(&p, 12, &frame).unwrap()
    });
    assert!(!tmp_snap.exists());
    assert_eq!(mode(&p.join(snapshot_name(12))), 0o600);
}

/// A journal written before files were private is made private when it is opened, and that is
/// said once.
#[test]
fn an_older_journal_is_made_private_when_opened() {
    let tmp = temp_dir();
    let p = tmp.path().join("journal");
    let (mut j, _) = open(&p);
    append_all(&mut j, 1..=3);
    j.snapshot(&(1..=3).map(d).collect::<State>()).unwrap();
    append_all(&mut j, 4..=4);
    drop(j);
    let ours: Vec<PathBuf> = fs::read_dir(&p)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    for path in &ours {
        chmod(path, 0o644);
    }
    chmod(&p, 0o755);
    // Not the journal's: left as it is.
    let token = p.join("api-token");
    fs::write(&token, "secret").unwrap();
    chmod(&token, 0o640);

    let ((_, rec), log) = logged(|| open(&p));
    assert_eq!(rec.records, ds(4..=4));
    assert_eq!(mode(&p), 0o700);
    for path in &ours {
        assert_eq!(mode(path), 0o600, "{}", path.display());
    }
    assert_eq!(mode(&token), 0o640);
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains("made it private")
            && warnings[0].contains("segment-00000000000000000004.log (644)"),
        "{log}"
    );
    // Said once: the next open finds nothing to change.
    let (_, log) = logged(|| open(&p));
    assert!(!log.contains("WARN"), "{log}");
}

/// Deleting `LOCK` and the segments once started an empty journal (every job gone, silently):
/// `MANIFEST` still says there were records. Either copy of the manifest is enough; a directory
/// that never held a journal still starts empty.
#[test]
fn a_directory_whose_segments_are_gone_is_not_a_new_journal() {
    let tmp = temp_dir();
    let p = tmp.path();
    append_all(&mut open(p).0, 1..=3);
    let seg = p.join(segment_name(1));
    let saved = fs::read(&seg).unwrap();
    for (deleted, left) in [("LOCK", "MANIFEST"), ("MANIFEST", "LOCK")] {
        fs::remove_file(p.join(deleted)).unwrap();
        fs::remove_file(&seg).unwrap();
        let err = open_err(p);
        assert!(
            matches!(&err, JournalError::Missing { path, .. } if *path == seg),
            "{err}"
        );
        assert!(
            err.to_string().contains(&format!("{left} names it")),
            "{err}"
        );
        assert!(files(p, ".log").is_empty(), "a failed open creates nothing");
        // Put back, it opens, and both copies are written again.
        fs::write(&seg, &saved).unwrap();
        assert_eq!(open(p).1.records, ds(1..=3));
        assert_eq!(
            fs::read(p.join("LOCK")).unwrap(),
            fs::read(p.join("MANIFEST")).unwrap()
        );
    }
    // Deleting LOCK alone loses nothing.
    fs::remove_file(p.join("LOCK")).unwrap();
    assert_eq!(open(p).1.records, ds(1..=3));

    // A directory that holds other things but never held a journal.
    let fresh = tmp.path().join("fresh");
    fs::create_dir(&fresh).unwrap();
    fs::write(fresh.join("api-token"), "secret").unwrap();
    let (j, rec) = open(&fresh);
    assert_eq!((j.last_seq(), rec.records.len()), (0, 0));
}

/// A copy of the manifest that is not one is never believed: its CRC catches a changed digit.
#[test]
fn a_damaged_manifest_is_a_hard_error_naming_it() {
    let tmp = temp_dir();
    let p = tmp.path();
    append_all(&mut open(p).0, 1..=3);
    let path = p.join("MANIFEST");
    let good = fs::read(&path).unwrap();
    // The `len` field, one digit up: it would claim bytes that were never written.
    let at = String::from_utf8_lossy(&good).find(" len ").unwrap() + 5 + 18;
    let mut bad = good.clone();
    bad[at] += 1;
    fs::write(&path, &bad).unwrap();
    let err = open_err(p);
    assert!(
        matches!(&err, JournalError::Corrupt { path: at, offset: 0, .. } if *at == path),
        "{err}"
    );
    assert!(err.to_string().contains("not a journal manifest"), "{err}");
    // Emptied, the other copy stands.
    fs::write(&path, b"").unwrap();
    assert_eq!(open(p).1.records, ds(1..=3));
}

/// Deleting the snapshot was refused with "expected sequence number 1 ... found 4", which named
/// neither the snapshot nor what it should have held.
#[test]
fn a_missing_snapshot_is_named() {
    let tmp = temp_dir();
    let p = tmp.path();
    let (mut j, _) = open(p);
    append_all(&mut j, 1..=3);
    j.snapshot(&(1..=3).map(d).collect::<State>()).unwrap();
    append_all(&mut j, 4..=5);
    drop(j);
    let snap = p.join(snapshot_name(3));
    fs::remove_file(&snap).unwrap();
    let err = open_err(p);
    assert!(
        matches!(&err, JournalError::Missing { path, .. } if *path == snap),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&snapshot_name(3))
            && msg.contains("records 1..=3")
            && msg.contains(&segment_name(4)),
        "{msg}"
    );
}

/// A segment cut between two frames leaves only whole frames: it once replayed as a shorter
/// journal, silently (a cut two bytes later was reported, as a torn write of one frame, though it
/// dropped every frame after it too). At every offset, recovery returns exactly the committed
/// records, or fails naming the segment and where it ends; only a write that never completed
/// (beyond what the manifest says was committed) is dropped, and reported.
#[test]
fn a_segment_cut_anywhere_is_recovered_exactly_or_refused() {
    let tmp = temp_dir();
    let p = tmp.path();
    let (mut j, _) = open(p);
    append_all(&mut j, 1..=4);
    j.append_batch(&(5..=7).map(d).collect::<Vec<_>>()).unwrap();
    append_all(&mut j, 8..=9);
    drop(j);
    let seg = p.join(segment_name(1));
    let committed = fs::read(&seg).unwrap();
    let offsets = frame_offsets(&committed);
    // A write of two more records that never completed.
    let torn = encode_frame(10, &[d(10), d(11)][..]).unwrap();
    let full = [&committed[..], &torn[..torn.len() - 1]].concat();
    let manifests: Vec<_> = ["LOCK", "MANIFEST"]
        .iter()
        .map(|n| (p.join(n), fs::read(p.join(n)).unwrap()))
        .collect();
    let (mut exact, mut refused) = (0, 0);
    for cut in 0..=full.len() {
        restore(&manifests);
        fs::write(&seg, &full[..cut]).unwrap();
        match J::open::<State>(p) {
            Ok((_, rec)) => {
                assert!(cut >= committed.len(), "cut at {cut} recovered");
                assert_eq!(rec.records, ds(1..=9), "cut at {cut}");
                // Its sequence numbers are known once the header and both varints survive.
                let torn = (cut > committed.len()).then(|| {
                    let seqs = (cut >= committed.len() + HEADER + 2).then_some(10..12);
                    (committed.len() as u64, seqs)
                });
                assert_eq!(rec.torn.map(|t| (t.offset, t.seqs)), torn, "cut at {cut}");
                exact += 1;
            }
            Err(err) => {
                assert!(cut < committed.len(), "cut at {cut}: {err}");
                // Where the last whole frame before the cut ends.
                let end = *offsets.iter().rfind(|&&o| o <= cut).unwrap();
                // The first record of each frame: 1 to 4 alone, 5..=7 in a batch, then 8 and 9.
                let first = [1, 2, 3, 4, 5, 8, 9][offsets.iter().position(|&o| o == end).unwrap()];
                let named = match &err {
                    JournalError::Lost {
                        path,
                        offset,
                        committed: c,
                        from,
                        last,
                        ..
                    } => {
                        *path == seg
                            && *offset == end as u64
                            && *c == committed.len() as u64
                            && (*from, *last) == (first, Some(9))
                    }
                    // Nothing whole is left.
                    JournalError::Missing { path, .. } => *path == seg && end == 0,
                    _ => false,
                };
                assert!(named, "cut at {cut}: {err}");
                assert!(err.to_string().contains(&segment_name(1)), "{err}");
                assert_eq!(fs::read(&seg).unwrap(), &full[..cut], "left as it was");
                refused += 1;
            }
        }
    }
    assert_eq!((exact, refused), (torn.len(), committed.len()));
}
