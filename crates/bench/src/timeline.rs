//! `--timeline`: completions per node over the measured window (Kite fig. 11), as CSV and as a
//! PNG line chart, drawn through the benchmarks' one plotting path ([`crate::plot`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::plot::{self, Chart, Kind, Panel, Series};
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

/// The chart of the timeline: one line per node, then the total (black), each point at its
/// bucket's middle.
pub fn chart(rows: &[(u64, Vec<f64>)], nodes: usize, bucket_ms: u64, title: &str) -> Chart {
    let x = rows.iter().map(|(t, _)| *t as f64 + bucket_ms as f64 / 2.0).collect();
    let series = (0..=nodes)
        .map(|i| Series {
            label: if i == nodes { "total".into() } else { format!("node {i}") },
            values: rows.iter().map(|(_, v)| v.get(i).copied()).collect(),
            color: (i == nodes).then_some([0, 0, 0]),
            ..Series::default()
        })
        .collect();
    Chart {
        title: None,
        width: 1100,
        height: 560,
        panels: vec![Panel {
            kind: Kind::Lines,
            title: format!("Per-node throughput: {title}"),
            x_label: "time in the measured window (ms)".into(),
            y_label: "ops/s".into(),
            x,
            y_min: Some(0.0),
            series,
            ..Panel::default()
        }],
    }
}

fn plot(
    png: &Path,
    rows: &[(u64, Vec<f64>)],
    nodes: usize,
    bucket_ms: u64,
    title: &str,
) -> Result<(), String> {
    plot::draw(&chart(rows, nodes, bucket_ms, title), png)
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
    fn the_chart_has_a_line_per_node_and_a_black_total() {
        let rows = rates(&[vec![1, 2], vec![3]], 10);
        let c = chart(&rows, 2, 10, "t");
        let p = &c.panels[0];
        assert_eq!(p.x, vec![5.0, 15.0]);
        let labels: Vec<&str> = p.series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["node 0", "node 1", "total"]);
        assert_eq!(p.series[2].values, vec![Some(400.0), Some(200.0)]);
        assert_eq!(p.series[2].color, Some([0, 0, 0]));
    }
}
