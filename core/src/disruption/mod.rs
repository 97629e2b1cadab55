//! Disruption, decided without I/O: which nodes leave, why, and how many at once.
//!
//! A pass of the disruption actor gathers a [`Snapshot`] (every NodeClaim with its node,
//! pods and PodDisruptionBudgets, every NodePool's disruption settings) and hands it to
//! [`pass::run`], which returns what to do: NodeClaims whose `expireAfter` has passed (deleted
//! forcefully, outside budgets, as upstream's expiration controller does), and at most one
//! command from the first method that has one, in upstream's order — emptiness, drift,
//! static drift, drift, multi-node and single-node consolidation. A consolidation command is checked again after 15 s
//! ([`validation`]) before it starts. What a command then goes through (taints,
//! replacements, waiting for them, draining) is [`orchestration`].
//!
//! - [`budgets`]: `spec.disruption.budgets`, cron windows included.
//! - [`candidates`]: which nodes may be disrupted at all, and why not.
//! - [`consolidation`]: the consolidation methods (multi-node, single-node) and our search;
//!   below it the `Consolidatable` condition, the delete or replace command a simulation
//!   allows, upstream's greedy searches and what rules a candidate out without simulating.
//! - [`decision`]: what a method decides and reports, and what simulations leave out.
//! - [`drift`]: the Drift method, and the drift the core judges itself
//!   (`InstanceTypeNotFound`).
//! - [`emptiness`]: the Emptiness method.
//! - [`observe`]: from what the actors and the cluster report to a [`Snapshot`].
//! - [`simulation`]: whether a candidate's pods fit on the rest of the cluster, and on which
//!   new NodeClaims.
//! - [`pass`]: expiration, repair and the methods in upstream's order.
//! - [`repair`]: unhealthy nodes deleted forcefully, within their NodePool's health.
//! - [`statics`]: static NodePools' drift and scale down.
//! - [`validation`]: a consolidation command checked again before it starts.
//! - [`orchestration`]: a command from its taints to its end.

pub mod balanced;
pub mod budgets;
pub mod candidates;
pub mod consolidation;
pub mod decision;
pub mod drift;
pub mod emptiness;
pub mod observe;
pub mod orchestration;
pub mod pass;
pub mod repair;
pub mod simulation;
pub mod statics;
pub mod validation;

pub use crate::events::disruption::{
    CommandRole, DriftMark, Method, NodeSnapshot, PodSnapshot, PoolPolicy, Snapshot, reason_label,
    reason_name,
};

#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod tests;
