//! `bench cluster`: upstream's performance suite against an API server.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use karpenter_rs::bench::cluster::{self, ClusterBench, cases::Case};

use super::parse_duration;

/// `bench cluster`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// The case of upstream's performance suite.
    #[arg(long, value_enum, default_value_t = Case::Basic)]
    case: Case,
    /// Kubeconfig of the API server (a real control plane, or the test API server with its
    /// scheduler and Deployment stand-ins); without it, the usual places.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Multiply every Deployment's replicas by this (0.1: a tenth of upstream's pods).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// How long no node may drain before a consolidation phase ends (upstream's report:
    /// 3 minutes, counted in the phase's time).
    #[arg(long, default_value = "3m", value_parser = parse_duration)]
    quiet_window: Duration,
    /// The same for the drift phase (upstream's: 2 minutes).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    drift_quiet_window: Duration,
    /// How long a simulated instance takes to register its Node.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    boot_delay: Duration,
    /// The catalog's region.
    #[arg(long, default_value = "us-west-2")]
    region: String,
    /// Where the controller's and sim-nodes' logs and the controller's journal go (created;
    /// a temporary directory, kept, when absent).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// A flag for the controller (repeat for more), e.g. --controller-arg=--log-level=debug.
    #[arg(
        long = "controller-arg",
        value_name = "FLAG",
        allow_hyphen_values = true
    )]
    controller_args: Vec<String>,
}

pub fn bench_cluster(args: ClusterArgs) -> anyhow::Result<ExitCode> {
    if !(args.scale.is_finite() && args.scale > 0.0 && args.scale <= 4.0) {
        anyhow::bail!("--scale must be above 0 and at most 4, not {}", args.scale);
    }
    // Shorter, and a consolidation phase would end before a node could be consolidated.
    let least = cluster::CONSOLIDATE_AFTER;
    for (flag, window) in [
        ("--quiet-window", args.quiet_window),
        ("--drift-quiet-window", args.drift_quiet_window),
    ] {
        if window <= least {
            anyhow::bail!(
                "{flag} must be longer than the NodePool's consolidateAfter ({}s), not {}s",
                least.as_secs(),
                window.as_secs()
            );
        }
    }
    if let Some(kubeconfig) = &args.kubeconfig
        && !kubeconfig.is_file()
    {
        anyhow::bail!("--kubeconfig {}: no such file", kubeconfig.display());
    }
    let work_dir = match args.work_dir {
        Some(dir) => dir,
        None => tempfile::Builder::new()
            .prefix("karpenter-bench-cluster-")
            .tempdir()
            .context("cannot create a work directory")?
            .keep(),
    };
    let bench = ClusterBench {
        case: args.case,
        kubeconfig: args.kubeconfig,
        scale: args.scale,
        quiet: args.quiet_window,
        drift_quiet: args.drift_quiet_window,
        boot_delay: args.boot_delay,
        region: args.region,
        binary: std::env::current_exe().context("cannot find the karpenter binary")?,
        work_dir: work_dir.clone(),
        controller_args: args.controller_args,
    };
    println!("{}", karpenter_rs::system::host::summary());
    println!("logs and journal in {}", work_dir.display());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let phases = runtime.block_on(cluster::run(&bench))?;
    print!("{}", cluster::report(bench.case, bench.scale, &phases));
    let settled = phases.len() == bench.case.steps().len() && phases.iter().all(|p| p.settled);
    if !settled {
        eprintln!(
            "a phase did not settle within its timeout; see {}",
            work_dir.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
