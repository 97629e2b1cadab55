//! Two runs' figures side by side, each measured from its own journal the same way
//! (`journal whatif`, `simulate --cluster-autoscaler`).

use karpenter_rs::report::run::{counts, hms};
use karpenter_rs::report::summary::Summary;

fn change(before: f64, after: f64) -> String {
    if before.abs() < 1e-12 {
        return if after.abs() < 1e-12 {
            "=".into()
        } else {
            "new".into()
        };
    }
    format!("{:+.1}%", (after - before) / before * 100.0)
}

/// How a figure is written.
type Shown = dyn Fn(f64) -> String;

/// How the two runs are named.
pub struct Columns<'a> {
    /// Names, over the columns (at most 18 characters).
    pub names: [&'a str; 2],
    /// Shorter ones, over the time series (at most 8).
    pub short: [&'a str; 2],
    /// What each run was, a line each.
    pub about: [String; 2],
    /// What a launch is called (NodeClaims, instances).
    pub launched: &'a str,
}

/// Both runs' figures in two columns, then $/h and nodes over time.
pub fn print_side_by_side(columns: &Columns<'_>, before: &Summary, after: &Summary) {
    let [a, b] = columns.names;
    for (name, about) in columns.names.iter().zip(&columns.about) {
        println!("== {:<19} {about}", format!("{name}:"));
    }
    println!("{:<28} {:>18} {:>18} {:>9}", "", a, b, "change");
    let rows: [(&str, f64, f64, &Shown); 7] = [
        (
            "$/h, mean over the run",
            before.mean_cost_per_hour,
            after.mean_cost_per_hour,
            &|v| format!("${v:.3}"),
        ),
        ("cost of the run", before.dollars, after.dollars, &|v| {
            format!("${v:.3}")
        }),
        (
            "$/h at the end",
            before.end_cost_per_hour,
            after.end_cost_per_hour,
            &|v| format!("${v:.3}"),
        ),
        ("nodes, mean", before.mean_nodes, after.mean_nodes, &|v| {
            format!("{v:.1}")
        }),
        (
            "nodes, peak",
            before.peak_nodes as f64,
            after.peak_nodes as f64,
            &|v| format!("{v:.0}"),
        ),
        (
            "pod pending p50",
            before.pending_p50,
            after.pending_p50,
            &|v| format!("{v:.0}s"),
        ),
        (
            "pod pending p99",
            before.pending_p99,
            after.pending_p99,
            &|v| format!("{v:.0}s"),
        ),
    ];
    for (name, x, y, show) in rows {
        println!(
            "{name:<28} {:>18} {:>18} {:>9}",
            show(x),
            show(y),
            change(x, y)
        );
    }
    println!(
        "{:<28} {:>18} {:>18} {:>9}",
        format!("{} launched", columns.launched),
        before.nodeclaims_launched,
        after.nodeclaims_launched,
        change(
            before.nodeclaims_launched as f64,
            after.nodeclaims_launched as f64
        )
    );
    println!(
        "{:<28} {:>18} {:>18}",
        "pods pending at the end", before.pods_pending_at_end, after.pods_pending_at_end
    );
    for (name, summary) in [(a, before), (b, after)] {
        println!(
            "{:<28} {}",
            format!("disruptions, {name}:"),
            counts(&summary.disrupted)
        );
    }
    println!();
    let [x, y] = columns.short;
    println!(
        "{:>8} {:>12} {:>12} {:>13} {:>13}",
        "time",
        format!("$/h {x}"),
        format!("$/h {y}"),
        format!("nodes {x}"),
        format!("nodes {y}")
    );
    let (p, q) = (&before.timeline.points, &after.timeline.points);
    let start =
        |points: &[karpenter_rs::report::timeline::Point]| points.first().map_or(0, |x| x.at_ms);
    let (s0, s1) = (start(p), start(q));
    // Every 5 minutes of journal time, from each run's own start.
    let mut i = 0usize;
    loop {
        let at = i as i64 * 300_000;
        let x = p.iter().take_while(|pt| pt.at_ms - s0 <= at).last();
        let y = q.iter().take_while(|pt| pt.at_ms - s1 <= at).last();
        let beyond = p.last().is_none_or(|pt| pt.at_ms - s0 < at)
            && q.last().is_none_or(|pt| pt.at_ms - s1 < at);
        if beyond || i > 10_000 {
            break;
        }
        let show = |pt: Option<&karpenter_rs::report::timeline::Point>| {
            pt.map_or(("-".to_owned(), "-".to_owned()), |pt| {
                (
                    format!("{:.3}", pt.cost_per_hour),
                    pt.nodes.values().sum::<usize>().to_string(),
                )
            })
        };
        let ((cx, nx), (cy, ny)) = (show(x), show(y));
        println!(
            "{:>8} {cx:>12} {cy:>12} {nx:>13} {ny:>13}",
            hms(std::time::Duration::from_millis(at as u64))
        );
        i += 1;
    }
}
