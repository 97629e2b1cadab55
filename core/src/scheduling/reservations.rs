//! Reserved capacity in a round, as upstream's reservation manager keeps it: a planned
//! NodeClaim whose cheapest option is a reserved offering holds one instance of that
//! reservation, and no more NodeClaims are planned into a reservation than it has left.
//!
//! The packing prices reserved offerings near zero (see [`crate::model::reservation`]) and
//! knows nothing of counts; this pass, run on its plan, hands reservations out in the order
//! the claims were planned. A claim that holds one is pinned to it (`capacity-type In
//! [reserved]`, `capacity-reservation-id In [id]`), so its launch goes into that reservation
//! and nowhere else. A claim planned into a reservation already used up is handled by the
//! [`ReservedOfferingMode`]: provisioning defers its pods to the next round rather than
//! launching them on other capacity (the next round sees the reservation's new count, and
//! falls back then if it is still full), while disruption's simulations reprice it on the
//! type's other offerings.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::model::{CapacityType, InstanceType, Requirement, Reservation};
use crate::vocab::labels;

use super::output::{InstanceTypeOption, PlannedNodeClaim, Unschedulable};
use super::{SchedulingInput, SchedulingResult};

/// What a round does with a NodeClaim planned into a reservation that is used up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReservedOfferingMode {
    /// Its pods wait for the next round (provisioning, upstream's strict mode).
    #[default]
    Strict,
    /// It launches on the type's other offerings (disruption's simulations).
    Fallback,
}

/// Hands out the reservations `input`'s offerings have left to `result`'s NodeClaims.
pub(super) fn hold_reservations(
    input: &SchedulingInput,
    result: &mut SchedulingResult,
    mode: ReservedOfferingMode,
) {
    // Only a claim whose cheapest option is reserved holds a reservation.
    let reserved = |c: &PlannedNodeClaim| {
        (c.instance_types.first()).is_some_and(|o| o.capacity_type == CapacityType::Reserved)
    };
    if !result.new_claims.iter().any(reserved) {
        return;
    }
    let mut left = remaining(input);
    if left.is_empty() {
        return;
    }
    let claims = std::mem::take(&mut result.new_claims);
    for mut claim in claims {
        let Some(pool) = input.nodepools.iter().find(|p| p.name == claim.nodepool) else {
            result.new_claims.push(claim);
            continue;
        };
        let types = &pool.instance_types;
        let Some(held) = claim
            .instance_types
            .first()
            .and_then(|o| reservation_of(types, o))
        else {
            result.new_claims.push(claim);
            continue;
        };
        let id = held.id.clone();
        match left.get_mut(&id) {
            Some(count) if *count > 0 => {
                *count -= 1;
                pin(&mut claim, types, &id);
                result.new_claims.push(claim);
            }
            _ if mode == ReservedOfferingMode::Strict => {
                let option = &claim.instance_types[0];
                let reason = format!(
                    "waiting for reserved capacity: reservation {id} ({} in {}) is used up by the NodeClaims this round planned before; the pod is planned again next round rather than launched on other capacity",
                    option.name, option.zone
                );
                defer(result, &claim, &reason);
            }
            _ => {
                reprice(&mut claim, types, &left);
                let first = claim.instance_types.first();
                match first
                    .and_then(|o| reservation_of(types, o))
                    .map(|r| r.id.clone())
                {
                    // Repriced onto another reservation with room: it holds that one.
                    Some(other) => {
                        if let Some(count) = left.get_mut(&other) {
                            *count = count.saturating_sub(1);
                        }
                        pin(&mut claim, types, &other);
                        result.new_claims.push(claim);
                    }
                    None if claim.instance_types.is_empty() => {
                        let reason = format!(
                            "reservation {id} is used up and the NodeClaim allows no other offering"
                        );
                        defer(result, &claim, &reason);
                    }
                    None => result.new_claims.push(claim),
                }
            }
        }
    }
}

/// `input` as if the instances counted in `in_use` (per reservation) were not running: each
/// of those reservations takes that many more, as upstream credits a reservation's slots
/// back when it plans the pods of nodes in it again (a round from scratch for the pods
/// running, which should find the reservations the fleet itself fills).
pub fn credit_reservations(input: &mut SchedulingInput, in_use: &BTreeMap<String, u32>) {
    if in_use.is_empty() {
        return;
    }
    for pool in &mut input.nodepools {
        for it in &mut pool.instance_types {
            let credited = |o: &crate::model::Offering| {
                o.reservation().is_some_and(|r| in_use.contains_key(&r.id))
            };
            if !it.offerings.iter().any(credited) {
                continue;
            }
            let mut copy = (**it).clone();
            for offering in &mut copy.offerings {
                let Some(reserved) = &mut offering.reserved else {
                    continue;
                };
                let Some(more) = in_use.get(&reserved.reservation.id) else {
                    continue;
                };
                // Full, it was unavailable for that alone; other reasons stand.
                offering.available |= reserved.remaining == 0 && *more > 0;
                reserved.remaining += more;
            }
            *it = Arc::new(copy);
        }
    }
}

/// Per reservation, how many instances it takes (the least any pool's types report, as
/// NodePools may list it at different moments).
fn remaining(input: &SchedulingInput) -> HashMap<String, u32> {
    let mut left: HashMap<String, u32> = HashMap::new();
    let offerings = input
        .nodepools
        .iter()
        .flat_map(|p| p.instance_types.iter())
        .flat_map(|t| t.offerings.iter());
    for reserved in offerings.filter_map(|o| o.reserved.as_ref()) {
        left.entry(reserved.reservation.id.clone())
            .and_modify(|n| *n = (*n).min(reserved.remaining))
            .or_insert(reserved.remaining);
    }
    left
}

/// The reservation a reserved option launches into: its type's reserved offering in its
/// zone (the cloud lists one per type and zone).
fn reservation_of<'a>(
    types: &'a [std::sync::Arc<InstanceType>],
    option: &InstanceTypeOption,
) -> Option<&'a Reservation> {
    if option.capacity_type != CapacityType::Reserved {
        return None;
    }
    let it = types.iter().find(|t| t.name == *option.name)?;
    it.offerings
        .iter()
        .filter(|o| o.capacity_type == CapacityType::Reserved && o.zone == *option.zone)
        .find_map(|o| o.reservation())
}

/// Pins `claim` to reservation `id`: only its offering remains to launch into.
fn pin(claim: &mut PlannedNodeClaim, types: &[std::sync::Arc<InstanceType>], id: &str) {
    claim
        .instance_types
        .retain(|o| reservation_of(types, o).is_some_and(|r| r.id == id));
    claim.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::is_in([CapacityType::Reserved.as_str()]),
    );
    claim
        .requirements
        .add(labels::CAPACITY_RESERVATION_ID, Requirement::is_in([id]));
}

/// Replaces the options of used-up reservations by their types' cheapest other offering
/// the claim allows, cheapest first again.
fn reprice(
    claim: &mut PlannedNodeClaim,
    types: &[std::sync::Arc<InstanceType>],
    left: &HashMap<String, u32>,
) {
    let used_up = |r: &Reservation| left.get(&r.id).is_none_or(|n| *n == 0);
    let requirements = &claim.requirements;
    let options = std::mem::take(&mut claim.instance_types);
    claim.instance_types = options
        .into_iter()
        .filter_map(|option| {
            if !reservation_of(types, &option).is_some_and(used_up) {
                return Some(option);
            }
            let it = types.iter().find(|t| t.name == *option.name)?;
            let other = it
                .offerings_for(requirements)
                .filter(|o| o.reservation().is_none_or(|r| !used_up(r)))
                .min_by(|a, b| {
                    a.price
                        .total_cmp(&b.price)
                        .then_with(|| a.zone.cmp(&b.zone))
                })?;
            Some(InstanceTypeOption::at(option.name, other))
        })
        .collect();
    claim
        .instance_types
        .sort_by(|a, b| a.price.total_cmp(&b.price));
}

/// Leaves `claim`'s pods pending with `reason`.
fn defer(result: &mut SchedulingResult, claim: &PlannedNodeClaim, reason: &str) {
    result
        .unschedulable
        .extend(claim.pods.iter().map(|pod| Unschedulable {
            pod: pod.clone(),
            reason: reason.to_owned(),
        }));
}
