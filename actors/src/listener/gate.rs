//! Every request head checked before hyper reads it, so that a malformed one gets a JSON answer.
//!
//! hyper answers a head it cannot parse (a garbage request line, a control byte in a header, a
//! `Content-Length` over 2^64) itself, with an empty body, and offers no way to change that answer.
//! A [`Gate`] stands between the socket and hyper and lets hyper read one message at a time: a head
//! it has checked as hyper would check it, then exactly the body that head declares, so that hyper
//! never reads ahead into a head the gate has not seen. A head hyper would refuse is never passed
//! on: the gate asks its listener to end the connection gracefully (hyper finishes any answer in
//! progress, so pipelined requests before the bad one are answered in order) and writes
//! `{"error": ...}` as the connection's last answer, when hyper shuts the connection down.
//!
//! Request bodies need a `Content-Length` (a 411 otherwise): the API's bodies are JSON of at most a
//! MiB, and framing `chunked` bodies here, a second time beside hyper, could only add ways for the
//! two to disagree about where a message ends.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{HeaderName, Method, StatusCode, Uri};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use crate::request::escape;

/// The largest request head: hyper's own limit is larger, and real heads are under 8 KiB.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most header fields in a head (hyper's default).
pub const MAX_HEADERS: usize = 100;
/// The longest request target hyper takes.
const MAX_TARGET_BYTES: usize = u16::MAX as usize - 1;
/// The largest `Content-Length` hyper takes (it keeps two values above it for itself).
const MAX_LENGTH: u64 = u64::MAX - 2;
/// How much the gate reads from the socket at once.
const READ_CHUNK: usize = 16 * 1024;
/// How much of what a client sent an error quotes.
const QUOTED_CHARS: usize = 100;

/// A refused head: the status and the message of its JSON answer.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Refusal {
            status,
            message: message.into(),
        }
    }

    fn bad(message: impl Into<String>) -> Self {
        Refusal::new(StatusCode::BAD_REQUEST, message)
    }

    /// The whole answer, on a connection that closes after it.
    fn answer(&self) -> Vec<u8> {
        let body = serde_json::json!({ "error": self.message }).to_string();
        format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            self.status.as_u16(),
            self.status.canonical_reason().unwrap_or("Error"),
            body.len()
        )
        .into_bytes()
    }
}

/// A checked head: its length in bytes and that of the body it declares.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    len: usize,
    body: u64,
}

/// What the gate expects next from the client.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    Head,
    /// This many more bytes of a body.
    Body(u64),
    /// Nothing: a head was refused, and the connection is ending.
    Refused,
}

/// A connection's bytes on their way to hyper, one checked message at a time.
pub struct Gate<S> {
    inner: S,
    /// Bytes read from the socket; those before `start` have gone to hyper.
    buf: Vec<u8>,
    start: usize,
    /// How many bytes from `start` hyper may read: a checked head, or body.
    open: usize,
    next: Next,
    eof: bool,
    /// The answer to a refused head, and how much of it is written.
    answer: Option<(Vec<u8>, usize)>,
    refused: Arc<Notify>,
}

impl<S> Gate<S> {
    /// Gates `inner`; `refused` is notified when a head is refused, and the connection must then be
    /// shut down gracefully (hyper's `graceful_shutdown`) for its answer to be written.
    pub fn new(inner: S, refused: Arc<Notify>) -> Self {
        Gate {
            inner,
            buf: Vec::new(),
            start: 0,
            open: 0,
            next: Next::Head,
            eof: false,
            answer: None,
            refused,
        }
    }

    fn refuse(&mut self, refusal: Refusal) {
        tracing::debug!(status = %refusal.status, error = %refusal.message, "refused a malformed request head");
        self.answer = Some((refusal.answer(), 0));
        self.next = Next::Refused;
        self.open = 0;
        self.refused.notify_one();
    }

    /// Opens what the buffered bytes allow; false when more must be read first (or a head was
    /// refused).
    fn advance(&mut self) -> bool {
        let pending = &self.buf[self.start..];
        match self.next {
            Next::Refused => false,
            Next::Body(0) => {
                self.next = Next::Head;
                self.advance()
            }
            Next::Body(_) | Next::Head if pending.is_empty() => false,
            Next::Body(left) => {
                let n = usize::try_from(left).map_or(pending.len(), |l| l.min(pending.len()));
                self.open = n;
                self.next = Next::Body(left - n as u64);
                true
            }
            Next::Head => match check_head(pending) {
                Ok(Some(head)) => {
                    self.open = head.len;
                    self.next = Next::Body(head.body);
                    true
                }
                Ok(None) if pending.len() < MAX_HEAD_BYTES => false,
                Ok(None) => {
                    self.refuse(Refusal::new(
                        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                        format!("the request head is over the limit of {MAX_HEAD_BYTES} bytes"),
                    ));
                    false
                }
                Err(refusal) => {
                    self.refuse(refusal);
                    false
                }
            },
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Gate<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.open > 0 {
                let n = this.open.min(out.remaining());
                out.put_slice(&this.buf[this.start..this.start + n]);
                this.start += n;
                this.open -= n;
                return Poll::Ready(Ok(()));
            }
            if this.advance() {
                continue;
            }
            if this.next == Next::Refused {
                // The listener ends the connection; hyper must not read past the refused head.
                return Poll::Pending;
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            if this.start > 0 {
                this.buf.drain(..this.start);
                this.start = 0;
                // An idle connection keeps a small buffer, whatever its largest head was.
                if this.buf.is_empty() {
                    this.buf.shrink_to(READ_CHUNK);
                }
            }
            let room = match this.next {
                Next::Head => READ_CHUNK.min(MAX_HEAD_BYTES - this.buf.len()),
                _ => READ_CHUNK,
            };
            let filled = this.buf.len();
            this.buf.resize(filled + room, 0);
            let mut read = ReadBuf::new(&mut this.buf[filled..]);
            let polled = Pin::new(&mut this.inner).poll_read(cx, &mut read);
            let n = read.filled().len();
            this.buf.truncate(filled + n);
            match polled {
                Poll::Ready(Ok(())) => this.eof = n == 0,
                other => return other,
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Gate<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    /// Writes the answer to a refused head, after everything hyper wrote, then shuts down.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some((answer, written)) = &mut this.answer {
            while *written < answer.len() {
                match Pin::new(&mut this.inner).poll_write(cx, &answer[*written..]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => *written += n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            match Pin::new(&mut this.inner).poll_flush(cx) {
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// Checks a request head as hyper parses it: `None` while it is incomplete.
fn check_head(bytes: &[u8]) -> Result<Option<Head>, Refusal> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut fields);
    let len = match request.parse(bytes) {
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(len)) => len,
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Refusal::new(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                format!("the request has more than {MAX_HEADERS} header fields"),
            ));
        }
        Err(error) => {
            let line = quote(bytes.split(|&b| b == b'\n').next().unwrap_or_default());
            let expected = "METHOD /PATH HTTP/1.1";
            return Err(Refusal::bad(match (request.method, request.path) {
                (None, _) => format!(
                    "the request line `{line}` is not `{expected}`: its method is not a token ({error})"
                ),
                (Some(_), None) => format!(
                    "the request line `{line}` is not `{expected}`: its target is not a path ({error})"
                ),
                (Some(_), Some(_)) if request.version.is_none() => format!(
                    "the request line `{line}` is not `{expected}`: it does not end in HTTP/1.0 or HTTP/1.1 ({error})"
                ),
                _ => bad_field(bytes, error),
            }));
        }
    };
    let method = request.method.unwrap_or_default();
    let target = request.path.unwrap_or_default();
    if Method::from_bytes(method.as_bytes()).is_err() {
        return Err(Refusal::bad(format!(
            "the method `{}` is not a token",
            quote(method.as_bytes())
        )));
    }
    if target.len() > MAX_TARGET_BYTES {
        return Err(Refusal::new(
            StatusCode::URI_TOO_LONG,
            format!("the request target is over the limit of {MAX_TARGET_BYTES} bytes"),
        ));
    }
    if let Err(e) = target.parse::<Uri>() {
        return Err(Refusal::bad(format!(
            "the request target `{}` is not a URI path ({e})",
            quote(target.as_bytes())
        )));
    }
    let mut length: Option<u64> = None;
    for field in request.headers.iter() {
        if HeaderName::from_bytes(field.name.as_bytes()).is_err() {
            return Err(Refusal::bad(format!(
                "the header name `{}` is not a token",
                quote(field.name.as_bytes())
            )));
        }
        if field.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Refusal::new(
                StatusCode::LENGTH_REQUIRED,
                format!(
                    "Transfer-Encoding: `{}`: send a request body with Content-Length instead (the API's \
                     bodies are JSON of at most a MiB)",
                    quote(field.value)
                ),
            ));
        }
        if field.name.eq_ignore_ascii_case("content-length") {
            let value = digits(field.value)
                .filter(|&n| n <= MAX_LENGTH)
                .ok_or_else(|| {
                    Refusal::bad(format!(
                        "Content-Length: `{}` is not a number of bytes from 0 to {MAX_LENGTH}",
                        quote(field.value)
                    ))
                })?;
            if length.is_some_and(|l| l != value) {
                return Err(Refusal::bad(format!(
                    "Content-Length: the request gives two lengths, {} and {value}",
                    length.unwrap_or_default()
                )));
            }
            length = Some(value);
        }
    }
    Ok(Some(Head {
        len,
        body: length.unwrap_or(0),
    }))
}

/// `bytes` as decimal digits (no sign, no spaces: as hyper reads a `Content-Length`).
fn digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
            .flatten()
    })
}

/// Names the header line httparse refused: the first after the request line that is not
/// `NAME: VALUE` with a token name and a value of visible characters, spaces and tabs.
fn bad_field(bytes: &[u8], error: httparse::Error) -> String {
    let lines = bytes.split(|&b| b == b'\n').enumerate().skip(1);
    for (k, line) in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => (&line[..colon], &line[colon + 1..]),
            None => (line, &[][..]),
        };
        let token = !name.is_empty() && HeaderName::from_bytes(name).is_ok();
        let visible = value
            .iter()
            .all(|&b| b == b'\t' || b == b' ' || b >= 0x21 && b != 0x7f);
        if !token || !visible || line.len() == name.len() {
            return format!(
                "header line {} (`{}`) is not `NAME: VALUE` with a token name and no control \
                 characters in the value ({error})",
                k + 1,
                quote(name)
            );
        }
    }
    format!("the request's header fields are malformed ({error})")
}

/// Some of what a client sent, printable.
fn quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end_matches('\r');
    let cut: String = text.chars().take(QUOTED_CHARS).collect();
    let more = if cut.len() < text.len() { "..." } else { "" };
    format!("{}{more}", escape(&cut))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn refused(head: &[u8]) -> Refusal {
        check_head(head).expect_err(&String::from_utf8_lossy(head))
    }

    #[test]
    fn heads_hyper_takes_pass_with_the_length_of_their_body() {
        let head = b"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{\"gpus\": 1}\n";
        assert_eq!(
            check_head(head),
            Ok(Some(Head {
                len: head.len() - 12,
                body: 12
            }))
        );
        assert_eq!(
            check_head(b"GET /jobs?x=1 HTTP/1.0\r\n\r\n"),
            Ok(Some(Head { len: 26, body: 0 }))
        );
        // The same length twice is one length, as hyper has it.
        let twice = b"POST / HTTP/1.1\r\ncontent-length: 2\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(
            check_head(twice),
            Ok(Some(Head {
                len: twice.len(),
                body: 2
            }))
        );
        assert_eq!(check_head(b"GET /jobs HTTP/1.1\r\nHost: lo"), Ok(None));
    }

    #[test]
    fn malformed_heads_are_refused_saying_what_is_wrong() {
        let e = refused(b"\x16\x03\x01garbage\r\n\r\n");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("method is not a token"), "{}", e.message);
        let e = refused(b"GET /jobs HTTQ/1.1\r\n\r\n");
        assert!(e.message.contains("HTTP/1.0 or HTTP/1.1"), "{}", e.message);
        let e = refused(b"GET /a\x01b HTTP/1.1\r\n\r\n");
        assert!(e.message.contains("target"), "{}", e.message);
        assert!(!e.message.chars().any(char::is_control), "{}", e.message);
        let e = refused(b"GET / HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\n\r\n");
        assert!(
            e.message.contains("header line 3 (`X-Bad`)"),
            "{}",
            e.message
        );
        let e = refused(b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n");
        assert!(e.message.contains("header line 2"), "{}", e.message);
        let e = refused(b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n");
        assert!(
            e.message
                .contains("Content-Length: `99999999999999999999` is not a number of bytes"),
            "{}",
            e.message
        );
        for length in ["-1", "+5", "1 2", "", "0x10", "5, 5"] {
            let head = format!("POST / HTTP/1.1\r\nContent-Length: {length}\r\n\r\n");
            assert_eq!(refused(head.as_bytes()).status, StatusCode::BAD_REQUEST);
        }
        let e = refused(b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n");
        assert!(e.message.contains("two lengths, 2 and 3"), "{}", e.message);
        let e = refused(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(e.status, StatusCode::LENGTH_REQUIRED);
        let many: String = (0..=MAX_HEADERS).map(|k| format!("X-{k}: 1\r\n")).collect();
        let e = refused(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes());
        assert_eq!(e.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    }

    /// Whether hyper, alone, passes `head` to its service (rather than answering it itself).
    async fn hyper_takes(head: &[u8]) -> bool {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let service = hyper::service::service_fn(|_| async {
            Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Empty::<
                axum::body::Bytes,
            >::new()))
        });
        let served = tokio::spawn(
            hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(server), service),
        );
        client.write_all(head).await.unwrap();
        let mut answer = Vec::new();
        let mut chunk = [0u8; 1024];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
        served.abort();
        // HTTP/1.0 or 1.1, as the request was.
        answer.get(8..13) == Some(b" 200 ")
    }

    #[tokio::test]
    async fn the_gate_passes_exactly_the_heads_hyper_takes() {
        let heads: &[&[u8]] = &[
            b"GET /jobs HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /jobs HTTP/1.0\r\n\r\n",
            b"get /jobs HTTP/1.1\r\n\r\n",
            b"PROPFIND-AND-MORE-THAN-FIFTEEN / HTTP/1.1\r\n\r\n",
            b"GET * HTTP/1.1\r\n\r\n",
            b"GET http://localhost:1/jobs?x=%20 HTTP/1.1\r\n\r\n",
            b"GET /jobs HTTP/1.1\nHost: x\n\n",
            b"\r\nGET /jobs HTTP/1.1\r\n\r\n",
            b"GET /jobs HTTP/1.1\r\nX: \r\nY:\t\xe9t\xe9\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 007\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 18446744073709551613\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 18446744073709551614\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 2\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
            b"GET / HTTP/1.1\r\nX : y\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\x7fb\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n",
            b"GET /a b HTTP/1.1\r\n\r\n",
            b"GET /a\"b HTTP/1.1\r\n\r\n",
            b"GET /a{b} HTTP/1.1\r\n\r\n",
            b"GET  /a HTTP/1.1\r\n\r\n",
            b"GET /a HTTP/1.1 \r\n\r\n",
            b"GET /a HTTP/2.0\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        ];
        for &head in heads {
            // Chunked bodies are refused here by choice; every other difference is a leak.
            let gate = check_head(head).is_ok_and(|h| h.is_some());
            assert_eq!(
                gate,
                hyper_takes(head).await,
                "{:?}: the gate {}",
                String::from_utf8_lossy(head),
                if gate { "passes it" } else { "refuses it" }
            );
        }
    }

    /// Reads what hyper would read through a gate, from a client that sent `sent` and closed: until
    /// the end, or until the gate holds back (true: it refused a head).
    async fn through_gate(sent: &[u8]) -> (Vec<u8>, bool) {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(sent).await.unwrap();
        client.shutdown().await.unwrap();
        let refused = Arc::new(Notify::new());
        let mut gate = Gate::new(server, refused.clone());
        let mut seen = Vec::new();
        let mut chunk = [0u8; 7];
        loop {
            // Everything was sent already: a read that waits is a gate holding back.
            match gate.read(&mut chunk).now_or_never() {
                Some(Ok(0)) => return (seen, false),
                Some(Ok(n)) => seen.extend_from_slice(&chunk[..n]),
                Some(Err(e)) => panic!("{e}"),
                None => {
                    assert!(gate.answer.is_some(), "the gate waits without refusing");
                    assert!(refused.notified().now_or_never().is_some(), "not told");
                    return (seen, true);
                }
            }
        }
    }

    #[tokio::test]
    async fn pipelined_requests_pass_whole_until_a_malformed_head() {
        let first = b"POST /jobs HTTP/1.1\r\nContent-Length: 21\r\n\r\nGET / HTTP/1.1\r\n\r\nxyz";
        let second = b"GET /jobs HTTP/1.1\r\n\r\n";
        let bad = b"GET / HTTP/1.1\r\nX: \x07\r\n\r\nGET / HTTP/1.1\r\n\r\n";
        let good = [&first[..], second].concat();
        let (seen, refused) = through_gate(&[&good[..], bad].concat()).await;
        assert!(refused);
        // A body that looks like a head is a body; nothing of the bad head gets through.
        assert_eq!(seen, good);
        assert_eq!(through_gate(&good).await, (good, false));
    }

    #[tokio::test]
    async fn a_refused_head_is_answered_in_json_at_shutdown() {
        let (mut client, server) = tokio::io::duplex(4096);
        let mut gate = Gate::new(server, Arc::new(Notify::new()));
        gate.refuse(Refusal::bad("what \"was\" wrong"));
        gate.shutdown().await.unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"], "what \"was\" wrong");
    }
}
