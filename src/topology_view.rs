//! A picture of one server's GPUs: GPUs on a circle, each pair joined by a line whose colour is the path
//! kind (NVLink, PCIe, across sockets) and whose width grows with bandwidth.

use std::path::Path;

use anyhow::Result;
use plotters::prelude::*;

use gangway_topology::topology::Topology;

/// Draws server `host`'s GPUs and the links between them as an SVG picture at `path`.
pub fn write_svg(path: &Path, topology: &Topology, host: usize) -> Result<()> {
    let h = &topology.hosts[host];
    let n = h.num_gpus;
    let root = SVGBackend::new(path, (640, 640)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("drawing {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    root.draw(&Text::new(
        format!("{} ({})", h.name, topology.designs[h.design].name),
        (20, 20),
        ("sans-serif", 22).into_font(),
    ))
    .map_err(err)?;
    let centre = (320.0, 340.0);
    let radius = 220.0;
    let at = |i: usize| {
        let angle = std::f64::consts::TAU * i as f64 / n as f64 - std::f64::consts::FRAC_PI_2;
        (
            (centre.0 + radius * angle.cos()) as i32,
            (centre.1 + radius * angle.sin()) as i32,
        )
    };
    let top = h
        .intra
        .iter()
        .copied()
        .filter(|b| b.is_finite())
        .fold(1.0f64, f64::max);
    // Slow paths first, so that fast links are drawn on top.
    let mut pairs: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .collect();
    pairs.sort_by(|a, b| h.intra[a.0 * n + a.1].total_cmp(&h.intra[b.0 * n + b.1]));
    for (i, j) in pairs {
        let kind = &h.path_kind[i * n + j];
        let color = if kind.starts_with("NV") {
            RGBColor(40, 160, 60)
        } else if kind == "SYS" {
            RGBColor(220, 80, 80)
        } else {
            RGBColor(70, 110, 220)
        };
        let width = (1.0 + 7.0 * h.intra[i * n + j] / top).round() as u32;
        root.draw(&PathElement::new(
            vec![at(i), at(j)],
            color.stroke_width(width),
        ))
        .map_err(err)?;
    }
    for i in 0..n {
        let (x, y) = at(i);
        root.draw(&Circle::new((x, y), 26, BLACK.filled()))
            .map_err(err)?;
        root.draw(&Text::new(
            format!("GPU{i}"),
            (x - 18, y - 7),
            ("sans-serif", 15).into_font().color(&WHITE),
        ))
        .map_err(err)?;
    }
    for (k, (label, color)) in [
        ("NVLink", RGBColor(40, 160, 60)),
        ("PCIe", RGBColor(70, 110, 220)),
        ("across sockets", RGBColor(220, 80, 80)),
    ]
    .into_iter()
    .enumerate()
    {
        let (x, y) = (20 + 200 * k as i32, 600);
        root.draw(&PathElement::new(
            vec![(x, y), (x + 30, y)],
            color.stroke_width(4),
        ))
        .map_err(err)?;
        root.draw(&Text::new(
            label,
            (x + 38, y - 7),
            ("sans-serif", 15).into_font(),
        ))
        .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
