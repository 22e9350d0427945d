//! Errors for input data: every message names the source, and, for rows, the line and field.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where a piece of input came from: a file path or a named embedded/synthetic source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source(pub String);

impl Source {
    /// The source a file path names, as the path displays.
    pub fn path(path: &Path) -> Self {
        Source(path.display().to_string())
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An error in user input (traces, throughput tables, cluster specs). Never a panic.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A value in one row is wrong: `file:line: field `name`: what`.
    #[error("{input}:{line}: field `{field}`: {message}")]
    Field {
        /// The file or named source the row is in.
        input: Source,
        /// The row's line in it, from 1.
        line: u64,
        /// The field's name, as its column header or key spells it.
        field: String,
        /// What is wrong with the value, often with the range or form expected.
        message: String,
    },
    /// A row as a whole is wrong (wrong number of columns, unreadable CSV).
    #[error("{input}:{line}: {message}")]
    Row {
        /// The file or named source the row is in.
        input: Source,
        /// The row's line in it, from 1.
        line: u64,
        /// What is wrong with the row.
        message: String,
    },
    /// The input as a whole is wrong (unknown format, empty, missing option).
    #[error("{input}: {message}")]
    Whole {
        /// The file or named source that is wrong.
        input: Source,
        /// What is wrong with it.
        message: String,
    },
    /// The file cannot be read. The I/O error is part of the message, not a separate cause, so that a
    /// report of the whole chain says it once.
    #[error("{}: {error}", .path.display())]
    Io {
        /// The file that could not be opened or read.
        path: PathBuf,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// The path is not a regular file (a FIFO, a device, a socket): reading it could block for ever
    /// or never end, so it is refused before any byte is read.
    #[error("{}: is {kind}, not a regular file", .path.display())]
    NotAFile {
        /// The path given.
        path: PathBuf,
        /// What it is instead, for the message: `a FIFO (named pipe)`, `a character device`, ...
        kind: &'static str,
    },
    /// The file is larger than any input gangway reads ([`MAX_INPUT_BYTES`]).
    #[error(
        "{}: is {bytes} bytes or more; an input may be at most {MAX_INPUT_BYTES} bytes ({} MiB)",
        .path.display(),
        MAX_INPUT_BYTES >> 20
    )]
    TooLarge {
        /// The file given.
        path: PathBuf,
        /// Its size in bytes when it was opened, or `MAX_INPUT_BYTES + 1` for one that grew past
        /// the limit while it was read (hence the message's "or more").
        bytes: u64,
    },
}

impl InputError {
    /// An [`InputError::Field`]: `field` on line `line` (from 1) of `source` is wrong, as `message`
    /// says.
    pub fn field(
        source: &Source,
        line: u64,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        InputError::Field {
            input: source.clone(),
            line,
            field: field.into(),
            message: message.into(),
        }
    }

    /// An [`InputError::Row`]: line `line` (from 1) of `source` is wrong as a whole.
    pub fn row(source: &Source, line: u64, message: impl Into<String>) -> Self {
        InputError::Row {
            input: source.clone(),
            line,
            message: message.into(),
        }
    }

    /// An [`InputError::Whole`]: `source` as a whole is wrong.
    pub fn whole(source: &Source, message: impl Into<String>) -> Self {
        InputError::Whole {
            input: source.clone(),
            message: message.into(),
        }
    }

    /// An [`InputError::Io`]: `path` could not be opened or read.
    pub fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        InputError::Io {
            path: path.into(),
            error,
        }
    }
}

/// The largest input file gangway reads (a trace, a table, a cluster or topology file, a profile):
/// 256 MiB, about 75 times the largest public trace (Philly's, 3.4 MB). A larger one is a mistake
/// (a disk image, a log) that would only fill memory.
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// Opens an input file for reading, refusing anything but a regular file.
///
/// The open does not block (`O_NONBLOCK`: a FIFO with no writer would hang a plain open for ever), and
/// the kind is checked on the opened descriptor (`fstat`), not on the path, so that nothing can be
/// swapped in between. A directory is the operating system's own error (`Is a directory`); a FIFO, a
/// device or a socket is [`InputError::NotAFile`]; a file over [`MAX_INPUT_BYTES`] is
/// [`InputError::TooLarge`]. Every reader of input files opens them here.
pub fn open_input(path: &Path) -> Result<File, InputError> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| InputError::io(path, e))?;
    let metadata = file.metadata().map_err(|e| InputError::io(path, e))?;
    let file_type = metadata.file_type();
    if file_type.is_dir() {
        return Err(InputError::io(path, is_a_directory()));
    }
    if !file_type.is_file() {
        return Err(InputError::NotAFile {
            path: path.to_path_buf(),
            kind: kind_of(&file_type),
        });
    }
    if metadata.len() > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
            bytes: metadata.len(),
        });
    }
    Ok(file)
}

/// Reads a whole input file, opened by [`open_input`]; no more than [`MAX_INPUT_BYTES`] are read even
/// when the file grows while it is read.
pub fn read_input(path: &Path) -> Result<Vec<u8>, InputError> {
    let file = open_input(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| InputError::io(path, e))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
            bytes: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

/// Reads a text file (a trace, a table, a cluster file) through [`read_input`]. Text that is not UTF-8
/// is reported at its line: `file:line: not valid UTF-8 ...`.
pub fn read_text(path: &Path) -> Result<String, InputError> {
    text_of(&Source::path(path), read_input(path)?)
}

/// The error reading a directory gives, said before reading it.
fn is_a_directory() -> std::io::Error {
    #[cfg(unix)]
    {
        std::io::Error::from_raw_os_error(libc::EISDIR)
    }
    #[cfg(not(unix))]
    {
        std::io::Error::new(std::io::ErrorKind::IsADirectory, "Is a directory")
    }
}

/// What a path that is neither a regular file nor a directory is, for messages.
fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    let _ = file_type;
    "an unknown kind of file"
}

/// `bytes` as text, or an error naming the line (and the byte within it) where UTF-8 breaks.
pub fn text_of(source: &Source, bytes: Vec<u8>) -> Result<String, InputError> {
    String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        let at = e.utf8_error().valid_up_to();
        let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count() as u64;
        let line_start = bytes[..at]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
        InputError::row(
            source,
            line,
            format!(
                "not valid UTF-8 (byte {} of the line is 0x{:02x})",
                at - line_start + 1,
                bytes[at]
            ),
        )
    })
}

/// Errors from configuring or running a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// An input (trace, throughput table, cluster spec or file) is wrong or cannot be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A policy that cannot be built (unknown, bad knobs, or what it needs is missing).
    #[error(transparent)]
    Policy(#[from] crate::policy::BuildError),
    /// A simulation setting (the round length, a preemption, restore or migration cost) is out of
    /// its range; the message names the setting, its range and the value given.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// What tests of input readers share: FIFOs, and a bound on how long a read may block.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::Path;
    use std::time::Duration;

    /// Makes a FIFO at `path`, as `mkfifo` does.
    pub fn fifo(path: &Path) {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo runs");
        assert!(made.success(), "mkfifo {}", path.display());
    }

    /// `read()`'s result, or a panic when it has not returned within 30 s: a reader that blocks
    /// (on a FIFO) fails its test instead of hanging the suite. The blocked thread ends with the
    /// test's process.
    pub fn at_once<T: Send + 'static>(read: impl FnOnce() -> T + Send + 'static) -> T {
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(read());
        });
        result
            .recv_timeout(Duration::from_secs(30))
            .expect("the read blocked (a FIFO opened without O_NONBLOCK?)")
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{at_once, fifo};
    use super::*;

    #[test]
    fn text_that_is_not_utf8_is_reported_at_its_line() {
        let err = text_of(&Source("t.csv".into()), b"a,b\n1,2\n3,\xff\n".to_vec())
            .unwrap_err()
            .to_string();
        assert_eq!(err, "t.csv:3: not valid UTF-8 (byte 3 of the line is 0xff)");
        assert_eq!(
            text_of(&Source("t".into()), b"ok\n".to_vec()).unwrap(),
            "ok\n"
        );
    }

    /// A FIFO once hung every reader (a plain open waits for a writer); a device such as /dev/zero
    /// was read until memory ran out, and /dev/null read as an empty input.
    #[test]
    fn only_regular_files_are_read_and_never_block() {
        let dir = tempfile::tempdir().unwrap();
        let pipe = dir.path().join("placements.csv");
        fifo(&pipe);
        // No writer ever opens it: a blocking open would hang.
        let path = pipe.clone();
        let err = at_once(move || read_text(&path).unwrap_err().to_string());
        assert_eq!(
            err,
            format!(
                "{}: is a FIFO (named pipe), not a regular file",
                pipe.display()
            )
        );
        // /dev/null, not /dev/zero: were the check lost, this test must fail, not fill memory.
        let err = at_once(|| read_text(Path::new("/dev/null")).unwrap_err().to_string());
        assert_eq!(err, "/dev/null: is a character device, not a regular file");
        let err = read_text(dir.path()).unwrap_err().to_string();
        assert!(err.ends_with("Is a directory (os error 21)"), "{err}");
        let file = dir.path().join("ok.csv");
        std::fs::write(&file, "a,b\n").unwrap();
        assert_eq!(read_text(&file).unwrap(), "a,b\n");
    }

    #[test]
    fn a_file_over_the_limit_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.csv");
        // Sparse: no disk is spent, and nothing is read.
        File::create(&path)
            .unwrap()
            .set_len(MAX_INPUT_BYTES + 1)
            .unwrap();
        // Never `unwrap_err`: were the limit lost, its message would print 256 MiB.
        let err = match read_input(&path) {
            Ok(bytes) => panic!("{} bytes read past the limit", bytes.len()),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains(
                "is 268435457 bytes or more; an input may be at most 268435456 bytes (256 MiB)"
            ),
            "{err}"
        );
    }

    #[test]
    fn an_io_error_is_said_once() {
        let dir = std::env::temp_dir();
        let err = read_text(&dir).unwrap_err();
        assert!(std::error::Error::source(&err).is_none());
        assert_eq!(err.to_string().matches("os error").count(), 1, "{err}");
    }
}
