//! Capacity reservations an EC2NodeClass selects (`spec.capacityReservationSelectorTerms`):
//! On-Demand Capacity Reservations and Capacity Blocks, found with
//! DescribeCapacityReservations, reported in `status.capacityReservations`, and offered to
//! rounds as `reserved` offerings.
//!
//! - Selection is a union over the terms, as upstream's: a term with `id` selects that
//!   reservation (one that does not exist selects nothing), others filter by tags (`*` means
//!   any value), `ownerID` and `instanceMatchCriteria`. Only `active` reservations count;
//!   interruptible ones are reported but not offered (launching into them needs the
//!   `reserved-capacity` fleet target, not modelled).
//! - A reservation's remaining count is DescribeCapacityReservations' AvailableInstanceCount
//!   at the last resolution, less the launches made into it since ([`ReservationUse`]); a
//!   launch refused with ReservationCapacityExceeded sets it to none until the next
//!   resolution, as upstream marks a reservation unavailable until it is described again.
//! - A Capacity Block is `expiring` [`CAPACITY_BLOCK_EXPIRING_SECS`] before its end: no
//!   longer offered, and its NodeClaims are to be drained.

use std::collections::{BTreeMap, HashMap, HashSet};

use aws_sdk_ec2::types::{
    CapacityReservationState, CapacityReservationType, Filter, InstanceMatchCriteria as SdkCriteria,
};
use karpenter_core::api::ec2nodeclass::{
    CapacityReservationSelectorTerm, InstanceMatchCriteria, ResolvedCapacityReservation,
};
use karpenter_core::model::reservation::CAPACITY_BLOCK_EXPIRING_SECS;
use karpenter_core::model::{Reservation, ReservationKind};

use crate::ec2::Ec2;
use crate::error::AwsError;

/// A capacity reservation as DescribeCapacityReservations reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityReservationInfo {
    /// `cr-…`.
    pub id: String,
    /// Owning account.
    pub owner_id: String,
    /// The instance type it reserves.
    pub instance_type: String,
    /// Its zone.
    pub zone: String,
    /// `open` or `targeted`.
    pub match_criteria: InstanceMatchCriteria,
    /// ODCR or Capacity Block.
    pub kind: ReservationKind,
    /// Instances it still takes.
    pub available: u32,
    /// When it ends (ms since the Unix epoch), if it does.
    pub end_ms: Option<i64>,
    /// EC2 may take the capacity back.
    pub interruptible: bool,
}

impl CapacityReservationInfo {
    /// The reservation an offering or instance names.
    pub fn reservation(&self) -> Reservation {
        Reservation {
            id: self.id.clone(),
            kind: self.kind,
        }
    }

    /// A Capacity Block within [`CAPACITY_BLOCK_EXPIRING_SECS`] of its end.
    pub fn expiring(&self, now_ms: i64) -> bool {
        self.kind == ReservationKind::CapacityBlock
            && self
                .end_ms
                .is_some_and(|end| now_ms >= end - CAPACITY_BLOCK_EXPIRING_SECS as i64 * 1000)
    }

    /// Whether rounds may plan launches into it.
    pub fn offered(&self, now_ms: i64) -> bool {
        !self.interruptible && !self.expiring(now_ms)
    }

    /// The `status.capacityReservations[]` entry.
    pub fn status(&self, now_ms: i64) -> ResolvedCapacityReservation {
        ResolvedCapacityReservation {
            availability_zone: self.zone.clone(),
            end_time: self.end_ms.and_then(|ms| {
                k8s_openapi::jiff::Timestamp::from_millisecond(ms)
                    .ok()
                    .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time)
            }),
            id: self.id.clone(),
            instance_match_criteria: self.match_criteria,
            instance_type: self.instance_type.clone(),
            interruptible: self.interruptible.then_some(true),
            owner_id: self.owner_id.clone(),
            reservation_type: Some(self.kind.as_str().to_owned()),
            state: Some(
                if self.expiring(now_ms) {
                    "expiring"
                } else {
                    "active"
                }
                .to_owned(),
            ),
        }
    }
}

fn filter(name: &str, value: &str) -> Filter {
    Filter::builder().name(name).values(value).build()
}

/// The filters of a term without an id.
fn term_filters(term: &CapacityReservationSelectorTerm) -> Vec<Filter> {
    let mut out = vec![filter("state", "active")];
    for (key, value) in term.tags.iter().flatten() {
        out.push(if value == "*" {
            filter("tag-key", key)
        } else {
            filter(&format!("tag:{key}"), value)
        });
    }
    if let Some(owner) = &term.owner_id {
        out.push(filter("owner-id", owner));
    }
    if let Some(criteria) = term.instance_match_criteria {
        let value = match criteria {
            InstanceMatchCriteria::Open => "open",
            InstanceMatchCriteria::Targeted => "targeted",
        };
        out.push(filter("instance-match-criteria", value));
    }
    out
}

fn info(r: &aws_sdk_ec2::types::CapacityReservation) -> Option<CapacityReservationInfo> {
    if r.state() != Some(&CapacityReservationState::Active) {
        return None;
    }
    Some(CapacityReservationInfo {
        id: r.capacity_reservation_id()?.to_owned(),
        owner_id: r.owner_id().unwrap_or_default().to_owned(),
        instance_type: r.instance_type()?.to_owned(),
        zone: r.availability_zone()?.to_owned(),
        match_criteria: match r.instance_match_criteria() {
            Some(SdkCriteria::Targeted) => InstanceMatchCriteria::Targeted,
            _ => InstanceMatchCriteria::Open,
        },
        kind: match r.reservation_type() {
            Some(CapacityReservationType::CapacityBlock) => ReservationKind::CapacityBlock,
            _ => ReservationKind::Default,
        },
        available: r.available_instance_count().unwrap_or(0).max(0) as u32,
        end_ms: r.end_date().and_then(|d| d.to_millis().ok()),
        interruptible: r.interruptible().unwrap_or(false),
    })
}

impl Ec2 {
    /// The active reservations any of the terms selects, by id.
    pub async fn capacity_reservations(
        &self,
        terms: &[CapacityReservationSelectorTerm],
    ) -> Result<Vec<CapacityReservationInfo>, AwsError> {
        let mut found: BTreeMap<String, CapacityReservationInfo> = BTreeMap::new();
        for term in terms {
            let mut token = None;
            loop {
                let mut call = self
                    .client
                    .describe_capacity_reservations()
                    .set_next_token(token.take());
                call = match &term.id {
                    Some(id) => call.capacity_reservation_ids(id),
                    None => call.set_filters(Some(term_filters(term))).max_results(1000),
                };
                let out = match call.send().await {
                    Ok(out) => out,
                    Err(e) => {
                        let error = AwsError::from_sdk("DescribeCapacityReservations", e);
                        // An id that does not exist selects nothing, as a tag nobody has.
                        if term.id.is_some()
                            && error.code == "InvalidCapacityReservationId.NotFound"
                        {
                            break;
                        }
                        return Err(error);
                    }
                };
                for reservation in out.capacity_reservations().iter().filter_map(info) {
                    found.insert(reservation.id.clone(), reservation);
                }
                token = out.next_token().map(str::to_owned);
                if token.is_none() {
                    break;
                }
            }
        }
        Ok(found.into_values().collect())
    }
}

/// Launches into reservations since they were last described, and reservations EC2 said
/// were full: what the next resolution's counts will include.
#[derive(Debug, Default)]
pub struct ReservationUse {
    launched: HashMap<String, u32>,
    exhausted: HashSet<String>,
    /// Bumped on every change, so caches of priced instance types know to refresh.
    pub generation: u64,
}

impl ReservationUse {
    /// One more instance launched into `id`.
    pub fn launched(&mut self, id: &str) {
        *self.launched.entry(id.to_owned()).or_default() += 1;
        self.generation += 1;
    }

    /// EC2 refused a launch into `id` for want of room.
    pub fn exhausted(&mut self, id: &str) {
        self.exhausted.insert(id.to_owned());
        self.generation += 1;
    }

    /// A fresh description of these reservations: what was counted since is in it.
    pub fn described(&mut self, ids: impl IntoIterator<Item = String>) {
        for id in ids {
            let a = self.launched.remove(&id).is_some();
            let b = self.exhausted.remove(&id);
            if a || b {
                self.generation += 1;
            }
        }
    }

    /// How many more instances `reservation` takes now.
    pub fn remaining(&self, reservation: &CapacityReservationInfo) -> u32 {
        if self.exhausted.contains(&reservation.id) {
            return 0;
        }
        reservation
            .available
            .saturating_sub(self.launched.get(&reservation.id).copied().unwrap_or(0))
    }
}

/// For each (instance type, zone), the offered reservation with the most room (ties: the
/// lowest id), with its remaining count: what a round sees as that type's reserved offering
/// in that zone, one per zone as upstream launches them.
pub fn best_per_type_and_zone<'a>(
    reservations: &'a [CapacityReservationInfo],
    usage: &ReservationUse,
    now_ms: i64,
) -> BTreeMap<(&'a str, &'a str), (&'a CapacityReservationInfo, u32)> {
    let mut out: BTreeMap<(&str, &str), (&CapacityReservationInfo, u32)> = BTreeMap::new();
    for r in reservations.iter().filter(|r| r.offered(now_ms)) {
        let remaining = usage.remaining(r);
        let slot = out
            .entry((r.instance_type.as_str(), r.zone.as_str()))
            .or_insert((r, remaining));
        if remaining > slot.1 {
            *slot = (r, remaining);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn odcr(id: &str, zone: &str, available: u32) -> CapacityReservationInfo {
        CapacityReservationInfo {
            id: id.into(),
            owner_id: "123456789012".into(),
            instance_type: "m5.large".into(),
            zone: zone.into(),
            match_criteria: InstanceMatchCriteria::Targeted,
            kind: ReservationKind::Default,
            available,
            end_ms: None,
            interruptible: false,
        }
    }

    #[test]
    fn launches_and_refusals_count_until_the_next_description() {
        let r = odcr("cr-1", "us-west-2a", 2);
        let mut usage = ReservationUse::default();
        usage.launched("cr-1");
        assert_eq!(usage.remaining(&r), 1);
        usage.exhausted("cr-1");
        assert_eq!(usage.remaining(&r), 0);
        let before = usage.generation;
        usage.described(["cr-1".to_owned()]);
        assert_eq!(usage.remaining(&r), 2);
        assert!(usage.generation > before);
    }

    #[test]
    fn the_reservation_with_most_room_stands_for_its_type_and_zone() {
        let mut block = odcr("cr-3", "us-west-2a", 9);
        block.kind = ReservationKind::CapacityBlock;
        block.end_ms = Some(10_000_000);
        let list = vec![
            odcr("cr-1", "us-west-2a", 1),
            odcr("cr-2", "us-west-2a", 3),
            odcr("cr-4", "us-west-2b", 0),
            block,
        ];
        let usage = ReservationUse::default();
        // The block ends in under 40 minutes: expiring, not offered.
        let best = best_per_type_and_zone(&list, &usage, 10_000_000 - 60_000);
        assert_eq!(best[&("m5.large", "us-west-2a")].0.id, "cr-2");
        assert_eq!(best[&("m5.large", "us-west-2b")].1, 0);
        assert_eq!(
            list[3].status(10_000_000 - 60_000).state.as_deref(),
            Some("expiring")
        );
        // Hours before its end it is active and has the most room.
        let best = best_per_type_and_zone(&list, &usage, 0);
        assert_eq!(best[&("m5.large", "us-west-2a")].0.id, "cr-3");
        assert_eq!(list[3].status(0).state.as_deref(), Some("active"));
    }

    #[test]
    fn terms_filter_on_active_state_tags_owner_and_criteria() {
        let term = CapacityReservationSelectorTerm {
            tags: Some(
                [
                    ("team".to_owned(), "ml".to_owned()),
                    ("any".to_owned(), "*".to_owned()),
                ]
                .into(),
            ),
            id: None,
            owner_id: Some("123456789012".into()),
            instance_match_criteria: Some(InstanceMatchCriteria::Targeted),
        };
        let names: Vec<(String, Vec<String>)> = term_filters(&term)
            .iter()
            .map(|f| (f.name().unwrap_or_default().to_owned(), f.values().to_vec()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("state".to_owned(), vec!["active".to_owned()]),
                ("tag-key".to_owned(), vec!["any".to_owned()]),
                ("tag:team".to_owned(), vec!["ml".to_owned()]),
                ("owner-id".to_owned(), vec!["123456789012".to_owned()]),
                (
                    "instance-match-criteria".to_owned(),
                    vec!["targeted".to_owned()]
                ),
            ]
        );
    }
}
