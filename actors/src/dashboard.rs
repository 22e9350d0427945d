//! The dashboard: a page at `/` of the API's own listener, built into the binary (HTML, CSS and a
//! little JavaScript, no library, nothing fetched from elsewhere), that reads the same API as every
//! other client and updates from its event stream.
//!
//! A browser cannot send the bearer token, and the token must never sit in a URL (URLs are logged,
//! kept in history, sent as referrers). So a browser logs in once per session:
//!
//! 1. `gangway ui` (holding the token) asks `POST /ui/login-codes` for a **one-time code**: 32 random
//!    bytes, good for [`CODE_SECONDS`], redeemable once. It prints `http://HOST:PORT/login#CODE`: the
//!    code is in the fragment, which browsers never send to a server, so no log or referrer sees it.
//! 2. `/login`'s script posts the code to `POST /login`, which answers with a **session cookie**
//!    (`HttpOnly`, `SameSite=Strict`, `Path=/`, [`SESSION_SECONDS`]): page scripts cannot read it and
//!    no other site's request carries it. Sessions live in the daemon's memory: a restart ends them.
//! 3. A request with the cookie is admitted like one with the token, except that a request that
//!    changes something (anything but `GET` and `HEAD`) must also carry [`CSRF_HEADER`] and an
//!    `Origin` naming this daemon: a cross-site form cannot set a header, and a cross-site script
//!    that tries needs a CORS preflight this API never grants. Minting login codes needs the token
//!    itself.
//!
//! Every answer carries a strict `Content-Security-Policy` (scripts and styles from this origin only,
//! no inline script, no framing), `X-Content-Type-Options: nosniff` and `Referrer-Policy:
//! no-referrer`. The `Host` check applies to the page as to the API.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::auth::Token;

/// Seconds a login code may wait to be redeemed.
pub const CODE_SECONDS: u64 = 60;

/// Seconds a browser session lasts.
pub const SESSION_SECONDS: u64 = 12 * 3600;

/// The most unredeemed codes and live sessions held at once (the oldest go first).
pub const MAX_CODES: usize = 64;
/// See [`MAX_CODES`].
pub const MAX_SESSIONS: usize = 256;

/// The session cookie's name.
pub const COOKIE: &str = "gangway_session";

/// The header a cookie-authenticated request that changes something must carry (any value).
pub const CSRF_HEADER: &str = "x-gangway-csrf";

/// What every answer's `Content-Security-Policy` allows.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// How a request proved who it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential {
    /// The bearer token (or a Unix socket, which needs none).
    Token,
    /// A browser session's cookie.
    Session,
}

/// Secrets that expire: login codes, or sessions.
#[derive(Default)]
struct Expiring(Vec<(Token, Instant)>);

impl Expiring {
    /// A new secret good for `lifetime`, keeping at most `most` (the oldest dropped).
    fn add(&mut self, lifetime: Duration, most: usize) -> Option<Token> {
        let token = Token::generate().ok()?;
        let now = Instant::now();
        self.0.retain(|(_, until)| *until > now);
        if self.0.len() >= most {
            self.0.remove(0);
        }
        self.0.push((token.clone(), now + lifetime));
        Some(token)
    }

    /// Whether `given` is a live secret; each is compared in constant time.
    fn holds(&self, given: &[u8]) -> bool {
        let now = Instant::now();
        (self.0.iter()).any(|(token, until)| *until > now && token.matches(given))
    }

    /// Takes `given` out: whether it was live.
    fn take(&mut self, given: &[u8]) -> bool {
        let live = self.holds(given);
        self.0.retain(|(token, _)| !token.matches(given));
        live
    }
}

/// The dashboard's logins: one-time codes and browser sessions.
#[derive(Default)]
pub struct Sessions {
    codes: Mutex<Expiring>,
    sessions: Mutex<Expiring>,
}

impl Sessions {
    /// A one-time login code, good for [`CODE_SECONDS`]; `None` without randomness.
    pub fn new_code(&self) -> Option<Token> {
        let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
        codes.add(Duration::from_secs(CODE_SECONDS), MAX_CODES)
    }

    /// Redeems a code (once) for a new session.
    pub fn redeem(&self, code: &[u8]) -> Option<Token> {
        let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
        if !codes.take(code) {
            return None;
        }
        drop(codes);
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.add(Duration::from_secs(SESSION_SECONDS), MAX_SESSIONS)
    }

    /// Whether a request's `Cookie` headers carry a live session.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        session_cookie(headers).is_some_and(|s| {
            let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            sessions.holds(s)
        })
    }

    /// Ends the session a request's cookie names.
    pub fn end(&self, headers: &HeaderMap) {
        if let Some(session) = session_cookie(headers) {
            let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            sessions.take(session);
        }
    }
}

/// The session cookie's value, if a `Cookie` header carries one.
fn session_cookie(headers: &HeaderMap) -> Option<&[u8]> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .flat_map(|h| h.as_bytes().split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            pair.strip_prefix(COOKIE.as_bytes())?.strip_prefix(b"=")
        })
}

/// Whether a cookie-authenticated request that changes something comes from this daemon's own page:
/// it carries [`CSRF_HEADER`], and an `Origin` whose host is the request's `Host`.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let host = headers.get(header::HOST).map(HeaderValue::as_bytes);
    let origin = headers.get(header::ORIGIN).map(HeaderValue::as_bytes);
    let origin_host = origin.and_then(|o| {
        o.strip_prefix(b"http://")
            .or_else(|| o.strip_prefix(b"https://"))
    });
    headers.contains_key(CSRF_HEADER) && host.is_some() && origin_host == host
}

/// Paths anyone may fetch: the login page and the static files (no secrets in them).
pub fn is_public(path: &str) -> bool {
    path == "/login" || (path.starts_with("/ui/") && ASSETS.iter().any(|a| a.0 == path))
}

/// The dashboard's files: path, content type, content.
const ASSETS: [(&str, &str, &str); 4] = [
    (
        "/ui/dashboard.js",
        "text/javascript; charset=utf-8",
        include_str!("dashboard/dashboard.js"),
    ),
    (
        "/ui/dashboard.css",
        "text/css; charset=utf-8",
        include_str!("dashboard/dashboard.css"),
    ),
    (
        "/ui/login.js",
        "text/javascript; charset=utf-8",
        include_str!("dashboard/login.js"),
    ),
    (
        "/ui/favicon.svg",
        "image/svg+xml",
        include_str!("dashboard/favicon.svg"),
    ),
];

const INDEX: &str = include_str!("dashboard/index.html");
const LOGIN: &str = include_str!("dashboard/login.html");

fn html(status: StatusCode, page: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page,
    )
        .into_response()
}

/// `GET /`: the dashboard (behind the guard).
pub async fn index() -> Response {
    html(StatusCode::OK, INDEX)
}

/// `GET /login`: the page that redeems the code in its fragment.
pub async fn login_page() -> Response {
    html(StatusCode::OK, LOGIN)
}

/// `GET /ui/...`: one of the dashboard's files.
pub async fn asset(uri: axum::http::Uri) -> Response {
    match ASSETS.iter().find(|a| a.0 == uri.path()) {
        Some((_, kind, body)) => ([(header::CONTENT_TYPE, *kind)], *body).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The answer to a browser that has not logged in.
pub fn login_needed() -> Response {
    html(
        StatusCode::UNAUTHORIZED,
        include_str!("dashboard/denied.html"),
    )
}

/// `POST /ui/login-codes` (the token only): a one-time login code.
pub async fn new_code(
    State(sessions): State<std::sync::Arc<Sessions>>,
    credential: Option<axum::Extension<Credential>>,
) -> Response {
    if credential.is_some_and(|c| c.0 == Credential::Session) {
        let why =
            "login codes are given to the token's holder only (`gangway ui`), not to a browser";
        return (StatusCode::FORBIDDEN, axum::Json(json!({ "error": why }))).into_response();
    }
    match sessions.new_code() {
        Some(code) => axum::Json(json!({
            "code": code.reveal(),
            "expires_in": CODE_SECONDS,
            "path": format!("/login#{}", code.reveal()),
        }))
        .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({ "error": "no randomness for a login code" })),
        )
            .into_response(),
    }
}

/// `POST /login` with `{"code": CODE}`: a session cookie for a live code (once).
pub async fn redeem(
    State(sessions): State<std::sync::Arc<Sessions>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let refused = |status: StatusCode, why: &str| {
        (status, axum::Json(json!({ "error": why }))).into_response()
    };
    if !same_origin(&headers) {
        return refused(
            StatusCode::FORBIDDEN,
            "a login comes from this daemon's own /login page",
        );
    }
    let Ok(bytes) = axum::body::to_bytes(body, 1024).await else {
        return refused(StatusCode::PAYLOAD_TOO_LARGE, "a login is a short body");
    };
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Login {
        code: String,
    }
    let Ok(Login { code }) = serde_json::from_slice::<Login>(&bytes) else {
        return refused(StatusCode::BAD_REQUEST, "expected {\"code\": \"...\"}");
    };
    match sessions.redeem(code.as_bytes()) {
        Some(session) => {
            let cookie = format!(
                "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={SESSION_SECONDS}",
                session.reveal()
            );
            let mut response = StatusCode::NO_CONTENT.into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        None => refused(
            StatusCode::UNAUTHORIZED,
            "this login code is unknown, used or expired (they last 60 s): run `gangway ui` again",
        ),
    }
}

/// `POST /logout`: ends the browser's session.
pub async fn logout(
    State(sessions): State<std::sync::Arc<Sessions>>,
    headers: HeaderMap,
) -> Response {
    sessions.end(&headers);
    let mut response = StatusCode::NO_CONTENT.into_response();
    let expired = format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&expired) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// Adds the security headers every answer carries.
pub async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let set = [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in set {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn a_code_buys_one_session_once() {
        let sessions = Sessions::default();
        let code = sessions.new_code().unwrap();
        let session = sessions.redeem(code.reveal().as_bytes()).unwrap();
        assert!(sessions.redeem(code.reveal().as_bytes()).is_none(), "once");
        assert!(sessions.redeem(b"0000").is_none());
        let cookie = format!("theme=dark; {COOKIE}={}", session.reveal());
        let with = headers(&[("cookie", &cookie)]);
        assert!(sessions.admits(&with));
        assert!(!sessions.admits(&headers(&[("cookie", "gangway_session=00")])));
        assert!(!sessions.admits(&headers(&[("cookie", code.reveal())])));
        sessions.end(&with);
        assert!(!sessions.admits(&with), "logged out");
    }

    #[test]
    fn codes_and_sessions_are_bounded_and_expire() {
        let mut codes = Expiring::default();
        let first = codes.add(Duration::from_secs(60), 2).unwrap();
        codes.add(Duration::from_secs(60), 2).unwrap();
        codes.add(Duration::from_secs(60), 2).unwrap();
        assert_eq!(codes.0.len(), 2);
        assert!(!codes.holds(first.reveal().as_bytes()), "the oldest went");
        let short = codes.add(Duration::ZERO, 2).unwrap();
        assert!(!codes.holds(short.reveal().as_bytes()), "expired");
    }

    #[test]
    fn a_change_by_cookie_needs_the_header_and_this_origin() {
        let host = ("host", "127.0.0.1:7878");
        let good = [
            host,
            ("origin", "http://127.0.0.1:7878"),
            (CSRF_HEADER, "1"),
        ];
        assert!(same_origin(&headers(&good)));
        assert!(!same_origin(&headers(&good[..2])), "no header");
        let other = [host, ("origin", "http://evil.example"), (CSRF_HEADER, "1")];
        assert!(!same_origin(&headers(&other)));
        let null = [host, ("origin", "null"), (CSRF_HEADER, "1")];
        assert!(!same_origin(&headers(&null)));
        assert!(
            !same_origin(&headers(&[host, (CSRF_HEADER, "1")])),
            "no origin"
        );
    }

    #[test]
    fn only_the_login_page_and_the_files_are_public() {
        assert!(is_public("/login"));
        assert!(is_public("/ui/dashboard.js"));
        assert!(!is_public("/"));
        assert!(!is_public("/ui/login-codes"));
        assert!(!is_public("/ui/../jobs"));
        assert!(!is_public("/jobs"));
    }
}
