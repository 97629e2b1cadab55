//! `journal whatif DIR --manifests NEW.yaml`: the workload a simulation recorded, run again on
//! the simulator under other NodePools and EC2NodeClasses, and both runs side by side, each
//! measured from its own journal the same way.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use karpenter_rs::report::summary::{Summary, summary};
use karpenter_rs::sim::report::{counts, hms};
use karpenter_rs::sim::run::{CloudChoice, RunOptions, run};
use karpenter_rs::sim::whatif::{SCENARIO_FILE, whatif};

use super::simulate::SchedulingArgs;

/// What `journal whatif` is asked.
#[derive(Debug, clap::Args)]
pub struct WhatIfArgs {
    /// Journal directory of a `karpenter simulate` run.
    #[arg(value_name = "DIR", default_value = "karpenter-sim-journal")]
    pub dir: PathBuf,
    /// NodePools and EC2NodeClasses to replay under (multi-document YAML).
    #[arg(long, value_name = "NEW.yaml")]
    pub manifests: PathBuf,
    /// Keep the what-if run's journal here (replaced if it holds one) instead of a temporary
    /// directory, e.g. to `journal report` or `journal explain` it.
    #[arg(long, value_name = "DIR")]
    pub keep_journal: Option<PathBuf>,
    /// Print both runs' figures as JSON.
    #[arg(long)]
    pub json: bool,
    /// Batching windows and scheduling policies of the replay (give the recorded run's).
    #[command(flatten)]
    pub scheduling: SchedulingArgs,
}

/// Runs the what-if and prints both runs.
pub fn whatif_command(args: WhatIfArgs) -> anyhow::Result<ExitCode> {
    let recorded_path = args.dir.join(SCENARIO_FILE);
    let recorded = match std::fs::read_to_string(&recorded_path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => bail!(
            "{} has no {SCENARIO_FILE}: what-if replays journals written by `karpenter simulate`, which keeps its scenario there (journals of `controller` runs hold the pods' events but not their workloads)",
            args.dir.display()
        ),
        Err(error) => {
            return Err(error).with_context(|| format!("cannot read {}", recorded_path.display()));
        }
    };
    let manifests = std::fs::read_to_string(&args.manifests)
        .with_context(|| format!("--manifests: cannot read {}", args.manifests.display()))?;
    let plan = whatif(&recorded, &manifests)
        .with_context(|| format!("--manifests {}", args.manifests.display()))?;
    for line in &plan.dropped {
        eprintln!("note: {line}");
    }
    let scenario = karpenter_rs::sim::scenario::parse(
        &plan.scenario,
        &format!("the recorded scenario under {}", args.manifests.display()),
    )?;
    let recorded_journal = super::journal_open::open(&args.dir)?;
    let before = summary(&recorded_journal)?;
    drop(recorded_journal);

    let temporary;
    let journal_dir = match &args.keep_journal {
        Some(dir) => {
            if dir.exists() {
                if !super::journal_open::is_journal_dir(dir) {
                    bail!(
                        "--keep-journal {}: exists and is not a journal; choose another directory",
                        dir.display()
                    );
                }
                std::fs::remove_dir_all(dir)
                    .with_context(|| format!("cannot remove {}", dir.display()))?;
            }
            dir.clone()
        }
        None => {
            temporary = tempfile::tempdir().context("cannot make a temporary directory")?;
            temporary.path().join("journal")
        }
    };
    eprintln!(
        "replaying {} ({} simulated) under {}…",
        scenario.file.name,
        hms(scenario.file.duration),
        args.manifests.display()
    );
    let options = RunOptions {
        journal_dir: journal_dir.clone(),
        progress: karpenter_rs::progress::Progress::Off,
        settings: args.scheduling.settings(),
        scope: "whatif".into(),
        resume: false,
        pace: None,
        admin: None,
        measure: false,
        gc: Default::default(),
        cloud: CloudChoice::Sim,
    };
    let report = run(&scenario, &options)?;
    let after = summary(&super::journal_open::open(&journal_dir)?)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "recorded": before,
                "whatif": after,
                "same_manifests": plan.same_manifests,
                "dropped": plan.dropped,
            }))?
        );
    } else {
        print_side_by_side(&args.dir, &args.manifests, &before, &after);
        if let Some(dir) = &args.keep_journal {
            println!("what-if journal: {}", dir.display());
        }
    }
    let healthy = report.leaked_instances == 0 && report.actor_failures.is_empty();
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

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

/// Both runs' figures in two columns, then $/h and nodes over time.
pub fn print_side_by_side(dir: &Path, manifests: &Path, before: &Summary, after: &Summary) {
    let (a, b) = ("recorded".to_owned(), "what-if".to_owned());
    println!("== recorded: {}", dir.display());
    println!(
        "== what-if:  the same workload under {}",
        manifests.display()
    );
    println!("{:<28} {:>14} {:>14} {:>9}", "", a, b, "change");
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
            "{name:<28} {:>14} {:>14} {:>9}",
            show(x),
            show(y),
            change(x, y)
        );
    }
    println!(
        "{:<28} {:>14} {:>14} {:>9}",
        "NodeClaims launched",
        before.nodeclaims_launched,
        after.nodeclaims_launched,
        change(
            before.nodeclaims_launched as f64,
            after.nodeclaims_launched as f64
        )
    );
    println!(
        "{:<28} {:>14} {:>14}",
        "pods pending at the end", before.pods_pending_at_end, after.pods_pending_at_end
    );
    println!("disruptions, recorded: {}", counts(&before.disrupted));
    println!("disruptions, what-if:  {}", counts(&after.disrupted));
    println!();
    println!(
        "{:>8} {:>12} {:>12} {:>8} {:>8}",
        "time", "$/h rec.", "$/h what-if", "nodes", "nodes"
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
            "{:>8} {cx:>12} {cy:>12} {nx:>8} {ny:>8}",
            hms(std::time::Duration::from_millis(at as u64))
        );
        i += 1;
    }
}
