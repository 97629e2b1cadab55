//! The adapters of karpenter-rs, where all I/O lives, used by the `karpenter` binary.
//!
//! # Layout
//! - [`sim`]: the embedded simulator (in-memory cluster on a virtual clock, scenarios, runs).
//! - [`simcloud`]: the in-memory EC2 that `simulate` and `controller --cloud sim` launch on.
//! - [`admin`]: the admin HTTP endpoint (actor state, journal, health, metrics).
//! - [`explain`]: explanations read from a journal (NodeClaims, round costs), for the CLI and
//!   the admin endpoint.
//! - [`report`]: what a run measured ([`report::run`]), the HTML report of a run or a
//!   journal, and a journal's figures.
//! - [`bench`]: upstream's scheduling benchmark on identical input.
//! - [`install`]: the manifests `karpenter install` prints (and the Helm chart mirrors).
//! - [`kube`]: the Kubernetes adapter (watches, writes, the `controller` run loop).
//! - [`system`]: the one start-up `simulate` and `controller` share, and the EC2 wiring.

pub mod admin;
pub mod bench;
pub mod explain;
pub mod install;
pub mod kube;
pub mod progress;
pub mod report;
pub mod sim;
pub mod simcloud;
pub mod system;
