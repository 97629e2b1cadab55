//! The karpenter-rs actors: the ractor actors that drive the pure core
//! ([`karpenter_core`]) and the Prometheus metrics they keep.
//!
//! - [`actor`]: the NodePool, NodeClaim, scheduler, interruption and garbage-collection actors
//!   and the supervisor that starts them.
//! - [`metrics`]: Prometheus metrics under upstream's names.
pub mod actor;
pub mod metrics;
