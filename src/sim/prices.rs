//! The prices a run's instances are paid at as the autoscaler decided them.
//!
//! The in-memory cloud prices an instance from its catalog; a NodeOverlay (negotiated
//! discounts, Savings Plans) changes the price the autoscaler buys at, and the NodeClaim's
//! launch records that price in the journal. With overlays in force the report and its
//! samples follow the journal's prices, read incrementally; without, the cloud's.

use std::collections::HashMap;

use karpenter_core::events::DomainEvent;
use karpenter_core::ports::Instance;
use karpenter_journal::Journal;

/// Launch prices read from the journal so far.
#[derive(Debug, Default)]
pub(super) struct LaunchPrices {
    enabled: bool,
    next_seq: u64,
    by_instance: HashMap<String, f64>,
}

impl LaunchPrices {
    /// Follows the journal when `enabled` (overlays in force); otherwise the cloud's prices
    /// stand.
    pub fn new(enabled: bool) -> Self {
        LaunchPrices {
            enabled,
            ..Default::default()
        }
    }

    /// Reads the launches journaled since the last call.
    pub fn catch_up(&mut self, journal: &Journal<DomainEvent>) -> anyhow::Result<()> {
        if !self.enabled {
            return Ok(());
        }
        for envelope in journal.read_from(self.next_seq) {
            let envelope = envelope?;
            self.next_seq = envelope.seq + 1;
            if let DomainEvent::NodeClaimLaunched { instance, .. } = envelope.event {
                self.by_instance.insert(instance.id, instance.price);
            }
        }
        Ok(())
    }

    /// What `instance` is paid at.
    pub fn price(&self, instance: &Instance) -> f64 {
        (self.by_instance.get(&instance.id).copied()).unwrap_or(instance.price)
    }
}
