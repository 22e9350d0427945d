//! The control plane's bearer token: what `gangway serve` writes for its TCP API and what its clients
//! (`gangway`, `elastic-run --daemon`) read and send as `Authorization: Bearer TOKEN`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use subtle::ConstantTimeEq;

/// The API's bearer token.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Why a token could not be made, written or read.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The operating system gave no randomness to make a token from.
    #[error("no randomness for the API token: {0}")]
    Random(String),
    /// The token file could not be created or written.
    #[error("writing the API token to {path}: {source}")]
    Write {
        /// The token file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The token file could not be read.
    #[error("reading the API token from {path}: {source}")]
    Read {
        /// The token file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file does not hold a token (64 hex digits, surrounding whitespace aside).
    #[error("{path} holds no API token (expected 64 hex digits)")]
    Malformed {
        /// The token file.
        path: PathBuf,
    },
}

impl Token {
    /// A fresh token from the operating system's randomness.
    pub fn generate() -> Result<Token, TokenError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| TokenError::Random(e.to_string()))?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// A token as a client holds it (from a file or the environment).
    pub fn parse(text: &str) -> Option<Token> {
        let text = text.trim();
        (text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Token(text.to_ascii_lowercase()))
    }

    /// Reads the token a daemon wrote to `path`.
    pub fn read(path: &Path) -> Result<Token, TokenError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Token::parse(&text).ok_or_else(|| TokenError::Malformed {
            path: path.to_path_buf(),
        })
    }

    /// Writes the token to `path`, readable by this user only: a new file (mode 0600) renamed over
    /// whatever was there, so that no reader ever sees a part of it and a link at `path` is replaced,
    /// not followed.
    pub fn write(&self, path: &Path) -> Result<(), TokenError> {
        let error = |source| TokenError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut temp = path.as_os_str().to_owned();
        temp.push(format!(".{}.tmp", std::process::id()));
        let temp = PathBuf::from(temp);
        let _ = std::fs::remove_file(&temp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(error)?;
        let written = file
            .write_all(format!("{}\n", self.0).as_bytes())
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&temp, path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(error(e));
        }
        Ok(())
    }

    /// The value of an `Authorization` header that carries this token.
    pub fn header_value(&self) -> String {
        format!("Bearer {}", self.0)
    }

    /// Whether an `Authorization` header carries this token (in constant time).
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(given) = authorization.and_then(|h| h.strip_prefix(b"Bearer ")) else {
            return false;
        };
        self.matches(given.trim_ascii())
    }

    /// Whether `given` is this token (in constant time).
    pub fn matches(&self, given: &[u8]) -> bool {
        given.len() == self.0.len() && bool::from(given.ct_eq(self.0.as_bytes()))
    }

    /// The secret itself, for the one place it is handed to its holder (a file, a cookie, a login
    /// link): never log it.
    pub fn reveal(&self) -> &str {
        &self.0
    }
}
