//! The instances of a controller in another process, as `karpenter sim-nodes` sees them:
//! through its NodeClaims, as KWOK's nodes follow theirs. A NodeClaim with a provider id is a
//! launched instance: after the boot delay it is announced to [`super::simnodes::SimNodes`]
//! (once), which registers its Node with the labels and capacity of its instance type from
//! the region's catalog. The instance counts as running until its NodeClaim is gone (the
//! controller drains and deletes the Node itself before it lets the NodeClaim go). Every
//! launched NodeClaim is taken for a simulated instance: run this only beside
//! `controller --cloud sim --sim-kubelets external`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use karpenter_core::api::NodeClaim;
use karpenter_core::model::{CapacityType, InstanceType};
use karpenter_core::ports::{Instance, InstanceState};
use karpenter_core::vocab::labels;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::simcloud::{InstanceBooted, announce_boot};

/// Instance ids whose NodeClaims exist, shared with the kubelets' heartbeat.
pub type Alive = Arc<Mutex<BTreeSet<String>>>;

/// The instance a launched NodeClaim stands for, or `None` while it has no provider id.
pub fn instance_of(claim: &NodeClaim) -> Option<Instance> {
    let status = claim.status.as_ref()?;
    let provider_id = status.provider_id.clone().filter(|p| !p.is_empty())?;
    let id = provider_id.rsplit('/').next()?.to_owned();
    let label = |key: &str| {
        claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key))
            .cloned()
            .unwrap_or_default()
    };
    Some(Instance {
        id,
        provider_id,
        instance_type: label(labels::INSTANCE_TYPE),
        zone: label(labels::ZONE),
        capacity_type: CapacityType::parse(&label(labels::CAPACITY_TYPE))
            .unwrap_or(CapacityType::OnDemand),
        price: 0.0,
        image_id: status.image_id.clone().unwrap_or_default(),
        nodeclaim: claim.metadata.name.clone().unwrap_or_default(),
        nodepool: label(labels::NODEPOOL),
        state: InstanceState::Running,
        launched_at_ms: None,
        price_source: None,
        reservation: None,
    })
}

/// Watches NodeClaims until the watch ends: announces each launched one on `booted` after
/// `boot_delay` and keeps `alive` to the instance ids whose NodeClaims exist.
pub async fn run(
    client: Client,
    types: Vec<Arc<InstanceType>>,
    boot_delay: Duration,
    booted: mpsc::UnboundedSender<InstanceBooted>,
    alive: Alive,
) {
    let types: BTreeMap<String, Arc<InstanceType>> =
        types.into_iter().map(|t| (t.name.clone(), t)).collect();
    let mut announced = BTreeSet::new();
    let mut listed = BTreeSet::new();
    let claims: Api<NodeClaim> = Api::all(client);
    let mut events = watcher::watcher(claims, watcher::Config::default())
        .default_backoff()
        .boxed();
    let ids = || {
        alive
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(claim)) | Ok(Event::Apply(claim)) => {
                let Some(instance) = instance_of(&claim) else {
                    continue;
                };
                listed.insert(instance.id.clone());
                ids().insert(instance.id.clone());
                if !announced.insert(instance.id.clone()) {
                    continue;
                }
                match types.get(&instance.instance_type) {
                    Some(t) => announce_boot(&booted, boot_delay, &instance, t.clone()),
                    None => warn!(
                        nodeclaim = %instance.nodeclaim,
                        instance_type = %instance.instance_type,
                        "The NodeClaim's instance type is not in the region's catalog; no simulated Node registers for it."
                    ),
                }
            }
            Ok(Event::InitDone) => {
                let listed = std::mem::take(&mut listed);
                ids().retain(|id| listed.contains(id));
            }
            Ok(Event::Delete(claim)) => {
                if let Some(instance) = instance_of(&claim) {
                    ids().remove(&instance.id);
                }
            }
            Err(error) => {
                debug!(%error, "Watching NodeClaims for the simulated kubelets failed; retrying.")
            }
        }
    }
}
