//! The simulator's pictures (SVG, plotters): JCT CDF, utilization over time, a per-policy
//! comparison, and, for policies that resize jobs, the GPUs each job held over time.
//!
//! Each picture is drawn once, into a string: the report writes it to its own file and inlines the
//! same text in `report.html`.

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use gangway_core::engine::Change;
use gangway_core::metrics::Summary;
use gangway_core::sim::SimResult;

use crate::report::Picture;

type Chart<'a, X> =
    ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>;
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Draws the JCT CDF, utilization and comparison pictures, then the GPUs per job of each policy whose
/// run logged its allocations, in that order.
pub fn draw(results: &[(SimResult, Summary)]) -> Result<Vec<Picture>> {
    let summaries: Vec<&Summary> = results.iter().map(|(_, s)| s).collect();
    let picture = |file: String, policy: Option<&str>, svg: Result<String>| -> Result<Picture> {
        let svg = svg.map_err(|e| e.context(format!("drawing {file}")))?;
        let policy = policy.map(str::to_owned);
        Ok(Picture { file, policy, svg })
    };
    let mut pictures = vec![
        picture("jct_cdf.svg".into(), None, jct_cdf(results))?,
        picture("utilization.svg".into(), None, utilization(results))?,
        picture("comparison.svg".into(), None, comparison(&summaries))?,
    ];
    for (result, summary) in results {
        if !result.changes.is_empty() {
            pictures.push(picture(
                format!("gpus_{}.svg", summary.policy),
                Some(&summary.policy),
                gpus_per_job(result, &summary.policy),
            )?);
        }
    }
    Ok(pictures)
}

/// Draws the chart's legend at `position`, on a light box.
fn legend<X: Ranged<ValueType = f64>>(
    chart: &mut Chart<'_, X>,
    position: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(position)
        .draw()
        .map_err(plot_err)
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plotting failed: {e:?}")
}

/// An SVG of `size` pixels on white, drawn by `paint`.
fn svg(size: (u32, u32), paint: impl FnOnce(&Area<'_>) -> Result<()>) -> Result<String> {
    let mut text = String::new();
    {
        // The backend borrows `text` until it is dropped; `present` finishes the document.
        let root = SVGBackend::with_string(&mut text, size).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        paint(&root)?;
        root.present().map_err(plot_err)?;
    }
    Ok(text)
}

/// Draws one policy's line, with its legend entry.
fn line<X: Ranged<ValueType = f64>>(
    chart: &mut Chart<'_, X>,
    points: Vec<(f64, f64)>,
    name: &str,
    color: RGBAColor,
    width: u32,
) -> Result<()> {
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(width)))
        .map_err(plot_err)?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    Ok(())
}

/// A CDF of JCT (hours, log scale) per policy, over the measured window.
fn jct_cdf(results: &[(SimResult, Summary)]) -> Result<String> {
    let curves: Vec<(String, Vec<f64>)> = results
        .iter()
        .map(|(r, s)| {
            let mut jct: Vec<f64> = r
                .records
                .iter()
                .filter(|rec| r.window.contains(rec.id))
                .filter_map(|rec| rec.jct())
                .map(|x| (x / 3600.0).max(1e-3))
                .collect();
            jct.sort_by(f64::total_cmp);
            (s.policy.clone(), jct)
        })
        .collect();
    let lo = curves
        .iter()
        .filter_map(|c| c.1.first())
        .copied()
        .fold(f64::INFINITY, f64::min);
    let hi = curves
        .iter()
        .filter_map(|c| c.1.last())
        .copied()
        .fold(0.0, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo, hi)
    } else {
        (1e-3, 1.0)
    };
    svg((800, 500), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("JCT CDF", ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("job completion time (hours)")
            .y_desc("fraction of jobs")
            .draw()
            .map_err(plot_err)?;
        for (i, (name, jct)) in curves.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let n = jct.len().max(1) as f64;
            // At most ~2,000 points per curve (every job's step would make the SVG megabytes large).
            let stride = (jct.len() / 2000).max(1);
            let points = jct
                .iter()
                .enumerate()
                .filter(|(k, _)| k % stride == 0 || k + 1 == jct.len())
                .map(|(k, x)| (*x, (k + 1) as f64 / n))
                .collect();
            line(&mut chart, points, name, color, 2)?;
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    })
}

/// Busy GPUs over simulated time (hours), per policy.
fn utilization(results: &[(SimResult, Summary)]) -> Result<String> {
    let end = results
        .iter()
        .filter_map(|(r, _)| r.utilization.last().map(|s| s.0))
        .fold(0.0f64, f64::max)
        / 3600.0;
    let capacity = results.first().map_or(1, |(r, _)| r.capacity_gpus) as f64;
    svg((800, 500), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("Cluster utilization", ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..end.max(1e-3), 0.0..1.0)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("simulated time (hours)")
            .y_desc("busy GPUs / all GPUs")
            .draw()
            .map_err(plot_err)?;
        for (i, (r, s)) in results.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            // Step function, thinned to at most ~2000 points so that the SVG stays small.
            let stride = (r.utilization.len() / 2000).max(1);
            let mut points = Vec::new();
            let mut last = 0.0;
            for (k, &(t, busy)) in r.utilization.iter().enumerate() {
                if k % stride == 0 || k + 1 == r.utilization.len() {
                    points.push((t / 3600.0, last));
                    last = f64::from(busy) / capacity;
                    points.push((t / 3600.0, last));
                }
            }
            line(&mut chart, points, &s.policy, color, 1)?;
        }
        legend(&mut chart, SeriesLabelPosition::MiddleRight)?;
        Ok(())
    })
}

/// Average and p99 JCT per policy, side by side.
fn comparison(summaries: &[&Summary]) -> Result<String> {
    let top = summaries
        .iter()
        .map(|s| s.p99_jct_h.max(s.avg_jct_h))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.1;
    let n = summaries.len().max(1);
    svg((160 + 140 * n as u32, 500), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("JCT per policy", ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..top)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                match summaries.get(i as usize) {
                    Some(s) if (x - i).abs() < 1e-6 && i >= 0.0 => s.policy.clone(),
                    _ => String::new(),
                }
            })
            .y_desc("hours")
            .draw()
            .map_err(plot_err)?;
        // Two bars per policy: the average on the left of its slot, p99 on the right.
        for (k, (label, color)) in [("average JCT", BLUE.mix(0.7)), ("p99 JCT", RED.mix(0.5))]
            .into_iter()
            .enumerate()
        {
            let bars = summaries.iter().enumerate().map(|(i, s)| {
                let value = if k == 0 { s.avg_jct_h } else { s.p99_jct_h };
                let left = i as f64 - 0.4 + 0.4 * k as f64;
                Rectangle::new([(left, 0.0), (left + 0.38, value)], color.filled())
            });
            chart
                .draw_series(bars)
                .map_err(plot_err)?
                .label(label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        legend(&mut chart, SeriesLabelPosition::MiddleRight)?;
        Ok(())
    })
}

/// The width of a GPUs-per-job picture, in pixels.
const GPUS_WIDTH: u32 = 900;

/// Sorts the stretches `(job, from, to, GPUs)` and joins each job's stretches at one GPU count that are
/// less than `pixel` seconds apart: a gap that narrow does not show, and LAS, which stops and restarts
/// a job in the same instant every round, otherwise drew a rectangle per round (an SVG of 87 MB for the
/// bundled trace).
fn join_unseen_gaps(
    mut held: Vec<(u32, f64, f64, usize)>,
    pixel: f64,
) -> Vec<(u32, f64, f64, usize)> {
    held.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut joined: Vec<(u32, f64, f64, usize)> = Vec::with_capacity(held.len());
    for stretch in held {
        match joined.last_mut() {
            Some(last)
                if last.0 == stretch.0 && last.3 == stretch.3 && stretch.1 - last.2 < pixel =>
            {
                last.2 = last.2.max(stretch.2);
            }
            _ => joined.push(stretch),
        }
    }
    joined
}

/// The GPUs each job held over time: one row per job (in id order), shaded by how many it held.
fn gpus_per_job(result: &SimResult, policy: &str) -> Result<String> {
    // (job, from, to, GPUs) for every stretch a job held GPUs.
    let mut held = Vec::new();
    let mut open: std::collections::HashMap<u32, (f64, usize)> = std::collections::HashMap::new();
    let mut end = 0.0f64;
    for (time, change) in &result.changes {
        end = end.max(*time);
        match change {
            Change::Started { job, gpus, .. } => {
                if let Some((from, count)) = open.insert(job.0, (*time, gpus.len())) {
                    held.push((job.0, from, *time, count));
                }
            }
            Change::Stopped { job, .. } => {
                if let Some((from, count)) = open.remove(&job.0) {
                    held.push((job.0, from, *time, count));
                }
            }
            Change::Retuned { .. } => {}
        }
    }
    held.extend(
        open.into_iter()
            .map(|(job, (from, count))| (job, from, end, count)),
    );
    let held = join_unseen_gaps(held, end / f64::from(GPUS_WIDTH));
    let jobs = result.records.len().max(1) as f64;
    let most = held.iter().map(|h| h.3).max().unwrap_or(1).max(1);
    let hours = (end / 3600.0).max(1e-3);
    svg((GPUS_WIDTH, 600), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("GPUs per job over time ({policy})"),
                ("sans-serif", 22),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..hours, 0.0..jobs)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("simulated time (hours)")
            .y_desc("job (arrival order)")
            .draw()
            .map_err(plot_err)?;
        // Darker for more GPUs, on a log scale: one GPU is light, the most any job held is darkest.
        let shade = move |gpus: usize| {
            let level = ((gpus as f64).ln() / (most as f64).ln().max(1e-9)).clamp(0.0, 1.0);
            BLUE.mix(0.2 + 0.8 * level).filled()
        };
        chart
            .draw_series(held.iter().map(|&(job, from, to, gpus)| {
                let y = f64::from(job);
                Rectangle::new([(from / 3600.0, y), (to / 3600.0, y + 0.9)], shade(gpus))
            }))
            .map_err(plot_err)?;
        // A legend of the shades: 1, then powers of two up to the most held.
        let mut levels = vec![1usize];
        while levels.last().is_some_and(|&l| l * 2 <= most) {
            levels.push(levels.last().unwrap() * 2);
        }
        for gpus in levels {
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
                .map_err(plot_err)?
                .label(format!("{gpus} GPU{}", if gpus == 1 { "" } else { "s" }))
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], shade(gpus)));
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_stretches_join_across_gaps_narrower_than_a_pixel_at_one_gpu_count_only() {
        let held = vec![
            (2, 0.0, 10.0, 4),
            (1, 20.0, 30.0, 1),
            (1, 0.0, 10.0, 1),
            (1, 10.5, 15.0, 1), // half a pixel after the first: joined
            (1, 15.5, 18.0, 2), // another count: kept apart
            (2, 10.2, 12.0, 4), // another job's, close behind its own: joined
            (2, 14.0, 16.0, 4), // two pixels behind: kept apart
        ];
        assert_eq!(
            join_unseen_gaps(held, 1.0),
            vec![
                (1, 0.0, 15.0, 1),
                (1, 15.5, 18.0, 2),
                (1, 20.0, 30.0, 1),
                (2, 0.0, 12.0, 4),
                (2, 14.0, 16.0, 4),
            ]
        );
    }
}
