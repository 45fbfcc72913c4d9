//! PNG plots of a report, drawn with `plotters` (one line per mode):
//!
//! * `throughput.png` — events/s over time (per ~1 s sample);
//! * `latency_cdf.png` — the per-event latency distribution: latency on a
//!   log scale against the percentile on a scale of nines (p90, p99,
//!   p99.9 … equally spaced), so the tail shows;
//! * `tier_sizes.png` — MB in L1 and L2, moved to L3, and the process's
//!   resident set, over time (the tiered modes).
//!
//! Text needs a TrueType font: DejaVu Sans (Debian `fonts-dejavu-core`,
//! installed by `scripts/setup.sh`) or the file `STRATA_BENCH_FONT` names.

use crate::backends::BenchError;
use crate::runner::ModeReport;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

const SIZE: (u32, u32) = (1000, 600);

/// Registers the font the plots' text uses (once per process).
pub fn register_font() -> Result<(), BenchError> {
    let path = std::env::var("STRATA_BENCH_FONT")
        .ok()
        .or_else(|| FONTS.iter().find(|p| Path::new(p).exists()).map(|p| p.to_string()))
        .ok_or("no font for the plots: install fonts-dejavu-core (scripts/setup.sh does) or set STRATA_BENCH_FONT to a .ttf file")?;
    let bytes = std::fs::read(&path).map_err(|e| format!("font {path}: {e}"))?;
    plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(bytes.into_boxed_slice()),
    )
    .map_err(|_| format!("font {path} is not a TrueType font"))?;
    Ok(())
}

/// A figure of a sample.
type Gauge = fn(&crate::timeline::Sample) -> u64;

/// One named line: (x, y) points.
type Series = (String, Vec<(f64, f64)>);

/// A plot written: its file name in the report directory and its title.
pub struct Plot {
    /// File name.
    pub file: &'static str,
    /// What it shows.
    pub title: &'static str,
}

/// Draws the plots of `modes` into `out` (those with data); returns them.
pub fn draw(out: &Path, modes: &BTreeMap<&str, &ModeReport>) -> Result<Vec<Plot>, BenchError> {
    let mut written = Vec::new();
    let charts = [
        (
            "throughput.png",
            "Throughput",
            "seconds",
            "events/s",
            throughput(modes),
            false,
        ),
        (
            "latency_cdf.png",
            "Per-event latency",
            "µs (log scale)",
            "percentile",
            latency(modes),
            true,
        ),
        (
            "tier_sizes.png",
            "Bytes per tier, and resident set",
            "seconds",
            "MB",
            tier_sizes(modes),
            false,
        ),
    ];
    for (file, title, x, y, series, log_x) in charts {
        if series.iter().all(|(_, points)| points.is_empty()) {
            continue;
        }
        chart(&out.join(file), title, (x, y), &series, log_x)?;
        written.push(Plot { file, title });
    }
    Ok(written)
}

fn throughput(modes: &BTreeMap<&str, &ModeReport>) -> Vec<Series> {
    modes
        .iter()
        .map(|(name, m)| {
            let points = m
                .timeline
                .windows(2)
                .filter(|w| w[1].secs > w[0].secs)
                .map(|w| {
                    (
                        w[1].secs,
                        (w[1].events - w[0].events) as f64 / (w[1].secs - w[0].secs),
                    )
                })
                .collect();
            (name.to_string(), points)
        })
        .collect()
}

fn latency(modes: &BTreeMap<&str, &ModeReport>) -> Vec<Series> {
    modes
        .iter()
        .map(|(name, m)| {
            let points = m
                .latency_cdf
                .iter()
                .filter(|&&(q, _)| q < 1.0)
                .map(|&(q, us)| (us.max(0.001), nines(q)))
                .collect();
            (name.to_string(), points)
        })
        .collect()
}

fn tier_sizes(modes: &BTreeMap<&str, &ModeReport>) -> Vec<Series> {
    let tiers: [(&str, Gauge); 4] = [
        ("L1", |s| s.l1_bytes),
        ("L2", |s| s.l2_bytes),
        ("moved to L3", |s| s.l3_bytes),
        ("RSS", |s| s.rss_bytes),
    ];
    let mut series = Vec::new();
    for (name, m) in modes.iter().filter(|(_, m)| m.l1_bytes.is_some()) {
        for (tier, bytes) in tiers {
            if tier == "moved to L3" && m.l3_bytes.is_none() {
                continue;
            }
            let points = m
                .timeline
                .iter()
                .map(|s| (s.secs, bytes(s) as f64 / 1e6))
                .collect();
            series.push((format!("{name} {tier}"), points));
        }
    }
    series
}

/// Quantile `q` as its number of nines: 0.9 → 1, 0.99 → 2.
fn nines(q: f64) -> f64 {
    -(1.0 - q).log10()
}

/// The percentile a number of nines stands for, as a label.
fn percentile_label(n: &f64) -> String {
    let p = 100.0 * (1.0 - 10f64.powf(-n));
    let digits = (n.ceil() as usize).saturating_sub(2);
    format!("p{p:.digits$}")
}

/// The extent of the points: (min x, max x, max y).
fn extent(series: &[Series]) -> (f64, f64, f64) {
    let all = series.iter().flat_map(|(_, p)| p.iter());
    all.fold((f64::MAX, 0.0_f64, 0.0_f64), |(lo, hi, top), &(x, y)| {
        (lo.min(x), hi.max(x), top.max(y))
    })
}

fn chart(
    path: &Path,
    title: &str,
    (x_label, y_label): (&str, &str),
    series: &[Series],
    log_x: bool,
) -> Result<(), BenchError> {
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (lo, hi, top) = extent(series);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 26))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80);
    if log_x {
        let y = 0.0..(top / 1.1).ceil().max(1.0);
        let mut c =
            builder.build_cartesian_2d((lo.max(0.001)..hi.max(lo * 10.0)).log_scale(), y)?;
        c.configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .y_labels(8)
            .y_label_formatter(&percentile_label)
            .draw()?;
        lines(&mut c, series)?;
    } else {
        let mut c = builder.build_cartesian_2d(0.0..hi.max(1.0), 0.0..top)?;
        c.configure_mesh().x_desc(x_label).y_desc(y_label).draw()?;
        lines(&mut c, series)?;
    }
    root.present()?;
    Ok(())
}

fn lines<'a, X, Y>(
    c: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
    series: &[Series],
) -> Result<(), BenchError>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        c.draw_series(LineSeries::new(
            points.iter().copied(),
            color.stroke_width(2),
        ))?
        .label(name.as_str())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
