//! The karpenter-rs control-plane core.
//!
//! # Layout
//! - [`api`]: the Karpenter v1 custom resources (NodePool, NodeClaim, EC2NodeClass), their
//!   validation, CRD generation and manifest checking.
//! - [`model`]: resources, requirements, taints, pods, instance types and the embedded catalog.
//! - [`scheduling`]: one binpacking round, [`scheduling::solve`].
//!
//! All three are pure: no I/O, no async.
pub mod api;
pub mod model;
pub mod scheduling;
