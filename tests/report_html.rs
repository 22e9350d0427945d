//! End-to-end tests of `report.html`, the page `gangway simulate --out DIR` writes: a row per policy
//! with the figures of summary.json, every picture inline, nothing to fetch, and the user's input
//! escaped.

use std::path::Path;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

/// A small, fast synthetic scenario.
const SYNTHETIC: &str = "synthetic:jobs=200,seed=1,rate=4";
const SMALL_CLUSTER: &str = "v100=8,k80=8";
/// Two queue policies and one that resizes jobs (Gandiva growing into idle GPUs), none needing an LP
/// solver.
const POLICIES: &str = "fifo,tiresias,gandiva:grow=1";

/// Runs `gangway simulate ARGS`, killed after two minutes (a hang then fails the test), and panics
/// unless it succeeded.
fn simulate(args: &[&str]) {
    let output = Command::cargo_bin("gangway")
        .expect("the gangway binary is built")
        .arg("simulate")
        .args(args)
        .env_remove("RUST_LOG")
        .timeout(Duration::from_secs(120))
        .output()
        .expect("gangway ran");
    assert!(
        output.status.success(),
        "gangway simulate {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text of each cell of the row `<tr data-policy="POLICY">`, which must be there exactly once.
fn row_cells(page: &str, policy: &str) -> Vec<String> {
    let marker = format!("<tr data-policy=\"{policy}\">");
    assert_eq!(page.matches(&marker).count(), 1, "{marker} once");
    let start = page.find(&marker).unwrap() + marker.len();
    let row = &page[start..start + page[start..].find("</tr>").expect("the row ends")];
    // A cell's text runs from its opening tag to its closing one; what follows the last is no cell.
    let pieces: Vec<&str> = row.split("</t").collect();
    pieces[..pieces.len() - 1]
        .iter()
        .map(|piece| piece.rsplit_once('>').expect("a cell").1.to_owned())
        .collect()
}

/// Asserts that `cell` is `value` as rounded to the cell's own number of decimals (`-`: no value;
/// `%`: a share shown in percent).
fn assert_shows(cell: &str, value: &Value, what: &str) {
    if value.is_null() {
        assert_eq!(cell, "-", "{what}");
        return;
    }
    let value = value.as_f64().unwrap_or_else(|| panic!("{what}: {value}"));
    let (text, value) = match cell.strip_suffix('%') {
        Some(text) => (text, value * 100.0),
        None => (cell, value),
    };
    let shown: f64 = text
        .parse()
        .unwrap_or_else(|e| panic!("{what}: `{cell}`: {e}"));
    let decimals = text.split_once('.').map_or(0, |(_, d)| d.len()) as i32;
    assert!(
        (shown - value).abs() <= 0.5 * 10f64.powi(-decimals) + 1e-9,
        "{what}: the page shows {cell}, summary.json has {value}"
    );
}

#[test]
fn the_page_has_a_row_per_policy_with_the_summarys_figures_and_every_picture_inline() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    simulate(&[
        "--trace",
        SYNTHETIC,
        "--cluster",
        SMALL_CLUSTER,
        "--policy",
        POLICIES,
        "--out",
        out.to_str().unwrap(),
    ]);
    let page = read(&out.join("report.html"));
    assert!(page.starts_with("<!DOCTYPE html>"), "{}", &page[..100]);

    let summaries: Vec<Value> =
        serde_json::from_str(&read(&out.join("summary.json"))).expect("summary.json parses");
    let names: Vec<&str> = summaries
        .iter()
        .map(|s| s["policy"].as_str().unwrap())
        .collect();
    assert_eq!(names.join(","), POLICIES);
    assert_eq!(page.matches("<tr data-policy=").count(), names.len());
    for summary in &summaries {
        let policy = summary["policy"].as_str().unwrap();
        let cells = row_cells(&page, policy);
        assert_eq!(cells.len(), 16, "{policy}: {cells:?}");
        assert_eq!(cells[0], policy);
        assert_eq!(cells[1], summary["jobs"].to_string(), "{policy}: jobs");
        // "N" or "N (+M unfinished)".
        let measured = match summary["unfinished_jobs"].as_u64().unwrap() {
            0 => summary["measured_jobs"].to_string(),
            m => format!("{} (+{m} unfinished)", summary["measured_jobs"]),
        };
        assert_eq!(cells[2], measured, "{policy}: measured");
        let keys = [
            "avg_jct_h",
            "p50_jct_h",
            "p95_jct_h",
            "p99_jct_h",
            "makespan_h",
            "avg_queue_h",
            "avg_ftf",
            "max_ftf",
            "ftf_over_1",
            "utilization",
            "preemptions",
            "migrations",
            "wall_s",
        ];
        for (cell, key) in cells[3..].iter().zip(keys) {
            assert_shows(cell, &summary[key], &format!("{policy}: {key}"));
        }
    }

    // Every picture written beside the page is in it, the same drawing, inline.
    let mut files = vec!["jct_cdf.svg", "utilization.svg", "comparison.svg"];
    let gpus: Vec<String> = names.iter().map(|p| format!("gpus_{p}.svg")).collect();
    files.extend(gpus.iter().map(String::as_str));
    for file in &files {
        let svg = read(&out.join(file));
        let figure = format!("<figure data-chart=\"{file}\">\n<svg");
        assert!(page.contains(&figure), "{file} is not inline");
        assert!(
            page.contains(svg.trim()),
            "the page's {file} is not the file's"
        );
    }
    assert_eq!(page.matches("<svg").count(), files.len());
    assert!(!page.contains("plots</code> feature"));

    // Nothing to fetch: the only address is the SVG namespace, which names and fetches nothing.
    let rest = page.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for needle in [
        "http://", "https://", "<script", "<link", "<img", "@import", "url(",
    ] {
        assert!(!rest.contains(needle), "the page has {needle}");
    }
    assert!(page.contains("@media print"));
}

#[test]
fn the_page_escapes_a_hostile_trace_path_and_lists_the_policies_knobs() {
    let dir = tempfile::tempdir().unwrap();
    // A path that reads `.../<script>alert(1)</script>.csv`: a folder and a file, the slash between.
    let folder = dir.path().join("<script>alert(1)<");
    std::fs::create_dir(&folder).unwrap();
    let trace = folder.join("script>.csv");
    std::fs::write(
        &trace,
        "job_id,arrival_unit,job_type,scale_factor,duration_s_on_v100,total_steps\n\
         0,0.0,ResNet-18 (batch size 64),1,3600.0,86400.0\n\
         1,0.5,ResNet-18 (batch size 64),2,3600.0,86400.0\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    simulate(&[
        "--trace",
        trace.to_str().unwrap(),
        "--rate",
        "1",
        "--cluster",
        SMALL_CLUSTER,
        "--policy",
        "fifo,tiresias:promote=5",
        "--no-ftf",
        "--out",
        out.to_str().unwrap(),
    ]);
    let page = read(&out.join("report.html"));
    assert!(!page.contains("<script"), "the trace's path went in raw");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;.csv (2 jobs)"),
        "the trace's path is not on the page escaped"
    );
    // Every knob in effect, the given one and the default.
    assert!(page.contains("<td>tiresias:promote=5 (promote=5, queue_scale=1)</td>"));
    assert!(page.contains("<tr data-policy=\"tiresias:promote=5\">"));
    assert!(page.contains("<td>skipped</td>"), "--no-ftf is not listed");
}
