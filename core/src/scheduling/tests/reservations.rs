//! Reserved capacity in a round, paraphrasing upstream's `reserved_fallback_test.go`
//! ("Reserved Instance Types/Full-but-available") and the reservation manager's counts.

use super::*;
use crate::model::{Reservation, ReservationKind, ReservedCapacity};

/// `m.xlarge` (4 vCPU) also offered in zone a from reservation `id` with `remaining` left.
fn reserved_catalog(id: &str, remaining: u32) -> Vec<Arc<InstanceType>> {
    let base = it("m.xlarge", 4, 16, 0.20);
    let mut offerings = base.offerings.clone();
    offerings.push(Offering::reserved(
        "a",
        0.20,
        ReservedCapacity {
            reservation: Reservation {
                id: id.into(),
                kind: ReservationKind::Default,
            },
            remaining,
        },
    ));
    let reserved = InstanceType::new(
        "m.xlarge",
        base.labels.clone(),
        base.capacity,
        base.overhead,
        offerings,
    );
    vec![
        it("m.large", 2, 8, 0.10),
        Arc::new(reserved),
        it("m.2xlarge", 8, 32, 0.40),
    ]
}

fn reserved_pool(catalog: Vec<Arc<InstanceType>>, capacity_types: &[&str]) -> NodePoolTemplate {
    let mut pool = pool("default");
    pool.instance_types = catalog;
    if !capacity_types.is_empty() {
        pool.requirements.add(
            labels::CAPACITY_TYPE,
            Requirement::is_in(capacity_types.iter().copied()),
        );
    }
    pool
}

fn reservation_ids(claim: &PlannedNodeClaim) -> Option<Vec<String>> {
    let requirement = claim.requirements.get(labels::CAPACITY_RESERVATION_ID)?;
    Some(requirement.values()?.iter().cloned().collect())
}

#[test]
fn a_reservation_with_room_is_preferred_over_on_demand_and_spot_and_pins_the_claim() {
    // Upstream: "strict (provisioning): a reservation with capacity is preferred over
    // on-demand (regression guard)"; the node is labelled with the reservation.
    let round = input(
        pods("p", 1, 100, 1),
        vec![reserved_pool(reserved_catalog("cr-1", 3), &[])],
    );
    let result = solve(&round);
    assert_all_placed(&result);
    let claim = &result.new_claims[0];
    assert_eq!(claim.instance_types.len(), 1, "{:?}", claim.instance_types);
    assert_eq!(
        claim.instance_types[0].capacity_type,
        CapacityType::Reserved
    );
    assert_eq!(&*claim.instance_types[0].zone, "a");
    assert_eq!(reservation_ids(claim), Some(vec!["cr-1".to_owned()]));
    let capacity_type = claim.requirements.get(labels::CAPACITY_TYPE).unwrap();
    assert!(capacity_type.has("reserved") && !capacity_type.has("on-demand"));
}

#[test]
fn no_more_claims_are_planned_into_a_reservation_than_it_has_left_and_the_rest_wait() {
    // Upstream's reservation manager: a reservation with one instance left is held by the
    // first NodeClaim; strict mode defers pods that would have used it rather than launching
    // them on other capacity within the same round.
    let round = input(
        pods("p", 3, 3000, 1),
        vec![reserved_pool(reserved_catalog("cr-1", 1), &[])],
    );
    let result = solve(&round);
    let reserved: Vec<_> = (result.new_claims.iter())
        .filter(|c| c.instance_types[0].capacity_type == CapacityType::Reserved)
        .collect();
    assert_eq!(reserved.len(), 1, "{:?}", result.new_claims);
    assert_eq!(reserved[0].pods.len(), 1);
    assert_eq!(result.unschedulable.len(), 2, "{:?}", result.unschedulable);
    for u in &result.unschedulable {
        assert!(
            u.reason
                .contains("waiting for reserved capacity: reservation cr-1"),
            "{}",
            u.reason
        );
    }
}

#[test]
fn disruptions_simulations_fall_back_to_the_types_other_offerings() {
    // Upstream's fallback mode (the disruption simulation's): a claim beyond the
    // reservation's count launches on the type's cheapest other offering.
    let round = input(
        pods("p", 3, 3000, 1),
        vec![reserved_pool(reserved_catalog("cr-1", 1), &[])],
    );
    let result = solve_in(&round, None, ReservedOfferingMode::Fallback);
    assert_all_placed(&result);
    let held = (result.new_claims.iter())
        .filter(|c| reservation_ids(c).is_some())
        .count();
    assert_eq!(held, 1, "{:?}", result.new_claims);
    for claim in result
        .new_claims
        .iter()
        .filter(|c| reservation_ids(c).is_none())
    {
        assert!(
            claim
                .instance_types
                .iter()
                .all(|o| o.capacity_type != CapacityType::Reserved)
        );
        assert!(claim.instance_types.is_sorted_by(|a, b| a.price <= b.price));
    }
}

#[test]
fn a_full_reservation_does_not_block_a_pool_that_may_buy_other_capacity() {
    // Upstream: "strict (provisioning): a full-but-available reservation does not block
    // scheduling and holds no reservation".
    let round = input(
        pods("p", 1, 3000, 1),
        vec![reserved_pool(reserved_catalog("cr-1", 0), &[])],
    );
    let result = solve(&round);
    assert_all_placed(&result);
    let claim = &result.new_claims[0];
    assert_eq!(reservation_ids(claim), None);
    assert_ne!(
        claim.instance_types[0].capacity_type,
        CapacityType::Reserved
    );
}

#[test]
fn a_reserved_only_pool_with_a_full_reservation_plans_nothing() {
    // Upstream: "fallback: a full reservation with no fallback yields no NodeClaim" and the
    // strict reserved-only mislaunch guard: nothing is launched on-demand instead.
    let round = input(
        pods("p", 1, 3000, 1),
        vec![reserved_pool(reserved_catalog("cr-1", 0), &["reserved"])],
    );
    let result = solve(&round);
    assert!(result.new_claims.is_empty(), "{:?}", result.new_claims);
    assert_eq!(result.unschedulable.len(), 1);
}

#[test]
fn a_reservation_id_requirement_selects_that_reservations_offering_only() {
    let catalog = reserved_catalog("cr-1", 2);
    let mut wanted = Requirements::new();
    wanted.add(
        labels::CAPACITY_RESERVATION_ID,
        Requirement::is_in(["cr-2"]),
    );
    let reserved = catalog[1]
        .allowed_offerings(&wanted)
        .filter(|o| o.reserved.is_some());
    assert_eq!(reserved.count(), 0);
    let mut right = Requirements::new();
    right.add(
        labels::CAPACITY_RESERVATION_ID,
        Requirement::is_in(["cr-1"]),
    );
    right.add(labels::CAPACITY_TYPE, Requirement::is_in(["reserved"]));
    let offerings: Vec<_> = catalog[1].offerings_for(&right).collect();
    assert_eq!(offerings.len(), 1);
    assert_eq!(
        offerings[0].reservation().map(|r| r.id.as_str()),
        Some("cr-1")
    );
}

#[test]
fn a_repriced_claim_holds_another_reservation_it_can_launch_into() {
    // Fallback: a claim past cr-1's count that may also launch as m.2xlarge, reserved in
    // cr-2, holds cr-2 (counted, pinned) rather than overrunning it unaccounted.
    let mut catalog = reserved_catalog("cr-1", 1);
    let big = catalog[2].clone();
    let mut offerings = big.offerings.clone();
    offerings.push(Offering::reserved(
        "a",
        0.40,
        ReservedCapacity {
            reservation: Reservation {
                id: "cr-2".into(),
                kind: ReservationKind::Default,
            },
            remaining: 1,
        },
    ));
    catalog[2] = Arc::new(InstanceType::new(
        "m.2xlarge",
        big.labels.clone(),
        big.capacity,
        big.overhead,
        offerings,
    ));
    let round = input(pods("p", 3, 3000, 1), vec![reserved_pool(catalog, &[])]);
    let result = solve_in(&round, None, ReservedOfferingMode::Fallback);
    assert_all_placed(&result);
    let mut held: Vec<_> = result
        .new_claims
        .iter()
        .filter_map(reservation_ids)
        .collect();
    held.sort();
    assert_eq!(
        held,
        vec![vec!["cr-1".to_owned()], vec!["cr-2".to_owned()]],
        "{:?}",
        result.new_claims
    );
    let unpinned: Vec<_> = (result.new_claims.iter())
        .filter(|c| reservation_ids(c).is_none())
        .collect();
    for claim in unpinned {
        assert!(
            claim
                .instance_types
                .iter()
                .all(|o| o.capacity_type != CapacityType::Reserved),
            "{claim:?}"
        );
    }
}
