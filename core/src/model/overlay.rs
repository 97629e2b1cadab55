//! NodeOverlay prices applied to offerings, as upstream's overlay store applies them.
//!
//! Overlays are tried in precedence order: higher weight first (none counts as 0), then by
//! name. An offering's price is decided by the first overlay in that order that matches it
//! and changes prices; the others that match it are not applied to it. An offering matches
//! an overlay when every overlay requirement is satisfied by the offering's labels: the
//! instance type's, its zone and capacity type, and the NodePool's (template labels and
//! `karpenter.sh/nodepool`); a label the offering does not have satisfies only `NotIn` and
//! `DoesNotExist`.
//!
//! Two overlays of the same weight that both change the price of one offering conflict: the
//! one first by name is applied, the other is reported ([`Applied::conflicts`]) so its status
//! can say so, as upstream marks it not Ready.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::instance_type::InstanceType;
use super::requirements::Requirements;
use crate::vocab::labels;

/// What an overlay does to a price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceChange {
    /// Replaces it (USD/hour).
    Set(f64),
    /// Adds this many USD/hour (negative: takes off); never below 0.
    Add(f64),
    /// Changes it by this many percent (`-100` makes it free).
    Percent(f64),
}

impl PriceChange {
    /// The price after the change.
    pub fn apply(self, price: f64) -> f64 {
        match self {
            PriceChange::Set(p) => p,
            PriceChange::Add(d) => (price + d).max(0.0),
            PriceChange::Percent(pct) => (price * (1.0 + pct / 100.0)).max(0.0),
        }
    }
}

impl std::fmt::Display for PriceChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PriceChange::Set(p) => write!(f, "price {p}"),
            PriceChange::Add(d) => write!(f, "priceAdjustment {d:+}"),
            PriceChange::Percent(p) => write!(f, "priceAdjustment {p:+}%"),
        }
    }
}

/// One overlay as the model uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceOverlay {
    /// The NodeOverlay's name.
    pub name: String,
    /// Its weight (none: 0).
    pub weight: i32,
    /// What it selects.
    pub requirements: Requirements,
    /// What it does to prices.
    pub price: PriceChange,
}

/// Overlays in precedence order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceOverlays(Vec<PriceOverlay>);

/// What applying overlays did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    /// Offerings repriced, by overlay name.
    pub repriced: BTreeMap<String, usize>,
    /// Overlays left out of some offering because another of the same weight, first by name,
    /// changed its price: (left out, applied instead).
    pub conflicts: BTreeSet<(String, String)>,
}

impl PriceOverlays {
    /// Orders `overlays` by precedence.
    pub fn new(mut overlays: Vec<PriceOverlay>) -> Self {
        overlays.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
        PriceOverlays(overlays)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The instance types of the NodePool `nodepool` (template labels `pool_labels`) with
    /// their offerings repriced; a type no overlay touches is shared, not copied.
    pub fn apply(
        &self,
        types: &[Arc<InstanceType>],
        nodepool: &str,
        pool_labels: &BTreeMap<String, String>,
    ) -> (Vec<Arc<InstanceType>>, Applied) {
        let mut applied = Applied::default();
        if self.0.is_empty() {
            return (types.to_vec(), applied);
        }
        let out = types
            .iter()
            .map(
                |it| match self.reprice(it, nodepool, pool_labels, &mut applied) {
                    Some(repriced) => Arc::new(repriced),
                    None => Arc::clone(it),
                },
            )
            .collect();
        (out, applied)
    }

    /// `it` with the prices overlays set, or `None` when no overlay matches any of its
    /// offerings.
    fn reprice(
        &self,
        it: &InstanceType,
        nodepool: &str,
        pool_labels: &BTreeMap<String, String>,
        applied: &mut Applied,
    ) -> Option<InstanceType> {
        let mut labels = it.labels.clone();
        labels.extend(pool_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        labels.insert(labels::NODEPOOL.to_owned(), nodepool.to_owned());
        let mut out: Option<InstanceType> = None;
        for (i, offering) in it.offerings.iter().enumerate() {
            labels.insert(labels::ZONE.to_owned(), offering.zone.clone());
            labels.insert(
                labels::CAPACITY_TYPE.to_owned(),
                offering.capacity_type.as_str().to_owned(),
            );
            let mut matching = self
                .0
                .iter()
                .filter(|o| o.requirements.matches_labels(&labels).is_ok());
            let Some(winner) = matching.next() else {
                continue;
            };
            for other in matching.take_while(|o| o.weight == winner.weight) {
                applied
                    .conflicts
                    .insert((other.name.clone(), winner.name.clone()));
            }
            let target = &mut out.get_or_insert_with(|| it.clone()).offerings[i];
            target.price = winner.price.apply(offering.price);
            target.overlay = Some(winner.name.clone());
            *applied.repriced.entry(winner.name.clone()).or_default() += 1;
        }
        out
    }
}

/// The overlay that priced the offering (`instance_type`, `zone`, `capacity_type`) among
/// `types`, with the price it set; `None` when no overlay priced it.
pub fn overlay_price<'a>(
    types: &'a [Arc<InstanceType>],
    instance_type: &str,
    zone: &str,
    capacity_type: super::CapacityType,
) -> Option<(&'a str, f64)> {
    let offering = types
        .iter()
        .find(|t| t.name == instance_type)?
        .offerings
        .iter()
        .find(|o| o.zone == zone && o.capacity_type == capacity_type)?;
    Some((offering.overlay.as_deref()?, offering.price))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::catalog::Catalog;
    use crate::model::{CapacityType, KubeletSettings, Requirement};

    fn types() -> Vec<Arc<InstanceType>> {
        let catalog = Catalog::embedded().unwrap();
        catalog
            .instance_types("us-east-1", &KubeletSettings::default(), &|_, _, od| {
                Some(od / 2.0)
            })
            .into_iter()
            .filter(|t| ["c6i.large", "m6i.large", "r6i.large"].contains(&t.name.as_str()))
            .map(Arc::new)
            .collect()
    }

    fn overlay(
        name: &str,
        weight: i32,
        key: &str,
        values: &[&str],
        price: PriceChange,
    ) -> PriceOverlay {
        let mut requirements = Requirements::new();
        requirements.add(key, Requirement::is_in(values.iter().copied()));
        PriceOverlay {
            name: name.into(),
            weight,
            requirements,
            price,
        }
    }

    fn price(types: &[Arc<InstanceType>], name: &str, capacity_type: CapacityType) -> f64 {
        types
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .offerings
            .iter()
            .find(|o| o.capacity_type == capacity_type)
            .unwrap()
            .price
    }

    #[test]
    fn a_family_discount_reprices_only_that_familys_offerings() {
        let cloud = types();
        let overlays = PriceOverlays::new(vec![overlay(
            "c6i-discount",
            0,
            "karpenter.k8s.aws/instance-family",
            &["c6i"],
            PriceChange::Percent(-30.0),
        )]);
        let (t, applied) = overlays.apply(&cloud, "default", &BTreeMap::new());
        assert!((price(&t, "c6i.large", CapacityType::OnDemand) - 0.085 * 0.7).abs() < 1e-12);
        assert!((price(&t, "c6i.large", CapacityType::Spot) - 0.0425 * 0.7).abs() < 1e-12);
        assert_eq!(price(&t, "m6i.large", CapacityType::OnDemand), 0.096);
        let c6i = t.iter().find(|x| x.name == "c6i.large").unwrap();
        assert_eq!(applied.repriced["c6i-discount"], c6i.offerings.len());
        assert!((c6i.offerings.iter()).all(|o| o.overlay.as_deref() == Some("c6i-discount")));
        // Types no overlay touches are shared with the cloud's list, not copied.
        let m6i = t.iter().position(|x| x.name == "m6i.large").unwrap();
        assert!(Arc::ptr_eq(&t[m6i], &cloud[m6i]));
        assert!(applied.conflicts.is_empty());
    }

    #[test]
    fn weight_then_name_decides_and_equal_weights_conflict() {
        let t = types();
        let overlays = PriceOverlays::new(vec![
            overlay(
                "b-spot-free",
                5,
                labels::CAPACITY_TYPE,
                &["spot"],
                PriceChange::Set(0.0),
            ),
            overlay(
                "a-spot-add",
                5,
                labels::CAPACITY_TYPE,
                &["spot"],
                PriceChange::Add(0.01),
            ),
            overlay(
                "heavy",
                10,
                labels::INSTANCE_TYPE,
                &["r6i.large"],
                PriceChange::Set(1.0),
            ),
            overlay(
                "other-pool",
                20,
                labels::NODEPOOL,
                &["gpu"],
                PriceChange::Set(9.0),
            ),
        ]);
        let (t, applied) = overlays.apply(&t, "default", &BTreeMap::new());
        // r6i.large: the heavier overlay wins on every offering, spot included.
        assert_eq!(price(&t, "r6i.large", CapacityType::Spot), 1.0);
        assert_eq!(price(&t, "r6i.large", CapacityType::OnDemand), 1.0);
        // Others' spot: the first by name of the two weight-5 overlays, the other in conflict.
        assert!((price(&t, "m6i.large", CapacityType::Spot) - (0.048 + 0.01)).abs() < 1e-12);
        assert_eq!(price(&t, "m6i.large", CapacityType::OnDemand), 0.096);
        assert!(
            applied
                .conflicts
                .contains(&("b-spot-free".to_owned(), "a-spot-add".to_owned()))
        );
        assert!(!applied.repriced.contains_key("other-pool"));
    }
}
