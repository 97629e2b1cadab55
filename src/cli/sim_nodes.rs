//! `sim-nodes`: the simulated Nodes' kubelets in a process of their own, beside
//! `controller --cloud sim --sim-kubelets external`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use karpenter_rs::kube::claimwatch;
use karpenter_rs::kube::simnodes::{Instances, SimNodes};

use super::parse_duration;

/// Options of `sim-nodes`.
#[derive(Debug, clap::Args)]
pub struct SimNodesArgs {
    /// Kubeconfig file; without it, the files KUBECONFIG lists, ~/.kube/config or the
    /// in-cluster service account.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (its current context when absent).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Region whose catalog gives the Nodes their capacity and labels (the controller's
    /// --region).
    #[arg(long, env = "AWS_REGION", default_value = "us-west-2")]
    pub region: String,
    /// How long after its NodeClaim is launched an instance registers its Node.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub boot_delay: Duration,
}

pub fn sim_nodes(args: SimNodesArgs) -> anyhow::Result<ExitCode> {
    let types = karpenter_rs::system::catalog_instance_types(&args.region)
        .with_context(|| format!("--region {}: no catalog for it", args.region))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async move {
        let client = karpenter_rs::kube::controller::connect(
            args.kubeconfig.as_deref(),
            args.context.as_deref(),
            Default::default(),
        )
        .await?;
        let alive = claimwatch::Alive::default();
        let (booted_tx, booted_rx) = tokio::sync::mpsc::unbounded_channel();
        let watch = tokio::spawn(claimwatch::run(
            client.clone(),
            types,
            args.boot_delay,
            booted_tx,
            alive.clone(),
        ));
        let nodes = SimNodes::new(client, Instances::NodeClaims(Arc::clone(&alive)));
        tracing::info!(region = %args.region, "Simulated kubelets running for the cluster's NodeClaims.");
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .context("cannot listen for SIGTERM")?;
        tokio::select! {
            _ = nodes.run(booted_rx) => {}
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        watch.abort();
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
