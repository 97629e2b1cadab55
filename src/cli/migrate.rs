//! `migrate`: taking over from another autoscaler.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// What to migrate from.
#[derive(Debug, clap::Subcommand)]
pub enum MigrateCommand {
    /// Say what taking over a cluster upstream Karpenter (v1) runs would do: each NodeClaim
    /// adopted in place with its instance and node (upstream's template hashes re-stamped,
    /// so the switch drifts nothing), NodePools and EC2NodeClasses used as they are or with
    /// the fields not acted on named, pending pods served. Only reads the cluster.
    FromKarpenter {
        /// Required: this command changes nothing; the switch is stopping upstream and
        /// starting `karpenter controller`, as the report's last lines say.
        #[arg(long)]
        dry_run: bool,
        /// Kubeconfig (default: KUBECONFIG, ~/.kube/config, or in-cluster).
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context (default: the current one).
        #[arg(long)]
        context: Option<String>,
    },
}

/// Runs a `migrate` subcommand.
pub fn run(command: MigrateCommand) -> anyhow::Result<ExitCode> {
    match command {
        MigrateCommand::FromKarpenter {
            dry_run,
            kubeconfig,
            context,
        } => {
            if !dry_run {
                anyhow::bail!(
                    "migrate from-karpenter changes nothing itself: add --dry-run to see what taking over would do; the switch is scaling upstream's deployment to 0 and starting `karpenter controller`"
                );
            }
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the runtime")?;
            let plan = runtime.block_on(async {
                let client = karpenter_rs::kube::controller::connect(
                    kubeconfig.as_deref(),
                    context.as_deref(),
                )
                .await?;
                karpenter_rs::kube::migrate::plan_from_karpenter(&client).await
            })?;
            print!("{}", plan.render());
            Ok(ExitCode::SUCCESS)
        }
    }
}
