//! Who may use the API over TCP: the holder of a bearer token, through a loopback name.
//!
//! - [`Token`]: 32 random bytes (hex), generated at every start and written to a file only the
//!   daemon's user can read (mode 0600, replaced atomically). Clients send it as
//!   `Authorization: Bearer TOKEN`; a request without it, or with another, gets a 401 with a JSON
//!   body. Only `GET /healthz` answers without it. Tokens are compared in constant time.
//! - [`HostCheck`]: the `Host` header must name this daemon by a loopback name (`localhost`,
//!   `127.0.0.1`, `[::1]`, with this port or none), so that a web page cannot reach it through DNS
//!   rebinding; operators add names (`--allow-host`) when they serve remote clients.
//!
//! A Unix socket needs neither: who may connect is decided by the socket file's permissions, and the
//! API learns the peer's user from the kernel (see [`crate::request::Submitter`]).

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
    #[error("no randomness for the API token: {0}")]
    Random(String),
    #[error("writing the API token to {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading the API token from {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no API token (expected 64 hex digits)")]
    Malformed { path: PathBuf },
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
        let given = given.trim_ascii();
        given.len() == self.0.len() && bool::from(given.ct_eq(self.0.as_bytes()))
    }
}

/// Which names the `Host` header may give.
#[derive(Clone, Debug)]
pub struct HostCheck {
    /// The port the daemon listens on.
    pub port: u16,
    /// Names the operator allows besides the loopback ones (lowercase); `*` allows any.
    pub allowed: Vec<String>,
}

impl HostCheck {
    pub fn new(port: u16, allowed: Vec<String>) -> Self {
        HostCheck {
            port,
            allowed: allowed
                .into_iter()
                .map(|n| n.to_ascii_lowercase())
                .collect(),
        }
    }

    /// Whether a request with this `Host` header may be answered.
    pub fn admits(&self, host: Option<&str>) -> bool {
        if self.allowed.iter().any(|a| a == "*") {
            return true;
        }
        let Some(host) = host else {
            return false;
        };
        let host = host.trim().to_ascii_lowercase();
        // `name`, `name:port`, `[v6]` or `[v6]:port`.
        let (name, port) = match host.rsplit_once(':') {
            Some((name, port))
                if !port.contains(']') && (!name.contains(':') || name.ends_with(']')) =>
            {
                (name, Some(port))
            }
            _ => (host.as_str(), None),
        };
        if port.is_some_and(|p| p.parse::<u16>() != Ok(self.port)) {
            return false;
        }
        matches!(name, "localhost" | "127.0.0.1" | "[::1]")
            || self.allowed.iter().any(|a| a == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_written_for_this_user_only_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api-token");
        std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
        let token = Token::generate().unwrap();
        token.write(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(
            meta.file_type().is_file(),
            "the link was replaced, not followed"
        );
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(Token::read(&path).unwrap(), token);
        assert_ne!(Token::generate().unwrap(), token);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
    }

    #[test]
    fn only_the_bearer_of_the_token_is_admitted() {
        let token = Token::generate().unwrap();
        let header = token.header_value();
        assert!(token.admits(Some(header.as_bytes())));
        assert!(!token.admits(None));
        assert!(!token.admits(Some(b"Bearer ")));
        assert!(!token.admits(Some(&header.as_bytes()[..header.len() - 1])));
        let other = Token::generate().unwrap().header_value();
        assert!(!token.admits(Some(other.as_bytes())));
        assert!(!token.admits(Some(header.trim_start_matches("Bearer ").as_bytes())));
    }

    #[test]
    fn only_loopback_names_of_this_port_pass_the_host_check() {
        let check = HostCheck::new(7878, Vec::new());
        for host in [
            "localhost:7878",
            "127.0.0.1:7878",
            "[::1]:7878",
            "LOCALHOST",
            "127.0.0.1",
        ] {
            assert!(check.admits(Some(host)), "{host}");
        }
        for host in [
            "evil.example:7878",
            "localhost:7879",
            "localhost.evil.example:7878",
            "127.0.0.2:7878",
            "[::1]:80",
            "",
        ] {
            assert!(!check.admits(Some(host)), "{host}");
        }
        assert!(!check.admits(None));
        let check = HostCheck::new(7878, vec!["Gpu-Box.lan".into()]);
        assert!(check.admits(Some("gpu-box.lan:7878")));
        assert!(HostCheck::new(1, vec!["*".into()]).admits(Some("anything:9")));
    }
}
