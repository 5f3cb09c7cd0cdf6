//! `--timeline`: completions per node over the measured window (Kite fig. 11), as CSV and as a
//! PNG line chart.
//!
//! The chart is drawn with `plotters`' bitmap backend. The workspace builds plotters without
//! a font engine (no `ttf`/`ab_glyph` feature, whose text drawing would otherwise panic), so
//! the title, tick labels and legend are drawn here with a built-in 3×5 pixel font (upper
//! case, digits and a little punctuation).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::BenchError;

/// Writes the timeline. `per_node[i][b]`: completions at node `i` in bucket `b` (buckets of
/// `bucket_ms`). The CSV goes to `path` (or, if `path` ends in `.png`, next to it with
/// `.csv`), the chart to `path` with `.png`. Returns the files written.
pub fn write(
    path: &Path,
    per_node: &[Vec<u64>],
    bucket_ms: u64,
    title: &str,
) -> Result<Vec<PathBuf>, BenchError> {
    let is_png = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png"));
    let csv_path = if is_png { path.with_extension("csv") } else { path.to_path_buf() };
    let png_path = path.with_extension("png");
    let rows = rates(per_node, bucket_ms);
    std::fs::write(&csv_path, csv(&rows, per_node.len())).map_err(|e| {
        BenchError::WriteTimeline { path: csv_path.clone(), message: e.to_string() }
    })?;
    plot(&png_path, &rows, per_node.len(), bucket_ms, title)
        .map_err(|message| BenchError::WriteTimeline { path: png_path.clone(), message })?;
    Ok(vec![csv_path, png_path])
}

/// One row per bucket: (start ms, ops/s per node..., total ops/s).
pub fn rates(per_node: &[Vec<u64>], bucket_ms: u64) -> Vec<(u64, Vec<f64>)> {
    let buckets = per_node.iter().map(Vec::len).max().unwrap_or(0);
    let per_s = 1000.0 / bucket_ms as f64;
    (0..buckets)
        .map(|b| {
            let mut v: Vec<f64> =
                per_node.iter().map(|n| n.get(b).copied().unwrap_or(0) as f64 * per_s).collect();
            v.push(v.iter().sum());
            (b as u64 * bucket_ms, v)
        })
        .collect()
}

/// `t_ms,node0,...,total` (ops per second over each bucket).
pub fn csv(rows: &[(u64, Vec<f64>)], nodes: usize) -> String {
    let mut out = String::from("t_ms");
    for i in 0..nodes {
        let _ = write!(out, ",node{i}");
    }
    out += ",total\n";
    for (t, v) in rows {
        let _ = write!(out, "{t}");
        for x in v {
            let _ = write!(out, ",{x:.0}");
        }
        out.push('\n');
    }
    out
}

const W: u32 = 1100;
const H: u32 = 560;
const LEFT: i32 = 110;
const RIGHT: i32 = W as i32 - 30;
const TOP: i32 = 60;
const BOTTOM: i32 = H as i32 - 70;

fn plot(
    png: &Path,
    rows: &[(u64, Vec<f64>)],
    nodes: usize,
    bucket_ms: u64,
    title: &str,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = BitMapBackend::new(png, (W, H)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let t_max = (rows.len() as u64 * bucket_ms).max(1) as f64;
    let y_top = rows.iter().flat_map(|(_, v)| v.iter().copied()).fold(0.0f64, f64::max);
    let y_step = nice_step(y_top.max(1.0) / 5.0);
    let y_max = (y_top / y_step).ceil().max(1.0) * y_step;
    let px = |t: f64| LEFT + ((t / t_max) * (RIGHT - LEFT) as f64).round() as i32;
    let py = |y: f64| BOTTOM - ((y / y_max) * (BOTTOM - TOP) as f64).round() as i32;
    let grey = RGBColor(220, 220, 220);

    // Grid and tick labels.
    let mut y = 0.0;
    while y <= y_max + y_step / 2.0 {
        let p = py(y);
        root.draw(&PathElement::new(vec![(LEFT, p), (RIGHT, p)], grey)).map_err(|x| e(&x))?;
        let label = si(y);
        text(&root, LEFT - 8 - width(&label, 2), p - 5, &label, 2, &BLACK)?;
        y += y_step;
    }
    let x_step = nice_step(t_max / 10.0);
    let mut t = 0.0;
    while t <= t_max + 1e-9 {
        let p = px(t);
        root.draw(&PathElement::new(vec![(p, TOP), (p, BOTTOM)], grey)).map_err(|x| e(&x))?;
        let label = format!("{t:.0}");
        text(&root, p - width(&label, 2) / 2, BOTTOM + 8, &label, 2, &BLACK)?;
        t += x_step;
    }
    root.draw(&PathElement::new(
        vec![(LEFT, TOP), (LEFT, BOTTOM), (RIGHT, BOTTOM)],
        BLACK.stroke_width(2),
    ))
    .map_err(|x| e(&x))?;
    text(&root, LEFT, 20, &format!("PER-NODE THROUGHPUT: {title}"), 3, &BLACK)?;
    text(&root, LEFT - 100, TOP - 22, "OPS/S", 2, &BLACK)?;
    let xl = "TIME IN THE MEASURED WINDOW (MS)";
    text(&root, (LEFT + RIGHT) / 2 - width(xl, 2) / 2, BOTTOM + 34, xl, 2, &BLACK)?;

    // One line per node, then the total (thicker, black), each point at its bucket's middle.
    let colors = [
        RGBColor(220, 50, 47),
        RGBColor(38, 139, 210),
        RGBColor(133, 153, 0),
        RGBColor(211, 54, 130),
        RGBColor(181, 137, 0),
    ];
    let mut legend = Vec::new();
    for i in 0..=nodes {
        let (style, name) = if i == nodes {
            (BLACK.stroke_width(2), "TOTAL".to_string())
        } else {
            (colors[i % colors.len()].stroke_width(2), format!("NODE {i}"))
        };
        let pts: Vec<(i32, i32)> =
            rows.iter().map(|(t, v)| (px(*t as f64 + bucket_ms as f64 / 2.0), py(v[i]))).collect();
        root.draw(&PathElement::new(pts, style)).map_err(|x| e(&x))?;
        legend.push((style, name));
    }
    // Legend, top right.
    let lx = RIGHT - 150;
    let mut ly = TOP + 10;
    root.draw(&Rectangle::new(
        [(lx - 10, ly - 8), (RIGHT - 8, ly + 20 * legend.len() as i32 - 4)],
        WHITE.filled(),
    ))
    .map_err(|x| e(&x))?;
    root.draw(&Rectangle::new(
        [(lx - 10, ly - 8), (RIGHT - 8, ly + 20 * legend.len() as i32 - 4)],
        BLACK,
    ))
    .map_err(|x| e(&x))?;
    for (style, name) in legend {
        root.draw(&PathElement::new(vec![(lx, ly + 5), (lx + 30, ly + 5)], style))
            .map_err(|x| e(&x))?;
        text(&root, lx + 40, ly, &name, 2, &BLACK)?;
        ly += 20;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

/// `1234567` → `1.2M`, `45000` → `45K`.
fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}K", trim(v / 1e3))
    } else {
        format!("{v:.0}")
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

fn width(s: &str, scale: i32) -> i32 {
    s.chars().count() as i32 * 4 * scale
}

fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    x: i32,
    y: i32,
    s: &str,
    scale: i32,
    color: &RGBColor,
) -> Result<(), String> {
    for (i, c) in s.chars().enumerate() {
        let rows = glyph(c.to_ascii_uppercase());
        let cx = x + i as i32 * 4 * scale;
        for (r, bits) in rows.iter().enumerate() {
            for (col, b) in bits.bytes().enumerate() {
                if b == b'1' {
                    let (x0, y0) = (cx + col as i32 * scale, y + r as i32 * scale);
                    area.draw(&Rectangle::new(
                        [(x0, y0), (x0 + scale - 1, y0 + scale - 1)],
                        color.filled(),
                    ))
                    .map_err(|e| e.to_string())?;
                }
            }
        }
    }
    Ok(())
}

/// A 3×5 pixel font; unknown characters draw as a small box.
fn glyph(c: char) -> [&'static str; 5] {
    match c {
        '0' => ["111", "101", "101", "101", "111"],
        '1' => ["010", "110", "010", "010", "111"],
        '2' => ["111", "001", "111", "100", "111"],
        '3' => ["111", "001", "111", "001", "111"],
        '4' => ["101", "101", "111", "001", "001"],
        '5' => ["111", "100", "111", "001", "111"],
        '6' => ["111", "100", "111", "101", "111"],
        '7' => ["111", "001", "001", "001", "001"],
        '8' => ["111", "101", "111", "101", "111"],
        '9' => ["111", "101", "111", "001", "111"],
        'A' => ["010", "101", "111", "101", "101"],
        'B' => ["110", "101", "110", "101", "110"],
        'C' => ["011", "100", "100", "100", "011"],
        'D' => ["110", "101", "101", "101", "110"],
        'E' => ["111", "100", "110", "100", "111"],
        'F' => ["111", "100", "110", "100", "100"],
        'G' => ["011", "100", "101", "101", "011"],
        'H' => ["101", "101", "111", "101", "101"],
        'I' => ["111", "010", "010", "010", "111"],
        'J' => ["001", "001", "001", "101", "010"],
        'K' => ["101", "101", "110", "101", "101"],
        'L' => ["100", "100", "100", "100", "111"],
        'M' => ["101", "111", "111", "101", "101"],
        'N' => ["110", "101", "101", "101", "101"],
        'O' => ["010", "101", "101", "101", "010"],
        'P' => ["110", "101", "110", "100", "100"],
        'Q' => ["010", "101", "101", "110", "011"],
        'R' => ["110", "101", "110", "101", "101"],
        'S' => ["011", "100", "010", "001", "110"],
        'T' => ["111", "010", "010", "010", "010"],
        'U' => ["101", "101", "101", "101", "111"],
        'V' => ["101", "101", "101", "101", "010"],
        'W' => ["101", "101", "111", "111", "101"],
        'X' => ["101", "101", "010", "101", "101"],
        'Y' => ["101", "101", "010", "010", "010"],
        'Z' => ["111", "001", "010", "100", "111"],
        ' ' => ["000", "000", "000", "000", "000"],
        '.' => ["000", "000", "000", "000", "010"],
        ',' => ["000", "000", "000", "010", "100"],
        '-' => ["000", "000", "111", "000", "000"],
        '(' => ["001", "010", "010", "010", "001"],
        ')' => ["100", "010", "010", "010", "100"],
        '%' => ["101", "001", "010", "100", "101"],
        '/' => ["001", "001", "010", "100", "100"],
        ':' => ["000", "010", "000", "010", "000"],
        '_' => ["000", "000", "000", "000", "111"],
        '=' => ["000", "111", "000", "111", "000"],
        '+' => ["000", "010", "111", "010", "000"],
        _ => ["111", "101", "101", "101", "111"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_has_a_column_per_node_and_the_total_in_ops_per_second() {
        let rows = rates(&[vec![1, 2], vec![3]], 10);
        assert_eq!(csv(&rows, 2), "t_ms,node0,node1,total\n0,100,300,400\n10,200,0,200\n");
    }

    #[test]
    fn writes_csv_and_png() {
        let dir =
            std::env::temp_dir().join(format!("strata-bench-timeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = write(
            &dir.join("t.csv"),
            &[vec![5, 6, 0, 7], vec![5, 5, 5, 5]],
            10,
            "kite mode, 5% writes",
        )
        .unwrap();
        assert_eq!(files, vec![dir.join("t.csv"), dir.join("t.png")]);
        assert!(std::fs::read_to_string(&files[0])
            .unwrap()
            .starts_with("t_ms,node0,node1,total\n"));
        let png = std::fs::read(&files[1]).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(130.0), 200.0);
        assert_eq!(nice_step(4500.0), 5000.0);
        assert_eq!(si(1_500_000.0), "1.5M");
        assert_eq!(si(40_000.0), "40K");
    }
}
