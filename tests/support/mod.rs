//! What the tests that start `gangway serve` share.

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
