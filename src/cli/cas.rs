//! `--cluster-autoscaler` of `simulate` and `journal whatif`: the workload run again under the
//! Cluster Autoscaler model, and both runs side by side.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use karpenter_core::cas::{CasSettings, Expander, groups_yaml};
use karpenter_rs::report::run::hms;
use karpenter_rs::report::summary::{Summary, summary};
use karpenter_rs::sim::cas::{CasOptions, GroupsChoice, run_cas};
use karpenter_rs::sim::scenario::Scenario;

use karpenter_rs::system::journal_dir::RunJournal;

use super::side_by_side::{Columns, print_side_by_side};

/// How the Cluster Autoscaler run is set up.
#[derive(Debug, clap::Args)]
pub struct CasArgs {
    /// The node groups (YAML: `nodeGroups:` with name, instanceType, capacityType, zones,
    /// minSize, maxSize, labels, taints); by default one per NodePool and capacity type it
    /// allows, printed so they can be edited and given here.
    #[arg(long, value_name = "FILE", requires = "cluster_autoscaler")]
    pub node_groups: Option<PathBuf>,
    /// How Cluster Autoscaler picks among the node groups that would help: random (its
    /// default), least-waste or most-pods.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "random",
        requires = "cluster_autoscaler"
    )]
    pub expander: Expander,
    /// Keep the Cluster Autoscaler run's journal here (replaced if it holds one), e.g. to
    /// `journal report` it.
    #[arg(long, value_name = "DIR", requires = "cluster_autoscaler")]
    pub cas_journal: Option<PathBuf>,
}

/// Both runs' figures, for JSON.
#[derive(Debug, serde::Serialize)]
pub struct Compared {
    /// The node groups, as a node-groups file.
    pub node_groups: String,
    /// NodePools left without a group, timeline steps left out.
    pub notes: Vec<String>,
    /// The Cluster Autoscaler run.
    pub cluster_autoscaler: Summary,
}

/// A Cluster Autoscaler run with its flags checked and its node-groups file read, its
/// journal directory not yet touched.
pub struct CasPlan {
    groups: GroupsChoice,
    expander: Expander,
    journal: RunJournal,
}

impl CasArgs {
    /// Checks the flags and reads `--node-groups` before anything is run or written.
    pub fn check(&self) -> anyhow::Result<CasPlan> {
        let groups = match &self.node_groups {
            Some(path) => GroupsChoice::File(
                std::fs::read_to_string(path)
                    .with_context(|| format!("--node-groups: cannot read {}", path.display()))?,
                path.clone(),
            ),
            None => GroupsChoice::Derived,
        };
        Ok(CasPlan {
            groups,
            expander: self.expander,
            journal: RunJournal::check_or_temporary(self.cas_journal.as_deref(), "--cas-journal")?,
        })
    }
}

impl CasPlan {
    /// The run's journal directory, to check against the other run's.
    pub fn journal(&self) -> &RunJournal {
        &self.journal
    }
}

/// Runs `scenario` under Cluster Autoscaler, says which node groups it used on stderr, and
/// returns its figures.
pub fn run(scenario: &Scenario, plan: CasPlan) -> anyhow::Result<Compared> {
    let CasPlan {
        groups,
        expander,
        journal,
    } = plan;
    let (journal_dir, _temporary) = journal.prepare()?;
    eprintln!(
        "running {} ({} simulated) under Cluster Autoscaler (expander {:?})…",
        scenario.file.name,
        hms(scenario.file.duration),
        expander
    );
    let run = run_cas(
        scenario,
        &CasOptions {
            journal_dir: journal_dir.clone(),
            groups,
            expander,
            settings: CasSettings::default(),
        },
    )?;
    eprintln!("node groups:");
    for (group, why) in &run.groups {
        eprintln!("  {}", group.describe());
        if let Some(why) = why {
            eprintln!("    ({why})");
        }
    }
    for note in &run.notes {
        eprintln!("note: {note}");
    }
    eprintln!(
        "Cluster Autoscaler: {} scans, {} scale-ups, {} nodes removed, {} launches refused",
        run.scans, run.scale_ups, run.removed, run.failed_launches
    );
    let cas = summary(&*super::journal_open::open(&journal_dir)?)?;
    let groups: Vec<_> = run.groups.iter().map(|(g, _)| g.clone()).collect();
    Ok(Compared {
        node_groups: groups_yaml(&groups),
        notes: run.notes,
        cluster_autoscaler: cas,
    })
}

/// Prints `ours` (karpenter-rs, from the journal in `dir`) beside Cluster Autoscaler's run.
pub fn print(dir: &Path, ours: &Summary, compared: &Compared, kept: Option<&Path>) {
    println!();
    print_side_by_side(
        &Columns {
            names: ["karpenter-rs", "cluster-autoscaler"],
            short: ["ours", "CAS"],
            about: [
                format!("karpenter-rs, journal {}", dir.display()),
                "the same workload under Cluster Autoscaler's node groups".to_owned(),
            ],
            launched: "instances",
        },
        ours,
        &compared.cluster_autoscaler,
    );
    if let Some(dir) = kept {
        println!("Cluster Autoscaler journal: {}", dir.display());
    }
}
