//! The domain model: quantities and resources, the requirement algebra, taints, pods,
//! instance types and the embedded EC2 catalog. Pure: no I/O, no async.

pub mod catalog;
pub mod drain;
pub mod instance_type;
pub mod overlay;
pub mod pod;
pub mod quantity;
pub mod registration_health;
pub mod requirements;
pub mod reservation;
pub mod resources;
pub mod taints;
pub mod time;
pub mod volumes;

pub use instance_type::{CapacityType, InstanceType, KubeletSettings, Offering};
pub use pod::Pod;
pub use requirements::{Requirement, Requirements};
pub use reservation::{Reservation, ReservationKind, ReservedCapacity};
pub use resources::{ResourceName, Resources};
pub use taints::{Taint, Toleration};

/// FNV-1a, 64-bit: a stable hash (same value on every platform and run, unlike std's
/// hasher) for template hashes, catalog digests and the spot-price assumption.
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    /// Feeds bytes.
    pub fn write(&mut self, bytes: &[u8]) -> &mut Self {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        self
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// What prices add up to ($/h): `0.0` when there are none. (An empty `f64` sum is `-0.0`,
/// which reports and logs would print as `-0.0`.)
pub fn total_price(prices: impl IntoIterator<Item = f64>) -> f64 {
    prices.into_iter().fold(0.0, |sum, price| sum + price)
}

#[cfg(test)]
mod price_tests {
    #[test]
    fn no_prices_add_up_to_positive_zero() {
        let total = super::total_price([]);
        assert!(total == 0.0 && total.is_sign_positive(), "{total}");
        assert_eq!(format!("{total}"), "0");
        assert_eq!(super::total_price([0.25, 0.5]), 0.75);
    }
}
