//! End-to-end tests of the `gangway simulate` binary: outputs, determinism, error messages, and the
//! public traces under `../shared/data` (skipped with a message when that folder is absent).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

mod support;

/// A small, fast synthetic scenario used by most tests.
const SYNTHETIC: &str = "synthetic:jobs=300,seed=1,rate=4";
const SMALL_CLUSTER: &str = "v100=8,k80=8";
/// The policies `gangway simulate` compares when `--policy` is not given.
fn default_policies() -> Vec<&'static str> {
    gangway::scenario::DEFAULT_POLICIES.split(',').collect()
}

/// What one run of the binary produced.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    command: String,
}

impl Run {
    /// Panics (with the output) unless the run exited 0; returns `self` for chaining.
    fn success(self) -> Run {
        assert_eq!(
            self.code,
            Some(0),
            "`{}` failed\n--- stdout\n{}\n--- stderr\n{}",
            self.command,
            self.stdout,
            self.stderr
        );
        self.no_panic()
    }

    /// Panics unless the run exited with a non-zero code (not a signal, not a panic).
    fn failure(self) -> Run {
        assert!(
            matches!(self.code, Some(c) if c != 0),
            "`{}` should have failed, got {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.command,
            self.code,
            self.stdout,
            self.stderr
        );
        self.no_panic()
    }

    fn no_panic(self) -> Run {
        assert!(
            !self.stderr.contains("panicked"),
            "`{}` panicked:\n{}",
            self.command,
            self.stderr
        );
        self
    }

    /// The run printed no comparison table (it failed, or only listed something).
    fn no_table(&self) -> &Run {
        assert!(
            !self.stdout.contains("avg JCT h"),
            "`{}` printed a table:\n{}",
            self.command,
            self.stdout
        );
        self
    }

    fn stderr_has(&self, needle: &str) -> &Run {
        self.stream_has("stderr", &self.stderr, needle)
    }

    fn stdout_has(&self, needle: &str) -> &Run {
        self.stream_has("stdout", &self.stdout, needle)
    }

    fn stream_has(&self, name: &str, text: &str, needle: &str) -> &Run {
        assert!(
            text.contains(needle),
            "{name} of `{}` lacks {needle:?}:\n{text}",
            self.command
        );
        self
    }

    /// stdout parsed as the JSON array of `--format json`.
    fn json(&self) -> Vec<serde_json::Map<String, Value>> {
        let value: Value = serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout of `{}` is not JSON ({e}):\n{}",
                self.command, self.stdout
            )
        });
        summaries(value, &self.command)
    }
}

fn summaries(value: Value, what: &str) -> Vec<serde_json::Map<String, Value>> {
    let Value::Array(items) = value else {
        panic!("{what}: expected a JSON array, got {value}");
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::Object(map) => map,
            other => panic!("{what}: expected an object per policy, got {other}"),
        })
        .collect()
}

/// Runs `gangway simulate ARGS`, with a timeout so that a hang fails the test instead of stalling CI.
fn simulate(args: &[&str]) -> Run {
    let args: Vec<&str> = std::iter::once("simulate")
        .chain(args.iter().copied())
        .collect();
    gangway(&args, Duration::from_secs(120))
}

/// Runs `gangway ARGS`, killed after `timeout` (a hang then fails the test as a run that did not
/// exit).
fn gangway(args: &[&str], timeout: Duration) -> Run {
    let mut cmd = Command::cargo_bin("gangway").expect("the gangway binary is built");
    cmd.args(args).env_remove("RUST_LOG").timeout(timeout);
    let command = std::iter::once("gangway".to_owned())
        .chain(args.iter().map(|a| (*a).to_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("`{command}` did not run: {e}"));
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        command,
    }
}

fn num(summary: &serde_json::Map<String, Value>, key: &str) -> f64 {
    summary
        .get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("`{key}` is not a number in {summary:?}"))
}

fn count(summary: &serde_json::Map<String, Value>, key: &str) -> u64 {
    summary
        .get(key)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("`{key}` is not a whole number in {summary:?}"))
}

fn policy_names(summaries: &[serde_json::Map<String, Value>]) -> Vec<&str> {
    summaries
        .iter()
        .map(|s| s["policy"].as_str().expect("policy is a string"))
        .collect()
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writing a test input");
    path
}

fn path_arg(path: &Path) -> String {
    path.to_str().expect("UTF-8 temp path").to_owned()
}

/// The shared reference data, or `None` (with a message) when it is not there.
fn shared_data(what: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data"));
    let path = dir.join(what);
    if path.exists() {
        Some(dir)
    } else {
        support::skip(&format!(
            "{} not found (the shared reference data is absent)",
            path.display()
        ));
        None
    }
}

/// The tests' one rule for a missing component (here, the reference data): skip, loudly, except in CI,
/// where it fails (a broken install must not turn the suite green).
#[test]
fn a_test_that_would_skip_fails_in_ci() {
    let in_ci = std::panic::catch_unwind(|| support::skip_unless_ci(true, "no widget"));
    let message = in_ci.unwrap_err();
    let message = message.downcast_ref::<String>().expect("a formatted panic");
    assert!(
        message.contains("CI=true, and this test would skip: no widget"),
        "{message}"
    );
    support::skip_unless_ci(false, "(the rule's own test: outside CI it only says so)");
}

/// Data lines of a headerless trace file.
fn data_lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .expect("reading shared data")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

// 1. The default run: the bundled trace, default policies, a table.
#[test]
fn no_arguments_replays_the_bundled_trace_as_a_table() {
    let run = simulate(&[]).success();
    run.stdout_has("avg JCT h").stdout_has("policy");
    run.stderr_has("bundled");
    let row = |name: &str| -> Vec<String> {
        run.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no `{name}` row in:\n{}", run.stdout))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    for name in default_policies() {
        let cells = row(name);
        // policy, jobs, measured, avg JCT h, ...
        assert_eq!(cells[1], "6000", "{name}: jobs in the bundled trace");
        assert_eq!(
            cells[2], "1000",
            "{name}: Gavel's window 4000..5000 is measured"
        );
        let avg: f64 = cells[3].parse().expect("avg JCT is a number");
        assert!(avg > 0.0, "{name}: avg JCT {avg}");
    }
}

/// A newcomer's first run shows the systems gangway exists for beside the baselines, not only the
/// baselines (it once compared FIFO, SJF, SRTF and LAS).
#[test]
fn the_default_run_compares_the_seed_policies_with_fifo() {
    let names = default_policies();
    for seed in [
        "fifo",
        "tiresias",
        "gandiva",
        "themis",
        "max_min_fairness_perf",
    ] {
        assert!(names.contains(&seed), "{seed} is not in {names:?}");
    }
    for name in names {
        gangway::core::policy::builtin()
            .resolve(name)
            .expect("a known policy");
    }
}

// 2. JSON output.
#[test]
fn json_has_one_summary_per_policy_with_sane_values() {
    let run = simulate(&[
        "--trace",
        SYNTHETIC,
        "--cluster",
        SMALL_CLUSTER,
        "--format",
        "json",
    ])
    .success();
    let summaries = run.json();
    assert_eq!(policy_names(&summaries), default_policies());
    for s in &summaries {
        for key in [
            "policy",
            "jobs",
            "measured_jobs",
            "avg_jct_h",
            "p50_jct_h",
            "p99_jct_h",
            "makespan_h",
            "avg_queue_h",
            "avg_ftf",
            "max_ftf",
            "utilization",
            "wall_s",
        ] {
            assert!(s.contains_key(key), "no `{key}` in {s:?}");
        }
        assert_eq!(count(s, "jobs"), 300);
        assert_eq!(count(s, "measured_jobs"), count(s, "jobs"), "{s:?}");
        let avg = num(s, "avg_jct_h");
        assert!(avg > 0.0, "{s:?}");
        assert!(num(s, "p50_jct_h") > 0.0 && num(s, "p99_jct_h") >= num(s, "p50_jct_h"));
        assert!(num(s, "makespan_h") > 0.0);
        assert!(num(s, "avg_queue_h") >= 0.0);
        let util = num(s, "utilization");
        assert!(util > 0.0 && util <= 1.0, "utilization {util}");
        assert!(num(s, "wall_s") >= 0.0);
        // Finish-time fairness is on by default.
        assert!(num(s, "avg_ftf") > 0.0 && num(s, "max_ftf") >= num(s, "avg_ftf"));
    }
    // --no-ftf turns rho off: the fields stay, as null.
    let run = simulate(&[
        "--trace",
        SYNTHETIC,
        "--cluster",
        SMALL_CLUSTER,
        "--policy",
        "fifo",
        "--no-ftf",
        "--format",
        "json",
    ])
    .success();
    let summaries = run.json();
    assert_eq!(policy_names(&summaries), ["fifo"]);
    assert_eq!(summaries[0]["avg_ftf"], Value::Null);
    assert_eq!(summaries[0]["max_ftf"], Value::Null);
}

// 3. Determinism.
#[test]
fn same_seed_gives_identical_results_and_per_job_csvs() {
    let run_once = |trace: &str, out: &Path| {
        let run = simulate(&[
            "--trace",
            trace,
            "--cluster",
            SMALL_CLUSTER,
            "--policy",
            "fifo,srtf,las",
            "--format",
            "json",
            "--out",
            &path_arg(out),
        ])
        .success();
        let mut summaries = run.json();
        for s in &mut summaries {
            assert!(s.remove("wall_s").is_some(), "no wall_s in {s:?}");
        }
        summaries
    };
    let trace = "synthetic:jobs=300,seed=1,rate=4,multi=true";
    let (a, b) = (tempdir(), tempdir());
    let first = run_once(trace, a.path());
    let second = run_once(trace, b.path());
    assert_eq!(first, second, "two runs with the same seed differ");

    let csvs = |dir: &Path| -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .expect("reading --out")
            .map(|e| e.expect("dir entry").path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.starts_with("jobs_") && name.ends_with(".csv")
            })
            .map(|p| {
                let bytes = std::fs::read(&p).expect("reading a CSV");
                (p.file_name().unwrap().to_string_lossy().into_owned(), bytes)
            })
            .collect()
    };
    let (ca, cb) = (csvs(a.path()), csvs(b.path()));
    assert_eq!(
        ca.keys().collect::<Vec<_>>(),
        ["jobs_fifo.csv", "jobs_las.csv", "jobs_srtf.csv"]
    );
    assert_eq!(ca.keys().collect::<Vec<_>>(), cb.keys().collect::<Vec<_>>());
    for (name, bytes) in &ca {
        assert!(
            bytes == &cb[name],
            "{name} differs between two runs with the same seed"
        );
    }

    // And the comparison means something: another seed gives another result.
    let c = tempdir();
    let other = run_once("synthetic:jobs=300,seed=2,rate=4,multi=true", c.path());
    assert_ne!(first, other, "seed 1 and seed 2 gave the same summaries");
}

// 4. Policy listing.
#[test]
fn policy_help_lists_every_policy_and_alias() {
    let run = simulate(&["--policy", "help"]).success();
    for name in ["fifo", "sjf", "srtf", "max_min_fairness", "isolated", "las"] {
        let listed = run
            .stdout
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|word| word == name);
        assert!(listed, "`{name}` not listed:\n{}", run.stdout);
    }
    // It only lists: no simulation table.
    run.no_table();
}

// 5. Unknown policy.
#[test]
fn unknown_policy_is_an_error_naming_it_and_the_known_ones() {
    let run = simulate(&[
        "--trace",
        SYNTHETIC,
        "--cluster",
        SMALL_CLUSTER,
        "--policy",
        "fifo,nope",
    ])
    .failure();
    run.stderr_has("`nope`");
    for known in ["fifo", "sjf", "srtf", "max_min_fairness", "isolated"] {
        run.stderr_has(known);
    }
    run.no_table();
}

// 6. Bad trace input names the file, the line and the field.
#[test]
fn bad_gavel_row_names_file_line_and_field() {
    let dir = tempdir();
    let path = write(
        dir.path(),
        "bad_gavel.csv",
        "job_id,arrival_unit,job_type,scale_factor,duration_s_on_v100,total_steps\n\
         0,0.0,ResNet-18 (batch size 64),1,68344.350,1646636.276\n\
         1,0.5,ResNet-18 (batch size 64),two,3600.0,86400.0\n",
    );
    let run = simulate(&[
        "--trace",
        &path_arg(&path),
        "--rate",
        "1",
        "--cluster",
        SMALL_CLUSTER,
    ])
    .failure();
    run.stderr_has(&format!("{}:3: field `scale_factor`", path.display()));
    run.stderr_has("`two`");

    // Without --rate, a continuous trace says that it needs one.
    let run = simulate(&["--trace", &path_arg(&path), "--cluster", SMALL_CLUSTER]).failure();
    run.stderr_has(&path.display().to_string())
        .stderr_has("--rate");

    // The same file, fixed, runs (so the failure above was about the field).
    let good = write(
        dir.path(),
        "good_gavel.csv",
        "job_id,arrival_unit,job_type,scale_factor,duration_s_on_v100,total_steps\n\
         0,0.0,ResNet-18 (batch size 64),1,68344.350,1646636.276\n\
         1,0.5,ResNet-18 (batch size 64),2,3600.0,86400.0\n",
    );
    let run = simulate(&[
        "--trace",
        &path_arg(&good),
        "--rate",
        "1",
        "--cluster",
        SMALL_CLUSTER,
        "--format",
        "json",
    ])
    .success();
    for s in run.json() {
        assert_eq!(count(&s, "measured_jobs"), 2, "{s:?}");
    }
}

#[test]
fn bad_philly_timestamp_names_file_line_and_field() {
    let dir = tempdir();
    let path = write(
        dir.path(),
        "philly.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n\
         2017-10-09 07:01:55,66.0,1,66.0,11cb48\n\
         yesterday,2951.0,4,11804.0,6214e9\n",
    );
    let run = simulate(&["--trace", &path_arg(&path), "--cluster", "generic=2x8"]).failure();
    run.stderr_has(&format!("{}:3: field `timestamp`", path.display()));
    run.stderr_has("`yesterday`");
}

#[test]
fn unknown_trace_format_points_at_trace_format_flag() {
    let dir = tempdir();
    let path = write(dir.path(), "mystery.csv", "what,is,this\n1,2,3\n");
    let run = simulate(&["--trace", &path_arg(&path), "--cluster", SMALL_CLUSTER]).failure();
    run.stderr_has(&path.display().to_string())
        .stderr_has("--trace-format");

    // A missing trace file is an error naming it, not a panic.
    let missing = dir.path().join("no_such_trace.csv");
    let run = simulate(&["--trace", &path_arg(&missing)]).failure();
    run.stderr_has(&missing.display().to_string());
}

// 7. --cluster errors.
#[test]
fn bad_cluster_specs_name_the_item() {
    for (spec, item) in [("v100", "`v100`"), ("v100=abc", "`v100=abc`")] {
        let run = simulate(&["--trace", SYNTHETIC, "--cluster", spec]).failure();
        run.stderr_has(item);
        run.no_table();
    }
}

// 8. --out DIR.
#[test]
fn out_writes_summary_plots_and_per_job_csvs() {
    let dir = tempdir();
    let out = dir.path().join("results"); // does not exist yet: --out creates it
    let run = simulate(&[
        "--trace",
        SYNTHETIC,
        "--cluster",
        SMALL_CLUSTER,
        "--policy",
        "fifo,las",
        "--format",
        "json",
        "--out",
        &path_arg(&out),
    ])
    .success();
    let stdout_summaries = run.json();

    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json");
    let value: Value = serde_json::from_str(&text).expect("summary.json parses");
    let file_summaries = summaries(value, "summary.json");
    assert_eq!(policy_names(&file_summaries), ["fifo", "las"]);
    assert_eq!(
        policy_names(&file_summaries),
        policy_names(&stdout_summaries)
    );

    for name in ["jct_cdf.svg", "utilization.svg"] {
        let svg = std::fs::read_to_string(out.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let head = svg.trim_start();
        assert!(
            head.starts_with("<svg") || head.starts_with("<?xml"),
            "{name} is not SVG: {}",
            &svg[..svg.len().min(200)]
        );
        assert!(
            svg.contains("<path") || svg.contains("<polyline"),
            "{name} draws no line"
        );
    }

    for policy in ["fifo", "las"] {
        let path = out.join(format!("jobs_{policy}.csv"));
        let csv = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines.len(),
            300 + 1,
            "{path:?}: one header + one row per job"
        );
        assert!(
            lines[0].starts_with("job_id,"),
            "{path:?} header: {}",
            lines[0]
        );
        let columns = lines[0].split(',').count();
        assert!(
            lines.iter().all(|l| l.split(',').count() == columns),
            "{path:?}: ragged rows"
        );
    }
}

// 9. Public traces from ../shared/data.
#[test]
fn philly_trace_prefix_runs() {
    let Some(data) = shared_data("philly/philly_jobs_pollux_derived.csv") else {
        return;
    };
    let full = std::fs::read_to_string(data.join("philly/philly_jobs_pollux_derived.csv"))
        .expect("reading the Philly trace");
    let prefix: String = full.lines().take(2001).map(|l| format!("{l}\n")).collect();
    let dir = tempdir();
    let path = write(dir.path(), "philly_2000.csv", &prefix);
    let run = simulate(&[
        "--trace",
        &path_arg(&path),
        "--policy",
        "fifo,las",
        "--cluster",
        "generic=16x8",
        "--no-ftf",
        "--format",
        "json",
    ])
    .success();
    let summaries = run.json();
    assert_eq!(policy_names(&summaries), ["fifo", "las"]);
    for s in &summaries {
        assert_eq!(count(s, "jobs"), 2000, "{s:?}");
        assert_eq!(count(s, "measured_jobs"), 2000, "{s:?}");
        assert!(num(s, "avg_jct_h") > 0.0, "{s:?}");
    }
}

#[test]
fn tiresias_sixty_jobs_run() {
    let Some(data) = shared_data("tiresias/60_job.csv") else {
        return;
    };
    let run = simulate(&[
        "--trace",
        &path_arg(&data.join("tiresias/60_job.csv")),
        "--cluster",
        "generic=4x8",
        "--format",
        "json",
    ])
    .success();
    for s in run.json() {
        assert_eq!(count(&s, "jobs"), 60, "{s:?}");
        assert_eq!(count(&s, "measured_jobs"), 60, "{s:?}");
        assert!(num(&s, "avg_jct_h") > 0.0, "{s:?}");
    }
}

#[test]
fn pollux_workload_runs_with_explicit_and_default_profiles() {
    let Some(data) = shared_data("pollux/workloads/workload-1.csv") else {
        return;
    };
    let workload = path_arg(&data.join("pollux/workloads/workload-1.csv"));
    let profiles = path_arg(&data.join("pollux/profiles"));
    let explicit = simulate(&[
        "--trace",
        &workload,
        "--profiles",
        &profiles,
        "--cluster",
        "t4=16x4",
        "--format",
        "json",
    ])
    .success();
    // Without --profiles, the profiles beside the workloads are used.
    let default = simulate(&[
        "--trace",
        &workload,
        "--cluster",
        "t4=16x4",
        "--format",
        "json",
    ])
    .success();
    let strip = |run: &Run| {
        let mut s = run.json();
        for x in &mut s {
            x.remove("wall_s");
        }
        s
    };
    let summaries = strip(&explicit);
    for s in &summaries {
        assert_eq!(count(s, "jobs"), 160, "{s:?}");
        assert_eq!(count(s, "measured_jobs"), 160, "{s:?}");
        assert!(num(s, "avg_jct_h") > 0.0, "{s:?}");
    }
    assert_eq!(summaries, strip(&default));

    // A wrong profiles folder is an error naming it.
    let dir = tempdir();
    let run = simulate(&[
        "--trace",
        &workload,
        "--profiles",
        &path_arg(&dir.path().join("nowhere")),
        "--cluster",
        "t4=16x4",
    ])
    .failure();
    run.stderr_has("nowhere");
}

/// `gangway workload` resamples Sia's philly workloads for a cluster twice the size; the command it
/// suggests runs that workload under `sia` on the doubled cluster.
#[test]
fn a_resampled_sia_workload_runs_on_the_cluster_it_names() {
    let Some(data) = shared_data("sia/workloads/philly/workload-1.csv") else {
        return;
    };
    let dir = tempdir();
    let out = dir.path().join("doubled.csv");
    let run = gangway(
        &[
            "workload",
            "--like",
            &path_arg(&data.join("sia/workloads/philly/workload-1.csv")),
            "--gpus",
            "128",
            "--hours",
            "2",
            "--seed",
            "3",
            "--out",
            &path_arg(&out),
        ],
        Duration::from_secs(60),
    )
    .success();
    // 160 jobs in 7.7 h on 64 GPUs: about 83 in 2 h on 128.
    let jobs = std::fs::read_to_string(&out).unwrap().lines().count() - 1;
    assert!((70..=96).contains(&jobs), "{jobs} jobs");
    run.stderr_has("--cluster aws=12x4,rtx=6x8,dgx-ext=4x8");
    let suggested = run
        .stderr
        .lines()
        .find_map(|l| l.split_once("simulate it with: gangway simulate "))
        .map(|(_, args)| args.to_owned())
        .expect("a suggested command");
    let mut args: Vec<&str> = suggested.split(' ').collect();
    args.extend(["--policy", "sia", "--no-ftf", "--format", "json"]);
    let summaries = simulate(&args).success().json();
    assert_eq!(count(&summaries[0], "jobs"), jobs as u64);
    assert_eq!(count(&summaries[0], "unfinished_jobs"), 0);

    // A reference that is not beside its profiles needs its cluster's size.
    gangway(
        &[
            "workload",
            "--like",
            &path_arg(&out),
            "--gpus",
            "64",
            "--jobs",
            "5",
        ],
        Duration::from_secs(60),
    )
    .failure()
    .stderr_has("--like-gpus");
}

#[test]
fn gavel_tab_separated_traces_run_with_both_throughput_tables() {
    let Some(data) = shared_data("gavel/physical_artifact_evaluation.trace") else {
        return;
    };
    let physical = data.join("gavel/physical_cluster_throughputs.json");
    for trace in [
        "gavel/physical_artifact_evaluation.trace", // 10 columns
        "gavel/msr_seed1_vc795a4c.trace",           // 7 columns
    ] {
        let path = data.join(trace);
        if !path.exists() {
            support::skip(&format!(
                "{} not found (the shared reference data is incomplete)",
                path.display()
            ));
            continue;
        }
        let jobs = data_lines(&path) as u64;
        assert!(jobs > 0);
        let trace_arg = path_arg(&path);
        let table_arg = path_arg(&physical);
        let mut runs = vec![(
            "the bundled table",
            vec!["--trace", trace_arg.as_str(), "--format", "json"],
        )];
        if physical.exists() {
            runs.push((
                "physical_cluster_throughputs.json",
                vec![
                    "--trace",
                    trace_arg.as_str(),
                    "--throughputs",
                    table_arg.as_str(),
                    "--format",
                    "json",
                ],
            ));
        }
        for (table, args) in runs {
            let summaries = simulate(&args).success().json();
            assert_eq!(policy_names(&summaries), default_policies());
            for s in &summaries {
                assert_eq!(count(s, "jobs"), jobs, "{trace} with {table}: {s:?}");
                assert_eq!(
                    count(s, "measured_jobs"),
                    jobs,
                    "{trace} with {table}: {s:?}"
                );
                assert!(num(s, "avg_jct_h") > 0.0, "{trace} with {table}: {s:?}");
            }
        }
    }
}

// 10. --cluster-file.
#[test]
fn cluster_file_is_read_and_overrides_cluster() {
    let dir = tempdir();
    let file = write(
        dir.path(),
        "cluster.toml",
        "[[nodes]]\ngpu_type = \"v100\"\ncount = 2\ngpus = 4\n\n\
         [[nodes]]\ngpu_type = \"k80\"\ncount = 4\ngpus = 2\n",
    );
    let out = dir.path().join("out");
    let run = simulate(&[
        "--trace",
        "synthetic:jobs=100,seed=3,rate=4",
        "--cluster-file",
        &path_arg(&file),
        // Overridden by the file: the per-job CSVs must show both of the file's GPU types.
        "--cluster",
        "p100=1",
        "--policy",
        "fifo",
        "--no-ftf",
        "--format",
        "json",
        "--out",
        &path_arg(&out),
    ])
    .success();
    let summaries = run.json();
    assert_eq!(count(&summaries[0], "measured_jobs"), 100);
    run.stderr_has("16 GPUs");
    let csv = std::fs::read_to_string(out.join("jobs_fifo.csv")).expect("jobs_fifo.csv");
    let header = csv.lines().next().expect("a header");
    assert!(
        header.ends_with(",gpu_s_v100,gpu_s_k80"),
        "GPU types of the cluster file expected in {header}"
    );

    let bad = write(
        dir.path(),
        "bad_cluster.toml",
        "[[nodes]]\ngpu_type = \"v100\"\ncount = 2\ngpus = 4\ncolour = \"red\"\n",
    );
    let run = simulate(&["--trace", SYNTHETIC, "--cluster-file", &path_arg(&bad)]).failure();
    run.stderr_has(&bad.display().to_string())
        .stderr_has("colour");

    let missing = dir.path().join("no_such_cluster.toml");
    let run = simulate(&["--trace", SYNTHETIC, "--cluster-file", &path_arg(&missing)]).failure();
    run.stderr_has(&missing.display().to_string());
}

/// `gangway topology` prints the `nvidia-smi topo -m`-style matrix of a preset and writes DOT and SVG.
#[test]
fn topology_prints_the_matrix_and_writes_pictures() {
    let dir = tempfile::tempdir().unwrap();
    let dot = dir.path().join("t.dot");
    let svg = dir.path().join("t.svg");
    let out = Command::cargo_bin("gangway")
        .unwrap()
        .args(["topology", "--preset", "dgx1-v100", "--dot"])
        .arg(&dot)
        .arg("--svg")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let gpu0 = text.lines().find(|l| l.starts_with("GPU0 ")).unwrap();
    assert_eq!(
        gpu0.split_whitespace().collect::<Vec<_>>(),
        ["GPU0", "X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"]
    );
    assert!(
        std::fs::read_to_string(&dot)
            .unwrap()
            .starts_with("graph {")
    );
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    let bad = Command::cargo_bin("gangway")
        .unwrap()
        .args(["topology", "--preset", "dgx-9"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown preset `dgx-9`"));
}

/// `--topology` builds the cluster from a topology file and `--placement` picks a topology-aware placer;
/// a bad mode or a cluster without a default topology fails with a clear message.
#[test]
fn simulate_places_on_a_topology() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    std::fs::write(
        &file,
        "hosts_per_rack = 2\n[[servers]]\npreset = \"dgx1-v100\"\ncount = 4\n",
    )
    .unwrap();
    let run = |placement: &str| {
        Command::cargo_bin("gangway")
            .unwrap()
            .args([
                "simulate",
                "--trace",
                "synthetic:jobs=200,seed=3,rate=6,multi=true",
                "--policy",
                "fifo",
            ])
            .arg("--topology")
            .arg(&file)
            .args(["--placement", placement, "--no-ftf", "--format", "json"])
            .output()
            .unwrap()
    };
    for mode in [
        "consolidate",
        "relaxed",
        "relax-after:600",
        "sensitive",
        "random",
    ] {
        let out = run(mode);
        assert!(
            out.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summaries: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summaries[0]["measured_jobs"], 200, "{mode}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("32 GPUs"),
            "{mode}"
        );
    }
    let bad = run("scattered");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown placement `scattered`"));
    let no_topology = Command::cargo_bin("gangway")
        .unwrap()
        .args([
            "simulate",
            "--trace",
            "synthetic:jobs=5,seed=1",
            "--cluster",
            "v100=3x3",
            "--placement",
            "relaxed",
        ])
        .output()
        .unwrap();
    assert!(!no_topology.status.success());
    assert!(String::from_utf8_lossy(&no_topology.stderr).contains("--topology FILE"));
}

/// `--gittins-distribution` feeds Tiresias' Gittins index; a bad value names the file, line and field.
#[test]
fn gittins_distribution_is_read_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("gput.csv");
    std::fs::write(&good, "duration\n120\n3600\n86400\n").unwrap();
    let out = Command::cargo_bin("gangway")
        .unwrap()
        .args([
            "simulate",
            "--trace",
            "synthetic:jobs=100,seed=2,rate=6",
            "--cluster",
            "v100=4",
            "--no-ftf",
        ])
        .args(["--policy", "tiresias_gittins", "--gittins-distribution"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("tiresias_gittins"));
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "duration\n12\n-5\n").unwrap();
    let out = Command::cargo_bin("gangway")
        .unwrap()
        .args([
            "simulate",
            "--trace",
            "synthetic:jobs=10,seed=2",
            "--policy",
            "tiresias_gittins",
            "--gittins-distribution",
        ])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}:3: field `duration`", bad.display())),
        "{stderr}"
    );
    // A service past any job's: more GPU-seconds than a cluster's every GPU has in 30 years.
    std::fs::write(&bad, "duration\n12\n1e300\n").unwrap();
    simulate(&[
        "--trace",
        "synthetic:jobs=10,seed=2",
        "--policy",
        "tiresias_gittins",
        "--gittins-distribution",
        &path_arg(&bad),
    ])
    .failure()
    .stderr_has(&format!(
        "{}:3: field `duration`: `1e300` is not a service time: it must be at least 0 GPU-seconds and at most 1.048576e15 GPU-seconds",
        bad.display()
    ));
}

// Hardening: input that once crashed, wrapped around or was misreported.

/// A closed pipe as stdout (and stderr): the reader has gone away before the first write.
fn run_into_closed_pipe(args: &[&str], stderr_too: bool) -> (std::process::ExitStatus, String) {
    use std::process::Stdio;
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gangway"));
    command
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    if stderr_too {
        command.stdout(writer.try_clone().unwrap()).stderr(writer);
        let status = command.status().unwrap();
        (status, String::new())
    } else {
        command.stdout(writer).stderr(Stdio::piped());
        let output = command.output().unwrap();
        (
            output.status,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

/// `gangway topology --list | head -5` once panicked with "failed printing to stdout: Broken pipe".
/// Every printing command ends quietly instead, as `ls | head` does (killed by SIGPIPE, or done).
#[test]
fn every_printing_command_ends_quietly_when_its_reader_goes_away() {
    use std::os::unix::process::ExitStatusExt;
    let small = [
        "--trace",
        "synthetic:jobs=40,seed=1,rate=4",
        "--cluster",
        "v100=4",
        "--policy",
        "fifo",
        "--no-ftf",
    ];
    let json: Vec<&str> = ["simulate"]
        .iter()
        .chain(&small)
        .chain(&["--format", "json"])
        .copied()
        .collect();
    let table: Vec<&str> = ["simulate"].iter().chain(&small).copied().collect();
    let commands: Vec<Vec<&str>> = vec![
        vec!["topology", "--list"],
        vec!["topology", "--preset", "dgx1-v100", "--servers", "2"],
        vec!["simulate", "--policy", "help"],
        table,
        json,
    ];
    for args in &commands {
        for stderr_too in [false, true] {
            let (status, stderr) = run_into_closed_pipe(args, stderr_too);
            assert!(
                status.success() || status.signal() == Some(libc::SIGPIPE),
                "{args:?} (stderr closed too: {stderr_too}): {status:?}\n{stderr}"
            );
            assert!(
                !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
                "{args:?}: {stderr}"
            );
        }
    }
}

/// An I/O error was printed twice ("Is a directory (os error 21): Is a directory (os error 21)").
#[test]
fn an_unreadable_input_is_reported_once() {
    let dir = tempdir();
    let d = path_arg(dir.path());
    for args in [
        vec!["--trace", d.as_str()],
        vec!["--throughputs", d.as_str()],
        vec!["--cluster-file", d.as_str()],
        vec!["--topology", d.as_str()],
    ] {
        let run = simulate(&args).failure();
        run.stderr_has("Is a directory");
        assert_eq!(
            run.stderr.matches("os error 21").count(),
            1,
            "{args:?}: {}",
            run.stderr
        );
    }
}

/// A trace that is not UTF-8 once gave no line number.
#[test]
fn a_trace_that_is_not_utf8_names_the_line() {
    let dir = tempdir();
    let path = dir.path().join("t.csv");
    std::fs::write(
        &path,
        b"job_id,arrival_unit,job_type,scale_factor,duration_s_on_v100,total_steps\n0,0,A,1,1,1\n1,0,\xff,1,1,1\n",
    )
    .unwrap();
    simulate(&["--trace", &path_arg(&path), "--rate", "1"])
        .failure()
        .stderr_has(&format!("{}:3: not valid UTF-8", path.display()));
}

/// `--rate 1e-300` once put arrivals at 1e303 seconds and printed garbage.
#[test]
fn a_rate_that_puts_arrivals_beyond_simulated_time_is_refused() {
    let run = simulate(&["--rate", "1e-300"]).failure();
    run.stderr_has("field `arrival_unit`")
        .stderr_has("check the rate");
    run.no_table();
    simulate(&["--trace", "synthetic:jobs=5,seed=1,rate=1e-300"])
        .failure()
        .stderr_has("raise the rate");
    simulate(&[
        "--trace",
        "synthetic:jobs=5,seed=1",
        "--load-factor",
        "1e-300",
    ])
    .failure()
    .stderr_has("--load-factor");
}

/// Duplicate ids were silently dropped and misreported as jobs too large for the cluster.
#[test]
fn a_duplicate_job_id_names_both_lines() {
    let dir = tempdir();
    let path = write(
        dir.path(),
        "dup.csv",
        "job_id,arrival_unit,job_type,scale_factor,duration_s_on_v100,total_steps\n\
         0,0,ResNet-18 (batch size 64),1,1,1\n\
         1,0,ResNet-18 (batch size 64),1,1,1\n\
         0,1,ResNet-18 (batch size 64),1,1,1\n",
    );
    simulate(&["--trace", &path_arg(&path), "--rate", "1"])
        .failure()
        .stderr_has(&format!(
            "{}:4: field `job_id`: duplicate of line 2",
            path.display()
        ));
}

/// Sizes that once wrapped around (a cluster "on 0 GPUs") or aborted on a huge allocation.
#[test]
fn oversized_clusters_are_refused_with_the_limit() {
    for cluster in ["v100=65536x65536", "v100=4294967295"] {
        simulate(&["--cluster", cluster])
            .failure()
            .stderr_has("at most 1048576 are supported");
    }
    let dir = tempdir();
    let file = write(
        dir.path(),
        "c.toml",
        "[[nodes]]\ngpu_type = \"v100\"\ngpus = 2147483648\n",
    );
    simulate(&["--cluster-file", &path_arg(&file)])
        .failure()
        .stderr_has("at most 1048576");
    let topo = write(
        dir.path(),
        "t.toml",
        "[[servers]]\npreset = \"dgx1-v100\"\ncount = 1000000000000\n",
    );
    simulate(&["--topology", &path_arg(&topo)])
        .failure()
        .stderr_has("at most 1048576 are supported");
    let out = Command::cargo_bin("gangway")
        .unwrap()
        .args([
            "serve",
            "--fake-gpus",
            "4294967295",
            "--listen",
            "127.0.0.1:1",
        ])
        .arg("--journal")
        .arg(dir.path().join("journal"))
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("at most 1048576"), "{stderr}");
}

/// Knobs out of range, or given twice, were silently accepted.
#[test]
fn policy_knobs_are_range_checked() {
    for (spec, says) in [
        ("themis:f=2", "2 is out of range (0 to 1)"),
        ("themis:f=0.5:f=0.7", "`f` is given twice"),
        ("gandiva:grow=2", "out of range (0 or 1)"),
    ] {
        simulate(&["--policy", spec]).failure().stderr_has(says);
    }
    simulate(&["--trace", "synthetic:jobs=10,jobs=20"])
        .failure()
        .stderr_has("`jobs` is given twice");
    simulate(&["--policy", "help"])
        .success()
        .stdout_has("(0 to 1)");
}

/// `sia`, `pollux` and `optimus` on a trace without a goodput model once ran first come first served,
/// reported as themselves; `+tune` without resource profiles left CPUs at their shares. Each is refused
/// before any run, naming the policy and what it needs.
#[test]
fn a_policy_run_without_what_it_needs_is_refused_naming_both() {
    for (spec, says) in [
        ("sia", "policy `sia` needs a goodput model"),
        ("fifo,optimus", "policy `optimus` needs a goodput model"),
        ("srtf+tune", "policy `srtf+tune` needs resource profiles"),
    ] {
        simulate(&["--trace", "synthetic:jobs=10,seed=1", "--policy", spec])
            .failure()
            .stderr_has(says);
    }
    simulate(&["--policy", "help"])
        .success()
        .stdout_has("[needs a goodput model")
        .stdout_has("+opt");
}

/// A run whose jobs never finished once exited 0, its stall warning hidden below the default log level.
/// (Heterogeneity-aware LAS that never re-solves leaves the jobs after its first solve waiting: a stall.)
#[test]
fn a_stalled_run_says_so_and_exits_non_zero() {
    let run = simulate(&[
        "--trace",
        "synthetic:jobs=60,seed=1,rate=4",
        "--cluster",
        "v100=4,k80=4",
        "--policy",
        "fifo,las_perf:realloc=1e9",
        "--no-ftf",
    ])
    .failure();
    run.stderr_has("las_perf:realloc=1e9: 59 jobs never finished: the policy stalled")
        .stderr_has("error: las_perf:realloc=1e9 stalled with jobs unfinished");
    assert!(
        !run.stderr.contains("fifo: "),
        "fifo finished:\n{}",
        run.stderr
    );
    // The results are still printed, with the unfinished jobs counted.
    run.stdout_has("unfinished");
}

/// A workload in Pollux's layout (`workloads/` beside `profiles/`), with per-type profiles (Sia's
/// layout) when `types` names them.
fn elastic_workload(root: &Path, types: &[&str]) -> PathBuf {
    let app = root.join("profiles").join("cifar10");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(root.join("workloads")).unwrap();
    std::fs::write(
        app.join("validation-64.csv"),
        "progress,iteration,metric,grad_sqr,grad_var\n10,10,0.5,1.0,2.0\n200,200,0.9,0.5,1.0\n",
    )
    .unwrap();
    let suffixes: Vec<String> = match types {
        [] => vec![String::new()],
        types => types.iter().map(|t| format!("-{t}")).collect(),
    };
    for suffix in suffixes {
        std::fs::write(
            app.join(format!("placements{suffix}.csv")),
            "placement,local_bsz,step_time,sync_time\n1,64,0.1,0.0\n2,32,0.06,0.01\n",
        )
        .unwrap();
        std::fs::write(
            app.join(format!("scalability{suffix}.csv")),
            "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,2,32,0.08,0.03\n",
        )
        .unwrap();
    }
    let workload = root.join("workloads").join("workload-1.csv");
    std::fs::write(
        &workload,
        "name,time,application,num_replicas,batch_size\ncifar10-0,0,cifar10,1,64\n",
    )
    .unwrap();
    workload
}

#[test]
fn elastic_workloads_run_on_the_cluster_and_rounds_they_were_made_for() {
    let dir = tempfile::tempdir().unwrap();
    let pollux = elastic_workload(&dir.path().join("pollux"), &[]);
    let run = simulate(&["--trace", pollux.to_str().unwrap(), "--policy", "fifo"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("on Pollux's cluster (t4=16x4) with 60 s rounds"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("on 64 GPUs: 64 t4 (16x4)"),
        "{}",
        run.stderr
    );

    let sia = elastic_workload(&dir.path().join("sia"), &["aws", "rtx", "dgx-ext"]);
    let run = simulate(&["--trace", sia.to_str().unwrap(), "--policy", "fifo"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("Sia's heterogeneous cluster (aws=6x4,rtx=3x8,dgx-ext=2x8)"),
        "{}",
        run.stderr
    );

    // With --out, every job's allocations over time.
    let out = dir.path().join("out");
    simulate(&[
        "--trace",
        pollux.to_str().unwrap(),
        "--policy",
        "sia",
        "--out",
        out.to_str().unwrap(),
    ])
    .success();
    let allocations = std::fs::read_to_string(out.join("allocations_sia.csv")).unwrap();
    let mut lines = allocations.lines();
    assert_eq!(
        lines.next(),
        Some(
            "time_s,job_id,event,gpu_type,gpus,gpu_ids,global_batch,local_batch,accum_steps,steps_per_second,steps_done,cpus,memory_gb"
        )
    );
    let start: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(start[1..5], ["0", "start", "t4", "1"], "{allocations}");
    assert!(!start[6].is_empty(), "sia chose a batch: {allocations}");
    let (cpus, memory_gb): (f64, f64) = (start[11].parse().unwrap(), start[12].parse().unwrap());
    assert!(
        cpus > 0.0 && memory_gb > 0.0,
        "a start holds its share: {allocations}"
    );
    assert!(
        allocations.lines().any(|l| l.contains(",0,stop,")),
        "{allocations}"
    );
    // And a picture of them: the job's stretch on its GPU is a shaded bar.
    let picture = std::fs::read_to_string(out.join("gpus_sia.svg")).unwrap();
    assert!(
        picture.contains("GPUs per job over time (sia)"),
        "{picture}"
    );
    assert!(picture.matches("<rect").count() >= 3, "{picture}");

    // An explicit cluster wins, and nothing is said about defaults.
    let run = simulate(&[
        "--trace",
        pollux.to_str().unwrap(),
        "--policy",
        "fifo",
        "--cluster",
        "t4=2x4",
    ]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!run.stderr.contains("Pollux's cluster"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("with 60 s rounds, as the workload was made for"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("on 8 GPUs"), "{}", run.stderr);
}

/// A FIFO made at `path` (what `mkfifo` makes).
fn fifo(path: &Path) -> PathBuf {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
    path.to_path_buf()
}

/// How long a run that must be refused at once may take before it counts as hung.
const AT_ONCE: Duration = Duration::from_secs(30);

/// `gangway serve ARGS` on a socket and a journal in `dir`, which must refuse to start, at once.
fn serve_refused(dir: &Path, args: &[&str]) -> Run {
    let socket = format!("unix:{}", dir.join("api.sock").display());
    let journal = path_arg(&dir.join("journal"));
    let mut all = vec!["serve"];
    all.extend_from_slice(args);
    all.extend(["--listen", &socket, "--journal", &journal]);
    gangway(&all, AT_ONCE).failure()
}

/// A FIFO in place of a profile CSV hung `simulate --profiles` (and every other input the same
/// way: a plain open waits for a writer that never comes); a device was read until memory ran out.
#[test]
fn a_fifo_or_a_device_in_place_of_an_input_is_refused_at_once() {
    let dir = tempdir();
    let workload = elastic_workload(&dir.path().join("pollux"), &[]);
    let profiles = dir.path().join("pollux/profiles");
    let placements = profiles.join("cifar10/placements.csv");
    std::fs::remove_file(&placements).unwrap();
    fifo(&placements);
    let run = gangway(
        &[
            "simulate",
            "--trace",
            &path_arg(&workload),
            "--profiles",
            &path_arg(&profiles),
            "--policy",
            "fifo",
        ],
        AT_ONCE,
    )
    .failure();
    run.stderr_has(&format!(
        "{}: is a FIFO (named pipe), not a regular file",
        placements.display()
    ));
    run.no_table();

    let pipe = fifo(&dir.path().join("pipe"));
    let pipe = path_arg(&pipe);
    for args in [
        vec!["--trace", pipe.as_str()],
        vec!["--throughputs", pipe.as_str()],
        vec!["--cluster-file", pipe.as_str()],
        vec!["--topology", pipe.as_str()],
        vec!["--gittins-distribution", pipe.as_str()],
        // Not /dev/zero, which was read until memory ran out: were the check lost, this test
        // must fail, not fill the machine's memory.
        vec!["--trace", "/dev/null"],
    ] {
        let run = gangway(
            &[&["simulate", "--policy", "fifo"][..], &args[..]].concat(),
            AT_ONCE,
        )
        .failure();
        let what = match args[1] {
            "/dev/null" => "/dev/null: is a character device, not a regular file".to_owned(),
            path => format!("{path}: is a FIFO (named pipe), not a regular file"),
        };
        run.stderr_has(&what);
    }
}

/// The same FIFO hung `gangway serve --goodput-profiles` before it listened.
#[test]
fn serve_refuses_a_fifo_among_its_goodput_profiles_at_once() {
    let dir = tempdir();
    elastic_workload(dir.path(), &[]);
    let profiles = dir.path().join("profiles");
    let validation = profiles.join("cifar10/validation-64.csv");
    std::fs::remove_file(&validation).unwrap();
    fifo(&validation);
    let run = serve_refused(
        dir.path(),
        &[
            "--goodput-profiles",
            &path_arg(&profiles),
            "--fake-gpus",
            "2",
        ],
    );
    run.stderr_has(&format!(
        "{}: is a FIFO (named pipe), not a regular file",
        validation.display()
    ));
}

/// `serve --workers processes` runs every job through `elastic-run`, as the job's user (root, for
/// root's jobs): it refuses one another user could change, and one that does not speak its
/// hand-over (an `elastic-run` older than the daemon ignored the job's directory and ran it in `/`).
#[test]
fn serve_refuses_an_elastic_run_another_user_could_change_or_of_another_hand_over() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let refused = |elastic_run: &Path| {
        serve_refused(
            dir.path(),
            &[
                "--fake-gpus",
                "1",
                "--workers",
                "processes",
                "--elastic-run",
                &path_arg(elastic_run),
            ],
        )
    };
    let fake = dir.path().join("elastic-run");
    std::fs::write(&fake, "#!/bin/sh\nexit 2\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    refused(&fake).stderr_has(&format!(
        "{}: does not say which hand-over it speaks (it is older than this gangway): install \
         the elastic-run built with this gangway",
        fake.display()
    ));
    std::fs::write(&fake, "#!/bin/sh\necho 999\n").unwrap();
    refused(&fake).stderr_has(&format!(
        "{}: speaks hand-over 999, this gangway {}",
        fake.display(),
        gangway::launcher::inherit::HANDOVER
    ));
    // The right hand-over, in a directory anyone may write to (not sticky, as /tmp is).
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let fake = open.join("elastic-run");
    support::stand_in_elastic_run(&fake, "#!/bin/sh\nexit 0\n");
    refused(&fake).stderr_has(&format!(
        "{}: the directory {} is writable by everyone (mode 777): they could change what runs; \
         it runs every job",
        fake.display(),
        open.display()
    ));
}

/// Durations or steps of 1e300 (or 1e23) were accepted in every trace format; the job never ran,
/// the warning said it needed more GPUs than the cluster had, and the exit code was 0.
#[test]
fn durations_and_steps_past_any_real_job_are_refused_at_their_row() {
    let dir = tempdir();
    let synergy_profiles = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/synergy_profiles_small.json"
    );
    for huge in ["1e300", "1e23"] {
        for (name, text, extra, says) in [
            (
                "gavel.csv",
                format!(
                    "job_id,arrival_unit,job_type,scale_factor,duration_s_on_v100,total_steps\n\
                     0,0,ResNet-18 (batch size 64),1,100,1000\n\
                     1,1,ResNet-18 (batch size 64),1,100,{huge}\n"
                ),
                vec!["--rate", "1"],
                format!(
                    ":3: field `total_steps`: {huge} is out of range: must be at least 0 steps and at most 1e12 steps"
                ),
            ),
            (
                "philly.csv",
                format!(
                    "timestamp,duration,num_gpus,gpu_time,cluster\n\
                     2017-10-09 07:01:55,{huge},1,66.0,a\n\
                     2017-10-09 07:02:55,100,1,66.0,a\n"
                ),
                vec![],
                format!(
                    ":2: field `duration`: {huge} is out of range: must be at least 0 seconds and at most 1e9 seconds"
                ),
            ),
            (
                "tiresias.csv",
                format!(
                    "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n\
                     0,1,0,606,vgg19,164,30\n\
                     1,1,30,133,vgg11,{huge},23\n"
                ),
                vec![],
                format!(":3: field `duration`: {huge} is out of range"),
            ),
            (
                "synergy.log",
                format!("0,alexnet,0,100,1\n1,alexnet,10,{huge},1\n"),
                vec!["--profiles", synergy_profiles],
                format!(":2: field `iterations`: {huge} is out of range"),
            ),
        ] {
            let path = write(dir.path(), name, &text);
            let trace = path_arg(&path);
            let args = [
                &["--trace", trace.as_str(), "--policy", "fifo", "--no-ftf"][..],
                &extra[..],
            ]
            .concat();
            let run = simulate(&args).failure();
            run.stderr_has(&format!("{}{says}", path.display()));
            run.no_table();
        }
    }
}

/// `--round 1e300` was accepted and printed 300-digit JCTs; the other numbers of the command line
/// had no upper bound either.
#[test]
fn every_number_option_is_range_checked() {
    for (args, says) in [
        (
            vec!["--round", "1e300"],
            "--round must be at least 1 second and at most 86400 seconds (got 1e300)",
        ),
        (
            vec!["--preempt-cost", "1e300"],
            "--preempt-cost must be at least 0 seconds and at most 86400 seconds (got 1e300)",
        ),
        (
            vec!["--restore-cost", "nan"],
            "--restore-cost must be at least 0 seconds",
        ),
        (
            vec!["--migrate-cost", "-1"],
            "--migrate-cost must be at least 0 seconds",
        ),
        (
            vec!["--rate", "1e300"],
            "--rate must be more than 0 jobs per hour and at most 1000000 jobs per hour (got 1e300)",
        ),
        (
            vec!["--load-factor", "1e300"],
            "--load-factor must be more than 0 and at most 1000000 (got 1e300)",
        ),
    ] {
        let run = simulate(&[&args[..], &["--policy", "fifo", "--no-ftf"]].concat()).failure();
        run.stderr_has(says);
        run.no_table();
    }
    let dir = tempdir();
    for (option, says) in [
        (
            "--round",
            "--round must be at least 1 second and at most 86400 seconds (got 1e300)",
        ),
        (
            "--time-scale",
            "--time-scale must be more than 0 and at most 1000000 (got 1e300)",
        ),
        ("--memory-gb", "memory_gb = 1e300 is out of range"),
    ] {
        let run = serve_refused(dir.path(), &["--fake-gpus", "1", option, "1e300"]);
        run.stderr_has(says);
    }
}

/// A profile row with `step_time=0` loaded, then every submission of the application got a 422
/// about rates; a `local_bsz` of 1e20 left an elastic job waiting for ever with every GPU free.
#[test]
fn profile_step_times_and_batches_are_range_checked_at_their_row() {
    for (placements, says) in [
        (
            "1,64,0,0.0",
            ":2: field `step_time`: 0 is out of range: must be more than 0 seconds and at most 86400 seconds",
        ),
        (
            "1,1e20,0.1,0.0",
            ":2: field `local_bsz`: 1e20 is out of range: must be at least 1 sample and at most 16777216 samples",
        ),
    ] {
        let dir = tempdir();
        let workload = elastic_workload(dir.path(), &[]);
        let file = dir.path().join("profiles/cifar10/placements.csv");
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, text.replace("1,64,0.1,0.0", placements)).unwrap();
        let run = simulate(&["--trace", &path_arg(&workload), "--policy", "pollux"]).failure();
        run.stderr_has(&format!("{}{says}", file.display()));
        run.no_table();
    }
    // A workload's own batch past any real one.
    let dir = tempdir();
    let workload = elastic_workload(dir.path(), &[]);
    let text = std::fs::read_to_string(&workload).unwrap();
    std::fs::write(&workload, text.replace(",1,64\n", ",1,100000000\n")).unwrap();
    simulate(&["--trace", &path_arg(&workload), "--policy", "fifo"])
        .failure()
        .stderr_has(&format!(
            "{}:2: field `batch_size`: 100000000 is out of range",
            workload.display()
        ));
}

/// A job that could never run was a warning ("needs more GPUs of one type than the cluster has",
/// whatever the cause) and the run exited 0; it is the trace's error, at the job's line, on the
/// cluster chosen after the trace was read.
#[test]
fn a_job_that_can_never_run_is_an_error_at_its_line() {
    let dir = tempdir();
    let gavel = write(
        dir.path(),
        "gavel.csv",
        "job_id,arrival_unit,job_type,scale_factor,duration_s_on_v100,total_steps\n\
         0,0,ResNet-18 (batch size 64),1,100,1000\n\
         1,0,ResNet-18 (batch size 64),8,100,1000\n\
         2,0,ResNet-18 (batch size 64),1,100,1e11\n",
    );
    let trace = path_arg(&gavel);
    let run = simulate(&[
        "--trace",
        &trace,
        "--rate",
        "1",
        "--cluster",
        "v100=4",
        "--policy",
        "fifo",
        "--no-ftf",
    ])
    .failure();
    run.stderr_has(&format!(
        "{}:3: field `scale_factor`: job 1 can never run on this cluster (4 v100 (4x1)): no GPU type has 8 GPUs (the largest has 4)",
        gavel.display()
    ));
    run.no_table();
    // On a cluster with room, the next: steps that would take past the longest job.
    simulate(&[
        "--trace",
        &trace,
        "--rate",
        "1",
        "--cluster",
        "v100=8",
        "--policy",
        "fifo",
        "--no-ftf",
    ])
    .failure()
    .stderr_has(&format!(
        "{}:4: field `total_steps`: job 2 can never run on this cluster",
        gavel.display()
    ))
    .stderr_has("longer than the 1e9 s (about 30 years) a job may take");
    // Philly's rows carry no id: the line follows the job through its renumbering by arrival.
    let philly = write(
        dir.path(),
        "philly.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n\
         2017-10-09 07:01:55,100,64,66.0,a\n\
         2017-10-09 06:01:55,100,1,66.0,a\n",
    );
    let run = simulate(&[
        "--trace",
        &path_arg(&philly),
        "--policy",
        "fifo",
        "--no-ftf",
    ])
    .failure();
    run.stderr_has(&format!(
        "{}:2: field `num_gpus`: job 1 can never run on this cluster",
        philly.display()
    ));
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
}

/// `serve --tenants FILE` refuses a bad row before it starts, naming the file, the line and the
/// field: an account that does not exist, a tenant name with a control character, a file without
/// its header.
#[test]
fn serve_refuses_a_bad_tenants_file_naming_the_line_and_field() {
    let dir = tempdir();
    for (text, says) in [
        (
            "user,tenant\nroot,team-a\nno-such-account-here,team-b\n",
            ":3: field `user`: no account is named `no-such-account-here`",
        ),
        (
            "user,tenant\n0,\"team\u{1b}[31m\"\n",
            ":2: field `tenant`: must not contain control characters",
        ),
        ("name,team\nroot,team-a\n", ": needs a `user,tenant` header"),
    ] {
        let file = dir.path().join("tenants.csv");
        std::fs::write(&file, text).unwrap();
        let run = serve_refused(
            dir.path(),
            &["--tenants", &path_arg(&file), "--fake-gpus", "1"],
        );
        run.stderr_has(&format!("{}{says}", file.display()));
    }
}
