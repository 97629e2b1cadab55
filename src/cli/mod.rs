//! Subcommands. Each returns the process exit code; errors that stop a command are
//! `anyhow` errors with context naming the file or object involved.

mod aws;
mod bench;
mod bench_cluster;
mod cas;
mod controller;
mod explain_pod;
mod journal;
mod journal_disruption;
mod journal_export;
mod journal_nominations;
mod journal_open;
mod journal_rounds;
mod journal_stats;
mod journal_whatif;
mod manifests;
mod migrate;
mod side_by_side;
mod sim_nodes;
mod simulate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::logging::LogFormat;

/// karpenter-rs: a Kubernetes node autoscaler compatible with Karpenter v1.
#[derive(Debug, Parser)]
#[command(name = "karpenter", version, about, long_about = None, propagate_version = true)]
pub struct Args {
    /// Log line format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log level: error, warn, info, debug, trace or off, alone or per crate as
    /// `TARGET=LEVEL` (e.g. `karpenter_actors=debug,info`) [default: `warn` for `simulate`,
    /// `bench` and `journal whatif`, whose progress and report say what happens; `info`
    /// otherwise].
    #[arg(long, global = true, env = "LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Append log lines to this file instead of writing them to stderr.
    #[arg(long, global = true, value_name = "FILE", env = "LOG_FILE")]
    pub log_file: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Args {
    /// The log filter: `--log-level`, else the command's default.
    pub fn log_level(&self) -> &str {
        match (&self.log_level, &self.command) {
            (Some(level), _) => level,
            (None, Command::Simulate(_) | Command::Bench(_)) => "warn",
            // A what-if runs a whole simulation; its figures say what happened.
            (None, Command::Journal(journal::JournalCommand::Whatif(_))) => "warn",
            (None, _) => "info",
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CRDs (NodePool, NodeClaim, EC2NodeClass, NodeOverlay, CapacityBuffer) generated
    /// from the Rust types.
    Crds {
        /// Write one file per CRD into this directory instead of printing a stream.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
    },
    /// Check Karpenter manifests (multi-document YAML) and print every problem.
    ///
    /// Exit code 0 when every Karpenter object is valid, 1 when any problem was found.
    /// Documents of other kinds (Deployments, …) are skipped.
    Validate {
        /// Manifest files; `-` reads standard input.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Run the autoscaler on the embedded simulated cluster and cloud (no cluster, no AWS).
    ///
    /// Runs the built-in scenario, or SCENARIO, on a virtual clock (an hour takes seconds),
    /// prints progress, and ends with a report: nodes and $/h, utilisation, pod pending
    /// latency, NodeClaims launched and terminated, interruptions handled. Every transition
    /// goes to the journal. Exit code 1 if an instance was leaked or an actor failed.
    Simulate(Box<simulate::SimulateArgs>),
    /// Run the autoscaler against a Kubernetes cluster (until interrupted).
    ///
    /// Watches pods, nodes and the Karpenter objects, creates NodeClaims for pods
    /// kube-scheduler cannot place, registers, drains and terminates their nodes. With
    /// `--cloud aws` they are EC2 instances; with `--cloud sim` they come from the in-memory
    /// cloud as simulated Nodes, so any cluster (kind, k3d, a test API server) can run it
    /// without AWS.
    Controller(Box<controller::ControllerArgs>),
    /// Play the kubelets of `controller --cloud sim --sim-kubelets external`'s Nodes (until
    /// interrupted), as KWOK does for its nodes.
    ///
    /// Each launched NodeClaim registers a simulated Node after --boot-delay (capacity and
    /// labels from the region's catalog), whose Lease is renewed and Ready refreshed; pods
    /// bound to it start, pods deleted finish after their grace period, and when its
    /// NodeClaim is gone so are the Node and its pods.
    SimNodes(Box<sim_nodes::SimNodesArgs>),
    /// Print every manifest needed to run the controller in a cluster (CRDs, RBAC,
    /// ServiceAccount, Deployment, PodDisruptionBudget, metrics Service), for
    /// `karpenter install | kubectl apply -f -`.
    Install {
        /// Values file with the Helm chart's keys (deploy/charts/karpenter-rs/values.yaml).
        #[arg(long, value_name = "FILE")]
        values: Option<PathBuf>,
        /// A value over the defaults and --values, as Helm's --set takes it (repeatable):
        /// `--set image.repository=REPO --set settings.clusterName=prod`.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Instead of printing, write the Helm chart's generated files (its CRDs and RBAC
        /// rules) into this chart directory.
        #[arg(long, value_name = "CHART_DIR", conflicts_with_all = ["values", "sets"])]
        write_chart_files: Option<PathBuf>,
    },
    /// Benchmarks that print their figures.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Post-mortems from a journal: replay, explain, verify, tail.
    #[command(subcommand)]
    Journal(journal::JournalCommand),
    /// Take over from another autoscaler: what switching would do, read from the cluster.
    #[command(subcommand)]
    Migrate(migrate::MigrateCommand),
    /// Convert manifests of any released Karpenter API to v1 in one step.
    ///
    /// v1alpha5 Provisioners and v1alpha1 AWSNodeTemplates (v0.2x–v0.31), and v1beta1
    /// NodePools, NodeClaims and EC2NodeClasses (v0.32–v0.37) become v1 NodePools and
    /// EC2NodeClasses; workloads' selectors and annotations on retired Karpenter labels are
    /// rewritten. Prints the converted YAML on stdout and each change on stderr. Exit code 1
    /// when a change needs a person (each names its field) or the result does not validate.
    Convert {
        /// Manifest file; `-` reads standard input.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Instance profile for classes that name none (v1alpha1 took it from the
        /// `aws.defaultInstanceProfile` setting, which v1 does not have).
        #[arg(long, value_name = "NAME")]
        default_instance_profile: Option<String>,
    },
}

/// Runs one subcommand.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Crds { output_dir } => manifests::crds(output_dir.as_deref()),
        Command::Validate { files } => manifests::validate(&files),
        Command::Convert {
            file,
            default_instance_profile,
        } => manifests::convert(
            &file,
            &karpenter_core::api::convert::ConvertOptions {
                default_instance_profile,
            },
        ),
        Command::Migrate(command) => migrate::run(command),
        Command::Simulate(args) => simulate::simulate(*args),
        Command::Controller(args) => controller::controller(*args),
        Command::SimNodes(args) => sim_nodes::sim_nodes(*args),
        Command::Install {
            write_chart_files: Some(dir),
            ..
        } => manifests::write_chart_files(&dir),
        Command::Install {
            values,
            sets,
            write_chart_files: None,
        } => manifests::install(values.as_deref(), &sets),
        Command::Journal(command) => journal::run(command),
        Command::Bench(command) => bench::run(command),
    }
}

/// Parses a flag's duration: `10s`, `1m`, `1h30m`.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    karpenter_core::vocab::duration::parse_duration(text).map_err(|e| e.to_string())
}
