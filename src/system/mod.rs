//! One start-up for `simulate` and `controller`: the cloud's instance types, the context the
//! actors share, the actors themselves and the admin endpoint. Each caller brings what differs
//! (its journal and clock, its cluster, its cloud) and runs its own loop.

pub mod aws;
pub mod host;
pub mod journal_dir;

use std::sync::Arc;

use anyhow::Context as _;
use karpenter_actors::actor::messages::{DisruptionStart, GcSettings};
use karpenter_actors::actor::shipper::{Shipper, Shipping};
use karpenter_actors::actor::supervisor::SupervisorArgs;
use karpenter_actors::actor::{Context, Settings};
use karpenter_actors::handles::System;
use karpenter_actors::metrics::Metrics;
use karpenter_core::api::NodePool;
use karpenter_core::events::DomainEvent;
use karpenter_core::model::catalog::{Catalog, assumed_spot_price};
use karpenter_core::model::{InstanceType, KubeletSettings};
use karpenter_core::ports::{CloudProvider, Cluster, InterruptionQueue};
use karpenter_journal::Journal;

use crate::admin::{AdminOptions, AdminServer};
use tracing::{info, warn};

/// How long a clean stop waits for the history store to take the journal's last records
/// (Kubernetes gives a stopping pod 30 s by default).
pub const FINAL_SHIP: std::time::Duration = std::time::Duration::from_secs(20);

/// The embedded catalog's priced instance types in `region` (the in-memory cloud's offer);
/// an error naming the regions that have some when it has none.
pub fn catalog_instance_types(region: &str) -> anyhow::Result<Vec<Arc<InstanceType>>> {
    let catalog = Catalog::embedded().context("embedded catalog")?;
    let types: Vec<_> = catalog
        .instance_types(region, &KubeletSettings::default(), &assumed_spot_price)
        .into_iter()
        .map(Arc::new)
        .collect();
    anyhow::ensure!(
        !types.is_empty(),
        "region {region:?} has no priced instance types; use one of {:?}",
        catalog.regions()
    );
    Ok(types)
}

/// Where the in-memory cloud's on-demand prices in `region` come from, as explanations
/// name it.
pub fn catalog_price_table(region: &str) -> anyhow::Result<String> {
    let catalog = Catalog::embedded().context("embedded catalog")?;
    let priced = catalog.priced_region(region);
    Ok(if priced == region {
        format!("the embedded price table ({region})")
    } else {
        format!("the embedded price table's {priced} prices (it has none for {region})")
    })
}

/// What a system starts from.
pub struct Start {
    /// The journal, opened on the caller's clock.
    pub journal: Journal<DomainEvent>,
    /// The cloud.
    pub cloud: Arc<dyn CloudProvider>,
    /// The cluster.
    pub cluster: Arc<dyn Cluster>,
    /// Metrics (shared with probes the caller may already serve).
    pub metrics: Arc<Metrics>,
    /// Actor timing and scheduling settings.
    pub settings: Settings,
    /// Prefix of the actors' names.
    pub scope: String,
    /// The NodeOverlays in force, which the caller keeps up to date.
    pub overlays: Arc<karpenter_actors::overlays::OverlayStore>,
    /// The NodePools to run from the start.
    pub nodepools: Vec<NodePool>,
    /// The last round the journal holds (0 when starting anew).
    pub last_round: u64,
    /// The instance-type sets the journal holds that rounds used lately
    /// ([`recent_catalogs`]).
    pub catalogs: std::collections::BTreeMap<String, i64>,
    /// The interruption queue to poll, if any.
    pub interruption_queue: Option<Arc<dyn InterruptionQueue>>,
    /// Start the garbage collector at once (`None`: later, once NodeClaims are adopted).
    pub gc: Option<GcSettings>,
    /// Start the disruption controller at once (`None`: later, once NodeClaims are adopted,
    /// with the commands the journal left unfinished).
    pub disruption: Option<DisruptionStart>,
    /// Serve the admin endpoint.
    pub admin: Option<AdminOptions>,
    /// Ship the journal to a history store (`--journal-bucket`).
    pub shipping: Option<Arc<Shipping>>,
}

/// A started system and its admin endpoint.
pub struct Running {
    /// The actors.
    pub system: System,
    admin: Option<AdminServer>,
}

impl Running {
    /// Where the admin endpoint listens, if it runs.
    pub fn admin_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin.as_ref().map(AdminServer::addr)
    }

    /// The context the actors share.
    pub fn context(&self) -> &Context {
        self.system.context()
    }

    /// Stops the admin endpoint, then every actor, flushes the journal and, when it is
    /// shipped, ships what is left (within [`FINAL_SHIP`]: a store that does not answer
    /// leaves it to the next leader, which goes on from what the store holds).
    pub async fn stop(self) -> anyhow::Result<()> {
        let ctx = self.system.context().clone();
        self.stop_without_shipping().await?;
        if let Some(shipping) = ctx.shipping.clone() {
            let mut shipper = Shipper::new(ctx, shipping);
            match tokio::time::timeout(FINAL_SHIP, shipper.finish()).await {
                Ok(Ok(through)) => info!(through, "Journal shipped before stopping."),
                Ok(Err(error)) => {
                    warn!(%error, "Could not ship the journal's last records before stopping.");
                }
                Err(_) => warn!(
                    "The history store did not take the journal's last records within {FINAL_SHIP:?}; the next leader goes on from what it holds."
                ),
            }
        }
        Ok(())
    }

    /// Stops the admin endpoint, then every actor, and flushes the journal, shipping
    /// nothing more (a replica that lost the Lease: the history is the next leader's).
    pub async fn stop_without_shipping(self) -> anyhow::Result<()> {
        drop(self.admin);
        self.system.stop().await;
        self.system.context().journal.flush()?;
        Ok(())
    }
}

/// Where the disruption controller starts from after a restart: the commands `view` (the
/// journal replayed) left unfinished.
pub fn disruption_start(view: &karpenter_core::events::ClusterView) -> DisruptionStart {
    DisruptionStart {
        last_command: view.last_disruption(),
        commands: view.disruptions_in_flight().cloned().collect(),
    }
}

/// The instance-type sets `view` says rounds used within the scheduler's memory, as of
/// `now_ms`: a restarted scheduler takes them as recorded.
pub fn recent_catalogs(
    view: &karpenter_core::events::ClusterView,
    now_ms: i64,
) -> std::collections::BTreeMap<String, i64> {
    let remembered = karpenter_actors::actor::keeper::CATALOG_REMEMBERED.as_millis() as i64;
    view.recent_catalogs(now_ms, remembered)
}

/// Builds the context, starts the actors and, if asked, the admin endpoint.
pub async fn start(start: Start) -> anyhow::Result<Running> {
    let ctx = Context {
        journal: Arc::new(start.journal),
        cloud: start.cloud,
        cluster: start.cluster,
        settings: start.settings,
        metrics: start.metrics,
        scope: start.scope,
        overlays: start.overlays,
        pools: Default::default(),
        shipping: start.shipping,
    };
    let system = System::start(SupervisorArgs {
        ctx,
        nodepools: start.nodepools,
        last_round: start.last_round,
        catalogs: start.catalogs,
        interruption_queue: start.interruption_queue,
        gc: start.gc,
        disruption: start.disruption,
    })
    .await?;
    let admin = match start.admin {
        Some(admin) => Some(crate::admin::start(admin, system.clone())?),
        None => None,
    };
    Ok(Running { system, admin })
}
