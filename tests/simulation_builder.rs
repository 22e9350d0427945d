//! The simulator's builder, used as a library, against the `gangway simulate` binary: the same inputs
//! give the same results, job by job and change by change.

use std::path::Path;

use assert_cmd::Command;
use clap::Parser;
use gangway::cli::Cli;
use gangway::core::cluster::Cluster;
use gangway::core::metrics::Window;
use gangway::core::policy::{self, Capabilities, Knob, KnobRange, PolicyEntry, Registry};
use gangway::core::sim::Simulation;
use gangway::core::trace::TraceOptions;
use gangway::scenario;

mod support;

/// The policies compared: one that keeps its queue, one that preempts, one that migrates.
const POLICIES: [&str; 3] = ["fifo", "tiresias", "gandiva"];

/// A file of `dir` as text.
fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The summaries of `summary.json`, without the wall time each run took.
fn summaries(dir: &Path) -> serde_json::Value {
    let mut value: serde_json::Value = serde_json::from_str(&read(dir, "summary.json")).unwrap();
    for summary in value.as_array_mut().unwrap() {
        summary.as_object_mut().unwrap().remove("wall_s");
    }
    value
}

#[test]
fn the_builder_gives_what_gangway_simulate_gives_on_the_bundled_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (cli, built) = (dir.path().join("cli"), dir.path().join("built"));
    let out = Command::cargo_bin("gangway")
        .unwrap()
        .args(["simulate", "--policy", &POLICIES.join(","), "--out"])
        .arg(&cli)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // What `gangway simulate` does with no options, said through the builder: Gavel's trace at 2
    // jobs/hour on its 108 GPUs, 360 s rounds, jobs 4000..5000 measured, rho against `isolated`.
    let table = scenario::load_throughputs(None).unwrap();
    let options = TraceOptions {
        rate: Some(2.0),
        ..TraceOptions::default()
    };
    let report = Simulation::builder()
        .trace(scenario::load_trace(None, &options, &table).unwrap())
        .table(table)
        .cluster(Cluster::parse_spec("v100=36,p100=36,k80=36", 1).unwrap())
        .policies(POLICIES)
        .round(360.0)
        .window(Window(Some(4000..5000)))
        .log_changes(true)
        .run()
        .unwrap();
    let results: Vec<_> = report
        .runs
        .into_iter()
        .map(|run| (run.result, run.summary))
        .collect();
    gangway::report::write_outputs(&built, &results, &gangway::report::Parameters::new()).unwrap();

    for policy in POLICIES {
        for file in [
            format!("jobs_{policy}.csv"),
            format!("allocations_{policy}.csv"),
        ] {
            let (a, b) = (read(&cli, &file), read(&built, &file));
            assert!(
                a.lines().count() > 1000,
                "{file}: {} lines",
                a.lines().count()
            );
            assert!(
                a == b,
                "{file} differs between gangway simulate and the builder"
            );
        }
    }
    assert_eq!(summaries(&cli), summaries(&built));
}

#[test]
fn a_user_registry_gives_the_command_line_its_policy_listed_with_its_knob_and_run_beside_the_built_ins()
 {
    let mut registry = Registry::with_builtins();
    registry
        .register(
            PolicyEntry::new("my_fifo", |config| {
                assert_eq!(
                    config.knob("patience"),
                    60.0,
                    "the spec's knob reaches the factory"
                );
                Box::new(support::Delegating(
                    policy::builtin()
                        .build("fifo", config, &Capabilities::ALL)
                        .unwrap(),
                ))
            })
            .summary("fifo, by a user")
            .knob(Knob {
                name: "patience",
                default: 1.0,
                range: KnobRange::SECONDS,
                help: "seconds it waits for nothing",
            }),
        )
        .unwrap();
    let listing = gangway::cli::policy_listing(&registry);
    assert!(
        listing.contains("my_fifo") && listing.contains("fifo, by a user"),
        "{listing}"
    );
    assert!(
        listing.contains(":patience=1 seconds it waits for nothing"),
        "{listing}"
    );

    let dir = tempfile::tempdir().unwrap();
    let args = [
        "gangway",
        "simulate",
        "--policy",
        "my_fifo:patience=60,fifo",
        "--out",
    ];
    let cli = Cli::parse_from(args.iter().copied().chain([dir.path().to_str().unwrap()]));
    gangway::cli::run(cli, &registry).unwrap();
    let (mine, fifo) = (
        read(dir.path(), "jobs_my_fifo:patience=60.csv"),
        read(dir.path(), "jobs_fifo.csv"),
    );
    assert!(fifo.lines().count() > 1000);
    assert_eq!(mine, fifo, "per-job results");

    // A spec the user's registry refuses is the CLI's error, before anything runs.
    let cli = Cli::parse_from(["gangway", "simulate", "--policy", "my_fifo:patience=-1"]);
    let e = gangway::cli::run(cli, &registry).unwrap_err();
    assert!(e.to_string().contains("patience"), "{e}");
}
