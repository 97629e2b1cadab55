//! The NodeOverlays in force, shared by every NodePool actor of a system.
//!
//! The controller (from the API server's NodeOverlays) or the simulator (from a scenario)
//! sets them; each NodePool actor reprices its instance types with them whenever a round
//! asks for its template, so scheduling, consolidation and the round's bound all see the
//! overlaid prices, and the round input the journal keeps holds them (`journal verify`
//! reproduces rounds without the overlays themselves). What each pool's application did is
//! kept so the NodeOverlays' status can say which overlays apply and which conflict.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use karpenter_core::model::InstanceType;
use karpenter_core::model::overlay::{Applied, PriceOverlays};

/// The overlays in force and what they did, per NodePool.
#[derive(Debug, Default)]
pub struct OverlayStore {
    overlays: RwLock<Arc<PriceOverlays>>,
    applied: RwLock<BTreeMap<String, Applied>>,
}

/// What the overlays did across NodePools, for their status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OverlayReport {
    /// Offerings repriced by each overlay, summed over NodePools.
    pub repriced: BTreeMap<String, usize>,
    /// `(left out, applied instead)`: equal-weight overlays that both priced an offering.
    pub conflicts: BTreeSet<(String, String)>,
}

impl OverlayStore {
    /// Replaces the overlays in force; the next round's templates use them.
    pub fn set(&self, overlays: PriceOverlays) {
        if let Ok(mut current) = self.overlays.write() {
            *current = Arc::new(overlays);
        }
    }

    /// `types` of the NodePool `nodepool` (template labels `labels`) repriced by the
    /// overlays in force; remembers what that did.
    pub fn apply(
        &self,
        types: &[Arc<InstanceType>],
        nodepool: &str,
        labels: &BTreeMap<String, String>,
    ) -> Vec<Arc<InstanceType>> {
        let overlays = self
            .overlays
            .read()
            .map(|o| Arc::clone(&o))
            .unwrap_or_default();
        let (types, applied) = overlays.apply(types, nodepool, labels);
        if let Ok(mut by_pool) = self.applied.write() {
            if applied == Applied::default() {
                by_pool.remove(nodepool);
            } else {
                by_pool.insert(nodepool.to_owned(), applied);
            }
        }
        types
    }

    /// Forgets what the overlays did for a NodePool that is gone.
    pub fn forget(&self, nodepool: &str) {
        if let Ok(mut by_pool) = self.applied.write() {
            by_pool.remove(nodepool);
        }
    }

    /// What the overlays did across NodePools at their last templates.
    pub fn report(&self) -> OverlayReport {
        let mut report = OverlayReport::default();
        if let Ok(by_pool) = self.applied.read() {
            for applied in by_pool.values() {
                for (name, n) in &applied.repriced {
                    *report.repriced.entry(name.clone()).or_default() += n;
                }
                report.conflicts.extend(applied.conflicts.iter().cloned());
            }
        }
        report
    }
}
