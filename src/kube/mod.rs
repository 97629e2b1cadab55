//! The Kubernetes adapter: watches and caches ([`watch`], [`cluster::Caches`]), the
//! [`Cluster`](karpenter_core::ports::Cluster) port over kube-rs ([`cluster::KubeCluster`]),
//! the translation of watch events into actor messages ([`tracker`], pure), the object
//! conversions ([`convert`], pure), simulated Nodes for the in-memory cloud in a real cluster
//! ([`simnodes`]; in `sim-nodes`, following the NodeClaims with [`claimwatch`]), leader election on a Lease ([`leader`]), the journal at start-up
//! ([`journal`]), the take-over of the cluster's NodeClaims by a new leader ([`takeover`]),
//! Events as client-go records them ([`events`], deciding with [`correlator`], pure),
//! the client's request rate ([`throttle`]) and retries ([`retry`], honouring `Retry-After`), the probe and metrics endpoint ([`probes`]) and the `controller` command's run loop
//! ([`controller`]), which writes the NodePool and EC2NodeClass status the core decides
//! (`karpenter_core::lifecycle::status`), and NodeOverlays handed to the actors ([`overlays`]).

pub mod buffers;
pub mod claimwatch;
pub mod cluster;
pub mod controller;
pub mod convert;
pub mod correlator;
pub mod events;
pub mod history;
pub mod journal;
pub mod leader;
pub mod migrate;
pub mod overlays;
pub mod probes;
pub mod retry;
pub mod simnodes;
pub mod takeover;
pub mod throttle;
pub mod tracker;
pub mod watch;
