//! The karpenter-rs control-plane core.
//!
//! # Layout
//! - [`api`]: the Karpenter v1 custom resources (NodePool, NodeClaim, EC2NodeClass), their
//!   validation, CRD generation and manifest checking.
//! - [`model`]: resources, requirements, taints, pods, instance types and the embedded catalog.
//! - [`scheduling`]: one binpacking round, [`scheduling::solve`].
//! - [`events`]: the domain events recorded in the journal and [`events::ClusterView`], the
//!   state replay rebuilds from them.
//! - [`ports`]: the [`ports::CloudProvider`] and [`ports::Cluster`] traits the actors drive.
//! - [`metrics`]: Prometheus metrics under upstream's names.
//! - [`recovery`]: what a start does with the journal and the cloud's instances.
//!
//! - [`actor`]: the ractor actors that drive them.
//!
//! All but `actor` are pure: no I/O, no async runtime.
pub mod actor;
pub mod api;
pub mod events;
pub mod metrics;
pub mod model;
pub mod ports;
pub mod recovery;
pub mod scheduling;
#[cfg(test)]
mod test_support;
