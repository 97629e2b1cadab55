//! `simulate`: the whole autoscaler on the embedded simulated cluster and cloud.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use karpenter_actors::actor::Settings;
use karpenter_actors::actor::keeper::JournalKeeping;
use karpenter_core::scheduling::{MinValuesPolicy, PreferencePolicy};
use karpenter_journal::RetentionPolicy;
use karpenter_rs::report::run::Report;
use karpenter_rs::sim::run::{CloudChoice, RunOptions, print_report, run};
use karpenter_rs::sim::scenario::{BUILT_IN, parse};

use super::parse_duration;
use karpenter_rs::system::journal_dir::{RunJournal, Start};

/// Options of `simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Scenario file (YAML); the built-in scenario when absent.
    #[arg(value_name = "SCENARIO")]
    pub scenario: Option<PathBuf>,
    /// Journal directory; a previous simulation journal there is replaced.
    #[arg(long, value_name = "DIR", default_value = "karpenter-sim-journal")]
    pub journal: PathBuf,
    /// Batching windows and scheduling policies.
    #[command(flatten)]
    pub scheduling: SchedulingArgs,
    /// Continue the journal in --journal from its last moment (after a crash or a kill) with
    /// the same scenario, instead of replacing it.
    #[arg(long)]
    pub resume: bool,
    /// Also write the report as a self-contained HTML page with charts over simulated time
    /// ($/h against one round from scratch and its lower bound, nodes by capacity type, pods
    /// pending and bound, disruptions by reason) and the end-of-run tables.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// No progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// Serve the admin endpoint (actor state, journal, metrics) on this address during the
    /// run, e.g. 127.0.0.1:8080.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<std::net::SocketAddr>,
    /// Token the admin endpoint and its page require: `Authorization: Bearer TOKEN`, or a
    /// browser login with the token as password (mandatory off loopback).
    #[arg(
        long,
        env = "ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
    /// Simulated seconds per real second; with --admin it defaults to 60 (an hour takes a
    /// minute) so there is time to look, otherwise the run goes as fast as it can.
    #[arg(long, value_name = "FACTOR")]
    pub pace: Option<f64>,
    /// Also run the workload under Cluster Autoscaler (a model of its defaults: fixed node
    /// groups of one instance type each, scale-up by group, nodes under 50 % utilization
    /// removed after 10 minutes) and print both runs side by side.
    #[arg(long)]
    pub cluster_autoscaler: bool,
    /// The Cluster Autoscaler run's node groups and expander.
    #[command(flatten)]
    pub cas: super::cas::CasArgs,
    /// The cloud nodes come from, and how to reach AWS.
    #[command(flatten)]
    pub aws: super::aws::AwsArgs,
}

/// The batching windows and scheduling policies, with upstream's names, shared by every
/// command that runs the actors.
#[derive(Debug, Clone, clap::Args)]
pub struct SchedulingArgs {
    /// Close a batch after this long without new pending pods.
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = parse_duration)]
    pub batch_idle_duration: Duration,
    /// Close a batch this long after it opened.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = parse_duration)]
    pub batch_max_duration: Duration,
    /// Honour pods' scheduling preferences (preferred node and pod affinity, ScheduleAnyway
    /// spreads) where possible, relaxing them one at a time when not (Respect), or ignore them
    /// (Ignore).
    #[arg(
        long,
        env = "PREFERENCE_POLICY",
        default_value = "Respect",
        value_name = "Respect|Ignore"
    )]
    pub preference_policy: PreferencePolicy,
    /// When a NodeClaim cannot keep a requirement's minValues distinct values: leave the pod
    /// unschedulable (Strict), or launch with what is left and annotate the NodeClaim
    /// karpenter.sh/nodeclaim-min-values-relaxed (BestEffort).
    #[arg(
        long,
        env = "MIN_VALUES_POLICY",
        default_value = "Strict",
        value_name = "Strict|BestEffort"
    )]
    pub min_values_policy: MinValuesPolicy,
    /// Take no voluntary disruption decision (no empty or drifted node is removed or
    /// replaced); NodeClaims still expire, get their conditions and can be deleted by hand.
    /// For a take-over or an incident, as upstream's budgets of `nodes: "0"` but for every
    /// NodePool at once.
    #[arg(long, env = "DISABLE_DISRUPTION")]
    pub disable_disruption: bool,
    /// Feature gates, as upstream's FEATURE_GATES: `SpotToSpotConsolidation=true` lets
    /// consolidation replace spot nodes with cheaper spot nodes, `NodeOverlay=true` applies
    /// NodeOverlays' prices, `NodeRepair=true` deletes nodes unhealthy past the cloud's
    /// repair policies, `StaticCapacity=true` keeps static NodePools' replicas,
    /// `CapacityBuffer=true` keeps CapacityBuffers' headroom (all five off by default, as
    /// upstream).
    #[arg(long, env = "FEATURE_GATES", default_value = "", value_parser = parse_feature_gates)]
    pub feature_gates: FeatureGates,
    /// Snapshot the journal's state this often (journal clock); a restart replays at most
    /// this much history.
    #[arg(long, env = "JOURNAL_SNAPSHOT_INTERVAL", default_value = "10m", value_parser = parse_duration)]
    pub journal_snapshot_interval: Duration,
    /// Remove journal history older than this (cut at a checkpoint snapshot; kept snapshots
    /// are 6 h apart); `0s` keeps history however old.
    #[arg(long, env = "JOURNAL_RETENTION", default_value = "24h", value_parser = parse_duration)]
    pub journal_retention: Duration,
    /// Remove the oldest journal history while its events exceed this many MiB; 0 for no
    /// limit.
    #[arg(long, env = "JOURNAL_MAX_MIB", default_value_t = 64)]
    pub journal_max_mib: u64,
}

/// The feature gates karpenter-rs reads, at upstream's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGates {
    /// `SpotToSpotConsolidation` (off).
    pub spot_to_spot: bool,
    /// `NodeOverlay` (off).
    pub node_overlay: bool,
    /// `ReservedCapacity` (on).
    pub reserved_capacity: bool,
    /// `NodeRepair` (off).
    pub node_repair: bool,
    /// `StaticCapacity` (off).
    pub static_capacity: bool,
    /// `CapacityBuffer` (off).
    pub capacity_buffer: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates {
            spot_to_spot: false,
            node_overlay: false,
            reserved_capacity: true,
            node_repair: false,
            static_capacity: false,
            capacity_buffer: false,
        }
    }
}

/// Reads `Name=true|false,...`: upstream's gates, each acted on.
pub fn parse_feature_gates(text: &str) -> Result<FeatureGates, String> {
    let mut gates = FeatureGates::default();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| format!("feature gate {item:?}: expected Name=true or Name=false"))?;
        let on = match value.trim() {
            "true" => true,
            "false" => false,
            other => {
                return Err(format!(
                    "feature gate {name}: {other:?} is not true or false"
                ));
            }
        };
        match name.trim() {
            "SpotToSpotConsolidation" => gates.spot_to_spot = on,
            "NodeOverlay" => gates.node_overlay = on,
            "ReservedCapacity" => gates.reserved_capacity = on,
            "NodeRepair" => gates.node_repair = on,
            "StaticCapacity" => gates.static_capacity = on,
            "CapacityBuffer" => gates.capacity_buffer = on,
            other => {
                return Err(format!(
                    "unknown feature gate {other:?}; known: SpotToSpotConsolidation, NodeOverlay, ReservedCapacity, NodeRepair, StaticCapacity, CapacityBuffer"
                ));
            }
        }
    }
    Ok(gates)
}

impl SchedulingArgs {
    /// The actor settings these flags set (the rest at their defaults).
    pub fn settings(&self) -> Settings {
        Settings {
            batch_idle: self.batch_idle_duration,
            batch_max: self.batch_max_duration,
            preference_policy: self.preference_policy,
            min_values_policy: self.min_values_policy,
            disruption_enabled: !self.disable_disruption,
            spot_to_spot: self.feature_gates.spot_to_spot,
            node_overlay: self.feature_gates.node_overlay,
            reserved_capacity: self.feature_gates.reserved_capacity,
            node_repair: self.feature_gates.node_repair,
            static_capacity: self.feature_gates.static_capacity,
            capacity_buffer: self.feature_gates.capacity_buffer,
            keeping: self.keeping(),
            ..Settings::default()
        }
    }

    /// How the journal keeper snapshots and trims the journal.
    pub fn keeping(&self) -> JournalKeeping {
        JournalKeeping {
            snapshot_every: self.journal_snapshot_interval.max(Duration::from_secs(1)),
            retention: RetentionPolicy {
                max_age: (!self.journal_retention.is_zero()).then_some(self.journal_retention),
                max_bytes: (self.journal_max_mib > 0).then(|| self.journal_max_mib * 1024 * 1024),
            },
            ..JournalKeeping::default()
        }
    }
}

/// Runs `simulate`. Every flag, the scenario and the settings are checked before the
/// journal directory is touched: a refused flag leaves a journal already there as it was.
pub fn simulate(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let (text, origin) = match &args.scenario {
        Some(path) => (
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?,
            path.display().to_string(),
        ),
        None => (BUILT_IN.to_owned(), "built-in scenario".to_owned()),
    };
    let scenario = parse(&text, &origin)?;
    let start = if args.resume {
        Start::Resume
    } else {
        Start::Replace
    };
    let journal = RunJournal::check(&args.journal, "--journal", start)?;
    let cloud = match args.aws.run()? {
        Some(mut aws) => {
            aws.settings.reserved_capacity = args.scheduling.feature_gates.reserved_capacity;
            CloudChoice::Aws(Box::new(aws))
        }
        None => CloudChoice::Sim,
    };
    let admin = args.admin.map(|addr| karpenter_rs::admin::AdminOptions {
        addr,
        token: args.admin_token.clone(),
    });
    if let Some(admin) = &admin {
        admin.check()?;
    }
    let pace = args.pace.or(args.admin.map(|_| 60.0));
    check_run(&args, &scenario, &origin, &cloud, pace)?;
    let cas = if args.cluster_autoscaler {
        let plan = args.cas.check()?;
        journal.distinct_from(plan.journal())?;
        Some(plan)
    } else {
        None
    };
    if let Some(path) = &args.report {
        check_writable(path, "--report")?;
    }
    let (journal_dir, _) = journal.prepare()?;
    let options = RunOptions {
        journal_dir,
        progress: karpenter_rs::progress::Progress::for_stderr(args.quiet),
        settings: args.scheduling.settings(),
        scope: "sim".into(),
        resume: args.resume,
        pace,
        admin,
        measure: false,
        gc: Default::default(),
        cloud,
    };
    let started = std::time::Instant::now();
    let report = run(&scenario, &options)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report, &args.journal);
        // Fleet figures from the journal, as `journal export`'s tables answer them.
        let tables = karpenter_export::project(&*super::journal_open::open(&args.journal)?)?;
        let mut figures = String::new();
        karpenter_export::figures::print(&tables, &mut figures)?;
        print!("{figures}");
        println!("wall time: {:.1}s", started.elapsed().as_secs_f64());
    }
    if let Some(plan) = cas {
        let ours =
            karpenter_rs::report::summary::summary(&*super::journal_open::open(&args.journal)?)?;
        let compared = super::cas::run(&scenario, plan)?;
        super::cas::print(
            &args.journal,
            &ours,
            &compared,
            args.cas.cas_journal.as_deref(),
        );
    }
    if let Some(path) = &args.report {
        write_report(&report, &args.journal, path)?;
        eprintln!("report: {}", path.display());
    }
    let healthy = report.leaked_instances == 0 && report.actor_failures.is_empty();
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The flags that do not go together, or do not suit the scenario or the cloud.
fn check_run(
    args: &SimulateArgs,
    scenario: &karpenter_rs::sim::scenario::Scenario,
    origin: &str,
    cloud: &CloudChoice,
    pace: Option<f64>,
) -> anyhow::Result<()> {
    let on_aws = matches!(cloud, CloudChoice::Aws(_));
    if on_aws && pace.is_some() {
        bail!(
            "--cloud aws runs in real time; --pace (and --admin, which paces the in-memory cloud) are for the in-memory cloud"
        );
    }
    if on_aws
        && let Some(i) = scenario.file.timeline.iter().position(|s| {
            matches!(
                s.action,
                karpenter_rs::sim::scenario::Action::AmiRelease { .. }
            )
        })
    {
        bail!(
            "{origin}: timeline[{i}].amiRelease: images on EC2 are released by AWS, not by a scenario; run it on the in-memory cloud (without --cloud aws), or use a scenario without amiRelease steps such as deploy/scenarios/emulator.yaml"
        );
    }
    if let Some(pace) = pace
        && !(pace.is_finite() && pace > 0.0)
    {
        bail!(
            "--pace {pace}: give a positive number of simulated seconds per real second, e.g. 60"
        );
    }
    if args.cluster_autoscaler {
        if args.json {
            bail!(
                "--cluster-autoscaler prints a table; for JSON run `karpenter journal whatif {} --cluster-autoscaler --json` after this run",
                args.journal.display()
            );
        }
        if on_aws || args.resume {
            bail!(
                "--cluster-autoscaler runs on the in-memory cloud from the start; leave out --cloud aws and --resume"
            );
        }
    }
    Ok(())
}

/// Refuses an output file whose directory does not exist, before the run rather than after.
fn check_writable(path: &Path, flag: &str) -> anyhow::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        bail!(
            "{flag} {}: the directory {} does not exist; create it or name a file in an existing one",
            path.display(),
            parent.display()
        );
    }
    if path.is_dir() {
        bail!("{flag} {}: is a directory; name a file", path.display());
    }
    Ok(())
}

/// The run's HTML report: its journal's timeline and its figures.
fn write_report(report: &Report, journal: &Path, path: &Path) -> anyhow::Result<()> {
    use karpenter_rs::report::{EVERY_MS, html, of_simulation, timeline};
    let journal = super::journal_open::open(journal)?;
    let timeline = timeline::timeline(&journal, EVERY_MS)?;
    let mut document = of_simulation(report, &timeline);
    let tables = karpenter_export::project(&journal)?;
    document
        .tables
        .extend(karpenter_rs::report::figures_tables(&tables));
    let page = html::render(&document);
    std::fs::write(path, page).with_context(|| format!("--report: cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_default_gates_are_read_and_each_gate_is_named_in_its_error() {
        // Upstream's FEATURE_GATES default, as a team switching would carry it over.
        let gates = parse_feature_gates(
            "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false",
        )
        .unwrap();
        assert_eq!(gates, FeatureGates::default());
        let on = parse_feature_gates("NodeRepair=true, StaticCapacity=true,CapacityBuffer=true")
            .unwrap();
        assert!(on.node_repair && on.static_capacity && on.capacity_buffer);
        let err = parse_feature_gates("Buffers=true").unwrap_err();
        assert!(err.contains("known: SpotToSpotConsolidation, NodeOverlay, ReservedCapacity, NodeRepair, StaticCapacity, CapacityBuffer"), "{err}");
        let err = parse_feature_gates("NodeRepair=yes").unwrap_err();
        assert!(
            err.contains("NodeRepair: \"yes\" is not true or false"),
            "{err}"
        );
        let err = parse_feature_gates("Repair=true").unwrap_err();
        assert!(err.contains("unknown feature gate \"Repair\""), "{err}");
    }
}
