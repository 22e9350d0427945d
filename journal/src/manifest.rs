//! The manifest: which segment is the newest, and how much of it was committed.
//!
//! It is kept twice, in `LOCK` and in `MANIFEST`, so that deleting one (a "stale" lock file, say)
//! takes no check away: the other still says that the journal held records, and how many.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::JournalError;

/// The copies' file names.
pub(crate) const LOCK: &str = "LOCK";
pub(crate) const MANIFEST: &str = "MANIFEST";

/// What a manifest says. Every frame below `len` bytes of segment `tail` was committed (fsynced and
/// acknowledged), so recovery must find all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Manifest {
    /// The first sequence number of the newest segment.
    pub tail: u64,
    /// Bytes of whole frames committed to it.
    pub len: u64,
    /// The last sequence number committed to the journal; `None` in a manifest written before the
    /// manifest counted them (it said only whether the tail held a frame: `len` is then 0 or 1).
    pub last: Option<u64>,
}

/// A manifest and the copy it was read from.
#[derive(Debug, Clone)]
pub(crate) struct Claim {
    pub manifest: Manifest,
    pub from: PathBuf,
}

impl Claim {
    /// The copy's file name, for messages.
    pub fn name(&self) -> String {
        self.from
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    }
}

impl Manifest {
    /// The line written to both copies; always the same length, so that rewriting it in place
    /// never leaves a tail. It ends with a CRC of the rest, so that a damaged copy is never
    /// believed.
    pub fn line(self) -> String {
        let text = format!(
            "gangway-journal 2 tail {:020} len {:020} last {:020}",
            self.tail,
            self.len,
            self.last.unwrap_or(0)
        );
        let crc = crc32fast::hash(text.as_bytes());
        format!("{text} crc {crc:08x}\n")
    }

    /// Writes the line at the start of `file`; `durable` fsyncs it. Appends write it without an
    /// fsync: the segment was fsynced first, so a copy that a power cut left behind says less than
    /// was committed, never more.
    pub fn write(self, file: &File, durable: bool) -> io::Result<()> {
        let line = self.line();
        file.write_all_at(line.as_bytes(), 0)?;
        if durable {
            file.set_len(line.len() as u64)?;
            file.sync_data()?;
        }
        Ok(())
    }

    /// Parses one copy's text: `None` for an empty one (a new journal, or one written before it
    /// kept this copy).
    pub fn parse(text: &str, path: &Path) -> Result<Option<Manifest>, JournalError> {
        if text.is_empty() {
            return Ok(None);
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        let number = |word: &str| word.parse::<u64>().ok();
        let manifest = match words.as_slice() {
            // Written before the manifest counted what was committed: only whether the tail held a
            // frame.
            [
                "gangway-journal",
                "tail",
                tail,
                state @ ("empty" | "written"),
            ] => number(tail).map(|tail| Manifest {
                tail,
                len: u64::from(*state == "written"),
                last: None,
            }),
            [
                "gangway-journal",
                "2",
                "tail",
                tail,
                "len",
                len,
                "last",
                last,
                "crc",
                _,
            ] => {
                match (number(tail), number(len), number(last)) {
                    (Some(tail), Some(len), Some(last)) => Some(Manifest {
                        tail,
                        len,
                        last: Some(last),
                    }),
                    _ => None,
                }
                // Only the very line it would write: this checks the CRC and the layout at once.
                .filter(|m| m.line() == text)
            }
            _ => None,
        };
        match manifest {
            Some(m) if m.tail > 0 => Ok(Some(m)),
            _ => Err(bad(path, text)),
        }
    }

    /// Reads the copy in `file` (at `path`).
    pub fn read(file: &File, path: &Path) -> Result<Option<Manifest>, JournalError> {
        let mut buf = vec![0; 256];
        let n = read_at_most(file, &mut buf).map_err(|error| JournalError::Io {
            path: path.to_owned(),
            error,
        })?;
        buf.truncate(n);
        match String::from_utf8(buf) {
            Ok(text) => Self::parse(&text, path),
            Err(e) => Err(bad(path, &String::from_utf8_lossy(e.as_bytes()))),
        }
    }

    /// The newer of the two copies: each is only ever rewritten to say more (a later tail, more
    /// bytes), and a crash between the two writes leaves one behind.
    pub fn newer(a: Option<Claim>, b: Option<Claim>) -> Option<Claim> {
        match (a, b) {
            (Some(a), Some(b)) => {
                let key = |c: &Claim| (c.manifest.tail, c.manifest.len);
                Some(if key(&b) > key(&a) { b } else { a })
            }
            (a, b) => a.or(b),
        }
    }
}

/// Fills `buf` from the start of `file` as far as the file goes.
fn read_at_most(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn bad(path: &Path, text: &str) -> JournalError {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    JournalError::Corrupt {
        path: path.to_owned(),
        offset: 0,
        reason: format!(
            "not a journal manifest: `{}` (it is kept in both LOCK and MANIFEST; an empty {name} leaves the other copy to stand)",
            text.trim().chars().take(80).collect::<String>()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_and_any_change_to_it_is_refused() {
        let m = Manifest {
            tail: 7,
            len: 1234,
            last: Some(99),
        };
        let line = m.line();
        let path = Path::new("MANIFEST");
        assert_eq!(Manifest::parse(&line, path).unwrap(), Some(m));
        for at in 0..line.len() {
            let mut bytes = line.clone().into_bytes();
            bytes[at] ^= 0x01;
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                Manifest::parse(&text, path).is_err(),
                "a flip at {at} was believed: {text}"
            );
        }
    }
}
