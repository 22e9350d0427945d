//! The bodies of the fuzz targets (`fuzz/`): every reader of untrusted input, fed arbitrary bytes, must
//! answer with a value that keeps its invariants or an error that names the input, and never panic,
//! abort or hang. The fuzz targets call these functions, and so does `tests/fuzz_corpora.rs`, which
//! replays the saved corpora on every test run (no nightly compiler needed). Not a stable API.

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use gangway_actors::cluster::{Cancel, ClusterActor, Parts, Settings, Submit, TimeSource};
use gangway_actors::ledger::{Ledger, Record, torn_tail_report};
use gangway_core::cluster::{Cluster, MAX_GPU_TYPES, MAX_GPUS};
use gangway_core::error::{Source, text_of};
use gangway_core::job::MAX_ARRIVAL_SECONDS;
use gangway_core::throughput::ThroughputTable;
use gangway_core::trace::{self, TraceFormat, TraceOptions};

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// Every target, by the name of its folder under `fuzz/corpus/` and its file under `fuzz/fuzz_targets/`.
pub const TARGETS: &[(&str, Target)] = &[
    ("trace", trace),
    ("cluster", cluster),
    ("topology", topology),
    ("throughputs", throughputs),
    ("job_request", job_request),
    ("journal", journal),
];

/// The name every fuzzed input goes by, which errors must name.
const NAME: &str = "fuzz-input";

/// Splits the first byte off as a selector.
fn split(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((&first, rest)) => (first, rest),
        None => (0, &[]),
    }
}

/// Every trace reader: the first byte picks one of the formats (or detection from the first line), the
/// rest is the file. UTF-8 is checked as `trace::load` does.
pub fn trace(data: &[u8]) {
    let (selector, bytes) = split(data);
    let source = Source(NAME.into());
    let Ok(text) = text_of(&source, bytes.to_vec()) else {
        return;
    };
    let format = TraceFormat::ALL.get(usize::from(selector) % (TraceFormat::ALL.len() + 1));
    let options = TraceOptions {
        format: format.copied(),
        rate: Some(f64::from(selector / 8 + 1) / 4.0),
        profiles: Some(pollux_profiles().clone()),
    };
    match trace::parse(&source, &text, &options) {
        Ok(t) => {
            assert!(!t.jobs.is_empty(), "an empty trace is an error");
            let mut ids = HashSet::new();
            let mut last = 0.0;
            for job in &t.jobs {
                assert!(ids.insert(job.id), "job {} twice", job.id);
                assert!(job.gpus >= 1, "{job:?}");
                assert!(
                    (0.0..=MAX_ARRIVAL_SECONDS).contains(&job.arrival) && job.arrival >= last,
                    "{job:?}"
                );
                last = job.arrival;
                assert!(
                    job.total_steps.is_finite() && job.total_steps >= 0.0,
                    "{job:?}"
                );
                assert!(job.weight.is_finite() && job.weight > 0.0, "{job:?}");
                assert!((job.job_type.0 as usize) < t.names.job_types.len());
                assert!((job.tenant.0 as usize) < t.names.tenants.len());
            }
        }
        Err(e) => assert!(e.to_string().starts_with(NAME), "{e}"),
    }
}

/// A Pollux profiles folder with one application, for the Pollux reader: in the checkout, where the
/// fuzz targets and the tests run (a folder made in /tmp under a fixed name was one a local user
/// could have made first, or linked elsewhere). Looked for once per process, not once per input.
fn pollux_profiles() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/pollux-profiles"));
        // Else every Pollux input would fail on the missing folder, and read as a crash of the
        // reader.
        assert!(
            dir.is_dir(),
            "the fuzz harness reads Pollux profiles from {}, in the checkout it was built from",
            dir.display()
        );
        dir
    })
}

/// The cluster readers: a TOML cluster file (even first byte) or a `--cluster` spec (odd; the byte
/// also gives `--gpus-per-node`).
pub fn cluster(data: &[u8]) {
    let (selector, bytes) = split(data);
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let parsed = if selector % 2 == 0 {
        Cluster::parse_toml(&Source(NAME.into()), text)
    } else {
        Cluster::parse_spec(text, u32::from(selector / 2))
    };
    match parsed {
        Ok(c) => check_cluster(&c),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

fn check_cluster(c: &Cluster) {
    assert!(
        c.num_gpus() >= 1 && c.num_gpus() <= MAX_GPUS,
        "{}",
        c.num_gpus()
    );
    assert!((1..=MAX_GPU_TYPES).contains(&c.num_gpu_types()));
    assert_eq!(
        c.capacity().iter().map(|&n| u64::from(n)).sum::<u64>(),
        u64::from(c.num_gpus())
    );
    let mut seen = 0u64;
    for (i, node) in c.nodes().iter().enumerate() {
        let id = gangway_core::cluster::NodeId(i as u32);
        for gpu in c.gpus_of(id) {
            assert_eq!(c.node_of(gpu), id);
            assert_eq!(c.gpu_type_of(gpu), node.gpu_type);
            seen += 1;
        }
    }
    assert_eq!(seen, u64::from(c.num_gpus()));
}

/// Most GPUs a fuzzed topology is built with (its graph is built and scored; larger ones are only
/// parsed and checked, to keep executions fast).
const FUZZ_BUILD_GPUS: usize = 512;

/// The topology file reader, TOML (even first byte) or JSON (odd), and, for clusters small enough, the
/// graph it builds and the cluster of that graph.
pub fn topology(data: &[u8]) {
    let (selector, bytes) = split(data);
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let name = if selector % 2 == 0 {
        "fuzz-input.toml"
    } else {
        "fuzz-input.json"
    };
    match gangway_topology::file::parse(name, text) {
        Ok(spec) => {
            spec.check().expect("parse checks the spec");
            let gpus = spec.num_gpus().expect("checked");
            if gpus <= FUZZ_BUILD_GPUS {
                let built = spec.build();
                assert_eq!(built.num_gpus(), gpus);
                let cluster = Cluster::from_topology(&built).expect("a checked topology fits");
                check_cluster(&cluster);
                assert_eq!(cluster.num_gpus() as usize, gpus);
            }
        }
        Err(e) => assert!(e.to_string().starts_with(name), "{e}"),
    }
}

/// The throughput table reader (Gavel's JSON).
pub fn throughputs(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match ThroughputTable::parse(&Source(NAME.into()), text) {
        Ok(table) => {
            for (job_type, _) in table.job_types() {
                for gpu in ["v100", "p100", "k80"] {
                    if let Some(rate) = table.alone(gpu, &job_type, 1) {
                        assert!(
                            rate.is_finite() && rate >= 0.0,
                            "{job_type} on {gpu}: {rate}"
                        );
                    }
                }
            }
        }
        Err(e) => assert!(e.to_string().starts_with(NAME), "{e}"),
    }
}

/// A control plane to submit to: one per thread, on a virtual clock that never moves.
struct ControlPlane {
    system: actix::SystemRunner,
    cluster: actix::Addr<ClusterActor>,
}

thread_local! {
    static CONTROL_PLANE: RefCell<Option<ControlPlane>> = const { RefCell::new(None) };
}

fn control_plane() -> ControlPlane {
    let system = actix::System::new();
    let cluster = system.block_on(async {
        let clock = Arc::new(gangway_actors::clock::VirtualClock::new(0.0));
        let model = Arc::new(gangway_core::throughput::DurationModel::uniform(1));
        let parts = Parts {
            cluster: Arc::new(Cluster::parse_spec("v100=4", 4).expect("a cluster")),
            policy: gangway_core::policy::build("fifo", &Default::default(), model.as_ref())
                .expect("fifo"),
            model,
            names: gangway_core::job::Names::default(),
            placer: Box::new(gangway_core::placement::PackingPlacer),
            executor: Box::new(gangway_actors::executor::SimExecutor::default()),
            probes: Vec::new(),
            health_every: std::time::Duration::from_secs(3600),
        };
        let settings = Settings::new(
            gangway_core::engine::EngineConfig::default(),
            TimeSource::Virtual(clock),
        );
        ClusterActor::start(parts, settings).expect("a control plane")
    });
    ControlPlane { system, cluster }
}

/// The API's request body, through the API's own public steps: a `POST /jobs` body read strictly
/// (`request::parse_job_request`), checked (`request::validate`), then submitted to a control plane,
/// which checks it against the cluster. An accepted job is cancelled at once, so that the control
/// plane's state stays small over millions of inputs.
pub fn job_request(data: &[u8]) {
    let request = match gangway_actors::request::parse_job_request(data) {
        Ok(request) => request,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    if let Err(invalid) = gangway_actors::request::validate(&request) {
        assert!(!invalid.to_string().is_empty());
        return;
    }
    CONTROL_PLANE.with(|cell| {
        let mut cell = cell.borrow_mut();
        let plane = cell.get_or_insert_with(control_plane);
        let cluster = plane.cluster.clone();
        plane.system.block_on(async move {
            let answer = cluster
                .send(Submit {
                    request,
                    at: None,
                    key: None,
                })
                .await
                .expect("the control plane answers");
            match answer {
                Ok(id) => {
                    let _ = cluster
                        .send(Cancel(id))
                        .await
                        .expect("the control plane answers");
                }
                Err(refusal) => assert!(!refusal.to_string().is_empty()),
            }
        });
    });
}

/// The journal's frame decoder, on a segment (even first byte) or a snapshot (odd) of the control
/// plane's records and ledger; a torn tail is also put into words, as recovery does.
pub fn journal(data: &[u8]) {
    let (selector, bytes) = split(data);
    if selector % 2 == 0 {
        let first = u64::from(selector / 2) + 1;
        match gangway_journal::fuzzing::segment::<Record>(bytes, first) {
            Ok((records, torn)) => {
                for (k, (seq, _)) in records.iter().enumerate() {
                    assert_eq!(*seq, first + k as u64);
                }
                if let Some(torn) = torn {
                    assert_eq!(torn.offset + torn.bytes, bytes.len() as u64);
                    assert!(!torn_tail_report(&torn).is_empty());
                }
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    } else {
        // Both forms a snapshot has had: the ledger alone, and with records beside it.
        let seq = u64::from(selector / 2);
        let _ = gangway_journal::fuzzing::snapshot::<Ledger>(bytes, seq);
        let _ = gangway_journal::fuzzing::snapshot::<gangway_actors::ledger::Snapshot>(bytes, seq);
    }
}
