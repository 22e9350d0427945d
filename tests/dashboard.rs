//! The dashboard and the simulator's report in a real browser: Debian's `chromium`, driven through its
//! WebDriver (`chromedriver`), headless. Without them these tests skip (fail, with CI=true);
//! scripts/test installs both.
//!
//! Each test saves a screenshot to `target/screenshots/`; with `GANGWAY_SCREENSHOTS=DIR` (as
//! docs/img/ was made) also to DIR.

mod support;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use support::Api;

/// A headless Chromium behind its WebDriver, which ends with it.
struct Browser {
    client: Client,
    _driver: Driver,
}

/// `chromedriver`, killed with the browser it started when dropped (also when a test fails before
/// its session is made).
struct Driver {
    child: Child,
    /// The driver's and the browser's temporary files (their profile, and shared memory with
    /// `--disable-dev-shm-usage`): killed, they cannot remove them, and each run left a dozen
    /// folders of 2 MB in /tmp. Removed after the kill (fields drop after `drop`).
    _scratch: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The driver leads its own process group, with the browser in it.
        // SAFETY: kill(2) on a process group this test started.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// A program on the PATH.
fn program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

impl Browser {
    /// Chromium through `chromedriver`, or `None` (having said why) when either is missing.
    async fn start() -> Option<Browser> {
        let (Some(driver), Some(chromium)) = (program("chromedriver"), program("chromium")) else {
            support::skip(
                "no chromium or chromedriver on the PATH (Debian: apt-get install chromium \
                 chromium-driver; scripts/test installs them)",
            );
            return None;
        };
        let port = support::free_port();
        let scratch = tempfile::tempdir().expect("a temporary folder");
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .env("TMPDIR", scratch.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromedriver starts");
        let driver = Driver {
            child,
            _scratch: scratch,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000"],
            }
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session");
        Some(Browser {
            client,
            _driver: driver,
        })
    }

    /// Waits until `script` (a function body) returns true; panics after `within`, saying `what`.
    /// Returns how long it took.
    async fn until(&self, script: &str, within: Duration, what: &str) -> Duration {
        let began = Instant::now();
        loop {
            let value = self.client.execute(script, Vec::new()).await;
            if value.as_ref().is_ok_and(|v| v == &Value::Bool(true)) {
                return began.elapsed();
            }
            assert!(
                began.elapsed() < within,
                "{what}: not within {within:?} ({value:?})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What `script` returns.
    async fn eval(&self, script: &str) -> Value {
        self.client.execute(script, Vec::new()).await.unwrap()
    }

    /// Logs into the dashboard of `daemon` as `gangway ui` does, and waits for its first view.
    async fn log_in(&self, daemon: &Daemon) {
        let link = daemon.login_link();
        self.client.goto(&link).await.unwrap();
        self.until(
            "return document.body.dataset.ready === '1'",
            Duration::from_secs(20),
            "the dashboard's first view",
        )
        .await;
    }

    /// Ends the session (the driver and the browser end when this is dropped).
    async fn close(&self) {
        self.client.clone().close().await.unwrap();
    }

    /// Saves what the browser shows as `name`.png.
    async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let mut dirs = vec![PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../screenshots")];
        dirs.extend(std::env::var_os("GANGWAY_SCREENSHOTS").map(PathBuf::from));
        for dir in dirs {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
        }
    }
}

/// `gangway serve` on simulated workers, killed at the end.
struct Daemon {
    child: Child,
    base: String,
    api: Api,
    _journal: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start(cluster: &str, policy: &str, extra: &[&str]) -> Daemon {
        let journal = tempfile::tempdir().unwrap();
        let port = support::free_port();
        let base = format!("http://127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(["serve", "--cluster", cluster, "--policy", policy])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--journal")
            .arg(journal.path())
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        support::wait_until_answering(&base);
        let api = Api::new(&base, journal.path(), Duration::from_secs(30));
        Daemon {
            child,
            base,
            api,
            _journal: journal,
        }
    }

    /// A one-time login link, from the command users run.
    fn login_link(&self) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(["ui", "--daemon", self.base.trim_start_matches("http://")])
            .env(
                "GANGWAY_TOKEN",
                self.api.authorization.trim_start_matches("Bearer "),
            )
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let link = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        assert!(link.starts_with(&format!("{}/login#", self.base)), "{link}");
        link
    }

    fn json(&self, path: &str) -> Value {
        self.api.get(path).unwrap().body_mut().read_json().unwrap()
    }

    /// Reads `path` until `done` holds of its answer, and returns that answer; panics after
    /// `within`, saying `what` and the last answer.
    fn eventually(
        &self,
        path: &str,
        within: Duration,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let answer = self.json(path);
            if done(&answer) {
                return answer;
            }
            assert!(Instant::now() < deadline, "{what}: {answer}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn submit(&self, gpus: u32, tenant: &str, work: f64) -> u64 {
        let body = json!({ "gpus": gpus, "work": work, "tenant": tenant });
        let mut answer = self.api.post("/jobs", &body).unwrap();
        assert_eq!(answer.status(), 201);
        answer.body_mut().read_json::<Value>().unwrap()["id"]
            .as_u64()
            .unwrap()
    }
}

/// Three servers of two GPU types, 16 GPUs; fast rounds in fast time.
fn small_daemon() -> Daemon {
    let fast = ["--round", "1", "--time-scale", "20"];
    Daemon::start("v100=2x4,k80=1x8", "fifo", &fast)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_every_gpu_and_a_submitted_job_on_its_gpus_within_2_s() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let daemon = small_daemon();
    daemon.submit(2, "vision", 20_000.0);
    daemon.submit(4, "speech", 20_000.0);
    browser.log_in(&daemon).await;
    let cells = browser
        .eval("return [...document.querySelectorAll('#servers .gpu')].map(c => Number(c.dataset.gpu))")
        .await;
    let mut shown: Vec<u64> = (cells.as_array().unwrap().iter())
        .map(|v| v.as_u64().unwrap())
        .collect();
    shown.sort_unstable();
    let nodes = daemon.json("/nodes");
    let mut gpus: Vec<u64> = (nodes.as_array().unwrap().iter())
        .flat_map(|n| {
            n["gpus"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g.as_u64().unwrap())
        })
        .collect();
    gpus.sort_unstable();
    assert_eq!(shown, gpus, "every GPU of every server, once");
    assert_eq!(shown.len(), 16);
    let servers = browser
        .eval("return document.querySelectorAll('#servers .server').length")
        .await;
    assert_eq!(servers, json!(3));

    // A job submitted through the API shows on the GPUs the API says it holds, within 2 s.
    let id = daemon.submit(3, "nlp", 20_000.0);
    let submitted = Instant::now();
    let script = format!(
        "return document.querySelectorAll('#servers .gpu[data-job=\"{id}\"]').length === 3"
    );
    browser
        .until(&script, Duration::from_secs(2), "the new job on its GPUs")
        .await;
    let took = submitted.elapsed();
    let placement: Vec<u64> = (daemon.json(&format!("/jobs/{id}"))["placement"].as_array())
        .unwrap()
        .iter()
        .map(|g| g.as_u64().unwrap())
        .collect();
    let on_page = browser
        .eval(&format!(
            "return [...document.querySelectorAll('#servers .gpu[data-job=\"{id}\"]')].map(c => Number(c.dataset.gpu))"
        ))
        .await;
    let mut on_page: Vec<u64> = on_page
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    on_page.sort_unstable();
    assert_eq!(on_page, placement);
    eprintln!("the job showed on its GPUs {took:?} after its submission was answered");
    // Its row in the jobs table, with its tenant and GPUs held of those asked.
    let row = browser
        .eval(&format!(
            "return document.querySelector('#jobs tr[data-job=\"{id}\"]').innerText"
        ))
        .await;
    let row = row.as_str().unwrap();
    assert!(row.contains("nlp") && row.contains("3 / 3"), "{row}");
    let line = format!(
        "return document.querySelector('#jobs tr[data-job=\"{id}\"] svg.spark polyline') !== null"
    );
    browser
        .until(&line, Duration::from_secs(10), "the job's GPUs over time")
        .await;

    // Jobs that cannot fit wait in the queue, with the engine's reason.
    let big = daemon.submit(8, "vision", 5_000.0);
    daemon.submit(6, "speech", 5_000.0);
    let script = format!(
        "const row = document.querySelector('#queue tr[data-job=\"{big}\"]'); \
         return row !== null && row.querySelector('.why').innerText.length > 0"
    );
    browser
        .until(&script, Duration::from_secs(10), "the waiting job and why")
        .await;
    let queue = browser
        .eval(
            "return [document.getElementById('queue-note').innerText, \
             [...document.querySelectorAll('#queue tbody tr')].map((r) => Number(r.dataset.job))]",
        )
        .await;
    assert!(
        queue[0].as_str().unwrap().contains("in the policy's order"),
        "{queue}"
    );
    assert_eq!(queue[1], json!([big, big + 1]), "FIFO's order");
    // The charts draw once the history has two samples (5 s apart).
    browser
        .until(
            "return document.querySelectorAll('#shares polyline').length === 3",
            Duration::from_secs(20),
            "a line per tenant",
        )
        .await;
    browser.screenshot("dashboard").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cordoned_gpu_shows_its_reason_and_the_page_cordons_through_the_api() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let daemon = small_daemon();
    browser.log_in(&daemon).await;
    let answer = daemon
        .api
        .post("/gpus/cordon", &json!({ "gpus": [3] }))
        .unwrap();
    assert_eq!(answer.status(), 200);
    browser
        .until(
            "return document.querySelector('#servers .gpu[data-gpu=\"3\"]').dataset.out === 'cordoned'",
            Duration::from_secs(10),
            "GPU 3 shown cordoned",
        )
        .await;
    let reasons = browser
        .eval("return document.querySelector('#servers').innerText")
        .await;
    assert!(
        reasons.as_str().unwrap().contains("GPU 3: cordoned"),
        "{reasons}"
    );

    // The page's own cordon button: select GPU 9, cordon it; the API then has it out of service.
    let cell = (browser.client)
        .find(Locator::Css("#servers .gpu[data-gpu=\"9\"]"))
        .await
        .unwrap();
    cell.click().await.unwrap();
    let button = browser.client.find(Locator::Id("cordon")).await.unwrap();
    button.click().await.unwrap();
    let out_of_service = |nodes: &Value| -> Vec<u64> {
        (nodes.as_array().unwrap().iter())
            .flat_map(|n| n["out_of_service"].as_array().into_iter().flatten())
            .map(|pair| pair[0].as_u64().unwrap())
            .collect()
    };
    let nodes = daemon.eventually(
        "/nodes",
        Duration::from_secs(10),
        "the page's cordon reaching the API",
        |nodes| out_of_service(nodes).contains(&9),
    );
    assert!(out_of_service(&nodes).contains(&3));
    browser
        .until(
            "return document.querySelector('#servers .gpu[data-gpu=\"9\"]').dataset.out === 'cordoned'",
            Duration::from_secs(10),
            "GPU 9 shown cordoned",
        )
        .await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_without_the_login_is_refused() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let daemon = small_daemon();
    browser.client.goto(&daemon.base).await.unwrap();
    let text = browser.eval("return document.body.innerText").await;
    assert!(text.as_str().unwrap().contains("needs a login"), "{text}");
    let fetched = browser
        .eval("return fetch('/jobs').then(r => r.status)")
        .await;
    assert_eq!(fetched, json!(401));

    // A link works once: the second browser visit is refused, and stays logged out.
    let link = daemon.login_link();
    browser.client.goto(&link).await.unwrap();
    browser
        .until(
            "return document.body.dataset.ready === '1'",
            Duration::from_secs(20),
            "the first use of the link",
        )
        .await;
    browser.client.delete_all_cookies().await.unwrap();
    browser.client.goto(&link).await.unwrap();
    browser
        .until(
            "return document.getElementById('status') !== null && \
             document.getElementById('status').innerText.includes('used or expired')",
            Duration::from_secs(10),
            "the second use refused",
        )
        .await;
    let fetched = browser
        .eval("return fetch('/nodes').then(r => r.status)")
        .await;
    assert_eq!(fetched, json!(401));
    browser.close().await;
}

#[test]
fn the_queue_in_the_policys_order_the_history_and_a_jobs_gpus_over_time_are_served() {
    let daemon = small_daemon();
    // Two 8-GPU jobs fill the 16 GPUs (one per GPU type).
    daemon.submit(8, "x", 3_000.0);
    let all = daemon.submit(8, "x", 3_000.0);
    let (big, small) = (daemon.submit(8, "y", 60.0), daemon.submit(1, "z", 60.0));
    let job = daemon.eventually(
        &format!("/jobs/{all}"),
        Duration::from_secs(20),
        "the job starting",
        |job| job["phase"] == "running",
    );
    let histories = daemon.json(&format!("/gpu-history?jobs={all},{big},424242"));
    let history = histories[all.to_string()].as_array().unwrap();
    assert_eq!(history.len(), 1, "{histories}");
    assert_eq!(histories[big.to_string()], json!([]), "waited only");
    assert!(
        histories.get("424242").is_none(),
        "an unknown job is left out"
    );
    assert_eq!(history[0]["gpus"], json!(8));
    assert!(history[0]["at"].as_f64().unwrap() >= job["submitted"].as_f64().unwrap());
    // FIFO: the 8-GPU job heads the queue and holds back the 1-GPU one behind it.
    let queue = daemon.eventually("/queue", Duration::from_secs(10), "FIFO's queue", |q| {
        q["jobs"] == json!([big, small])
    });
    assert_eq!(queue["by"], "policy");
    // A sample every 5 s: the second one shows tenant x holding every GPU.
    let last = |samples: &Value| {
        samples
            .as_array()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default()
    };
    let samples = daemon.eventually("/history", Duration::from_secs(20), "a sample", |s| {
        last(s)["tenants"] == json!({ "x": 16 })
    });
    assert_eq!(last(&samples)["busy_gpus"], json!(16));
    assert_eq!(last(&samples)["queued_jobs"], json!(2));
}

/// The cookie as the daemon sets it, from a code redeemed as the login page does.
fn session_cookie(daemon: &Daemon) -> String {
    let mut code = daemon.api.post("/ui/login-codes", &json!({})).unwrap();
    let code: Value = code.body_mut().read_json().unwrap();
    let agent = support::agent(Duration::from_secs(10));
    let host = daemon.base.trim_start_matches("http://");
    let answer = agent
        .post(format!("{}/login", daemon.base))
        .header("origin", &daemon.base)
        .header("x-gangway-csrf", "1")
        .header("content-type", "application/json")
        .send(json!({ "code": code["code"] }).to_string())
        .unwrap();
    assert_eq!(answer.status(), 204, "host {host}");
    let cookie = answer
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    cookie.split(';').next().unwrap().to_owned()
}

#[test]
fn a_change_with_the_cookie_needs_this_origin_and_the_header_and_codes_need_the_token() {
    let daemon = small_daemon();
    let cookie = session_cookie(&daemon);
    let agent = support::agent(Duration::from_secs(10));
    let cordon = |headers: &[(&str, &str)]| {
        let mut request = agent
            .post(format!("{}/gpus/cordon", daemon.base))
            .header("cookie", &cookie)
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send(r#"{"gpus": [1]}"#).unwrap().status().as_u16()
    };
    // A cross-site form (no header) and a cross-site script (another origin) are refused.
    assert_eq!(cordon(&[("origin", &daemon.base)]), 403);
    assert_eq!(
        cordon(&[("origin", "http://evil.example"), ("x-gangway-csrf", "1")]),
        403
    );
    assert_eq!(cordon(&[("x-gangway-csrf", "1")]), 403, "no Origin");
    let nodes = daemon.json("/nodes");
    assert!(
        !nodes.to_string().contains("cordoned"),
        "nothing refused was done"
    );
    assert_eq!(
        cordon(&[("origin", &daemon.base), ("x-gangway-csrf", "1")]),
        200
    );
    // Reads need only the cookie; minting a login code needs the token itself.
    let read = agent
        .get(format!("{}/stats", daemon.base))
        .header("cookie", &cookie)
        .call()
        .unwrap();
    assert_eq!(read.status(), 200);
    let mint = agent
        .post(format!("{}/ui/login-codes", daemon.base))
        .header("cookie", &cookie)
        .header("origin", &daemon.base)
        .header("x-gangway-csrf", "1")
        .send("")
        .unwrap();
    assert_eq!(mint.status(), 403);
    // Every answer carries the page's protections; the login page needs no token.
    let page = agent.get(format!("{}/login", daemon.base)).call().unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    // A forged cookie is nobody's.
    let forged = agent
        .get(format!("{}/stats", daemon.base))
        .header("cookie", format!("gangway_session={}", "ab".repeat(32)))
        .call()
        .unwrap();
    assert_eq!(forged.status(), 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_report_opens_offline_and_shows_every_policy_row() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let policies = ["fifo", "tiresias", "srtf"];
    let ran = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["simulate", "--trace", "synthetic:jobs=60,seed=1,rate=4"])
        .args(["--cluster", "v100=8,k80=8", "--policy"])
        .arg(policies.join(","))
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let report = out.path().join("report.html");
    browser
        .client
        .goto(&format!("file://{}", report.display()))
        .await
        .unwrap();
    let rows = browser
        .eval("return [...document.querySelectorAll('tr[data-policy]')].map(r => r.dataset.policy)")
        .await;
    assert_eq!(rows, json!(policies), "a row per policy, in order");
    let charts = browser
        .eval("return document.querySelectorAll('svg').length")
        .await;
    assert!(charts.as_u64().unwrap() >= 3, "{charts}");
    browser.client.set_window_size(1400, 2400).await.unwrap();
    browser.screenshot("report").await;
    browser.close().await;
    assert!(report_is_offline(&report));
}

/// Whether a page names nothing outside itself (SVG's namespace aside).
fn report_is_offline(page: &Path) -> bool {
    let text = std::fs::read_to_string(page).unwrap();
    let outside = text
        .match_indices("http")
        .filter(|(at, _)| !text[*at..].starts_with("http://www.w3.org/"))
        .count();
    outside == 0
}

/// The page on the scale scenario of `examples/control_plane_scale.rs` (4,096 GPUs, 10,000 jobs):
/// how long until its first view, and whether it freezes while it follows the rounds. A measurement,
/// not a check (it asserts only that the page shows every GPU): its figures are in
/// docs/PERFORMANCE.md. Run it on a quiet machine (`GANGWAY_SCALE_POLICY`: another policy than fifo):
/// `cargo test --release --test dashboard -- --ignored --nocapture the_dashboard_at_4096_gpus`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement for docs/PERFORMANCE.md"]
async fn the_dashboard_at_4096_gpus_and_10000_jobs() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let policy = std::env::var("GANGWAY_SCALE_POLICY").unwrap_or_else(|_| "fifo".into());
    let daemon = Daemon::start(
        "v100=256x8,k80=256x8",
        &policy,
        &["--round", "60", "--time-scale", "60"],
    );
    let began = Instant::now();
    std::thread::scope(|scope| {
        for client in 0..8u32 {
            let daemon = &daemon;
            scope.spawn(move || {
                for k in 0..1_250u32 {
                    let n = client * 1_250 + k;
                    let gpus = [1, 1, 2, 4, 8][(n % 5) as usize];
                    let tenant = format!("team-{}", n % 12);
                    // Works spread over 10 to 100 minutes, so that jobs end all the time.
                    daemon.submit(gpus, &tenant, f64::from(600 + n * 7_919 % 5_400));
                }
            });
        }
    });
    eprintln!(
        "10,000 jobs submitted in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    browser.client.set_window_size(1600, 1000).await.unwrap();
    browser.log_in(&daemon).await;
    let first = browser
        .eval(
            "const m = performance.getEntriesByName('gangway-first-paint')[0]; \
             const n = performance.getEntriesByType('navigation')[0]; \
             return [m.startTime, n.responseEnd, document.querySelectorAll('#servers .gpu').length]",
        )
        .await;
    assert_eq!(first[2], json!(4096), "every GPU shown");
    // For 20 s: the longest gap between two frames, the tasks over 50 ms, and how many views.
    let watched = browser
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1]; \
             const long = []; \
             new PerformanceObserver((l) => long.push(...l.getEntries().map((e) => e.duration))) \
               .observe({ type: 'longtask' }); \
             const updates = Number(document.body.dataset.updates); \
             let last = performance.now(), worst = 0; \
             const frame = (t) => { worst = Math.max(worst, t - last); last = t; \
               if (t < end) requestAnimationFrame(frame); else done({ worst, long, \
                 updates: Number(document.body.dataset.updates) - updates }); }; \
             const end = performance.now() + 20000; requestAnimationFrame(frame);",
            Vec::new(),
        )
        .await
        .unwrap();
    let long: Vec<f64> = (watched["long"].as_array().unwrap().iter())
        .map(|v| v.as_f64().unwrap())
        .collect();
    let fetches = browser
        .eval(
            "return performance.getEntriesByType('resource').filter((e) => e.name.includes('/jobs')) \
             .slice(-5).map((e) => [Math.round(e.duration), e.encodedBodySize])",
        )
        .await;
    eprintln!("the last job lists fetched (ms, bytes): {fetches}");
    let stats = daemon.json("/stats");
    eprintln!(
        "first view {:.0} ms after navigation (HTML in {:.0} ms); over 20 s: {} views, longest \
         frame gap {:.0} ms, {} tasks over 50 ms (longest {:.0} ms, {:.0} ms in all); {} rounds, \
         {} running, {} waiting",
        first[0].as_f64().unwrap(),
        first[1].as_f64().unwrap(),
        watched["updates"],
        watched["worst"].as_f64().unwrap(),
        long.len(),
        long.iter().copied().fold(0.0, f64::max),
        long.iter().sum::<f64>(),
        stats["rounds"],
        stats["running_jobs"],
        stats["queued_jobs"],
    );
    browser.screenshot("dashboard-4096").await;
    browser.close().await;
}
