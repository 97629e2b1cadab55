//! Capacity reservations as offerings carry them: On-Demand Capacity Reservations and
//! Capacity Blocks that an EC2NodeClass selects, each a count of instances of one type in
//! one zone, paid for whether used or not.
//!
//! A reserved offering is priced as upstream prices it, the zone's on-demand price divided
//! by [`RESERVED_PRICE_DIVISOR`]: near zero, so the solver fills reservations before it
//! buys anything, while larger reserved types still cost more than smaller ones.

use std::fmt;

/// Reserved offerings cost the on-demand price divided by this (upstream's factor).
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// A Capacity Block is `expiring` this many seconds before its end: nothing more launches
/// into it, and its instances are to be drained (EC2 takes them back 30 minutes before the
/// end).
pub const CAPACITY_BLOCK_EXPIRING_SECS: u64 = 40 * 60;

/// What kind of reservation an instance launches into.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum ReservationKind {
    /// An On-Demand Capacity Reservation (`reservationType: default`).
    #[serde(rename = "default")]
    Default,
    /// A Capacity Block for ML: capacity until a fixed end time.
    #[serde(rename = "capacity-block")]
    CapacityBlock,
}

impl ReservationKind {
    /// The `karpenter.k8s.aws/capacity-reservation-type` label value (and EC2NodeClass
    /// status `reservationType`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationKind::Default => "default",
            ReservationKind::CapacityBlock => "capacity-block",
        }
    }

    /// Parses a label or status value.
    pub fn parse(value: &str) -> Option<ReservationKind> {
        match value {
            "default" => Some(ReservationKind::Default),
            "capacity-block" => Some(ReservationKind::CapacityBlock),
            _ => None,
        }
    }
}

impl fmt::Display for ReservationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A capacity reservation an instance runs in or an offering launches into.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Reservation {
    /// Its id, `cr-…`.
    pub id: String,
    /// Its kind.
    pub kind: ReservationKind,
}

/// A reserved offering's reservation and how many more instances it takes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReservedCapacity {
    /// The reservation.
    pub reservation: Reservation,
    /// Instances that can still launch into it.
    pub remaining: u32,
}

/// What a reserved offering costs when on-demand costs `on_demand` ($/h).
pub fn reserved_price(on_demand: f64) -> f64 {
    on_demand / RESERVED_PRICE_DIVISOR
}

/// Where a reserved instance's price comes from, as explanations say it: `on_demand` names
/// the on-demand price's source.
pub fn price_source(reservation: &Reservation, on_demand: &str) -> String {
    format!(
        "reserved capacity {} ({}), paid for whether used or not: priced as upstream prices reserved offerings, the on-demand price from {on_demand} divided by {RESERVED_PRICE_DIVISOR}",
        reservation.id, reservation.kind,
    )
}

/// Checks a reservation id's shape (`cr-` then lowercase letters and digits, as EC2 and
/// upstream's CRD have it); the error says what was wrong.
pub fn check_reservation_id(id: &str) -> Result<(), String> {
    let rest = id.strip_prefix("cr-").unwrap_or("");
    if rest.is_empty()
        || !rest
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Err(format!(
            "{id:?} is not a capacity reservation id: it must be \"cr-\" followed by lowercase letters and digits, like cr-0123456789abcdef0"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservation_ids_have_ec2s_shape() {
        assert!(check_reservation_id("cr-0123456789abcdef0").is_ok());
        for bad in ["cr-", "CR-0123", "cr-0123ABC", "i-0123", "cr-01_23", ""] {
            let error = check_reservation_id(bad).expect_err(bad);
            assert!(error.contains("cr-0123456789abcdef0"), "{error}");
        }
    }

    #[test]
    fn reserved_offerings_cost_almost_nothing_but_keep_their_order() {
        assert!(reserved_price(0.34) < 1e-6);
        assert!(reserved_price(0.68) > reserved_price(0.34));
        assert_eq!(
            ReservationKind::parse("capacity-block"),
            Some(ReservationKind::CapacityBlock)
        );
        assert_eq!(ReservationKind::Default.to_string(), "default");
    }
}
