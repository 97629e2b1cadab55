//! The choices the AWS provider makes, as pure functions over plain data: which subnet per
//! zone, which AMI per requirement set, which capacity type and CreateFleet overrides for a
//! launch, and the insufficient-capacity cache. The SDK-facing code only gathers the inputs
//! and sends the result.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use karpenter_core::model::{
    CapacityType, InstanceType, Requirements, Reservation, ReservationKind,
};
use karpenter_core::ports::OfferingKey;
use tokio::time::Instant;

/// CreateFleet accepts at most this many overrides per request.
pub const MAX_FLEET_OVERRIDES: usize = 60;

/// How long an offering that failed stays unavailable (upstream: 3 minutes).
pub const UNAVAILABLE_OFFERING_TTL: Duration = Duration::from_secs(180);

/// A subnet as DescribeSubnets reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    /// `subnet-…`.
    pub id: String,
    /// Availability zone name.
    pub zone: String,
    /// Availability zone id.
    pub zone_id: Option<String>,
    /// Free IPv4 addresses.
    pub available_ips: i64,
}

/// Per zone, the subnet with the most free addresses (ties: the lowest id, for stability).
pub fn subnet_per_zone(subnets: &[Subnet]) -> BTreeMap<String, Subnet> {
    let mut out: BTreeMap<String, Subnet> = BTreeMap::new();
    for subnet in subnets {
        match out.get(&subnet.zone) {
            Some(best)
                if best.available_ips > subnet.available_ips
                    || (best.available_ips == subnet.available_ips && best.id <= subnet.id) => {}
            _ => {
                out.insert(subnet.zone.clone(), subnet.clone());
            }
        }
    }
    out
}

/// An image candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Ami {
    /// `ami-…`.
    pub id: String,
    /// Name.
    pub name: String,
    /// Creation date, ISO 8601 (sorts as text).
    pub created: String,
    /// Deprecated (DeprecationTime in the past).
    pub deprecated: bool,
    /// The instance types it can boot: arch, and GPU / accelerator presence for variants.
    pub requirements: Requirements,
}

fn requirements_key(requirements: &Requirements) -> String {
    serde_json::to_string(&requirements.to_api()).unwrap_or_default()
}

/// Per distinct requirement set, the newest image; deprecated images only where no
/// non-deprecated one has the same requirements. Newest first overall.
pub fn newest_per_requirements(amis: &[Ami]) -> Vec<Ami> {
    let mut best: BTreeMap<String, &Ami> = BTreeMap::new();
    for ami in amis {
        let key = requirements_key(&ami.requirements);
        let better = match best.get(&key) {
            None => true,
            Some(current) => {
                (current.deprecated && !ami.deprecated)
                    || (current.deprecated == ami.deprecated
                        && (ami.created.as_str(), ami.id.as_str())
                            > (current.created.as_str(), current.id.as_str()))
            }
        };
        if better {
            best.insert(key, ami);
        }
    }
    let mut out: Vec<Ami> = best.into_values().cloned().collect();
    out.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| a.id.cmp(&b.id)));
    out
}

/// The image that boots `instance_type`: the first (newest) whose requirements it satisfies.
pub fn ami_for<'a>(amis: &'a [Ami], instance_type: &InstanceType) -> Option<&'a Ami> {
    amis.iter().find(|ami| {
        ami.requirements
            .matches_labels(&instance_type.labels)
            .is_ok()
    })
}

/// Offerings that failed recently, by key, with when they become available again.
#[derive(Debug, Default)]
pub struct UnavailableOfferings {
    until: HashMap<OfferingKey, Instant>,
    /// Bumped on every change, so caches of priced instance types know to refresh.
    pub generation: u64,
}

impl UnavailableOfferings {
    /// Marks an offering unavailable for [`UNAVAILABLE_OFFERING_TTL`] from `now`.
    pub fn mark(&mut self, key: OfferingKey, now: Instant) {
        self.until.insert(key, now + UNAVAILABLE_OFFERING_TTL);
        self.generation += 1;
    }

    /// Whether the offering is still marked at `now`.
    pub fn is_unavailable(&self, key: &OfferingKey, now: Instant) -> bool {
        self.until.get(key).is_some_and(|until| *until > now)
    }

    /// Drops expired entries.
    pub fn expire(&mut self, now: Instant) {
        let before = self.until.len();
        self.until.retain(|_, until| *until > now);
        if self.until.len() != before {
            self.generation += 1;
        }
    }

    /// Entries still marked at `now`.
    pub fn len_at(&self, now: Instant) -> usize {
        self.until.values().filter(|until| **until > now).count()
    }
}

/// One CreateFleet override: an instance type in a zone's subnet, with the image to boot.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetOverride {
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Subnet in that zone.
    pub subnet_id: String,
    /// Image (selects the launch template).
    pub image_id: String,
    /// USD/hour.
    pub price: f64,
    /// The capacity reservation it launches into (a reserved plan's overrides).
    pub reservation: Option<Reservation>,
}

impl FleetOverride {
    /// What picks its launch template: the image, and the reservation it targets.
    pub fn template_key(&self) -> String {
        template_key(&self.image_id, self.reservation.as_ref())
    }
}

/// A launch template's key among a launch's: its image and the reservation it targets.
pub fn template_key(image_id: &str, reservation: Option<&Reservation>) -> String {
    match reservation {
        Some(r) => format!("{image_id}|{}", r.id),
        None => image_id.to_owned(),
    }
}

/// What one CreateFleet call asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetPlan {
    /// Capacity type of every override.
    pub capacity_type: CapacityType,
    /// Overrides, cheapest first, at most [`MAX_FLEET_OVERRIDES`].
    pub overrides: Vec<FleetOverride>,
    /// The overrides are in the autoscaler's order, not EC2's price order: CreateFleet uses
    /// the prioritized strategies (`prioritized` on-demand, `capacity-optimized-prioritized`
    /// spot), each override's priority its position.
    pub prioritized: bool,
}

impl FleetPlan {
    /// Orders the overrides as `order` lists their instance types (those it does not name
    /// last, each group keeping its price order) and marks the plan prioritized: what
    /// upstream does when NodeOverlays set the prices the NodeClaim was planned with.
    pub fn prioritize(&mut self, order: &[&str]) {
        let rank = |name: &str| order.iter().position(|o| *o == name).unwrap_or(order.len());
        self.overrides.sort_by_key(|o| rank(&o.instance_type));
        self.prioritized = true;
    }
}

/// Why nothing can be launched.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FleetPlanError {
    /// Every offering the request allows is in the insufficient-capacity cache.
    #[error("every allowed offering is currently unavailable")]
    AllUnavailable(Vec<OfferingKey>),
    /// No allowed offering has a subnet or an image.
    #[error("{0}")]
    Unlaunchable(String),
}

/// Plans a launch: the capacity type (spot when allowed and any spot offering is available,
/// else on-demand, as upstream), then every allowed, available (type, zone) offering of that
/// capacity type that has a subnet and an image, cheapest first, capped at 60.
pub fn plan_fleet(
    candidates: &[&InstanceType],
    requirements: &Requirements,
    subnets: &BTreeMap<String, Subnet>,
    amis: &[Ami],
    unavailable: &UnavailableOfferings,
    now: Instant,
) -> Result<FleetPlan, FleetPlanError> {
    let mut by_capacity: BTreeMap<CapacityType, Vec<FleetOverride>> = BTreeMap::new();
    let mut all_unavailable = Vec::new();
    let mut reasons = Vec::new();
    for it in candidates {
        let Some(ami) = ami_for(amis, it) else {
            reasons.push(format!("no resolved AMI can boot {}", it.name));
            continue;
        };
        // Every offering the requirements allow, available or not, so that "all of them are
        // unavailable" can be told apart from "none is allowed".
        for offering in it.allowed_offerings(requirements) {
            let key = OfferingKey {
                instance_type: it.name.clone(),
                zone: offering.zone.clone(),
                capacity_type: offering.capacity_type,
            };
            if !offering.available || unavailable.is_unavailable(&key, now) {
                all_unavailable.push(key);
                continue;
            }
            let Some(subnet) = subnets.get(&offering.zone) else {
                reasons.push(format!("no subnet in zone {}", offering.zone));
                continue;
            };
            by_capacity
                .entry(offering.capacity_type)
                .or_default()
                .push(FleetOverride {
                    instance_type: it.name.clone(),
                    zone: offering.zone.clone(),
                    subnet_id: subnet.id.clone(),
                    image_id: ami.id.clone(),
                    price: offering.price,
                    reservation: offering.reservation().cloned(),
                });
        }
    }
    let capacity_type = [
        CapacityType::Reserved,
        CapacityType::Spot,
        CapacityType::OnDemand,
    ]
    .into_iter()
    .find(|ct| by_capacity.contains_key(ct));
    let Some(capacity_type) = capacity_type else {
        if !all_unavailable.is_empty() {
            return Err(FleetPlanError::AllUnavailable(all_unavailable));
        }
        reasons.sort();
        reasons.dedup();
        return Err(FleetPlanError::Unlaunchable(if reasons.is_empty() {
            "no instance type offering matches the NodeClaim's requirements".into()
        } else {
            reasons.join("; ")
        }));
    };
    let mut overrides = by_capacity.remove(&capacity_type).unwrap_or_default();
    // One fleet targets one kind of reservation: ODCRs launch as on-demand, Capacity Blocks
    // with the capacity-block target; ODCRs first, as they cost the same.
    if capacity_type == CapacityType::Reserved
        && overrides.iter().any(|o| {
            o.reservation
                .as_ref()
                .is_some_and(|r| r.kind == ReservationKind::Default)
        })
    {
        overrides.retain(|o| {
            o.reservation
                .as_ref()
                .is_some_and(|r| r.kind == ReservationKind::Default)
        });
    }
    overrides.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.instance_type.cmp(&b.instance_type))
            .then_with(|| a.zone.cmp(&b.zone))
    });
    overrides.truncate(MAX_FLEET_OVERRIDES);
    Ok(FleetPlan {
        capacity_type,
        overrides,
        prioritized: false,
    })
}

/// CreateFleet error codes that mean "no capacity for this offering": the offering goes into
/// the insufficient-capacity cache and the pods are re-planned elsewhere.
pub fn is_capacity_error(code: &str) -> bool {
    matches!(
        code,
        "InsufficientInstanceCapacity"
            | "InsufficientCapacity"
            | "UnfulfillableCapacity"
            | "MaxSpotInstanceCountExceeded"
            | "VcpuLimitExceeded"
            | "InsufficientFreeAddressesInSubnet"
            | "ReservationCapacityExceeded"
            | "SpotMaxPriceTooLow"
            | "Unsupported"
    )
}

/// Error codes that mean the caller's identity cannot do this: a configuration problem to
/// surface on the node class, not something to retry quickly.
pub fn is_auth_error(code: &str) -> bool {
    matches!(
        code,
        "UnauthorizedOperation"
            | "AuthFailure"
            | "AccessDenied"
            | "AccessDeniedException"
            | "InvalidClientTokenId"
            | "ExpiredToken"
            | "SignatureDoesNotMatch"
            | "UnrecognizedClientException"
            | "OptInRequired"
    )
}

#[cfg(test)]
mod tests;
