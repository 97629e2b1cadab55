//! The embedded simulator: an in-memory cloud and cluster on tokio's virtual clock, so the
//! real actors run a simulated hour in seconds with no cluster and no AWS account.

pub mod aws;
pub mod backend;
mod buffers;
pub mod cas;
pub mod cluster;
mod prices;
pub mod run;
pub mod scenario;
mod steps;
pub mod whatif;
