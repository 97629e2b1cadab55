//! A self-contained HTML page: charts drawn as inline SVG here, tables, one style sheet in
//! the page. No script and nothing fetched, so it opens anywhere, offline, from a file.

use std::fmt::Write as _;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend.
    pub name: String,
    /// CSS colour.
    pub color: &'static str,
    /// `(seconds since the start, value)`, in time order.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (bounds and references).
    pub dashed: bool,
}

/// A chart of series over time.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Heading.
    pub title: String,
    /// What the values are, e.g. `$/h`.
    pub unit: String,
    /// Its lines.
    pub series: Vec<Series>,
}

/// A table.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Heading.
    pub title: String,
    /// Column names.
    pub header: Vec<String>,
    /// Cells, already formatted.
    pub rows: Vec<Vec<String>>,
}

/// The page.
#[derive(Debug, Clone, Default)]
pub struct Document {
    /// `<title>` and heading.
    pub title: String,
    /// Lines under the heading.
    pub summary: Vec<String>,
    /// Charts, in order.
    pub charts: Vec<Chart>,
    /// Tables after the charts.
    pub tables: Vec<Table>,
}

/// Colours the charts take series from, in order.
pub const PALETTE: [&str; 8] = [
    "#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#4b5563",
];

/// `text` with `&`, `<`, `>`, `"` and `'` escaped, for element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A round step (1, 2 or 5 times a power of ten) giving about `ticks` ticks up to `max`.
fn nice_step(max: f64, ticks: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / ticks;
    let power = 10f64.powf(raw.log10().floor());
    let unit = raw / power;
    let nice = if unit <= 1.0 {
        1.0
    } else if unit <= 2.0 {
        2.0
    } else if unit <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// A tick interval of whole minutes or hours giving about six ticks over `seconds`.
fn time_step(seconds: f64) -> f64 {
    const STEPS: [f64; 12] = [
        60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 10800.0, 21600.0, 43200.0,
        86400.0,
    ];
    STEPS
        .into_iter()
        .find(|s| seconds / s <= 8.0)
        .unwrap_or(86400.0 * (seconds / 86400.0 / 8.0).ceil())
}

fn clock(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    if s >= 86400 {
        format!("{}d{:02}h", s / 86400, s % 86400 / 3600)
    } else {
        format!("{:02}:{:02}", s / 3600, s % 3600 / 60)
    }
}

fn number(value: f64) -> String {
    if value == value.trunc() && value.abs() < 1e9 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// The chart as an inline SVG element.
pub fn svg(chart: &Chart) -> String {
    const W: f64 = 720.0;
    const H: f64 = 260.0;
    const LEFT: f64 = 56.0;
    const RIGHT: f64 = 16.0;
    const TOP: f64 = 12.0;
    const BOTTOM: f64 = 28.0;
    let all = chart.series.iter().flat_map(|s| s.points.iter());
    let (x_max, y_max) = all.fold((0.0f64, 0.0f64), |(x, y), p| (x.max(p.0), y.max(p.1)));
    let x_max = x_max.max(60.0);
    let y_step = nice_step(y_max, 4.0);
    let y_top = (y_max / y_step).ceil().max(1.0) * y_step;
    let x = |v: f64| LEFT + v / x_max * (W - LEFT - RIGHT);
    let y = |v: f64| H - BOTTOM - v / y_top * (H - TOP - BOTTOM);
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg viewBox="0 0 {W} {H}" role="img" aria-label="{}">"#,
        escape(&chart.title)
    );
    let mut tick = 0.0;
    while tick <= y_top + y_step / 2.0 {
        let _ = write!(
            out,
            r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}"/><text class="tick" x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            W - RIGHT,
            LEFT - 6.0,
            y(tick) + 4.0,
            number(tick),
            y = y(tick),
        );
        tick += y_step;
    }
    let x_step = time_step(x_max);
    let mut tick = 0.0;
    while tick <= x_max + 1e-9 {
        let _ = write!(
            out,
            r#"<text class="tick" x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x(tick),
            H - 8.0,
            clock(tick)
        );
        tick += x_step;
    }
    let _ = write!(
        out,
        r#"<line class="axis" x1="{LEFT}" x2="{}" y1="{b}" y2="{b}"/>"#,
        W - RIGHT,
        b = H - BOTTOM
    );
    for series in &chart.series {
        if series.points.is_empty() {
            continue;
        }
        let points: Vec<String> = series
            .points
            .iter()
            .map(|&(px, py)| format!("{:.1},{:.1}", x(px), y(py)))
            .collect();
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{}" stroke-width="2"{} points="{}"><title>{}</title></polyline>"#,
            series.color,
            if series.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            },
            points.join(" "),
            escape(&series.name)
        );
    }
    out.push_str("</svg>");
    out
}

const STYLE: &str = "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1d2330;background:#f5f6f8;margin:0}
header{background:#1d2330;color:#fff;padding:16px 24px}header h1{margin:0 0 4px;font-size:20px}header p{margin:2px 0;color:#c9d1e0}
main{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:16px;padding:16px 24px}
section{background:#fff;border:1px solid #e4e7ec;border-radius:8px;padding:12px 16px;overflow-x:auto}
h2{font-size:15px;margin:0 0 8px}.unit{color:#667085;font-weight:normal}
svg{width:100%;height:auto}.grid{stroke:#eef0f3}.axis{stroke:#98a2b3}.tick{font-size:11px;fill:#667085}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;color:#475467;margin-top:4px}.legend i{display:inline-block;width:16px;height:3px;vertical-align:middle;margin-right:5px}
.legend i.dashed{background-image:linear-gradient(90deg,currentColor 60%,transparent 60%);background-size:6px 3px}
table{border-collapse:collapse;width:100%;font-size:13px}th{text-align:left;color:#667085;border-bottom:1px solid #e4e7ec;padding:4px 8px}
td{border-bottom:1px solid #f0f1f3;padding:4px 8px}td.num{text-align:right;font-variant-numeric:tabular-nums}
footer{color:#667085;font-size:12px;padding:0 24px 16px}";

fn is_numeric(cell: &str) -> bool {
    let trimmed = cell.trim_start_matches('$').trim_end_matches('%');
    !trimmed.is_empty()
        && trimmed
            .replace([',', '.', '-', '×'], "")
            .chars()
            .all(|c| c.is_ascii_digit())
}

/// The whole page.
pub fn render(document: &Document) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title><style>{STYLE}</style></head><body><header><h1>{}</h1>",
        escape(&document.title),
        escape(&document.title)
    );
    for line in &document.summary {
        let _ = write!(out, "<p>{}</p>", escape(line));
    }
    out.push_str("</header><main>");
    for chart in &document.charts {
        let _ = write!(
            out,
            "<section class=\"chart\"><h2>{} <span class=\"unit\">({})</span></h2>{}<div class=\"legend\">",
            escape(&chart.title),
            escape(&chart.unit),
            svg(chart)
        );
        for series in &chart.series {
            let _ = write!(
                out,
                "<span style=\"color:{}\"><i class=\"{}\" style=\"background-color:{}\"></i>{}</span>",
                series.color,
                if series.dashed { "dashed" } else { "" },
                if series.dashed {
                    "transparent"
                } else {
                    series.color
                },
                escape(&series.name)
            );
        }
        out.push_str("</div></section>");
    }
    for table in &document.tables {
        let _ = write!(
            out,
            "<section class=\"table\"><h2>{}</h2><table><thead><tr>",
            escape(&table.title)
        );
        for name in &table.header {
            let _ = write!(out, "<th>{}</th>", escape(name));
        }
        out.push_str("</tr></thead><tbody>");
        for row in &table.rows {
            out.push_str("<tr>");
            for cell in row {
                let class = if is_numeric(cell) {
                    " class=\"num\""
                } else {
                    ""
                };
                let _ = write!(out, "<td{class}>{}</td>", escape(cell));
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table></section>");
    }
    out.push_str("</main><footer>Made by karpenter-rs; self-contained: no script, nothing loaded from elsewhere.</footer></body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_a_run_cannot_become_markup() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        let page = render(&Document {
            title: "<b>run</b>".into(),
            summary: vec!["a < b".into()],
            charts: vec![Chart {
                title: "cost".into(),
                unit: "$/h".into(),
                series: vec![Series {
                    name: "</title><script>".into(),
                    color: PALETTE[0],
                    points: vec![(0.0, 1.0), (60.0, 2.0)],
                    dashed: false,
                }],
            }],
            tables: vec![Table {
                title: "t".into(),
                header: vec!["<th>".into()],
                rows: vec![vec!["<td>".into()]],
            }],
        });
        assert!(!page.contains("<script"), "{page}");
        assert!(!page.contains("<b>run"), "{page}");
        assert!(page.contains("&lt;/title&gt;&lt;script&gt;"));
        assert!(!page.contains("http://") && !page.contains("https://"));
    }

    #[test]
    fn axes_take_round_steps() {
        assert_eq!(nice_step(10.31, 4.0), 5.0);
        assert_eq!(nice_step(0.48, 4.0), 0.2);
        assert_eq!(nice_step(32.0, 4.0), 10.0);
        assert_eq!(nice_step(0.0, 4.0), 1.0);
        assert_eq!(time_step(3600.0), 600.0);
        assert_eq!(time_step(7.0 * 86400.0), 86400.0);
        assert_eq!(clock(5400.0), "01:30");
        assert_eq!(clock(90000.0), "1d01h");
    }

    #[test]
    fn a_series_is_drawn_within_the_frame() {
        let chart = Chart {
            title: "nodes".into(),
            unit: "count".into(),
            series: vec![Series {
                name: "spot".into(),
                color: PALETTE[1],
                points: vec![(0.0, 0.0), (1800.0, 32.0), (3600.0, 13.0)],
                dashed: true,
            }],
        };
        let svg = svg(&chart);
        let points = svg
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        for pair in points.split(' ') {
            let (x, y) = pair.split_once(',').unwrap();
            let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            assert!(
                (56.0..=704.0).contains(&x) && (12.0..=232.0).contains(&y),
                "{pair}"
            );
        }
        assert!(svg.contains("stroke-dasharray"));
    }
}
