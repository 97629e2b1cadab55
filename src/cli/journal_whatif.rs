//! `journal whatif DIR --manifests NEW.yaml`: the workload a simulation recorded, run again on
//! the simulator under other NodePools and EC2NodeClasses (or, with `--cluster-autoscaler`,
//! under Cluster Autoscaler's node groups), and both runs side by side, each measured from its
//! own journal the same way.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use karpenter_rs::report::run::hms;
use karpenter_rs::report::summary::summary;
use karpenter_rs::sim::run::{CloudChoice, RunOptions, run};
use karpenter_rs::sim::whatif::{SCENARIO_FILE, whatif};
use karpenter_rs::system::journal_dir::RunJournal;

use super::cas::CasArgs;
use super::side_by_side::{Columns, print_side_by_side};
use super::simulate::SchedulingArgs;

/// What `journal whatif` is asked.
#[derive(Debug, clap::Args)]
pub struct WhatIfArgs {
    /// Journal directory of a `karpenter simulate` run.
    #[arg(value_name = "DIR", default_value = "karpenter-sim-journal")]
    pub dir: PathBuf,
    /// NodePools and EC2NodeClasses to replay under (multi-document YAML).
    #[arg(
        long,
        value_name = "NEW.yaml",
        required_unless_present = "cluster_autoscaler",
        conflicts_with_all = ["cluster_autoscaler", "node_groups", "cas_journal"]
    )]
    pub manifests: Option<PathBuf>,
    /// Replay under Cluster Autoscaler instead (a model of its defaults: fixed node groups of
    /// one instance type each, scale-up by group, nodes under 50 % utilization removed after
    /// 10 minutes).
    #[arg(long)]
    pub cluster_autoscaler: bool,
    /// The Cluster Autoscaler run's node groups and expander.
    #[command(flatten)]
    pub cas: CasArgs,
    /// Keep the what-if run's journal here (replaced if it holds one) instead of a temporary
    /// directory, e.g. to `journal report` or `journal explain` it.
    #[arg(long, value_name = "DIR", conflicts_with = "cluster_autoscaler")]
    pub keep_journal: Option<PathBuf>,
    /// Print both runs' figures as JSON.
    #[arg(long)]
    pub json: bool,
    /// Batching windows and scheduling policies of the replay (give the recorded run's);
    /// with --cluster-autoscaler the recorded run is not replayed and they have no use.
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
    let Some(manifests_path) = &args.manifests else {
        return against_cluster_autoscaler(&args, &recorded);
    };
    let keep = RunJournal::check_or_temporary(args.keep_journal.as_deref(), "--keep-journal")?;
    keep.not_in(&args.dir, "the journal replayed")?;
    let manifests = std::fs::read_to_string(manifests_path)
        .with_context(|| format!("--manifests: cannot read {}", manifests_path.display()))?;
    let plan = whatif(&recorded, &manifests)
        .with_context(|| format!("--manifests {}", manifests_path.display()))?;
    for line in &plan.dropped {
        eprintln!("note: {line}");
    }
    let scenario = karpenter_rs::sim::scenario::parse(
        &plan.scenario,
        &format!("the recorded scenario under {}", manifests_path.display()),
    )?;
    let recorded_journal = super::journal_open::open(&args.dir)?;
    let before = summary(&recorded_journal)?;
    drop(recorded_journal);

    let (journal_dir, _temporary) = keep.prepare()?;
    eprintln!(
        "replaying {} ({} simulated) under {}…",
        scenario.file.name,
        hms(scenario.file.duration),
        manifests_path.display()
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
    let after = summary(&*super::journal_open::open(&journal_dir)?)?;
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
        print_side_by_side(
            &Columns {
                names: ["recorded", "what-if"],
                short: ["rec.", "what-if"],
                about: [
                    args.dir.display().to_string(),
                    format!("the same workload under {}", manifests_path.display()),
                ],
                launched: "NodeClaims",
            },
            &before,
            &after,
        );
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

/// `--cluster-autoscaler`: the recorded scenario as it ran, under Cluster Autoscaler.
fn against_cluster_autoscaler(args: &WhatIfArgs, recorded: &str) -> anyhow::Result<ExitCode> {
    let scenario = karpenter_rs::sim::scenario::parse(
        recorded,
        &format!("{}", args.dir.join(SCENARIO_FILE).display()),
    )?;
    let plan = args.cas.check()?;
    plan.journal().not_in(&args.dir, "the journal replayed")?;
    let before = summary(&*super::journal_open::open(&args.dir)?)?;
    let compared = super::cas::run(&scenario, plan)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "recorded": before,
                "cluster_autoscaler": compared.cluster_autoscaler,
                "node_groups": compared.node_groups,
                "notes": compared.notes,
            }))?
        );
    } else {
        super::cas::print(
            &args.dir,
            &before,
            &compared,
            args.cas.cas_journal.as_deref(),
        );
    }
    Ok(ExitCode::SUCCESS)
}
