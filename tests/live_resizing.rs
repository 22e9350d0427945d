//! `gangway serve --policy sia` (and `pollux`) resize elastic jobs live, on Sia's application profiles
//! (the shared reference data), with simulated workers: what each job holds is followed through the
//! API.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;

/// Sia's per-GPU-type profiles, where the shared reference data is.
fn sia_profiles() -> Option<PathBuf> {
    support::shared_data("sia/profiles", "cifar10")
}

struct Daemon {
    child: Child,
    api: support::Api,
    addr: String,
    journal: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A daemon on `cluster` (`rtx` servers) under `policy`, its workers simulated, a round every second
/// of wall time (60 s rounds, 60 times faster than the wall clock).
fn daemon(journal: &Path, profiles: &Path, policy: &str, cluster: &str) -> Daemon {
    let port = support::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["serve", "--cluster", cluster, "--policy", policy])
        .arg("--goodput-profiles")
        .arg(profiles)
        .args(["--round", "60", "--time-scale", "60"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--journal")
        .arg(journal)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    support::wait_until_answering(&base);
    Daemon {
        child,
        api: support::Api::new(&base, journal, Duration::from_secs(10)),
        addr: format!("127.0.0.1:{port}"),
        journal: journal.to_path_buf(),
    }
}

/// A cifar10 job on up to `gpus` GPUs with `extra` fields (`min_gpus`, `tp`, batches).
fn cifar(gpus: u32, extra: Value) -> Value {
    let mut request = json!({"job_type": "cifar10", "gpus": gpus, "work": 1e7});
    request
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    request
}

fn submit(api: &support::Api, request: Value) -> u64 {
    let mut response = api.post("/jobs", &request).unwrap();
    let body: Value = response.body_mut().read_json().unwrap();
    assert_eq!(response.status(), 201, "{body}");
    body["id"].as_u64().unwrap()
}

fn jobs(api: &support::Api) -> Vec<Value> {
    api.get("/jobs").unwrap().body_mut().read_json().unwrap()
}

/// The GPUs each job holds, by id, as the API shows them now.
fn sizes(api: &support::Api) -> BTreeMap<u64, usize> {
    jobs(api)
        .iter()
        .map(|j| {
            let held = j["placement"].as_array().map_or(0, Vec::len);
            (j["id"].as_u64().unwrap(), held)
        })
        .collect()
}

/// Polls the jobs' sizes into `seen` (every size each job held, in order, without repeats) until
/// `done` holds of the latest, or panics after `seconds`.
fn follow(
    api: &support::Api,
    seen: &mut BTreeMap<u64, Vec<usize>>,
    seconds: u64,
    what: &str,
    mut done: impl FnMut(&BTreeMap<u64, usize>) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let now = sizes(api);
        for (&job, &held) in &now {
            let sizes = seen.entry(job).or_default();
            if sizes.last() != Some(&held) {
                sizes.push(held);
            }
        }
        if done(&now) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {seconds} s; sizes held so far: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Checks the sizes an elastic job held (`seen`, as [`follow`] keeps them): once it ran, it started on
/// one GPU, only grew until it held all `full`, shrank for newcomers, and ended on `full` again.
fn grew_alone_shrank_and_grew_back(seen: &[usize], full: usize) {
    let grown: Vec<usize> = seen.iter().copied().skip_while(|&g| g == 0).collect();
    assert_eq!(
        grown[0], 1,
        "it started on one GPU, as Sia and Pollux start a job: {grown:?}"
    );
    let peak = grown.iter().position(|&g| g == full).unwrap();
    assert!(
        grown[..=peak].windows(2).all(|w| w[0] < w[1]),
        "alone, it only grew: {grown:?}"
    );
    assert!(
        grown[peak..].iter().any(|&g| (1..full).contains(&g)),
        "it shrank for the newcomers: {grown:?}"
    );
    assert_eq!(grown.last(), Some(&full), "{grown:?}");
}

#[test]
fn under_sia_an_elastic_job_grows_alone_shrinks_for_others_and_grows_back() {
    let Some(profiles) = sia_profiles() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Two servers: on one 8-GPU server, Sia keeps a job that scales as well as cifar10 does on all
    // 8 (sharing them would cost it more normalized goodput than a newcomer gains).
    let d = daemon(&dir.path().join("journal"), &profiles, "sia", "rtx=2x8");
    let api = &d.api;
    let mut seen = BTreeMap::new();
    let elastic = submit(api, cifar(16, json!({"min_gpus": 1})));
    follow(
        api,
        &mut seen,
        60,
        "the elastic job growing to 16 GPUs alone",
        |s| s[&elastic] == 16,
    );
    // A rigid job and a tensor-parallel pair arrive: the elastic job gives GPUs up.
    let rigid = submit(api, cifar(4, json!({})));
    let pairs = submit(api, cifar(16, json!({"min_gpus": 2, "tp": 2})));
    follow(api, &mut seen, 60, "the newcomers running", |s| {
        s[&rigid] == 4 && s[&pairs] > 0 && s[&elastic] < 16
    });
    // The API shows each job's sizes while it lives: none for the rigid one.
    let live = jobs(api);
    let sizes_of = |id: u64| live.iter().find(|j| j["id"] == id).unwrap()["sizes"].clone();
    assert_eq!(sizes_of(rigid), Value::Null, "rigid jobs have no sizes");
    assert_eq!(sizes_of(pairs), json!({"min": 2, "max": 16, "multiple": 2}));
    // They leave; it grows back.
    for job in [rigid, pairs] {
        assert_eq!(api.delete(&format!("/jobs/{job}")).unwrap().status(), 200);
    }
    follow(
        api,
        &mut seen,
        60,
        "the elastic job growing back to 16",
        |s| s[&elastic] == 16,
    );

    // Its sizes once it ran (it may have been seen queued first).
    grew_alone_shrank_and_grew_back(&seen[&elastic], 16);
    // The rigid job only ever held its 4 GPUs; the pairs only whole pairs.
    assert!(
        seen[&rigid].iter().all(|&g| g == 0 || g == 4),
        "the rigid job was resized: {:?}",
        seen[&rigid]
    );
    assert!(
        seen[&pairs].iter().all(|&g| g % 2 == 0),
        "the tp=2 job ran on an odd count: {:?}",
        seen[&pairs]
    );

    // What the API and the metrics say of it.
    let all = jobs(api);
    let info = |id: u64| all.iter().find(|j| j["id"] == id).unwrap();
    let shown = info(elastic);
    assert_eq!(shown["sizes"], json!({"min": 1, "max": 16, "multiple": 1}));
    assert!(shown["resizes"].as_u64().unwrap() >= 3, "{shown}");
    assert_eq!(shown["last_resize"]["to"], 16, "{shown}");
    assert_eq!(info(rigid)["resizes"], 0);
    let metrics = api
        .get("/metrics")
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let resizes: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("gangway_resizes_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no resizes_total in {metrics}"));
    assert!(resizes >= 3, "{metrics}");
}

#[test]
fn under_pollux_an_elastic_job_adapts_its_batch_and_shares_one_server_with_a_newcomer() {
    let Some(profiles) = sia_profiles() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(&dir.path().join("journal"), &profiles, "pollux", "rtx=1x8");
    let api = &d.api;
    let mut seen = BTreeMap::new();
    // It adapts its batch from 256 to 4096; Pollux picks it at every launch.
    let elastic = submit(
        api,
        cifar(8, json!({"min_gpus": 1, "min_batch": 256, "batch": 4096})),
    );
    // Every batch it ran at, and every reason given for a resize.
    let mut batches = std::collections::BTreeSet::new();
    let mut whys = std::collections::BTreeSet::new();
    let mut note_batches = |api: &support::Api| {
        for job in jobs(api).into_iter().filter(|j| j["id"] == elastic) {
            if let Some(batch) = job["batch"].as_u64() {
                batches.insert(batch);
            }
            if let Some(why) = job["last_resize"]["why"].as_str() {
                whys.insert(why.to_owned());
            }
        }
    };
    follow(
        api,
        &mut seen,
        60,
        "the elastic job growing to 8 GPUs alone",
        |s| {
            note_batches(api);
            s[&elastic] == 8
        },
    );
    // A newcomer in tensor-parallel pairs that keeps its own batch: Pollux's harmonic mean shares
    // the server with it, and grows it in whole pairs.
    let newcomer = submit(api, cifar(8, json!({"min_gpus": 1, "tp": 2})));
    follow(
        api,
        &mut seen,
        60,
        "the newcomer growing past one pair",
        |s| {
            note_batches(api);
            s[&newcomer] > 2 && s[&elastic] < 8
        },
    );
    assert!(
        seen[&newcomer].iter().all(|g| g % 2 == 0),
        "{:?}",
        seen[&newcomer]
    );
    let live = jobs(api);
    let shown = |id: u64| live.iter().find(|j| j["id"] == id).unwrap().clone();
    assert_eq!(
        shown(newcomer)["batch"],
        Value::Null,
        "it keeps its own batch"
    );
    assert_eq!(
        api.delete(&format!("/jobs/{newcomer}")).unwrap().status(),
        200
    );
    follow(
        api,
        &mut seen,
        60,
        "the elastic job growing back to 8",
        |s| {
            note_batches(api);
            s[&elastic] == 8
        },
    );

    grew_alone_shrank_and_grew_back(&seen[&elastic], 8);
    // Its batch: within its range at every launch, and not one size for all of them.
    assert!(
        batches.iter().all(|b| (256..=4096).contains(b)),
        "{batches:?}"
    );
    assert!(batches.len() >= 2, "its batch never changed: {batches:?}");
    // Its resizes say why.
    let said = |what: &str| whys.iter().any(|w| w.contains(what));
    assert!(
        // Growing alone (each reason lasts until the next resize, a round or more).
        said("its goodput gains from them (1 job active)"),
        "{whys:?}"
    );
    assert!(
        said(&format!("to make room for job {newcomer}")),
        "{whys:?}"
    );
    assert!(said(&format!("freed as job {newcomer} ended")), "{whys:?}");
    let info = jobs(api);
    let last = info.iter().find(|j| j["id"] == elastic).unwrap();
    assert!(last["resizes"].as_u64().unwrap() >= 4, "{last}");
    // `gangway jobs` shows the batch it runs at now.
    let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["jobs", "--daemon", &d.addr])
        .env("GANGWAY_TOKEN_FILE", d.journal.join("api-token"))
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    let column = header.iter().position(|&h| h == "BATCH").unwrap();
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&elastic.to_string()))
        .unwrap()
        .split_whitespace()
        .collect();
    let now = jobs(api).into_iter().find(|j| j["id"] == elastic).unwrap();
    assert_eq!(row[column], now["batch"].to_string(), "{table}");
}

/// Every (GPU type, GPUs) `job` held, in order, until `done` holds of the latest or `seconds` pass
/// (a panic); GPUs 0-7 are `rtx`, the others `dgx-ext`. A job holds one type at a time.
fn follow_types(
    api: &support::Api,
    job: u64,
    held: &mut Vec<(&'static str, usize)>,
    seconds: u64,
    what: &str,
    done: impl Fn(&(&'static str, usize)) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let info = jobs(api).into_iter().find(|j| j["id"] == job).unwrap();
        let gpus: Vec<u64> = (info["placement"].as_array().unwrap().iter())
            .map(|g| g.as_u64().unwrap())
            .collect();
        let on = match gpus.first() {
            Some(&g) if g < 8 => "rtx",
            Some(_) => "dgx-ext",
            None => "",
        };
        assert!(
            gpus.iter().all(|&g| (g < 8) == (on == "rtx")),
            "one type at a time: {gpus:?}"
        );
        if held.last() != Some(&(on, gpus.len())) {
            held.push((on, gpus.len()));
        }
        if done(held.last().unwrap()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {seconds} s; held so far: {held:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn under_sia_a_pipeline_grows_in_whole_replicas_of_each_gpu_types_own_stages() {
    let Some(profiles) = sia_profiles() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // GPUs 0-7 are RTX 2080Ti, 8-15 A100 (`dgx-ext`), as the cluster names them in order.
    let d = daemon(
        &dir.path().join("journal"),
        &profiles,
        "sia",
        "rtx=1x8,dgx-ext=1x8",
    );
    let api = &d.api;
    // A pipeline of 4 stages on the small RTX GPUs and of 2 on the A100s (Sia's scale unit).
    let pipeline = cifar(
        16,
        json!({"min_gpus": 1, "pp_by_type": {"rtx": 4, "dgx-ext": 2}}),
    );
    // A type the cluster lacks is refused, naming the field.
    let mut wrong = pipeline.clone();
    wrong["pp_by_type"] = json!({"t4": 2});
    let mut response = api.post("/jobs", &wrong).unwrap();
    let body = response.body_mut().read_to_string().unwrap();
    assert_eq!(response.status(), 422, "{body}");
    assert!(
        body.contains("pp_by_type: this cluster has no GPU type"),
        "{body}"
    );

    let job = submit(api, pipeline);
    let mut held = Vec::new();
    // Alone, it starts on one replica and grows on the A100s, where it scales best.
    follow_types(api, job, &mut held, 60, "growing to 8 A100s", |&h| {
        h == ("dgx-ext", 8)
    });
    // The A100s go out of service: it moves to the RTX GPUs, in replicas of 4.
    let cordoned = api
        .post(
            "/gpus/cordon",
            &json!({"gpus": (8..16).collect::<Vec<u32>>()}),
        )
        .unwrap();
    assert_eq!(cordoned.status(), 200);
    follow_types(api, job, &mut held, 60, "moving to the RTX GPUs", |&h| {
        h.0 == "rtx"
    });
    follow_types(api, job, &mut held, 60, "growing to 8 RTX GPUs", |&h| {
        h == ("rtx", 8)
    });

    let ran: Vec<_> = held.iter().filter(|h| h.1 > 0).collect();
    assert_eq!(ran[0], &("dgx-ext", 2), "one replica first: {held:?}");
    for &&(on, gpus) in &ran {
        let group = if on == "rtx" { 4 } else { 2 };
        assert!(gpus % group == 0, "a part of a replica on {on}: {held:?}");
    }
    let info = jobs(api).into_iter().find(|j| j["id"] == job).unwrap();
    assert_eq!(
        info["sizes"],
        json!({"min": 1, "max": 16, "multiple": 1,
            "multiple_by_type": {"rtx": 4, "dgx-ext": 2}})
    );
}
