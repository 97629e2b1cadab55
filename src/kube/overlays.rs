//! NodeOverlays from the API server (with the `NodeOverlay` gate on): handed to the actors'
//! overlay store, and their status written back: `ValidationSucceeded` and `Ready`, False
//! with reason `Conflict` when an overlay of the same weight priced an offering instead.

use std::collections::BTreeMap;

use karpenter_actors::overlays::OverlayStore;
use karpenter_core::api::NodeOverlay;
use karpenter_core::lifecycle::status;
use karpenter_core::model::overlay::Overlays;
use kube::api::{Patch, PatchParams};
use tracing::{info, warn};

use super::cluster::Caches;

/// Hands the cluster's valid NodeOverlays (not being deleted) to `store`; a no-op without
/// the gate.
pub fn sync(store: &OverlayStore, caches: &Caches) {
    let Some(overlays) = &caches.overlays else {
        return;
    };
    let live: Vec<_> = overlays
        .state()
        .iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .filter_map(|o| o.overlay())
        .collect();
    store.set(Overlays::new(live));
}

/// Writes the NodeOverlays' statuses that changed.
pub async fn report_status(
    client: &kube::Client,
    caches: &Caches,
    store: &OverlayStore,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    let Some(overlays) = &caches.overlays else {
        return;
    };
    let report = store.report();
    // The overlay each one lost to, first by name when it lost to several.
    let mut lost_to: BTreeMap<&str, &str> = BTreeMap::new();
    for (left_out, applied) in &report.conflicts {
        lost_to.entry(left_out.as_str()).or_insert(applied.as_str());
    }
    let api: kube::Api<NodeOverlay> = kube::Api::all(client.clone());
    let params = PatchParams::apply(super::cluster::FIELD_MANAGER).force();
    for overlay in overlays.state() {
        let name = overlay.metadata.name.clone().unwrap_or_default();
        let mut wanted =
            status::nodeoverlay_conditions(&overlay, lost_to.get(name.as_str()).copied(), now);
        let current = overlay
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        status::keep_times(&current, &mut wanted);
        if status::same_conditions(&current, &wanted) {
            continue;
        }
        info!(nodeoverlay = %name, repriced = report.repriced.get(&name).copied().unwrap_or(0), "NodeOverlay status changed.");
        let body = serde_json::json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": name}, "status": {"conditions": wanted},
        });
        if let Err(error) = api.patch_status(&name, &params, &Patch::Apply(&body)).await {
            warn!(nodeoverlay = %name, %error, "Writing the NodeOverlay status failed.");
        }
    }
}
