//! The pure karpenter-rs core: everything that decides, with no I/O and no async runtime (the
//! crate's manifest has no tokio, ractor or metrics dependency, and `tests/layers.rs` keeps it
//! that way).
//!
//! # Layout
//! - [`vocab`]: labels, durations and operators every layer shares.
//! - [`api`]: the Karpenter v1 custom resources (NodePool, NodeClaim, EC2NodeClass,
//!   NodeOverlay, CapacityBuffer), their validation, CRD generation and manifest checking.
//! - [`model`]: resources, requirements, taints, pods, instance types and the embedded catalog.
//! - [`scheduling`]: one binpacking round, [`scheduling::solve`].
//! - [`disruption`]: which nodes leave, why and how many at once (budgets, candidates,
//!   emptiness, expiration, drift) and a command's course from taints to termination.
//! - [`lifecycle`]: the NodeClaim lifecycle (`decide`, the object it writes) and a NodePool's
//!   count against its limits.
//! - [`events`]: the domain events recorded in the journal and [`events::ClusterView`], the
//!   state replay rebuilds from them.
//! - [`ports`]: the [`ports::CloudProvider`] and [`ports::Cluster`] traits the actors drive.
//! - [`provisioning`]: what a round is given about nodes and NodeClaims on their way, and
//!   what its decisions become (named plans, the round's record).
//! - [`recovery`]: what a start does with the journal and the cloud's instances.
//! - [`eventbridge`]: the interruption queue's EventBridge messages, parsed into notices.
//! - [`migration`]: NodePools proposed from Cluster Autoscaler's node groups.
//! - [`cas`]: a model of Cluster Autoscaler's decisions, to compare the bill.
pub mod api;
pub mod cas;
pub mod disruption;
pub mod eventbridge;
pub mod events;
pub mod lifecycle;
pub mod migration;
pub mod model;
pub mod ports;
pub mod provisioning;
pub mod recovery;
pub mod scheduling;
#[cfg(test)]
mod test_support;
pub mod vocab;
