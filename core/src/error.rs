//! Errors for input data: every message names the source, and, for rows, the line and field.

use std::fmt;
use std::path::PathBuf;

/// Where a piece of input came from: a file path or a named embedded/synthetic source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source(pub String);

impl Source {
    pub fn path(path: &std::path::Path) -> Self {
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
        input: Source,
        line: u64,
        field: String,
        message: String,
    },
    /// A row as a whole is wrong (wrong number of columns, unreadable CSV).
    #[error("{input}:{line}: {message}")]
    Row {
        input: Source,
        line: u64,
        message: String,
    },
    /// The input as a whole is wrong (unknown format, empty, missing option).
    #[error("{input}: {message}")]
    Whole { input: Source, message: String },
    /// The file cannot be read. The I/O error is part of the message, not a separate cause, so that a
    /// report of the whole chain says it once.
    #[error("{}: {error}", .path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl InputError {
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

    pub fn row(source: &Source, line: u64, message: impl Into<String>) -> Self {
        InputError::Row {
            input: source.clone(),
            line,
            message: message.into(),
        }
    }

    pub fn whole(source: &Source, message: impl Into<String>) -> Self {
        InputError::Whole {
            input: source.clone(),
            message: message.into(),
        }
    }

    pub fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        InputError::Io {
            path: path.into(),
            error,
        }
    }
}

/// Reads a text file (a trace, a table, a cluster file). Text that is not UTF-8 is reported at its line:
/// `file:line: not valid UTF-8 ...`.
pub fn read_text(path: &std::path::Path) -> Result<String, InputError> {
    let bytes = std::fs::read(path).map_err(|e| InputError::io(path, e))?;
    text_of(&Source::path(path), bytes)
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
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("unknown policy `{name}`; known policies: {known}")]
    UnknownPolicy { name: String, known: String },
    #[error("invalid configuration: {0}")]
    Config(String),
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn an_io_error_is_said_once() {
        let dir = std::env::temp_dir();
        let err = read_text(&dir).unwrap_err();
        assert!(std::error::Error::source(&err).is_none());
        assert_eq!(err.to_string().matches("os error").count(), 1, "{err}");
    }
}
