//! NodeOverlays applied to a NodePool's instance types, as upstream's overlay store
//! applies them: prices per offering, extended resources per instance type.
//!
//! Overlays are taken in precedence order: higher weight first (none counts as 0), then, at
//! equal weight, the name later in the alphabet first (upstream's order). Each is accepted
//! unless it conflicts with one accepted before it of the same weight, and an accepted
//! overlay applies where nothing before it did:
//! - an offering's price is set by the first accepted overlay that matches it and changes
//!   prices; the cloud's price is what it changes;
//! - an extended resource of an instance type is set by the first accepted overlay that
//!   names it among those matching any of the type's offerings (a higher weight wins, as
//!   upstream's design has it);
//! - two overlays of the same weight conflict when both change the price of one offering,
//!   or both name one resource of one instance type: the one later in the order is not
//!   applied to the NodePool at all (no partial application) and is reported
//!   ([`Applied::conflicts`]) so its status can say so, as upstream marks it.
//!
//! An offering matches an overlay when every overlay requirement is satisfied by the
//! offering's labels: the instance type's, its zone and capacity type, and the NodePool's
//! (template labels and `karpenter.sh/nodepool`); a label the offering does not have
//! satisfies only `NotIn` and `DoesNotExist`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::instance_type::InstanceType;
use super::requirements::Requirements;
use super::resources::{RESOURCE_COUNT, ResourceName};
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
pub struct Overlay {
    /// The NodeOverlay's name.
    pub name: String,
    /// Its weight (none: 0).
    pub weight: i32,
    /// What it selects.
    pub requirements: Requirements,
    /// What it does to prices, if anything.
    pub price: Option<PriceChange>,
    /// Extended resources it sets on instance types' capacity.
    pub capacity: Vec<(ResourceName, i64)>,
}

/// Overlays in precedence order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overlays(Vec<Overlay>);

/// What applying overlays to one NodePool did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    /// Offerings repriced, by overlay name.
    pub repriced: BTreeMap<String, usize>,
    /// Instance types given extended resources, by overlay name.
    pub resized: BTreeMap<String, usize>,
    /// Overlays not applied because they conflict with one of the same weight applied
    /// before them: (left out, applied instead).
    pub conflicts: BTreeSet<(String, String)>,
}

/// What overlays set on one instance type, before it is copied.
struct TypeChanges {
    /// Per offering: the price and the overlay (index) that set it.
    prices: Vec<Option<(f64, usize)>>,
    /// Per resource: the amount and the overlay (index) that set it.
    capacity: [Option<(i64, usize)>; RESOURCE_COUNT],
}

impl Overlays {
    /// Orders `overlays` by precedence: weight, then name later in the alphabet first.
    pub fn new(mut overlays: Vec<Overlay>) -> Self {
        overlays.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| b.name.cmp(&a.name)));
        Overlays(overlays)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The instance types of the NodePool `nodepool` (template labels `pool_labels`) with
    /// the overlays applied; a type no overlay changes is shared, not copied.
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
        let matched = self.matches(types, nodepool, pool_labels);
        let mut changes: Vec<TypeChanges> = types
            .iter()
            .map(|it| TypeChanges {
                prices: vec![None; it.offerings.len()],
                capacity: [None; RESOURCE_COUNT],
            })
            .collect();
        for (index, overlay) in self.0.iter().enumerate() {
            if let Some(winner) = self.conflict(index, &matched, &changes) {
                applied
                    .conflicts
                    .insert((overlay.name.clone(), self.0[winner].name.clone()));
                continue;
            }
            for ((it, offerings), change) in types.iter().zip(&matched[index]).zip(&mut changes) {
                if offerings.is_empty() {
                    continue;
                }
                if let Some(price) = overlay.price {
                    for &o in offerings {
                        if change.prices[o].is_none() {
                            change.prices[o] = Some((price.apply(it.offerings[o].price), index));
                            *applied.repriced.entry(overlay.name.clone()).or_default() += 1;
                        }
                    }
                }
                let mut resized = false;
                for &(resource, amount) in &overlay.capacity {
                    let slot = &mut change.capacity[resource as usize];
                    if slot.is_none() {
                        *slot = Some((amount, index));
                        resized = true;
                    }
                }
                if resized {
                    *applied.resized.entry(overlay.name.clone()).or_default() += 1;
                }
            }
        }
        let out = types
            .iter()
            .zip(&changes)
            .map(|(it, change)| {
                self.changed(it, change)
                    .map_or_else(|| Arc::clone(it), Arc::new)
            })
            .collect();
        (out, applied)
    }

    /// Per overlay, per instance type: the offerings it matches.
    fn matches(
        &self,
        types: &[Arc<InstanceType>],
        nodepool: &str,
        pool_labels: &BTreeMap<String, String>,
    ) -> Vec<Vec<Vec<usize>>> {
        let mut out = vec![vec![Vec::new(); types.len()]; self.0.len()];
        for (t, it) in types.iter().enumerate() {
            let mut labels = it.labels.clone();
            labels.extend(pool_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            labels.insert(labels::NODEPOOL.to_owned(), nodepool.to_owned());
            for (o, offering) in it.offerings.iter().enumerate() {
                labels.insert(labels::ZONE.to_owned(), offering.zone.clone());
                labels.insert(
                    labels::CAPACITY_TYPE.to_owned(),
                    offering.capacity_type.as_str().to_owned(),
                );
                for (index, overlay) in self.0.iter().enumerate() {
                    if overlay.requirements.admits(&labels) {
                        out[index][t].push(o);
                    }
                }
            }
        }
        out
    }

    /// The overlay of the same weight, applied before overlay `index`, that it conflicts
    /// with: both price one offering, or both name one resource of one instance type.
    fn conflict(
        &self,
        index: usize,
        matched: &[Vec<Vec<usize>>],
        changes: &[TypeChanges],
    ) -> Option<usize> {
        let overlay = &self.0[index];
        let same_weight = |by: usize| self.0[by].weight == overlay.weight;
        matched[index]
            .iter()
            .zip(changes)
            .filter(|(offerings, _)| !offerings.is_empty())
            .find_map(|(offerings, change)| {
                let price = overlay.price.and_then(|_| {
                    offerings.iter().find_map(|&o| {
                        change.prices[o]
                            .map(|(_, by)| by)
                            .filter(|&by| same_weight(by))
                    })
                });
                price.or_else(|| {
                    overlay.capacity.iter().find_map(|&(r, _)| {
                        change.capacity[r as usize]
                            .map(|(_, by)| by)
                            .filter(|&by| same_weight(by))
                    })
                })
            })
    }

    /// `it` with what overlays set, or `None` when they set nothing on it.
    fn changed(&self, it: &InstanceType, change: &TypeChanges) -> Option<InstanceType> {
        let resized = change.capacity.iter().any(Option::is_some);
        if !resized && change.prices.iter().all(Option::is_none) {
            return None;
        }
        let mut out = it.clone();
        for (offering, price) in out.offerings.iter_mut().zip(&change.prices) {
            if let Some((price, by)) = price {
                offering.price = *price;
                offering.overlay = Some(self.0[*by].name.clone());
            }
        }
        for r in ResourceName::ALL {
            if let Some((amount, _)) = change.capacity[r as usize] {
                out.capacity.set(r, amount);
            }
        }
        Some(out)
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

    fn overlay(name: &str, weight: i32, key: &str, values: &[&str], price: PriceChange) -> Overlay {
        let mut requirements = Requirements::new();
        requirements.add(key, Requirement::is_in(values.iter().copied()));
        Overlay {
            name: name.into(),
            weight,
            requirements,
            price: Some(price),
            capacity: Vec::new(),
        }
    }

    fn capacity(
        name: &str,
        weight: i32,
        key: &str,
        values: &[&str],
        add: &[(&str, i64)],
    ) -> Overlay {
        Overlay {
            price: None,
            capacity: add
                .iter()
                .map(|(r, v)| (ResourceName::register(r).unwrap(), *v))
                .collect(),
            ..overlay(name, weight, key, values, PriceChange::Set(0.0))
        }
    }

    fn extended(types: &[Arc<InstanceType>], name: &str, resource: &str) -> i64 {
        let it = types.iter().find(|t| t.name == name).unwrap();
        ResourceName::parse(resource).map_or(0, |r| it.capacity.get(r))
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
        let overlays = Overlays::new(vec![overlay(
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

    // Paraphrases upstream's "should fail when requirements overlays overlap": of two
    // overlays of weight 10 pricing the same offerings, overlay-b (later by name) is applied
    // and overlay-a is reported in conflict and applied nowhere in the pool, not even where
    // overlay-b does not reach.
    #[test]
    fn equal_weights_pricing_the_same_offering_leave_the_earlier_name_out_entirely() {
        let t = types();
        let overlays = Overlays::new(vec![
            overlay(
                "overlay-a",
                10,
                labels::INSTANCE_TYPE,
                &["c6i.large", "m6i.large"],
                PriceChange::Set(1.03),
            ),
            overlay(
                "overlay-b",
                10,
                labels::INSTANCE_TYPE,
                &["c6i.large"],
                PriceChange::Set(23.0),
            ),
        ]);
        let (t, applied) = overlays.apply(&t, "default", &BTreeMap::new());
        assert_eq!(price(&t, "c6i.large", CapacityType::OnDemand), 23.0);
        assert_eq!(price(&t, "m6i.large", CapacityType::OnDemand), 0.096);
        assert_eq!(
            applied.conflicts,
            BTreeSet::from([("overlay-a".to_owned(), "overlay-b".to_owned())])
        );
        assert!(!applied.repriced.contains_key("overlay-a"));
    }

    // Paraphrases upstream's capacity cases: "should apply capacity adjustments for
    // instances types", "should update capacity for one instance types from multiple
    // overlays", "should apply pricing and capacity adjustment from two overlays on the same
    // instance type", and "should update capacity for instance types from multiple overlays"
    // (a zone requirement reaching one offering gives the whole type the resource).
    #[test]
    fn capacity_overlays_add_extended_resources_per_instance_type() {
        let t = types();
        let overlays = Overlays::new(vec![
            capacity(
                "fuse",
                10,
                labels::INSTANCE_TYPE,
                &["m6i.large"],
                &[("smarter-devices/fuse", 1)],
            ),
            capacity(
                "huge",
                10,
                labels::INSTANCE_TYPE,
                &["m6i.large"],
                &[("hugepages-1Gi", 2 << 30)],
            ),
            overlay(
                "pricier",
                10,
                labels::INSTANCE_TYPE,
                &["m6i.large"],
                PriceChange::Add(1000.0),
            ),
            capacity(
                "zone",
                10,
                labels::ZONE,
                &["us-east-1b"],
                &[("example.com/zonal", 3)],
            ),
        ]);
        let (t, applied) = overlays.apply(&t, "default", &BTreeMap::new());
        assert!(applied.conflicts.is_empty(), "{:?}", applied.conflicts);
        assert_eq!(extended(&t, "m6i.large", "smarter-devices/fuse"), 1);
        assert_eq!(extended(&t, "m6i.large", "hugepages-1Gi"), 2 << 30);
        assert!((price(&t, "m6i.large", CapacityType::OnDemand) - 1000.096).abs() < 1e-9);
        assert_eq!(extended(&t, "c6i.large", "smarter-devices/fuse"), 0);
        for name in ["c6i.large", "m6i.large", "r6i.large"] {
            assert_eq!(extended(&t, name, "example.com/zonal"), 3, "{name}");
        }
        let m6i = t.iter().find(|x| x.name == "m6i.large").unwrap();
        let fuse = ResourceName::parse("smarter-devices/fuse").unwrap();
        assert_eq!(m6i.allocatable().get(fuse), 1, "overhead takes none of it");
        assert_eq!(applied.resized["fuse"], 1);
        assert_eq!(applied.resized["zone"], 3);
    }

    // Paraphrases upstream's "should that there is not a partial application for instance
    // types": equal weights naming one resource on a shared type conflict, and the one
    // left out adds nothing anywhere; a heavier overlay's amount wins over a lighter one's.
    #[test]
    fn capacity_conflicts_and_weights() {
        let t = types();
        let overlays = Overlays::new(vec![
            capacity(
                "overlay-a",
                10,
                labels::INSTANCE_TYPE,
                &["c6i.large", "r6i.large"],
                &[("smarter-devices/buz", 54)],
            ),
            capacity(
                "overlay-b",
                10,
                labels::INSTANCE_TYPE,
                &["c6i.large", "m6i.large"],
                &[("smarter-devices/buz", 21)],
            ),
            capacity(
                "light",
                1,
                labels::INSTANCE_TYPE,
                &["m6i.large"],
                &[("smarter-devices/buz", 5)],
            ),
        ]);
        let (t, applied) = overlays.apply(&t, "default", &BTreeMap::new());
        assert_eq!(extended(&t, "c6i.large", "smarter-devices/buz"), 21);
        assert_eq!(extended(&t, "m6i.large", "smarter-devices/buz"), 21);
        assert_eq!(extended(&t, "r6i.large", "smarter-devices/buz"), 0);
        assert_eq!(
            applied.conflicts,
            BTreeSet::from([("overlay-a".to_owned(), "overlay-b".to_owned())])
        );
        assert!(!applied.resized.contains_key("light"));
    }

    #[test]
    fn weight_then_name_decides_and_equal_weights_conflict() {
        let t = types();
        let overlays = Overlays::new(vec![
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
        // Others' spot: the later by name of the two weight-5 overlays, the other in conflict.
        assert_eq!(price(&t, "m6i.large", CapacityType::Spot), 0.0);
        assert_eq!(price(&t, "m6i.large", CapacityType::OnDemand), 0.096);
        assert!(
            applied
                .conflicts
                .contains(&("a-spot-add".to_owned(), "b-spot-free".to_owned()))
        );
        assert!(!applied.repriced.contains_key("other-pool"));
    }
}
