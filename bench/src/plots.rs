//! PNG plots of a report, drawn with `plotters` (one line per mode):
//!
//! * `throughput.png` — events/s over time (per ~1 s sample);
//! * `latency_cdf.png` — the per-event latency distribution: latency on a
//!   log scale against the percentile on a scale of nines (p90, p99,
//!   p99.9 … equally spaced), so the tail shows;
//! * `tier_sizes.png` — bytes in L1 and L2, moved to L3, and the process's
//!   resident set, over time (the tiered modes).
//!
//! Each plot is titled with the workload it measured (users, events, form,
//! key distribution, memory budgets), so a PNG read alone says what ran.
//! Axes print SI units (1.2M, 500k); the legend sits in a panel right of
//! the chart, so it covers no line; every line also carries markers of its
//! own shape at places no other line has them, so a line lying exactly
//! under another still shows. A run too short for a throughput line (the
//! in-memory mode, say) is named there with its duration and does not set
//! the axis.
//!
//! On the throughput chart, a second without a single event is a stop: the
//! line breaks there and a bar on the floor spans it, so a stop never reads
//! as a slowdown on a log scale's floor. Each mode's checkpoints are shaded
//! spans in its colour (start to completion).
//!
//! Text needs a TrueType font: DejaVu Sans (Debian `fonts-dejavu-core`,
//! installed by `scripts/setup.sh`) or the file `STRATA_BENCH_FONT` names.

use crate::backends::BenchError;
use crate::runner::ModeReport;
use crate::timeline::Sample;
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
pub(crate) fn register_font() -> Result<(), BenchError> {
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
type Gauge = fn(&Sample) -> u64;

/// One named line: its points, in segments (a stop breaks a throughput
/// line), the spans it stood still and its checkpoints (seconds).
#[derive(Default)]
struct Series {
    name: String,
    segments: Vec<Vec<(f64, f64)>>,
    stops: Vec<(f64, f64)>,
    checkpoints: Vec<(f64, f64)>,
}

impl Series {
    /// A line through `points` (none drawn if there are none).
    fn line(name: String, points: Vec<(f64, f64)>) -> Self {
        let segments = if points.is_empty() {
            Vec::new()
        } else {
            vec![points]
        };
        Self {
            name,
            segments,
            ..Self::default()
        }
    }

    fn points(&self) -> impl Iterator<Item = &(f64, f64)> + '_ {
        self.segments.iter().flatten()
    }

    fn is_empty(&self) -> bool {
        self.points().next().is_none()
    }

    /// The same series with every y below `floor` raised to it (a log
    /// axis has no zero).
    fn floored(&self, floor: f64) -> Self {
        let segments = self.segments.iter();
        Self {
            name: self.name.clone(),
            segments: segments
                .map(|p| p.iter().map(|&(x, y)| (x, y.max(floor))).collect())
                .collect(),
            stops: self.stops.clone(),
            checkpoints: self.checkpoints.clone(),
        }
    }
}

/// A plot written: its file name in the report directory and its title.
pub(crate) struct Plot {
    /// File name.
    pub file: &'static str,
    /// What it shows.
    pub title: &'static str,
}

/// Draws the plots of `modes` into `out` (those with data), each titled
/// with `workload` (one line: what ran, with which budgets); returns them.
pub(crate) fn draw(
    out: &Path,
    modes: &BTreeMap<&str, &ModeReport>,
    workload: &str,
) -> Result<Vec<Plot>, BenchError> {
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
        if series.iter().all(Series::is_empty) {
            continue;
        }
        let path = out.join(file);
        let root = BitMapBackend::new(&path, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root
            .titled(title, ("sans-serif", 26))?
            .titled(workload, ("sans-serif", 15))?;
        let width = body.dim_in_pixel().0;
        let (chart_area, legend_area) = body.split_horizontally(width - LEGEND_WIDTH);
        chart(&chart_area, (x, &y), &series, scale)?;
        legend(&legend_area, &series)?;
        root.present()?;
        written.push(Plot { file, title });
    }
    Ok(written)
}

/// Width of the legend panel right of each chart (it never covers a line).
const LEGEND_WIDTH: u32 = 280;

/// The legend: one entry per series, in its colour and with its marker (a
/// series without points: its name alone, greyed), then what the floor
/// bars and the shaded spans mean, where the chart has them.
fn legend(area: &Area<'_>, series: &[Series]) -> Result<(), BenchError> {
    let font = ("sans-serif", 16).into_font();
    let grey = font.clone().color(&BLACK.mix(0.6));
    let mut y = 40;
    for (i, s) in series.iter().enumerate() {
        y += 24;
        if s.is_empty() {
            area.draw(&Text::new(s.name.clone(), (8, y - 8), grey.clone()))?;
            continue;
        }
        let color = colour(i);
        area.draw(&PathElement::new(
            vec![(8, y), (40, y)],
            color.stroke_width(3),
        ))?;
        area.draw(&marker((24, y), i, color))?;
        area.draw(&Text::new(s.name.clone(), (48, y - 8), font.clone()))?;
    }
    let notes = [
        (
            series.iter().any(|s| !s.stops.is_empty()),
            "bar on the floor: a stop (no event)",
        ),
        (
            series.iter().any(|s| !s.checkpoints.is_empty()),
            "shaded: a mode's checkpoints",
        ),
    ];
    for (_, note) in notes.iter().filter(|(shown, _)| *shown) {
        y += 24;
        area.draw(&Text::new(*note, (8, y - 8), grey.clone()))?;
    }
    Ok(())
}

/// Marker `i` (a shape per series, so that lines of one colour family or
/// lying on each other stay apart) at `at`.
fn marker<DB: DrawingBackend, C: Clone + 'static>(
    at: C,
    i: usize,
    color: RGBAColor,
) -> DynElement<'static, DB, C> {
    match i % 4 {
        0 => Circle::new(at, 4, color.filled()).into_dyn(),
        1 => TriangleMarker::new(at, 6, color.filled()).into_dyn(),
        2 => Cross::new(at, 5, color.stroke_width(2)).into_dyn(),
        _ => Circle::new(at, 5, color.stroke_width(2)).into_dyn(),
    }
}

/// `v` in SI units with at most 3 significant digits: 950, 1.2k, 35M, 1.5G.
pub(crate) fn si(v: &f64) -> String {
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
/// has no points and says why in its name. A window of the timeline
/// without an event after the first one is a stop: it breaks the line.
fn throughput(modes: &BTreeMap<&str, &ModeReport>) -> Vec<Series> {
    modes
        .iter()
        .map(|(name, m)| {
            if m.timeline.is_empty() {
                let why =
                    format!("{name}: no timeline (the peer reports only its totals), not drawn");
                return Series::line(why, Vec::new());
            }
            if left_out(modes, m) {
                let why = format!("{name}: done in {:.1} s, not drawn", duration(m));
                return Series::line(why, Vec::new());
            }
            let mut series = rates(&m.timeline);
            series.name = name.to_string();
            series.checkpoints = m
                .checkpoints
                .as_ref()
                .map(|c| c.windows.clone())
                .unwrap_or_default();
            series
        })
        .collect()
}

/// The events/s of each window of `timeline`, in segments between stops.
/// Before the first event a run is starting, and after the last one it is
/// ending (a final checkpoint, a shutdown): neither is a stop. The input
/// ends inside the last window with events, so that one's rate is only a
/// part of one: it is left out once two windows came before it.
fn rates(timeline: &[Sample]) -> Series {
    let mut series = Series::default();
    let mut segment = Vec::new();
    let windows: Vec<_> = timeline
        .windows(2)
        .filter(|w| w[1].secs > w[0].secs)
        .collect();
    let busy: Vec<usize> = (0..windows.len())
        .filter(|&i| windows[i][1].events > windows[i][0].events)
        .collect();
    let Some(&first) = busy.first() else {
        return series;
    };
    let last = busy[busy.len() - if busy.len() >= 3 { 2 } else { 1 }];
    for w in windows.get(first..=last).unwrap_or_default() {
        let (from, to) = (w[0].secs, w[1].secs);
        let events = w[1].events.saturating_sub(w[0].events);
        if events > 0 {
            segment.push((to, events as f64 / (to - from)));
            continue;
        }
        if !segment.is_empty() {
            series.segments.push(std::mem::take(&mut segment));
        }
        match series.stops.last_mut() {
            Some(last) if last.1 >= from => last.1 = to,
            _ => series.stops.push((from, to)),
        }
    }
    if !segment.is_empty() {
        series.segments.push(segment);
    }
    series
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
            Series::line(name.to_string(), points)
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
            series.push(Series::line(format!("{name} {tier}"), points));
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

/// The extent of the points, stops and checkpoints: (min x, max x, max y).
fn extent(series: &[Series]) -> (f64, f64, f64) {
    let spans = series
        .iter()
        .flat_map(|s| s.stops.iter().chain(&s.checkpoints))
        .map(|&(_, to)| (to, 0.0));
    let all = series.iter().flat_map(Series::points).copied().chain(spans);
    all.fold((f64::MAX, 0.0_f64, 0.0_f64), |(lo, hi, top), (x, y)| {
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
        .filter(|s| !s.is_empty())
        .map(|s| {
            let mut ys: Vec<f64> = s.points().map(|&(_, y)| y).collect();
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
    (x_label, y_label): (&str, &str),
    series: &[Series],
    scale: Scale,
) -> Result<(), BenchError> {
    let (lo, hi, top) = extent(series);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let mut builder = ChartBuilder::on(area);
    builder
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
            lines(&mut c, series, 0.0)
        }
        Scale::LogY => {
            // The axis starts two decades below the slowest series'
            // median: a slow second sits on the floor rather than
            // stretching the axis (a stop has a bar of its own there).
            let slowest = medians(series).into_iter().fold(top, f64::min);
            let bottom = 10f64.powf((slowest / 100.0).log10().floor()).max(1.0);
            let mut c = builder.build_cartesian_2d(0.0..hi.max(1.0), (bottom..top).log_scale())?;
            let floored: Vec<Series> = series.iter().map(|s| s.floored(bottom)).collect();
            si_axes(&mut c, (x_label, y_label))?;
            spans(&mut c, &floored, (bottom, top))?;
            lines(&mut c, &floored, bottom)
        }
        Scale::Linear => {
            let mut c = builder.build_cartesian_2d(0.0..hi.max(1.0), 0.0..top)?;
            si_axes(&mut c, (x_label, y_label))?;
            spans(&mut c, series, (0.0, top))?;
            lines(&mut c, series, 0.0)
        }
    }
}

/// A chart context of the bitmap.
type Context<'a, X, Y> = ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>;

/// Axes labelled in SI units.
fn si_axes<X, Y>(
    c: &mut Context<'_, X, Y>,
    (x_label, y_label): (&str, &str),
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
    Ok(())
}

/// Each series' checkpoints as spans shaded in its colour from `y.0` to
/// `y.1` (at least a fifth of a second wide, so a quick one shows).
fn spans<X, Y>(
    c: &mut Context<'_, X, Y>,
    series: &[Series],
    y: (f64, f64),
) -> Result<(), BenchError>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, s) in series.iter().enumerate() {
        let shade = colour(i).mix(0.15).filled();
        c.draw_series(
            s.checkpoints
                .iter()
                .map(|&(from, to)| Rectangle::new([(from, y.0), (to.max(from + 0.2), y.1)], shade)),
        )?;
    }
    Ok(())
}

/// Each series' line (segment by segment), its markers, and a bar at
/// `floor` over each of its stops.
fn lines<X, Y>(c: &mut Context<'_, X, Y>, series: &[Series], floor: f64) -> Result<(), BenchError>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, s) in series.iter().enumerate() {
        let color = colour(i);
        for segment in &s.segments {
            c.draw_series(LineSeries::new(
                segment.iter().copied(),
                color.stroke_width(2),
            ))?;
        }
        c.draw_series(marked(s, i, series.len()).map(|p| marker(p, i, color)))?;
        c.draw_series(s.stops.iter().map(|&(from, to)| {
            PathElement::new(vec![(from, floor), (to, floor)], color.stroke_width(6))
        }))?;
    }
    Ok(())
}

/// Markers a line carries: about ten, the first shifted by the series'
/// place among `n`, so two lines on top of each other show both; a line
/// of one point gets its marker.
fn marked(s: &Series, i: usize, n: usize) -> impl Iterator<Item = (f64, f64)> + '_ {
    let count = s.points().count();
    let stride = (count / 10).max(1);
    let offset = (i * stride / n.max(1)).min(count.saturating_sub(1));
    s.points().skip(offset).step_by(stride).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(counts: &[u64]) -> Vec<Sample> {
        let at = |(i, &events): (usize, &u64)| Sample {
            secs: i as f64,
            events,
            ..Sample::default()
        };
        counts.iter().enumerate().map(at).collect()
    }

    #[test]
    fn a_second_without_events_is_a_stop_that_breaks_the_line_but_start_and_end_are_not() {
        let s = rates(&timeline(&[0, 0, 100, 200, 200, 200, 300, 400, 500, 500]));
        assert_eq!(
            s.segments,
            [
                vec![(2.0, 100.0), (3.0, 100.0)],
                vec![(6.0, 100.0), (7.0, 100.0)]
            ]
        );
        assert_eq!(s.stops, [(3.0, 5.0)]);
    }

    #[test]
    fn the_last_busy_window_is_left_out_after_two_others() {
        let mut samples = timeline(&[0, 100, 200]);
        samples.push(Sample {
            secs: 2.05,
            events: 201,
            ..Sample::default()
        });
        let s = rates(&samples);
        assert_eq!(s.segments, [vec![(1.0, 100.0), (2.0, 100.0)]]);
        assert!(s.stops.is_empty());
        // A run of two windows keeps both.
        let short: Vec<Sample> = [(0.0, 0), (0.2, 50), (0.3, 60)]
            .iter()
            .map(|&(secs, events)| Sample {
                secs,
                events,
                ..Sample::default()
            })
            .collect();
        assert_eq!(rates(&short).points().count(), 2);
    }

    #[test]
    fn two_lines_on_top_of_each_other_carry_markers_at_different_places() {
        let points: Vec<(f64, f64)> = (0..40).map(|i| (i as f64, 7.0)).collect();
        let line = Series::line("a".into(), points);
        let first: Vec<_> = marked(&line, 0, 2).collect();
        let second: Vec<_> = marked(&line, 1, 2).collect();
        assert_eq!(first.len(), 10);
        assert_eq!(second.len(), 10);
        assert!(
            first.iter().all(|p| !second.contains(p)),
            "{first:?} {second:?}"
        );
        let one = Series::line("b".into(), vec![(1.0, 2.0)]);
        assert_eq!(marked(&one, 3, 4).collect::<Vec<_>>(), [(1.0, 2.0)]);
    }
}
