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

pub use gangway_protocol::token::{Token, TokenError};

/// Which names the `Host` header may give.
#[derive(Clone, Debug)]
pub struct HostCheck {
    /// The port the daemon listens on.
    pub port: u16,
    /// Names the operator allows besides the loopback ones (lowercase); `*` allows any.
    pub allowed: Vec<String>,
}

impl HostCheck {
    /// A check for a daemon on `port` that also admits the names in `allowed` (any case; `*`: any name).
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
