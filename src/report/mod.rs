//! Reports of simulation results: a table for people, JSON and CSV for programs, SVG plots, and one
//! HTML page that holds them all ([`html`]).

pub mod html;

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use gangway_core::engine::Change;
use gangway_core::metrics::{JobRecord, Summary};
use gangway_core::sim::SimResult;
use gangway_core::throughput::goodput::BatchPlan;

pub use html::Parameters;

/// One SVG picture of a run, drawn once: written to its own file and inlined in `report.html`.
#[derive(Clone, Debug)]
pub struct Picture {
    /// The file name it is written to, such as `jct_cdf.svg`.
    pub file: String,
    /// The one policy it shows, or `None` for a picture of every policy.
    pub policy: Option<String>,
    /// The SVG document, starting with `<svg`.
    pub svg: String,
}

/// How results are printed: a table for people, or JSON for programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Fixed-width columns for a terminal.
    Table,
    /// JSON, for programs.
    Json,
}

/// The comparison's column headers, as [`table`] and the HTML report show them.
pub const COLUMNS: [&str; 16] = [
    "policy",
    "jobs",
    "measured",
    "avg JCT h",
    "p50 h",
    "p95 h",
    "p99 h",
    "makespan h",
    "queue h",
    "avg rho",
    "max rho",
    "rho>1",
    "util",
    "preempt",
    "migrate",
    "wall s",
];

/// One policy's row of the comparison, a cell per [`COLUMNS`] entry, rounded as people read it.
pub fn cells(s: &Summary) -> [String; COLUMNS.len()] {
    let opt = |x: Option<f64>, digits: usize| x.map_or("-".to_owned(), |v| format!("{v:.digits$}"));
    let mut measured = s.measured_jobs.to_string();
    if s.unfinished_jobs > 0 {
        let _ = write!(measured, " (+{} unfinished)", s.unfinished_jobs);
    }
    [
        s.policy.clone(),
        s.jobs.to_string(),
        measured,
        format!("{:.2}", s.avg_jct_h),
        format!("{:.2}", s.p50_jct_h),
        format!("{:.2}", s.p95_jct_h),
        format!("{:.2}", s.p99_jct_h),
        format!("{:.1}", s.makespan_h),
        format!("{:.2}", s.avg_queue_h),
        opt(s.avg_ftf, 2),
        opt(s.max_ftf, 2),
        s.ftf_over_1
            .map_or("-".to_owned(), |x| format!("{:.0}%", x * 100.0)),
        format!("{:.0}%", s.utilization * 100.0),
        s.preemptions.to_string(),
        s.migrations.to_string(),
        format!("{:.2}", s.wall_s),
    ]
}

/// A fixed-width comparison table, one row per policy.
pub fn table(summaries: &[Summary]) -> String {
    let rows: Vec<[String; COLUMNS.len()]> = summaries.iter().map(cells).collect();
    let mut widths: Vec<usize> = COLUMNS.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let line = |cells: &[&str], out: &mut String| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i == 0 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(&COLUMNS, &mut out);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    line(
        &rule.iter().map(String::as_str).collect::<Vec<_>>(),
        &mut out,
    );
    for row in &rows {
        line(
            &row.iter().map(String::as_str).collect::<Vec<_>>(),
            &mut out,
        );
    }
    out
}

/// Writes into `dir`: per-job CSVs (`jobs_POLICY.csv`, and `allocations_POLICY.csv` for runs that
/// logged their allocations), `summary.json`, with the `plots` feature the SVG pictures, and
/// `report.html`, one page with `parameters`, the comparison and the pictures.
pub fn write_outputs(
    dir: &Path,
    results: &[(SimResult, Summary)],
    parameters: &Parameters,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (result, summary) in results {
        let path = dir.join(format!("jobs_{}.csv", summary.policy));
        write_records(&path, &result.records, &result.gpu_types)
            .with_context(|| format!("writing {}", path.display()))?;
        if !result.changes.is_empty() {
            let path = dir.join(format!("allocations_{}.csv", summary.policy));
            write_allocations(&path, &result.changes, &result.gpu_types)
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    let summaries: Vec<&Summary> = results.iter().map(|(_, s)| s).collect();
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write(
        "summary.json",
        &(serde_json::to_string_pretty(&summaries)? + "\n"),
    )?;
    #[cfg(feature = "plots")]
    let pictures = Some(crate::plots::draw(results)?);
    #[cfg(not(feature = "plots"))]
    let pictures: Option<Vec<Picture>> = None;
    for picture in pictures.iter().flatten() {
        write(&picture.file, &picture.svg)?;
    }
    write(
        "report.html",
        &html::render(parameters, &summaries, pictures.as_deref()),
    )
}

/// Every start, stop and change of pace in place, in time order: how many GPUs of which type each job
/// held, with which batch, CPUs and memory, over time.
fn write_allocations(path: &Path, changes: &[(f64, Change)], gpu_types: &[String]) -> Result<()> {
    let mut w = csv::Writer::from_path(path)?;
    w.write_record([
        "time_s",
        "job_id",
        "event",
        "gpu_type",
        "gpus",
        "gpu_ids",
        "global_batch",
        "local_batch",
        "accum_steps",
        "steps_per_second",
        "steps_done",
        "cpus",
        "memory_gb",
    ])?;
    let batch_columns = |batch: &Option<BatchPlan>, gpus: usize| match batch {
        Some(plan) => [
            plan.global(gpus as u32).to_string(),
            plan.local.to_string(),
            plan.accum.to_string(),
        ],
        None => Default::default(),
    };
    for (time, change) in changes {
        let row: Vec<String> = match change {
            Change::Started {
                job,
                gpu_type,
                gpus,
                steps_per_second,
                batch,
                resources,
                ..
            } => {
                let ids: Vec<String> = gpus.iter().map(|g| g.0.to_string()).collect();
                let [global, local, accum] = batch_columns(batch, gpus.len());
                vec![
                    format!("{time:.3}"),
                    job.to_string(),
                    "start".into(),
                    gpu_types[gpu_type.0 as usize].clone(),
                    gpus.len().to_string(),
                    ids.join("-"),
                    global,
                    local,
                    accum,
                    format!("{steps_per_second:.6}"),
                    String::new(),
                    format!("{:.3}", resources.cpus),
                    format!("{:.3}", resources.memory_gb),
                ]
            }
            Change::Stopped { job, steps_done } => vec![
                format!("{time:.3}"),
                job.to_string(),
                "stop".into(),
                String::new(),
                "0".into(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                format!("{steps_done:.3}"),
                String::new(),
                String::new(),
            ],
            Change::Retuned {
                job,
                steps_per_second,
                batch,
                resources,
                ..
            } => {
                // The GPU count is unchanged; the batch columns give the new plan's split.
                let [_, local, accum] = batch_columns(batch, 0);
                vec![
                    format!("{time:.3}"),
                    job.to_string(),
                    "retune".into(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    local,
                    accum,
                    format!("{steps_per_second:.6}"),
                    String::new(),
                    format!("{:.3}", resources.cpus),
                    format!("{:.3}", resources.memory_gb),
                ]
            }
        };
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}

fn write_records(path: &Path, records: &[JobRecord], gpu_types: &[String]) -> Result<()> {
    let mut w = csv::Writer::from_path(path)?;
    let mut header = vec![
        "job_id".to_owned(),
        "job_type".into(),
        "gpus".into(),
        "arrival_s".into(),
        "first_start_s".into(),
        "finish_s".into(),
        "jct_s".into(),
        "preemptions".into(),
        "migrations".into(),
    ];
    header.extend(gpu_types.iter().map(|t| format!("gpu_s_{t}")));
    w.write_record(&header)?;
    let opt = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.3}"));
    for r in records {
        let mut row = vec![
            r.id.to_string(),
            r.job_type.to_string(),
            r.gpus.to_string(),
            format!("{:.3}", r.arrival),
            opt(r.first_start),
            opt(r.finish),
            opt(r.jct()),
            r.preemptions.to_string(),
            r.migrations.to_string(),
        ];
        row.extend(r.gpu_seconds.iter().map(|s| format!("{s:.3}")));
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}
