//! PNG plots of a report, drawn with `plotters` (one line per mode):
//!
//! * `throughput.png` — events/s over time (per ~1 s sample);
//! * `latency_cdf.png` — the per-event latency distribution: latency on a
//!   log scale against the percentile on a scale of nines (p90, p99,
//!   p99.9 … equally spaced), so the tail shows;
//! * `tier_sizes.png` — bytes in L1 and L2, moved to L3, and the process's
//!   resident set, over time (the tiered modes).
//!
//! Axes print SI units (1.2M, 500k); the legend sits in a panel right of
//! the chart, so it covers no line; a run too short for a throughput line
//! (the in-memory mode, say) is named there with its duration and does not
//! set the axis.
//!
//! Text needs a TrueType font: DejaVu Sans (Debian `fonts-dejavu-core`,
//! installed by `scripts/setup.sh`) or the file `STRATA_BENCH_FONT` names.

use crate::backends::BenchError;
use crate::runner::ModeReport;
use plotters::coord::ranged1d::ValueFormatter;
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
    let rates = throughput(modes);
    let rate_scale = if spread(&rates) > 5.0 {
        Scale::LogY
    } else {
        Scale::Linear
    };
    let charts = [
        (
            "throughput.png",
            "Throughput",
            "seconds",
            rate_scale.label("events/s"),
            rates,
            rate_scale,
        ),
        (
            "latency_cdf.png",
            "Per-event latency",
            "latency (log scale)",
            "percentile".to_owned(),
            latency(modes),
            Scale::LogX,
        ),
        (
            "tier_sizes.png",
            "Bytes per tier, and resident set",
            "seconds",
            "bytes".to_owned(),
            tier_sizes(modes),
            Scale::Linear,
        ),
    ];
    for (file, title, x, y, series, scale) in charts {
        if series.iter().all(|(_, points)| points.is_empty()) {
            continue;
        }
        let path = out.join(file);
        let root = BitMapBackend::new(&path, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let (chart_area, legend_area) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
        chart(&chart_area, title, (x, &y), &series, scale)?;
        legend(&legend_area, &series)?;
        root.present()?;
        written.push(Plot { file, title });
    }
    Ok(written)
}

/// Width of the legend panel right of each chart (it never covers a line).
const LEGEND_WIDTH: u32 = 260;

/// The legend: one entry per series, in its colour (a series without
/// points: its name alone, greyed).
fn legend(area: &Area<'_>, series: &[Series]) -> Result<(), BenchError> {
    let font = ("sans-serif", 16).into_font();
    for (i, (name, points)) in series.iter().enumerate() {
        let y = 60 + 24 * i as i32;
        if points.is_empty() {
            area.draw(&Text::new(
                name.clone(),
                (8, y - 8),
                font.clone().color(&BLACK.mix(0.6)),
            ))?;
            continue;
        }
        let color = colour(i);
        area.draw(&PathElement::new(
            vec![(8, y), (32, y)],
            color.stroke_width(3),
        ))?;
        area.draw(&Text::new(name.clone(), (40, y - 8), font.clone()))?;
    }
    Ok(())
}

/// `v` in SI units with at most 3 significant digits: 950, 1.2k, 35M, 1.5G.
fn si(v: &f64) -> String {
    let (v, sign) = (v.abs(), if *v < 0.0 { "-" } else { "" });
    let (scaled, unit) = [(1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(f, _)| v >= *f)
        .map_or((v, ""), |(f, u)| (v / f, u));
    let digits = if scaled >= 100.0 || scaled == scaled.trunc() {
        0
    } else {
        1
    };
    format!("{sign}{scaled:.digits$}{unit}")
}

/// A run shorter than this draws no throughput line (one or two samples)
/// when another run is long enough: the legend gives its duration instead,
/// and it does not set the axis.
const SHORTEST_DRAWN_SECS: f64 = 3.0;

/// Whether mode `m` is left out of the throughput chart: it is too short,
/// and some other mode is not.
fn left_out(modes: &BTreeMap<&str, &ModeReport>, m: &ModeReport) -> bool {
    duration(m) < SHORTEST_DRAWN_SECS && modes.values().any(|o| duration(o) >= SHORTEST_DRAWN_SECS)
}

/// Seconds from a run's start to its last sample.
fn duration(m: &ModeReport) -> f64 {
    m.timeline.last().map_or(0.0, |s| s.secs)
}

/// One series per mode (colours match the other charts); a mode left out
/// has no points and says why in its name.
fn throughput(modes: &BTreeMap<&str, &ModeReport>) -> Vec<Series> {
    modes
        .iter()
        .map(|(name, m)| {
            if m.timeline.is_empty() {
                let why =
                    format!("{name}: no timeline (the peer reports only its totals), not drawn");
                return (why, Vec::new());
            }
            if left_out(modes, m) {
                let why = format!("{name}: done in {:.1} s, not drawn", duration(m));
                return (why, Vec::new());
            }
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
    for (name, m) in modes {
        for (tier, bytes) in tiers {
            // Every mode has a resident set; only tiered ones have tiers.
            let has = match tier {
                "RSS" => true,
                "moved to L3" => m.l3_bytes.is_some(),
                _ => m.l1_bytes.is_some(),
            };
            if !has {
                continue;
            }
            let points = m
                .timeline
                .iter()
                .map(|s| (s.secs, bytes(s) as f64))
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

/// A duration in µs as a label in its own unit: 5 µs, 20 ms, 1.5 s.
fn micros_label(us: &f64) -> String {
    let (v, unit) = [(1e6, "s"), (1e3, "ms")]
        .into_iter()
        .find(|(f, _)| *us >= *f)
        .map_or((*us, "µs"), |(f, u)| (us / f, u));
    let digits = if v >= 10.0 || v == v.trunc() { 0 } else { 1 };
    format!("{v:.digits$} {unit}")
}

/// The extent of the points: (min x, max x, max y).
fn extent(series: &[Series]) -> (f64, f64, f64) {
    let all = series.iter().flat_map(|(_, p)| p.iter());
    all.fold((f64::MAX, 0.0_f64, 0.0_f64), |(lo, hi, top), &(x, y)| {
        (lo.min(x), hi.max(x), top.max(y))
    })
}

/// How a chart's axes are scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scale {
    Linear,
    /// Log x (latency), percentile y.
    LogX,
    /// Log y: rates an order of magnitude apart (a hash map against
    /// RocksDB) each keep a readable line.
    LogY,
}

impl Scale {
    fn label(self, what: &str) -> String {
        match self {
            Scale::LogY => format!("{what} (log scale)"),
            _ => what.to_owned(),
        }
    }
}

/// The median y of each series with points.
fn medians(series: &[Series]) -> Vec<f64> {
    series
        .iter()
        .filter(|(_, p)| !p.is_empty())
        .map(|(_, p)| {
            let mut ys: Vec<f64> = p.iter().map(|&(_, y)| y).collect();
            ys.sort_by(f64::total_cmp);
            ys[ys.len() / 2]
        })
        .collect()
}

/// The ratio of the largest to the smallest median y of the series with
/// points (1 if fewer than two).
fn spread(series: &[Series]) -> f64 {
    let medians = medians(series);
    let lo = medians.iter().copied().fold(f64::MAX, f64::min);
    let hi = medians.iter().copied().fold(0.0, f64::max);
    if medians.len() < 2 || lo <= 0.0 {
        1.0
    } else {
        hi / lo
    }
}

/// Colours that read on white (plotters' palettes start with a yellow).
const COLOURS: [RGBColor; 10] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(0, 0, 0),
];

/// The colour of series `i`.
fn colour(i: usize) -> RGBAColor {
    COLOURS[i % COLOURS.len()].to_rgba()
}

/// A part of a bitmap being drawn.
type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

fn chart(
    area: &Area<'_>,
    title: &str,
    (x_label, y_label): (&str, &str),
    series: &[Series],
    scale: Scale,
) -> Result<(), BenchError> {
    let (lo, hi, top) = extent(series);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 26))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80);
    match scale {
        Scale::LogX => {
            let y = 0.0..(top / 1.1).ceil().max(1.0);
            let mut c =
                builder.build_cartesian_2d((lo.max(0.001)..hi.max(lo * 10.0)).log_scale(), y)?;
            c.configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .y_labels(8)
                .x_label_formatter(&micros_label)
                .y_label_formatter(&percentile_label)
                .draw()?;
            lines(&mut c, series)
        }
        Scale::LogY => {
            // The axis starts two decades below the slowest series'
            // median: a pause (zero, or nearly) sits on the axis rather
            // than stretching it.
            let slowest = medians(series).into_iter().fold(top, f64::min);
            let bottom = 10f64.powf((slowest / 100.0).log10().floor()).max(1.0);
            let mut c = builder.build_cartesian_2d(0.0..hi.max(1.0), (bottom..top).log_scale())?;
            let floored: Vec<Series> = series
                .iter()
                .map(|(n, p)| {
                    (
                        n.clone(),
                        p.iter().map(|&(x, y)| (x, y.max(bottom))).collect(),
                    )
                })
                .collect();
            si_axes_and_lines(&mut c, (x_label, y_label), &floored)
        }
        Scale::Linear => {
            let mut c = builder.build_cartesian_2d(0.0..hi.max(1.0), 0.0..top)?;
            si_axes_and_lines(&mut c, (x_label, y_label), series)
        }
    }
}

/// Axes labelled in SI units, then the lines.
fn si_axes_and_lines<'a, X, Y>(
    c: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
    (x_label, y_label): (&str, &str),
    series: &[Series],
) -> Result<(), BenchError>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    c.configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&si)
        .y_label_formatter(&si)
        .draw()?;
    lines(c, series)
}

fn lines<'a, X, Y>(
    c: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
    series: &[Series],
) -> Result<(), BenchError>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, (_, points)) in series.iter().enumerate() {
        let color = colour(i);
        c.draw_series(LineSeries::new(
            points.iter().copied(),
            color.stroke_width(2),
        ))?;
        // One sample draws no line: a dot shows it.
        if let [point] = points.as_slice() {
            c.draw_series(std::iter::once(Circle::new(*point, 4, color.filled())))?;
        }
    }
    Ok(())
}
