//! The domain model: quantities and resources, the requirement algebra, taints, pods,
//! instance types and the embedded EC2 catalog. Pure: no I/O, no async.

pub mod catalog;
pub mod instance_type;
pub mod pod;
pub mod quantity;
pub mod requirements;
pub mod resources;
pub mod taints;

pub use instance_type::{CapacityType, InstanceType, KubeletSettings, Offering};
pub use pod::Pod;
pub use requirements::{Requirement, Requirements};
pub use resources::{ResourceName, Resources};
pub use taints::{Taint, Toleration};
