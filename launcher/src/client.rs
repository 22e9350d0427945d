//! A client of `gangway serve`'s API, for `gangway`'s subcommands and `elastic-run --daemon`.
//!
//! The daemon is `HOST:PORT` (TCP) or `unix:PATH` (a Unix socket). Over TCP every request carries the
//! daemon's bearer token, read afresh for each request (a restarted daemon writes a new one) from, in
//! order: `$GANGWAY_TOKEN` (the token itself), the token file given (`--token-file`),
//! `$GANGWAY_TOKEN_FILE`, or `.gangway/journal/api-token` in this directory or the nearest parent
//! that has one (where `gangway serve` writes it by default). A Unix socket needs no token: its file's
//! permissions decide who may connect.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use gangway_protocol::token::Token;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, Transport,
};

/// The token itself (remote clients).
pub const TOKEN_VAR: &str = "GANGWAY_TOKEN";
/// A file that holds the token.
pub const TOKEN_FILE_VAR: &str = "GANGWAY_TOKEN_FILE";
/// Where `gangway serve` writes its token by default, under the directory it started in.
pub const DEFAULT_TOKEN_FILE: &str = ".gangway/journal/api-token";

/// Where the daemon listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// `HOST:PORT`, as given.
    Tcp(String),
    /// A Unix socket's path (`unix:PATH`).
    Unix(PathBuf),
}

impl Address {
    /// Reads `unix:PATH` or `HOST:PORT` (no `/` or space), or says why it is neither.
    pub fn parse(text: &str) -> Result<Address, String> {
        match text.strip_prefix("unix:") {
            Some("") => Err("`unix:` needs a socket path".into()),
            Some(path) => Ok(Address::Unix(path.into())),
            None if text.is_empty() || text.contains(['/', ' ']) => Err(format!(
                "`{text}` is not a daemon address (HOST:PORT or unix:PATH)"
            )),
            None => Ok(Address::Tcp(text.to_owned())),
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp(addr) => f.write_str(addr),
            Address::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// A client of one daemon.
pub struct Client {
    agent: ureq::Agent,
    address: Address,
    token_file: Option<PathBuf>,
}

impl Client {
    /// A client of the daemon at `address` (`HOST:PORT` or `unix:PATH`); `token_file` overrides where
    /// the token is looked for.
    pub fn new(address: &str, token_file: Option<PathBuf>) -> Result<Client, String> {
        let address = Address::parse(address)?;
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build();
        let agent = match &address {
            Address::Tcp(_) => config.into(),
            Address::Unix(path) => {
                ureq::Agent::with_parts(config, UnixConnector(path.clone()), NoResolver)
            }
        };
        Ok(Client {
            agent,
            address,
            token_file,
        })
    }

    /// Where the daemon listens.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// The URL of `path` at the daemon (a Unix socket's requests name `localhost`).
    pub fn url(&self, path: &str) -> String {
        match &self.address {
            Address::Tcp(addr) => format!("http://{addr}{path}"),
            Address::Unix(_) => format!("http://localhost{path}"),
        }
    }

    /// The token to send, and where it came from; `None` on a Unix socket or when there is none.
    fn token(&self) -> Result<Option<Token>, String> {
        if matches!(self.address, Address::Unix(_)) {
            return Ok(None);
        }
        if let Ok(text) = std::env::var(TOKEN_VAR) {
            return Token::parse(&text)
                .map(Some)
                .ok_or_else(|| format!("${TOKEN_VAR} is not a token (64 hex digits)"));
        }
        let file = self
            .token_file
            .clone()
            .or_else(|| std::env::var_os(TOKEN_FILE_VAR).map(PathBuf::from))
            .or_else(default_token_file);
        match file {
            Some(file) => Token::read(&file).map(Some).map_err(|e| e.to_string()),
            None => Ok(None),
        }
    }

    fn request(
        &self,
        method: &str,
        path: &str,
    ) -> Result<ureq::RequestBuilder<ureq::typestate::WithoutBody>, String> {
        let url = self.url(path);
        let builder = match method {
            "GET" => self.agent.get(&url),
            _ => self.agent.delete(&url),
        };
        Ok(match self.token()? {
            Some(token) => builder.header("Authorization", token.header_value()),
            None => builder,
        })
    }

    /// `GET path`: the daemon's JSON answer, or why not.
    pub fn get(&self, path: &str) -> Result<serde_json::Value, String> {
        let response = self.request("GET", path)?.call();
        self.answer(path, response)
    }

    /// `DELETE path`.
    pub fn delete(&self, path: &str) -> Result<serde_json::Value, String> {
        let response = self.request("DELETE", path)?.call();
        self.answer(path, response)
    }

    /// `POST path` with a JSON body, and an `Idempotency-Key` if given (then the request is sent
    /// again once if the connection fails: the key keeps it from making a second job).
    pub fn post(
        &self,
        path: &str,
        body: &impl serde::Serialize,
        key: Option<&str>,
    ) -> Result<serde_json::Value, String> {
        let attempts = if key.is_some() { 2 } else { 1 };
        let mut last = Err(String::new());
        for _ in 0..attempts {
            let mut builder = self.agent.post(self.url(path));
            if let Some(token) = self.token()? {
                builder = builder.header("Authorization", token.header_value());
            }
            if let Some(key) = key {
                builder = builder.header("Idempotency-Key", key);
            }
            let response = builder.send_json(body);
            let unreachable = response.is_err();
            last = self.answer(path, response);
            if !unreachable {
                break;
            }
        }
        last
    }

    /// The JSON answer to a request for `path`, or why not: unreachable, not JSON, or its
    /// `{"error"}` (with where the token was looked for, after a 401).
    fn answer(
        &self,
        path: &str,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<serde_json::Value, String> {
        let mut response = response.map_err(|e| {
            format!(
                "cannot reach the daemon at {} ({e}); is `gangway serve` running?",
                self.address
            )
        })?;
        let status = response.status();
        let body: serde_json::Value = response.body_mut().read_json().map_err(|e| {
            format!(
                "{}{path}: the answer ({status}) is not JSON: {e}",
                self.address
            )
        })?;
        if !status.is_success() {
            let message = body["error"].as_str().unwrap_or("no message");
            let hint = if status == 401 {
                format!(
                    "; set ${TOKEN_FILE_VAR} to the token file `gangway serve` printed (by default {} in \
                     the directory it started in), or ${TOKEN_VAR} to the token",
                    DEFAULT_TOKEN_FILE
                )
            } else {
                String::new()
            };
            return Err(format!("the daemon refused ({status}): {message}{hint}"));
        }
        Ok(body)
    }
}

/// `.gangway/journal/api-token` in this directory or the nearest parent that has one.
fn default_token_file() -> Option<PathBuf> {
    let here = std::env::current_dir().ok()?;
    here.ancestors()
        .map(|dir| dir.join(DEFAULT_TOKEN_FILE))
        .find(|file| file.is_file())
}

/// A fresh idempotency key for one submission.
pub fn new_idempotency_key() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No randomness: the process and the time are unique enough for one machine.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return format!("{}-{}", std::process::id(), now.as_nanos());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Connects to a Unix socket whatever the URL's host.
#[derive(Debug)]
struct UnixConnector(PathBuf);

impl<In: Transport> Connector<In> for UnixConnector {
    type Out = UnixTransport;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let stream = UnixStream::connect(&self.0).map_err(|e| {
            ureq::Error::Io(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", self.0.display()),
            ))
        })?;
        let config = details.config;
        Ok(Some(UnixTransport {
            stream,
            buffers: LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size()),
        }))
    }
}

/// No name lookup: a Unix socket's requests never leave this machine.
#[derive(Debug)]
struct NoResolver;

impl Resolver for NoResolver {
    fn resolve(
        &self,
        _uri: &ureq::http::Uri,
        _config: &ureq::config::Config,
        _timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let mut addrs = self.empty();
        addrs.push(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        Ok(addrs)
    }
}

#[derive(Debug)]
struct UnixTransport {
    stream: UnixStream,
    buffers: LazyBuffers,
}

/// A read or write error, as ureq reports it (a timeout names which).
fn io_error(e: std::io::Error, timeout: &NextTimeout) -> ureq::Error {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            ureq::Error::Timeout(timeout.reason)
        }
        _ => ureq::Error::Io(e),
    }
}

fn deadline(timeout: &NextTimeout) -> Result<Option<Duration>, ureq::Error> {
    match timeout.not_zero() {
        _ if !timeout.after.is_not_happening() && timeout.after.is_zero() => {
            Err(ureq::Error::Timeout(timeout.reason))
        }
        Some(left) => Ok(Some(*left)),
        None => Ok(None),
    }
}

impl Transport for UnixTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let timeout = timeout.for_write();
        self.stream.set_write_timeout(deadline(&timeout)?)?;
        let output = &self.buffers.output()[..amount];
        self.stream
            .write_all(output)
            .map_err(|e| io_error(e, &timeout))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let timeout = timeout.for_read();
        self.stream.set_read_timeout(deadline(&timeout)?)?;
        let input = self.buffers.input_append_buf();
        let amount = loop {
            match self.stream.read(input) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other.map_err(|e| io_error(e, &timeout))?,
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // Open when a read would block: nothing unasked for has arrived, and the peer is there.
        if self.stream.set_nonblocking(true).is_err() {
            return false;
        }
        let mut byte = [0];
        let open = matches!(self.stream.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        open && self.stream.set_nonblocking(false).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_tcp_or_unix_sockets() {
        assert_eq!(
            Address::parse("127.0.0.1:7878"),
            Ok(Address::Tcp("127.0.0.1:7878".into()))
        );
        assert_eq!(
            Address::parse("unix:/run/gangway.sock"),
            Ok(Address::Unix("/run/gangway.sock".into()))
        );
        assert!(Address::parse("unix:").is_err());
        assert!(Address::parse("/run/gangway.sock").is_err());
    }

    #[test]
    fn idempotency_keys_differ() {
        assert_ne!(new_idempotency_key(), new_idempotency_key());
    }
}
