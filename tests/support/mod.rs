//! What the tests share: skipping for a missing component (or failing, in CI), and, for the tests that
//! start `gangway serve`, a free port, an HTTP agent and a readiness wait.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::time::{Duration, Instant};

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An HTTP client that returns 4xx and 5xx answers instead of errors.
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// Waits until the daemon at `base` (`http://HOST:PORT`) answers `/healthz` with 200; panics after 30 s.
pub fn wait_until_answering(base: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !agent(Duration::from_secs(5))
        .get(format!("{base}/healthz"))
        .call()
        .is_ok_and(|r| r.status() == 200)
    {
        assert!(
            Instant::now() < deadline,
            "gangway serve did not answer within 30 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether this is CI (`CI=true` or `CI=1`), where scripts/test has installed torch, Slurm and the
/// reference data, so that a test that would skip for want of one must fail instead.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// The one way a test skips when the machine lacks what it needs (torch, Slurm, the reference data):
/// it says `why` on stderr, loudly, and the caller returns. In CI that would let a broken install turn
/// the suite green without running it, so there it panics instead.
pub fn skip(why: &str) {
    skip_unless_ci(in_ci(), why);
}

/// [`skip`], told whether this is CI.
pub fn skip_unless_ci(ci: bool, why: &str) {
    assert!(
        !ci,
        "CI=true, and this test would skip: {why}. scripts/test installs torch, Slurm and the \
         reference data; in CI a test that cannot run fails"
    );
    eprintln!("SKIPPED: {why}");
}
