//! The NodeOverlays in force, shared by every NodePool actor of a system.
//!
//! The controller (from the API server's NodeOverlays) or the simulator (from a scenario)
//! sets them; each NodePool actor applies them to its instance types whenever a round asks
//! for its template, so scheduling, consolidation and the round's bound all see the
//! overlaid prices and extended resources, and the round input the journal keeps holds
//! them (`journal verify` reproduces rounds without the overlays themselves). What each pool's application did is
//! kept so the NodeOverlays' status can say which overlays apply and which conflict.
//! A pool whose instance types and overlays are the ones it last asked with gets the same
//! repriced list again instead of a new copy each round.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};

use karpenter_core::model::InstanceType;
use karpenter_core::model::overlay::{Applied, Overlays};

/// The overlays in force and what they did, per NodePool.
#[derive(Debug, Default)]
pub struct OverlayStore {
    overlays: RwLock<Arc<Overlays>>,
    applied: RwLock<BTreeMap<String, Applied>>,
    /// Each NodePool's last application, by NodePool.
    last: Mutex<BTreeMap<String, LastApplied>>,
}

/// What a NodePool was last given, and from what.
#[derive(Debug)]
struct LastApplied {
    overlays: Arc<Overlays>,
    labels: BTreeMap<String, String>,
    cloud: Vec<Arc<InstanceType>>,
    repriced: Vec<Arc<InstanceType>>,
}

impl LastApplied {
    fn serves(
        &self,
        overlays: &Arc<Overlays>,
        types: &[Arc<InstanceType>],
        labels: &BTreeMap<String, String>,
    ) -> bool {
        Arc::ptr_eq(&self.overlays, overlays)
            && self.labels == *labels
            && self.cloud.len() == types.len()
            && self.cloud.iter().zip(types).all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// What the overlays did across NodePools, for their status and the admin page.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct OverlayReport {
    /// Offerings repriced by each overlay, summed over NodePools.
    pub repriced: BTreeMap<String, usize>,
    /// Instance types given extended resources by each overlay, summed over NodePools.
    pub resized: BTreeMap<String, usize>,
    /// `(left out, applied instead)`: equal-weight overlays that both priced an offering.
    pub conflicts: BTreeSet<(String, String)>,
}

impl OverlayStore {
    /// Replaces the overlays in force; the next round's templates use them.
    pub fn set(&self, overlays: Overlays) {
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
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = last.get(nodepool)
            && entry.serves(&overlays, types, labels)
        {
            return entry.repriced.clone();
        }
        let (repriced, applied) = overlays.apply(types, nodepool, labels);
        if let Ok(mut by_pool) = self.applied.write() {
            if applied == Applied::default() {
                by_pool.remove(nodepool);
            } else {
                by_pool.insert(nodepool.to_owned(), applied);
            }
        }
        last.insert(
            nodepool.to_owned(),
            LastApplied {
                overlays,
                labels: labels.clone(),
                cloud: types.to_vec(),
                repriced: repriced.clone(),
            },
        );
        repriced
    }

    /// `it` with the extended resources the overlays last gave it in `nodepool`'s rounds: what
    /// a device plugin on its node advertises, so a simulated node registers with them (the
    /// cloud's own type otherwise).
    pub fn as_applied(&self, nodepool: &str, it: &Arc<InstanceType>) -> Arc<InstanceType> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let overlaid = (last.get(nodepool))
            .and_then(|entry| entry.repriced.iter().find(|t| t.name == it.name))
            .filter(|t| t.capacity != it.capacity);
        match overlaid {
            Some(t) => Arc::new(InstanceType {
                capacity: t.capacity,
                ..(**it).clone()
            }),
            None => Arc::clone(it),
        }
    }

    /// Forgets a NodePool that is gone: what the overlays did for it, and its last list.
    pub fn forget(&self, nodepool: &str) {
        if let Ok(mut by_pool) = self.applied.write() {
            by_pool.remove(nodepool);
        }
        (self.last.lock().unwrap_or_else(|p| p.into_inner())).remove(nodepool);
    }

    /// What the overlays did across NodePools at their last templates.
    pub fn report(&self) -> OverlayReport {
        let mut report = OverlayReport::default();
        if let Ok(by_pool) = self.applied.read() {
            for applied in by_pool.values() {
                for (name, n) in &applied.repriced {
                    *report.repriced.entry(name.clone()).or_default() += n;
                }
                for (name, n) in &applied.resized {
                    *report.resized.entry(name.clone()).or_default() += n;
                }
                report.conflicts.extend(applied.conflicts.iter().cloned());
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::model::catalog::{Catalog, assumed_spot_price};
    use karpenter_core::model::overlay::{Overlay, PriceChange};
    use karpenter_core::model::{KubeletSettings, Requirement, Requirements};

    fn m6i_discount(name: &str) -> Overlays {
        let mut requirements = Requirements::new();
        requirements.add(
            "karpenter.k8s.aws/instance-family",
            Requirement::is_in(["m6i"]),
        );
        Overlays::new(vec![Overlay {
            name: name.into(),
            weight: 0,
            requirements,
            price: Some(PriceChange::Percent(-30.0)),
            capacity: Vec::new(),
        }])
    }

    #[test]
    fn a_pool_asking_again_with_the_same_types_gets_the_same_list_until_overlays_change() {
        let catalog = Catalog::embedded().unwrap();
        let types: Vec<Arc<InstanceType>> = catalog
            .instance_types(
                "us-east-1",
                &KubeletSettings::default(),
                &assumed_spot_price,
            )
            .into_iter()
            .map(Arc::new)
            .collect();
        let store = OverlayStore::default();
        store.set(m6i_discount("a"));
        let labels = BTreeMap::new();
        let first = store.apply(&types, "default", &labels);
        let again = store.apply(&types, "default", &labels);
        let m6i = first.iter().position(|t| t.name == "m6i.large").unwrap();
        assert!(first[m6i].offerings[0].overlay.is_some());
        assert!(Arc::ptr_eq(&first[m6i], &again[m6i]), "not repriced again");
        assert!(store.report().repriced["a"] > 0);
        store.set(m6i_discount("b"));
        let changed = store.apply(&types, "default", &labels);
        assert_eq!(changed[m6i].offerings[0].overlay.as_deref(), Some("b"));
        store.forget("default");
        assert!(store.report().repriced.is_empty());
    }
}
