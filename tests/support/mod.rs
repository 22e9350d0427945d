//! What the tests share: skipping for a missing component (or failing, in CI), and, for the tests that
//! start `gangway serve`, a free port, an HTTP agent and a readiness wait.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::net::TcpListener;
#[cfg(feature = "launcher")]
use std::time::{Duration, Instant};

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An HTTP client that returns 4xx and 5xx answers instead of errors. (ureq, like everything HTTP here,
/// comes with the `launcher` feature, which `serve` implies; the simulator's tests do without.)
#[cfg(feature = "launcher")]
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// Waits until the daemon at `base` (`http://HOST:PORT`) answers `/healthz` with 200; panics after 30 s.
#[cfg(feature = "launcher")]
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
        "CI=true, and this test would skip: {why}. scripts/test installs torch, Slurm, Chromium \
         and the reference data; in CI a test that cannot run fails"
    );
    eprintln!("SKIPPED: {why}");
}

/// `GANGWAY_TEST_PYTHON`, a Python that has torch (scripts/test makes one); `None` after skipping
/// (failing, in CI) when there is none.
pub fn torch_python() -> Option<String> {
    let Ok(python) = std::env::var("GANGWAY_TEST_PYTHON") else {
        skip("no torch (set GANGWAY_TEST_PYTHON to a python that has it)");
        return None;
    };
    let ok = std::process::Command::new(&python)
        .args(["-c", "import torch.distributed.run"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(&format!("GANGWAY_TEST_PYTHON={python} cannot import torch"));
        return None;
    }
    Some(python)
}

/// `REL` under the shared reference data (`../shared/data` beside the project), when it holds
/// `inside`; otherwise the test skips (in CI, fails) saying so.
pub fn shared_data(rel: &str, inside: &str) -> Option<std::path::PathBuf> {
    let path =
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")).join(rel);
    if path.join(inside).exists() {
        return Some(path);
    }
    skip(&format!(
        "{} not found (the shared reference data is absent)",
        path.join(inside).display()
    ));
    None
}

/// The daemon's API at `base` (`http://HOST:PORT`), with the token `gangway serve` wrote beside its
/// journal (`JOURNAL/api-token`).
#[cfg(feature = "launcher")]
pub struct Api {
    pub base: String,
    pub authorization: String,
    agent: ureq::Agent,
}

// Each test file uses some of these.
#[allow(dead_code)]
#[cfg(feature = "launcher")]
impl Api {
    pub fn new(base: &str, journal: &std::path::Path, timeout: Duration) -> Api {
        let token = std::fs::read_to_string(journal.join("api-token"))
            .expect("gangway serve writes its token beside the journal");
        Api {
            base: base.to_owned(),
            authorization: format!("Bearer {}", token.trim()),
            agent: agent(timeout),
        }
    }

    pub fn get(&self, path: &str) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        self.agent
            .get(format!("{}{path}", self.base))
            .header("Authorization", &self.authorization)
            .call()
    }

    pub fn post(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        self.agent
            .post(format!("{}{path}", self.base))
            .header("Authorization", &self.authorization)
            .send_json(body)
    }

    pub fn delete(&self, path: &str) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        self.agent
            .delete(format!("{}{path}", self.base))
            .header("Authorization", &self.authorization)
            .call()
    }

    /// `POST path` with a raw body, as JSON, and extra headers.
    pub fn post_raw(
        &self,
        path: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        let mut request = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("Authorization", &self.authorization)
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send(body)
    }
}

/// A user's policy that hands every call to another, here a built-in one built through the public
/// registry: whatever the built-in does, it may do only through doors a user's policy has.
#[cfg(feature = "simulate")]
pub struct Delegating(pub Box<dyn gangway::core::policy::Policy>);

#[cfg(feature = "simulate")]
impl gangway::core::policy::Policy for Delegating {
    fn allocate(
        &mut self,
        input: &gangway::core::policy::RoundInput<'_>,
    ) -> Vec<gangway::core::policy::Grant> {
        self.0.allocate(input)
    }

    fn changes_with_time(&self) -> bool {
        self.0.changes_with_time()
    }

    fn keeps_queue(&self) -> bool {
        self.0.keeps_queue()
    }

    fn look_again_at(&self, view: &gangway::core::policy::JobView<'_>, now: f64) -> f64 {
        self.0.look_again_at(view, now)
    }

    fn queue_order(&self, limit: usize) -> Option<Vec<gangway::core::job::JobId>> {
        self.0.queue_order(limit)
    }
}

/// Writes `script`, a shell script standing in for `elastic-run`, at `path` (mode 0755), made to
/// answer the daemon's check of which hand-over it speaks as the real one does.
#[cfg(feature = "launcher")]
pub fn stand_in_elastic_run(path: &std::path::Path, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    let (shebang, body) = script.split_once('\n').expect("a #! line");
    let answer = format!(
        "[ \"$1\" = {} ] && {{ echo {}; exit 0; }}",
        gangway::launcher::inherit::HANDOVER_FLAG,
        gangway::launcher::inherit::HANDOVER
    );
    std::fs::write(path, format!("{shebang}\n{answer}\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
