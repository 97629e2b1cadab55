//! The karpenter-rs actors: the ractor actors that drive the pure core
//! ([`karpenter_core`]) and the Prometheus metrics they keep.
//!
//! - [`actor`]: the NodePool, NodeClaim, scheduler, interruption and garbage-collection actors
//!   and the supervisor that starts them.
//! - [`handles`]: how the adapters start a system and reach its actors (typed, no ractor).
//! - [`metrics`]: Prometheus metrics under upstream's names.
//! - [`overlays`]: the NodeOverlays in force, shared by every NodePool actor of a system.
pub mod actor;
pub mod handles;
pub mod metrics;
pub mod overlays;
