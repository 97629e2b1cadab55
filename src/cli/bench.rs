//! `bench scheduling` and `bench consolidation`.

use std::process::ExitCode;

use clap::Subcommand;
use karpenter_core::scheduling::PreferencePolicy;
use karpenter_rs::bench::consolidation::{
    Case, CaseOptions, Run, aws_input, one_pod_per_node, run_case, run_fleet,
};
use karpenter_rs::bench::long_run::{self, LongRun};
use karpenter_rs::bench::{Row, SIZES, benchmark_input, run as run_sizes, run_preferences};
use karpenter_rs::system::journal_dir::{RunJournal, Start};

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Upstream Karpenter's scheduling benchmark on identical input: 400 fake instance types,
    /// its generated pod lists (generic, zone and hostname spread, zone self-affinity,
    /// hostname anti-affinity), one NodePool. Prints one row per size; fails if any pod is
    /// left unplaced.
    Scheduling {
        /// Sizes to run (from 1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000).
        #[arg(long, value_delimiter = ',', default_values_t = SIZES.to_vec())]
        sizes: Vec<usize>,
        /// Rounds per size; the median is printed.
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Also run upstream's preferences case (4,000 pods with preferred node affinity and
        /// preferred anti-affinity), with preferences respected and with them ignored.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        preferences: bool,
    },
    /// Consolidation to its fixed point: a cluster packed for one of upstream's pod lists
    /// (400 fake instance types), a seeded half of its pods deleted, then every command the
    /// disruption pass would issue, each carried out at once. One row for our search
    /// (`WhenEmptyOrUnderutilized`), one for it with every NodePool `Balanced` (a move
    /// must save, as a share of the pool's cost, at least half the share of the pool's pods
    /// it moves), one for upstream's greedy search on the same cluster. Fails if any leaves
    /// a pod unplaced or breaks a constraint.
    Consolidation(ConsolidationArgs),
    /// The controller on the simulator for days of virtual time, the workload changing every
    /// few minutes: prints the journal's size on disk and the process's resident memory as
    /// the run goes, which the journal keeper's snapshots and retention keep level. Fails if
    /// either passes its target (200 MB, 150 MB) or a pod is left pending.
    /// Upstream Karpenter's performance suite (test/suites/performance) against an API
    /// server: the controller (`--cloud sim`) and `sim-nodes` run as processes of their
    /// own while the case's Deployments scale out and in; per phase the time, nodes, $/h,
    /// reserved CPU and memory utilisation, pods evicted, the controller's P95 resident
    /// memory and average CPU, and the API requests, beside upstream's bounds. Fails if a
    /// phase does not settle within upstream's timeout.
    Cluster(Box<super::bench_cluster::ClusterArgs>),
    LongRun {
        /// Simulated time.
        #[arg(long, default_value = "168h", value_parser = super::parse_duration)]
        duration: std::time::Duration,
        /// Seed of the workload's changes.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How often the web Deployment is scaled.
        #[arg(long, default_value = "5m", value_parser = super::parse_duration)]
        step: std::time::Duration,
        /// Print a row this often (simulated time).
        #[arg(long, default_value = "12h", value_parser = super::parse_duration)]
        print_every: std::time::Duration,
        /// Where the journal goes (replaced).
        #[arg(long, value_name = "DIR", default_value = "karpenter-long-run-journal")]
        journal: std::path::PathBuf,
        /// Fail when the resident memory passes this many MB (the target: 150).
        #[arg(long, default_value_t = long_run::RSS_TARGET / 1_000_000)]
        max_rss_mb: u64,
        /// Journal snapshots and retention, as for `simulate` and `controller`.
        #[command(flatten)]
        scheduling: super::simulate::SchedulingArgs,
    },
}

/// `bench consolidation`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ConsolidationArgs {
    /// The cluster: `upstream-pod-lists` (one of upstream's pod lists packed, half its
    /// pods deleted) or `one-pod-per-node` (the cluster upstream's disruption suite times:
    /// N on-demand 4-vCPU nodes with one 1-CPU pod each, over an assorted catalog like its
    /// fake provider's; `--catalogs` does not apply).
    #[arg(long, default_value = "upstream-pod-lists")]
    case: ConsolidationCase,
    /// Pod lists to pack (default 1000 and 2000: the whole run, baseline included, takes
    /// well under two minutes; 5000 makes about 1,000 nodes, 20000 about 4,000 and takes
    /// minutes more), or for `one-pod-per-node` the nodes (default 100, 500 and 1000).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Seed of the pods deleted.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also run upstream's greedy search on the same cluster (the baseline row).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    baseline: bool,
    /// Stop upstream's search after this long: at 20,000 pods it runs for most of an
    /// hour. Its row then shows where it stood, its total time prefixed `>`; `0s` for no
    /// limit.
    #[arg(long, default_value = "60s", value_parser = super::parse_duration)]
    baseline_limit: std::time::Duration,
    /// Catalogs to pack each pod list with: `fake` (upstream's 400 fake types, one
    /// unconstrained NodePool) and `aws` (the embedded AWS catalog with the built-in
    /// scenario's general-purpose NodePool).
    #[arg(long, value_delimiter = ',', default_values_t = vec![Catalog::Fake, Catalog::Aws])]
    catalogs: Vec<Catalog>,
    /// Consolidate with the `SpotToSpotConsolidation` feature gate on (spot nodes may be
    /// replaced by cheaper spot nodes; off, as by default, they can only be deleted).
    #[arg(long)]
    spot_to_spot: bool,
}

/// The cluster a consolidation case starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConsolidationCase {
    /// One of upstream's pod lists packed, a seeded half of its pods deleted.
    UpstreamPodLists,
    /// N on-demand 4-vCPU nodes, one 1-CPU pod each, an assorted catalog.
    OnePodPerNode,
}

/// The instance types a consolidation case packs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Catalog {
    /// Upstream's 400 fake types.
    Fake,
    /// The embedded AWS catalog, general-purpose NodePool.
    Aws,
}

impl std::fmt::Display for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Catalog::Fake => "fake",
            Catalog::Aws => "aws",
        })
    }
}

pub fn run(command: BenchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Scheduling {
            sizes,
            repeats,
            preferences,
        } => {
            println!("{}", karpenter_rs::system::host::summary());
            println!(
                "{:>13} {:>7} {:>6} {:>10} {:>10} {:>6} {:>10} {:>6} {:>11} {:>9} {:>8} | {:>9} {:>10} {:>6} {:>11}",
                "pods",
                "placed",
                "nodes",
                "$/h",
                "bound $/h",
                "ratio",
                "LP $/h",
                "/LP",
                "round",
                "pods/s",
                "peak MB",
                "FFD nodes",
                "FFD $/h",
                "ratio",
                "FFD round"
            );
            let print = |row: &Row| {
                let (ours, ffd) = (&row.ours, &row.first_fit);
                println!(
                    "{:>13} {:>7} {:>6} {:>10.2} {:>10.2} {:>6.3} {:>10.2} {:>6.3} {:>8.2} ms {:>9.0} {:>8} | {:>9} {:>10.2} {:>6.3} {:>8.2} ms",
                    row.label,
                    ours.placed,
                    ours.nodes,
                    ours.cost,
                    row.bound,
                    ours.cost / row.bound,
                    row.relaxation,
                    ours.cost / row.relaxation,
                    ours.round.as_secs_f64() * 1e3,
                    row.pods as f64 / ours.round.as_secs_f64(),
                    row.peak_rss
                        .map_or("-".to_owned(), |b| format!("{:.0}", b as f64 / 1e6)),
                    ffd.nodes,
                    ffd.cost,
                    ffd.cost / row.bound,
                    ffd.round.as_secs_f64() * 1e3,
                );
            };
            for size in sizes {
                print(&run_sizes(&[size], repeats)?.remove(0));
            }
            if preferences {
                for policy in [PreferencePolicy::Respect, PreferencePolicy::Ignore] {
                    print(&run_preferences(policy, repeats)?);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Consolidation(args) => consolidation(args),
        BenchCommand::Cluster(args) => super::bench_cluster::bench_cluster(*args),
        BenchCommand::LongRun {
            duration,
            seed,
            step,
            print_every,
            journal,
            max_rss_mb,
            scheduling,
        } => {
            let journal = RunJournal::check(&journal, "--journal", Start::Replace)?;
            let (journal_dir, _) = journal.prepare()?;
            long_run(
                &LongRun {
                    duration,
                    seed,
                    step,
                    journal_dir,
                    keeping: scheduling.keeping(),
                },
                print_every,
                max_rss_mb * 1_000_000,
            )
        }
    }
}

/// `bench consolidation`.
fn consolidation(args: ConsolidationArgs) -> anyhow::Result<ExitCode> {
    let ConsolidationArgs {
        case: which,
        sizes,
        seed,
        baseline,
        baseline_limit,
        catalogs,
        spot_to_spot,
    } = args;
    println!("{}", karpenter_rs::system::host::summary());
    println!(
        "{:>10} {:>9} {:>6} {:>6} {:>9} {:>9} | {:>10} {:>8} {:>8} {:>6} {:>6} {:>6} {:>9} {:>7} {:>9} {:>6}",
        "pods",
        "search",
        "nodes",
        "left",
        "$/h",
        "bound",
        "first",
        "total",
        "commands",
        "nodes",
        "moved",
        "sims",
        "after $/h",
        "/bound",
        "nodes",
        "saved"
    );
    let baseline_limit = (!baseline_limit.is_zero()).then_some(baseline_limit);
    match which {
        ConsolidationCase::UpstreamPodLists => {
            let sizes = if sizes.is_empty() {
                vec![1000, 2000]
            } else {
                sizes
            };
            for catalog in &catalogs {
                for &size in &sizes {
                    let (label, input) = match catalog {
                        Catalog::Fake => (size.to_string(), benchmark_input(size)?),
                        Catalog::Aws => (format!("{size} aws"), aws_input(size)?),
                    };
                    let options = CaseOptions {
                        seed,
                        baseline,
                        baseline_limit,
                        spot_to_spot,
                    };
                    print_case(&run_case(&label, &input, options)?)?;
                }
            }
        }
        ConsolidationCase::OnePodPerNode => {
            let sizes = if sizes.is_empty() {
                vec![100, 500, 1000]
            } else {
                sizes
            };
            for &nodes in &sizes {
                let label = format!("{nodes} 1/node");
                let mut fleet = one_pod_per_node::fleet(nodes)?;
                fleet.spot_to_spot = spot_to_spot;
                let limit = baseline.then_some(baseline_limit);
                print_case(&run_fleet(&label, fleet, false, limit)?)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn long_run(
    run: &LongRun,
    print_every: std::time::Duration,
    max_rss: u64,
) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let report = long_run::run(run)?;
    let mb = |b: Option<u64>| b.map_or("-".to_owned(), |b| format!("{:.1}", b as f64 / 1e6));
    println!(
        "{:>9} {:>11} {:>8} {:>6} {:>8} {:>8}",
        "simulated", "journal MB", "RSS MB", "nodes", "$/h", "pending"
    );
    for s in long_run::rows(&report.samples, print_every) {
        println!(
            "{:>9} {:>11} {:>8} {:>6} {:>8.2} {:>8}",
            karpenter_rs::report::run::hms(std::time::Duration::from_secs(s.at_seconds)),
            mb(s.journal_bytes),
            mb(s.rss_bytes),
            s.nodes,
            s.cost_per_hour,
            s.pods_pending
        );
    }
    let trimmed = long_run::trimmed(&run.journal_dir)?;
    let peaks = long_run::peaks(&report.samples);
    let (journal, rss) = (peaks.journal.0, peaks.rss.0);
    let at = |s: u64| karpenter_rs::report::run::hms(std::time::Duration::from_secs(s));
    println!(
        "long-run: {} simulated in {:.0} s; journal peak {} MB at {} (target {}), RSS peak {} MB at {}, median {} MB after the first day (target {}, failing above {}); retention removed {} events, {} kept; {} NodeClaims launched, {} pods pending at the end",
        karpenter_rs::report::run::hms(run.duration),
        started.elapsed().as_secs_f64(),
        mb(Some(journal)),
        at(peaks.journal.1),
        long_run::JOURNAL_TARGET / 1_000_000,
        mb(Some(rss)),
        at(peaks.rss.1),
        mb(long_run::rss_median(&report.samples, 24 * 3600)),
        long_run::RSS_TARGET / 1_000_000,
        max_rss / 1_000_000,
        trimmed.events,
        trimmed.kept,
        report.nodeclaims_launched,
        report.pods_pending,
    );
    if journal > long_run::JOURNAL_TARGET || rss > max_rss || report.pods_pending > 0 {
        eprintln!("long-run: journal or memory over its bound, or pods left pending");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints a case's rows; an error when a run lost a pod or broke a constraint.
fn print_case(case: &Case) -> anyhow::Result<()> {
    let runs = [
        ("ours", Some(&case.ours)),
        ("balanced", case.balanced.as_ref()),
        ("upstream", case.upstream.as_ref()),
    ];
    for (name, run) in runs.into_iter().filter_map(|(n, r)| Some((n, r?))) {
        print_run(case, name, run);
        if run.capped {
            println!(
                "{:>10} {name:>9} stopped at its time limit (--baseline-limit) before its fixed point",
                case.label
            );
        }
        let broken = run.fleet.violations();
        if run.fleet.pods() != case.pods || !broken.is_empty() {
            anyhow::bail!(
                "{} {name}: {} of {} pods placed; {} constraints broken, e.g. {:?}",
                case.label,
                run.fleet.pods(),
                case.pods,
                broken.len(),
                broken.first()
            );
        }
    }
    Ok(())
}

fn print_run(case: &Case, name: &str, run: &Run) {
    let first = run.first.map_or("-".to_owned(), |d| {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    });
    let total = format!(
        "{}{:.2} s",
        if run.capped { ">" } else { "" },
        run.total.as_secs_f64()
    );
    println!(
        "{:>10} {:>9} {:>6} {:>6} {:>9.2} {:>9.2} | {:>10} {:>8} {:>8} {:>6} {:>6} {:>6} {:>9.2} {:>7.3} {:>9} {:>5.1}%",
        case.label,
        name,
        case.nodes,
        case.pods,
        case.before,
        case.bound,
        first,
        total,
        run.commands.values().sum::<usize>(),
        run.disrupted,
        run.moved,
        run.simulations,
        run.after,
        run.after / case.bound,
        run.nodes,
        100.0 * (case.before - run.after) / case.before,
    );
}
