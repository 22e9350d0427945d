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
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        #[source]
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
