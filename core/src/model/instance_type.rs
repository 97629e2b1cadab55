//! Instance types with their capacity, overhead, labels and offerings.

use std::collections::BTreeMap;
use std::fmt;

use super::requirements::{Requirement, Requirements};
use super::reservation::{Reservation, ReservedCapacity};
use super::resources::{ResourceName, Resources};
use crate::vocab::labels;

/// How an instance is bought.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum CapacityType {
    /// Reserved capacity (capacity reservations, capacity blocks).
    #[serde(rename = "reserved")]
    Reserved,
    /// Spot.
    #[serde(rename = "spot")]
    Spot,
    /// On-demand.
    #[serde(rename = "on-demand")]
    OnDemand,
}

impl CapacityType {
    /// The `karpenter.sh/capacity-type` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::Reserved => "reserved",
            CapacityType::Spot => "spot",
            CapacityType::OnDemand => "on-demand",
        }
    }

    /// Parses a label value.
    pub fn parse(value: &str) -> Option<CapacityType> {
        match value {
            "reserved" => Some(CapacityType::Reserved),
            "spot" => Some(CapacityType::Spot),
            "on-demand" => Some(CapacityType::OnDemand),
            _ => None,
        }
    }
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One way to buy an instance type: a zone, a capacity type and a price.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Offering {
    /// Availability zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
    /// False while the cloud reports no capacity (insufficient-capacity cache).
    pub available: bool,
    /// The NodeOverlay that set `price`, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<String>,
    /// For a `reserved` offering, its reservation and how many instances it still takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<ReservedCapacity>,
}

impl Offering {
    /// An offering at the cloud's price.
    pub fn new(
        zone: impl Into<String>,
        capacity_type: CapacityType,
        price: f64,
        available: bool,
    ) -> Self {
        Offering {
            zone: zone.into(),
            capacity_type,
            price,
            available,
            overlay: None,
            reserved: None,
        }
    }

    /// A reserved offering of `reservation` in `zone`, priced from the zone's on-demand
    /// price ([`super::reservation::reserved_price`]), available while it takes more.
    pub fn reserved(
        zone: impl Into<String>,
        on_demand_price: f64,
        capacity: ReservedCapacity,
    ) -> Self {
        Offering {
            available: capacity.remaining > 0,
            reserved: Some(capacity),
            ..Offering::new(
                zone,
                CapacityType::Reserved,
                super::reservation::reserved_price(on_demand_price),
                true,
            )
        }
    }

    /// The reservation a reserved offering launches into.
    pub fn reservation(&self) -> Option<&Reservation> {
        self.reserved.as_ref().map(|r| &r.reservation)
    }
}

/// An instance type as the scheduler sees it. Serialized without its derived requirements,
/// which deserialization rebuilds.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(from = "StoredInstanceType")]
pub struct InstanceType {
    /// Name, e.g. `m5.large`.
    pub name: String,
    /// Single-valued labels every node of this type carries (arch, family, size, …).
    pub labels: BTreeMap<String, String>,
    /// `labels` as requirements, plus zones and capacity types from the offerings.
    #[serde(skip_serializing)]
    pub requirements: Requirements,
    /// What the machine has.
    pub capacity: Resources,
    /// Kube-reserved + system-reserved + eviction threshold.
    pub overhead: Resources,
    /// Zones × capacity types with prices.
    pub offerings: Vec<Offering>,
}

#[derive(serde::Deserialize)]
struct StoredInstanceType {
    name: String,
    labels: BTreeMap<String, String>,
    capacity: Resources,
    overhead: Resources,
    offerings: Vec<Offering>,
}

impl From<StoredInstanceType> for InstanceType {
    fn from(s: StoredInstanceType) -> Self {
        InstanceType::new(s.name, s.labels, s.capacity, s.overhead, s.offerings)
    }
}

impl InstanceType {
    /// Builds the type, deriving requirements from labels and offerings.
    pub fn new(
        name: impl Into<String>,
        labels: BTreeMap<String, String>,
        capacity: Resources,
        overhead: Resources,
        offerings: Vec<Offering>,
    ) -> Self {
        let mut requirements = Requirements::from_labels(&labels);
        let zones: Vec<String> = offerings.iter().map(|o| o.zone.clone()).collect();
        let capacity_types: Vec<&str> =
            offerings.iter().map(|o| o.capacity_type.as_str()).collect();
        requirements.add(labels::ZONE, Requirement::is_in(zones));
        requirements.add(labels::CAPACITY_TYPE, Requirement::is_in(capacity_types));
        InstanceType {
            name: name.into(),
            labels,
            requirements,
            capacity,
            overhead,
            offerings,
        }
    }

    /// What pods can use: capacity minus overhead, never below zero (as the kubelet reports).
    pub fn allocatable(&self) -> Resources {
        let mut out = self.capacity.sub(&self.overhead);
        for v in &mut out.0 {
            *v = (*v).max(0);
        }
        out
    }

    /// Available offerings allowed by `requirements` (zone and capacity type).
    pub fn offerings_for<'a>(
        &'a self,
        requirements: &'a Requirements,
    ) -> impl Iterator<Item = &'a Offering> + 'a {
        self.allowed_offerings(requirements).filter(|o| o.available)
    }

    /// Offerings allowed by `requirements`, available or not: zone and capacity type, and
    /// for reserved offerings the reservation id and kind (other offerings have none, which
    /// those keys allow, as upstream treats them as undefined well-known labels).
    pub fn allowed_offerings<'a>(
        &'a self,
        requirements: &'a Requirements,
    ) -> impl Iterator<Item = &'a Offering> + 'a {
        let reservation_id = requirements.get(labels::CAPACITY_RESERVATION_ID);
        let reservation_type = requirements.get(labels::CAPACITY_RESERVATION_TYPE);
        self.offerings.iter().filter(move |o| {
            requirements
                .get(labels::ZONE)
                .is_none_or(|r| r.has(&o.zone))
                && requirements
                    .get(labels::CAPACITY_TYPE)
                    .is_none_or(|r| r.has(o.capacity_type.as_str()))
                && o.reservation().is_none_or(|reservation| {
                    reservation_id.is_none_or(|r| r.has(&reservation.id))
                        && reservation_type.is_none_or(|r| r.has(reservation.kind.as_str()))
                })
        })
    }

    /// The cheapest available offering allowed by `requirements`.
    pub fn cheapest_offering<'a>(&'a self, requirements: &'a Requirements) -> Option<&'a Offering> {
        self.offerings_for(requirements).min_by(|a, b| {
            a.price
                .total_cmp(&b.price)
                .then_with(|| a.zone.cmp(&b.zone))
        })
    }

    /// GPUs, accelerators and bare metal: only used for pods that need them.
    pub fn is_exotic(&self) -> bool {
        ResourceName::ALL
            .into_iter()
            .any(|r| r.is_exotic() && self.capacity.get(r) > 0)
            || self
                .labels
                .get("karpenter.k8s.aws/instance-size")
                .is_some_and(|s| s.contains("metal"))
    }
}

/// Kubelet-derived settings that change capacity and overhead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletSettings {
    /// Fixed max pods per node.
    pub max_pods: Option<i64>,
    /// Max pods per vCPU.
    pub pods_per_core: Option<i64>,
    /// Replaces the computed kube-reserved amounts it names.
    pub kube_reserved: BTreeMap<ResourceName, i64>,
    /// Reserved for system daemons.
    pub system_reserved: Resources,
    /// `memory.available` hard eviction threshold in bytes, if set absolutely.
    pub eviction_hard_memory: Option<i64>,
    /// Root volume size in bytes (ephemeral-storage capacity).
    pub root_volume_bytes: Option<i64>,
    /// Memory the hypervisor keeps, in tenths of a percent of the advertised memory
    /// (`--vm-memory-overhead-percent`); `None` is upstream's default of 7.5 %.
    pub vm_memory_overhead_permille: Option<i64>,
}

/// Max pods when the kubelet does not fix it: ENI-limited, capped at 110.
pub fn default_max_pods(max_enis: i64, ipv4_per_eni: i64) -> i64 {
    (max_enis * (ipv4_per_eni - 1) + 2).clamp(1, 110)
}

/// Upstream's AWS kube-reserved CPU: 6% of the first core, 1% of the second, 0.5% of cores
/// 3–4 and 0.25% of the rest, in millicores (rounded up).
pub fn kube_reserved_cpu_millis(vcpus: i64) -> i64 {
    // In tenths of a millicore to stay exact.
    let mut tenths = 0;
    for core in 1..=vcpus {
        tenths += match core {
            1 => 600,
            2 => 100,
            3 | 4 => 50,
            _ => 25,
        };
    }
    (tenths + 9) / 10
}

/// Kube-reserved memory for `max_pods`: 11 MiB per pod + 255 MiB, in bytes.
pub fn kube_reserved_memory_bytes(max_pods: i64) -> i64 {
    (11 * max_pods + 255) << 20
}

/// Default hard eviction threshold for memory: 100Mi.
pub const DEFAULT_EVICTION_MEMORY_BYTES: i64 = 100 << 20;
/// Default root volume (ephemeral-storage) size: 20Gi.
pub const DEFAULT_ROOT_VOLUME_BYTES: i64 = 20 << 30;

/// Overhead for a type with `capacity`: kube-reserved (or its overrides), system-reserved and
/// the eviction thresholds (memory 100Mi, nodefs 10%).
pub fn overhead(capacity: &Resources, kubelet: &KubeletSettings) -> Resources {
    let vcpus = capacity.get(ResourceName::Cpu) / 1000;
    let pods = capacity.get(ResourceName::Pods);
    let ephemeral = capacity.get(ResourceName::EphemeralStorage);
    let mut kube_reserved = Resources::ZERO
        .with(ResourceName::Cpu, kube_reserved_cpu_millis(vcpus))
        .with(ResourceName::Memory, kube_reserved_memory_bytes(pods))
        .with(ResourceName::EphemeralStorage, 1 << 30);
    for (name, value) in &kubelet.kube_reserved {
        kube_reserved.set(*name, *value);
    }
    let eviction = Resources::ZERO
        .with(
            ResourceName::Memory,
            kubelet
                .eviction_hard_memory
                .unwrap_or(DEFAULT_EVICTION_MEMORY_BYTES),
        )
        .with(ResourceName::EphemeralStorage, ephemeral / 10);
    kube_reserved.add(&kubelet.system_reserved).add(&eviction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_reserved_cpu_matches_upstream_formula() {
        assert_eq!(kube_reserved_cpu_millis(1), 60);
        assert_eq!(kube_reserved_cpu_millis(2), 70);
        assert_eq!(kube_reserved_cpu_millis(4), 80);
        assert_eq!(kube_reserved_cpu_millis(8), 90);
        assert_eq!(kube_reserved_cpu_millis(96), 310);
    }

    #[test]
    fn max_pods_from_enis() {
        assert_eq!(default_max_pods(3, 10), 29); // m5.large
        assert_eq!(default_max_pods(15, 50), 110);
    }

    #[test]
    fn offerings_follow_requirements() {
        let offerings = vec![
            Offering::new("a", CapacityType::Spot, 0.03, true),
            Offering::new("b", CapacityType::Spot, 0.02, false),
            Offering::new("b", CapacityType::OnDemand, 0.1, true),
        ];
        let it = InstanceType::new(
            "t",
            BTreeMap::new(),
            Resources::ZERO,
            Resources::ZERO,
            offerings,
        );
        let any = Requirements::new();
        assert_eq!(it.cheapest_offering(&any).map(|o| o.price), Some(0.03));
        let mut zone_b = Requirements::new();
        zone_b.add(labels::ZONE, Requirement::is_in(["b"]));
        assert_eq!(it.cheapest_offering(&zone_b).map(|o| o.price), Some(0.1));
        assert!(
            it.requirements
                .get(labels::ZONE)
                .is_some_and(|r| r.has("b"))
        );
    }
}
