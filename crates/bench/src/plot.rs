//! The one plotting path of the benchmarks: a [`Chart`] (panels of grouped bars or lines, side
//! by side) drawn as a PNG with `plotters`' bitmap backend and a real TrueType font, DejaVu
//! Sans, embedded from the `dejavu` crate (plotters' `ab_glyph` feature: no system font lookup,
//! so a machine without fonts draws the same picture).
//!
//! `strata bench --timeline` draws its chart through [`draw`] (see `timeline.rs`); the
//! scripts' charts are specs written as JSON by `python3 -m benchlib chart ...` (the medians
//! come from scripts/benchlib/summary.py) and drawn by the `strata-plot` binary
//! (`src/bin/strata-plot.rs`), which reads them with [`draw_file`].
//!
//! Log axes are drawn on a linear axis over log10 of the values, with ticks at 1, 2 and 5
//! times the powers of ten, so one coordinate type serves every panel.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

/// The font family every text of a chart uses (registered once, see [`register_font`]).
const FONT: &str = "sans-serif";

/// A figure: a title over panels laid side by side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Chart {
    /// The figure's title, above every panel.
    pub title: Option<String>,
    /// Size of the PNG in pixels (0: 1100 x 500).
    pub width: u32,
    pub height: u32,
    pub panels: Vec<Panel>,
}

/// What a panel draws.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// One group of bars per category, one bar per series.
    #[default]
    Bars,
    /// One line per series over the `x` values.
    Lines,
}

/// One panel: axes, series and a legend.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Panel {
    pub kind: Kind,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// The panel's share of the figure's width, relative to the others' (0: 1).
    pub weight: f64,
    /// Bars: the groups' names. Lines: the labels of the ticks at `x` (none: numbers).
    pub categories: Vec<String>,
    /// Lines: the x value of each point.
    pub x: Vec<f64>,
    pub x_log: bool,
    pub y_log: bool,
    /// The y axis' range; by default from the data (bars: from 0 on a linear axis).
    pub y_min: Option<f64>,
    pub y_max: Option<f64>,
    /// A shaded horizontal band (e.g. a paper's range), with its legend entry.
    pub band: Option<Band>,
    pub series: Vec<Series>,
}

/// A shaded horizontal band between two y values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Band {
    pub from: f64,
    pub to: f64,
    pub label: String,
}

/// One series: a value per category (bars) or per x (lines); `None` is not drawn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Series {
    pub label: String,
    pub values: Vec<Option<f64>>,
    /// Bars: a tick across each bar at this value (e.g. the p99 over a p50 bar).
    pub marks: Vec<Option<f64>>,
    /// RGB; by default the palette's next colour.
    pub color: Option<[u8; 3]>,
    /// Line width in pixels (0: 2).
    pub width: u32,
}

/// matplotlib's tab10, the colours the scripts' charts had.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Registers DejaVu Sans as [`FONT`] (once per process).
fn register_font() -> Result<(), String> {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok = *OK.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
            && plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold()).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err("the embedded DejaVu Sans font does not parse".into())
    }
}

/// Reads a chart spec (JSON) from `spec` and draws it to `png`.
pub fn draw_file(spec: &Path, png: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(spec)
        .map_err(|e| format!("cannot read {}: {e}", spec.display()))?;
    let chart: Chart = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a chart spec: {e}", spec.display()))?;
    draw(&chart, png)
}

/// Draws `chart` to the PNG file `png`.
pub fn draw(chart: &Chart, png: &Path) -> Result<(), String> {
    register_font()?;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let (w, h) = if chart.width == 0 || chart.height == 0 {
        (1100, 500)
    } else {
        (chart.width, chart.height)
    };
    let root = BitMapBackend::new(png, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let area = match &chart.title {
        Some(t) if !t.is_empty() => {
            root.titled(t, (FONT, 18).into_font().style(FontStyle::Bold)).map_err(|x| e(&x))?
        }
        _ => root.clone(),
    };
    let weights: Vec<f64> =
        chart.panels.iter().map(|p| if p.weight > 0.0 { p.weight } else { 1.0 }).collect();
    let total: f64 = weights.iter().sum();
    let (aw, _) = area.dim_in_pixel();
    let mut breaks = Vec::new();
    let mut acc = 0.0;
    for wt in weights.iter().take(weights.len().saturating_sub(1)) {
        acc += wt;
        breaks.push((acc / total * aw as f64).round() as i32);
    }
    let areas = area.split_by_breakpoints(breaks, Vec::<i32>::new());
    for (panel, a) in chart.panels.iter().zip(&areas) {
        draw_panel(panel, a)?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// An axis: data to drawing coordinates (log10 on a log axis) and its ticks.
struct Axis {
    log: bool,
    lo: f64,
    hi: f64,
}

impl Axis {
    /// An axis over `values` (finite; positive on a log axis), within `min`/`max` if given.
    fn new(log: bool, values: &[f64], min: Option<f64>, max: Option<f64>, from_zero: bool) -> Axis {
        let vals: Vec<f64> =
            values.iter().copied().filter(|v| v.is_finite() && (!log || *v > 0.0)).collect();
        let (mut lo, mut hi) = vals
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(*v), b.max(*v)));
        if vals.is_empty() {
            (lo, hi) = if log { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        if log {
            let (l, h) = (lo.log10().floor(), hi.log10().ceil());
            (lo, hi) = (l, if h > l { h } else { l + 1.0 });
        } else {
            if from_zero {
                lo = lo.min(0.0);
            }
            let step = nice_step(((hi - lo).abs()).max(f64::MIN_POSITIVE) / 5.0);
            // Headroom above the highest value, for the legend.
            let top = hi + (hi - lo).abs() * 0.12;
            hi = (top / step).ceil() * step + if from_zero { 0.0 } else { step * 0.25 };
            if !from_zero {
                lo -= step * 0.25;
            }
            if hi <= lo {
                hi = lo + 1.0;
            }
        }
        if let Some(m) = min {
            lo = if log { m.max(f64::MIN_POSITIVE).log10() } else { m };
        }
        if let Some(m) = max {
            hi = if log { m.log10() } else { m };
        }
        Axis { log, lo, hi }
    }

    /// A value in drawing coordinates (log10 on a log axis; clamped to the axis' bottom).
    fn to(&self, v: f64) -> f64 {
        if self.log {
            v.max(f64::MIN_POSITIVE).log10().max(self.lo)
        } else {
            v
        }
    }

    /// Tick positions (drawing coordinates).
    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let decades = (self.hi - self.lo).round() as i32;
            let mults: &[f64] = if decades <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
            let mut t = Vec::new();
            for d in self.lo.floor() as i32..=self.hi.ceil() as i32 {
                for m in mults {
                    let v = (m * 10f64.powi(d)).log10();
                    if v >= self.lo - 1e-9 && v <= self.hi + 1e-9 {
                        t.push(v);
                    }
                }
            }
            t
        } else {
            let step = nice_step((self.hi - self.lo) / 6.0);
            let mut t = Vec::new();
            let mut v = (self.lo / step).ceil() * step;
            while v <= self.hi + step * 1e-6 {
                t.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
                v += step;
            }
            t
        }
    }

    fn coord(&self) -> Ticked {
        Ticked { lo: self.lo, hi: self.hi, ticks: self.ticks() }
    }

    /// A tick's label, in data units.
    fn label(&self, v: f64) -> String {
        number(if self.log { 10f64.powf(v) } else { v })
    }
}

/// A linear f64 axis whose ticks are given (plotters' own f64 axis picks its ticks itself).
#[derive(Clone, Debug)]
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let r = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (r * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

fn draw_panel<DB: DrawingBackend>(
    p: &Panel,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let n = p.series.len().max(1);
    let cats = match p.kind {
        Kind::Bars => p.series.iter().map(|s| s.values.len()).max().unwrap_or(0),
        Kind::Lines => p.x.len(),
    };
    let values: Vec<f64> = p
        .series
        .iter()
        .flat_map(|s| s.values.iter().chain(&s.marks).flatten().copied())
        .chain(p.band.iter().flat_map(|b| [b.from, b.to]))
        .collect();
    let y = Axis::new(p.y_log, &values, p.y_min, p.y_max, p.kind == Kind::Bars && !p.y_log);
    let (x, x_coord) = match p.kind {
        Kind::Bars => {
            let a = Axis { log: false, lo: -0.5, hi: cats.max(1) as f64 - 0.5 };
            let c = Ticked { lo: a.lo, hi: a.hi, ticks: (0..cats).map(|i| i as f64).collect() };
            (a, c)
        }
        Kind::Lines => {
            // The x axis spans the points with a little room on each side (no headroom).
            let xs: Vec<f64> =
                p.x.iter()
                    .filter(|v| v.is_finite() && (!p.x_log || **v > 0.0))
                    .map(|v| if p.x_log { v.log10() } else { *v })
                    .collect();
            let (l, h) = xs
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(*v), b.max(*v)));
            let a = if xs.is_empty() {
                Axis { log: p.x_log, lo: 0.0, hi: 1.0 }
            } else {
                let pad = if h > l { (h - l) * if p.x_log { 0.05 } else { 0.02 } } else { 0.5 };
                Axis { log: p.x_log, lo: l - pad, hi: h + pad }
            };
            let c = if p.categories.len() == p.x.len() && !p.x.is_empty() {
                Ticked { lo: a.lo, hi: a.hi, ticks: p.x.iter().map(|v| a.to(*v)).collect() }
            } else {
                a.coord()
            };
            (a, c)
        }
    };
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, (FONT, 16))
        .margin(12)
        .x_label_area_size(if p.x_label.is_empty() { 30 } else { 48 })
        .y_label_area_size(72)
        .build_cartesian_2d(x_coord, y.coord())
        .map_err(|x| e(&x))?;
    let x_fmt = |v: &f64| match p.kind {
        Kind::Bars => p.categories.get(v.round().max(0.0) as usize).cloned().unwrap_or_default(),
        Kind::Lines => {
            p.x.iter()
                .position(|xv| (x.to(*xv) - v).abs() < 1e-9)
                .and_then(|i| p.categories.get(i).cloned())
                .unwrap_or_else(|| x.label(*v))
        }
    };
    let y_fmt = |v: &f64| y.label(*v);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(&p.x_label)
        .y_desc(&p.y_label)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(TRANSPARENT);
    if p.kind == Kind::Bars {
        mesh.disable_x_mesh();
    }
    mesh.draw().map_err(|x| e(&x))?;

    if let Some(b) = &p.band {
        let fill = RGBColor(44, 160, 44).mix(0.15);
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x.lo, y.to(b.from)), (x.hi, y.to(b.to))],
                fill.filled(),
            )))
            .map_err(|x| e(&x))?
            .label(&b.label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], fill.filled()));
    }
    let bottom = y.lo;
    for (i, s) in p.series.iter().enumerate() {
        let color = s.color.map_or(PALETTE[i % PALETTE.len()], |[r, g, b]| RGBColor(r, g, b));
        let stroke = if s.width == 0 { 2 } else { s.width };
        match p.kind {
            Kind::Bars => {
                let bw = 0.8 / n as f64;
                let center = |k: usize| k as f64 + (i as f64 - (n as f64 - 1.0) / 2.0) * bw;
                let bars = s.values.iter().enumerate().filter_map(|(k, v)| {
                    let v = (*v)?;
                    let c = center(k);
                    Some(Rectangle::new(
                        [(c - bw / 2.0 + 0.01, bottom), (c + bw / 2.0 - 0.01, y.to(v))],
                        color.filled(),
                    ))
                });
                chart.draw_series(bars).map_err(|x| e(&x))?.label(&s.label).legend(
                    move |(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], color.filled()),
                );
                let marks = s.marks.iter().enumerate().filter_map(|(k, m)| {
                    let m = (*m)?;
                    let c = center(k);
                    Some(PathElement::new(
                        vec![(c - bw * 0.4, y.to(m)), (c + bw * 0.4, y.to(m))],
                        BLACK.stroke_width(3),
                    ))
                });
                chart.draw_series(marks).map_err(|x| e(&x))?;
            }
            Kind::Lines => {
                let pts: Vec<(f64, f64)> =
                    p.x.iter()
                        .zip(&s.values)
                        .filter_map(|(xv, v)| Some((x.to(*xv), y.to((*v)?))))
                        .collect();
                let style = color.stroke_width(stroke);
                chart
                    .draw_series(LineSeries::new(pts.clone(), style))
                    .map_err(|x| e(&x))?
                    .label(&s.label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
                if pts.len() <= 40 {
                    chart
                        .draw_series(pts.iter().map(|pt| Circle::new(*pt, 4, color.filled())))
                        .map_err(|x| e(&x))?;
                }
            }
        }
    }
    if !p.series.is_empty() {
        chart
            .configure_series_labels()
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(legend_position(p, &y))
            .draw()
            .map_err(|x| e(&x))?;
    }
    Ok(())
}

/// The upper corner whose side of the panel has the lower data: the legend covers less there.
fn legend_position(p: &Panel, y: &Axis) -> SeriesLabelPosition {
    let n = p.series.iter().map(|s| s.values.len()).max().unwrap_or(0);
    let third = n.div_ceil(3).max(1);
    let top = |range: std::ops::Range<usize>| {
        p.series
            .iter()
            .flat_map(|s| {
                let r = range.start.min(s.values.len())..range.end.min(s.values.len());
                s.values[r.clone()].iter().chain(s.marks.get(r).unwrap_or(&[]))
            })
            .flatten()
            .map(|v| y.to(*v))
            .fold(f64::NEG_INFINITY, f64::max)
    };
    if top(0..third) < top(n.saturating_sub(third)..n) {
        SeriesLabelPosition::UpperLeft
    } else {
        SeriesLabelPosition::UpperRight
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
pub fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

/// A tick label: `1234567` → `1.2M`, `45000` → `45K`, `0.5` → `0.5`, `20` → `20`.
pub fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}K", trim(v / 1e3))
    } else if a >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trim(v)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("strata-bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn ticks_and_labels() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(130.0), 200.0);
        assert_eq!(nice_step(4500.0), 5000.0);
        assert_eq!(number(1_500_000.0), "1.5M");
        assert_eq!(number(40_000.0), "40K");
        assert_eq!(number(2000.0), "2000");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(1.5), "1.5");
        let log = Axis::new(true, &[3.0, 420.0], None, None, false);
        assert_eq!((log.lo, log.hi), (0.0, 3.0));
        let t: Vec<String> = log.ticks().iter().map(|v| log.label(*v)).collect();
        assert_eq!(t, ["1", "10", "100", "1000"]);
        let lin = Axis::new(false, &[0.0, 8.0], None, None, true);
        assert_eq!((lin.lo, lin.hi), (0.0, 10.0));
        let lin = Axis::new(false, &[0.0, 9.0], None, None, true);
        assert_eq!((lin.lo, lin.hi), (0.0, 12.0), "headroom over the highest bar");
    }

    #[test]
    fn draws_bars_and_lines_from_a_json_spec() {
        let spec = r#"{"title": "a figure", "width": 800, "height": 300, "panels": [
            {"kind": "bars", "title": "bars", "y_label": "ms", "categories": ["a", "b"], "y_log": true,
             "series": [{"label": "one", "values": [1.5, 30], "marks": [3, 60]},
                        {"label": "two", "values": [null, 2]}]},
            {"kind": "lines", "title": "lines", "x_label": "writes", "x": [1, 5, 50],
             "categories": ["1%", "5%", "50%"], "x_log": true, "y_min": 0, "y_max": 1.05,
             "band": {"from": 0.69, "to": 0.88, "label": "paper"},
             "series": [{"label": "kite", "values": [0.9, 0.8, null]}]}]}"#;
        let (json, png) = (tmp("c.json"), tmp("c.png"));
        std::fs::write(&json, spec).unwrap();
        draw_file(&json, &png).unwrap();
        assert_eq!(&std::fs::read(&png).unwrap()[1..4], b"PNG");
        assert!(draw_file(&tmp("missing.json"), &png).unwrap_err().contains("cannot read"));
        let _ = std::fs::remove_file(json);
        let _ = std::fs::remove_file(png);
    }
}
