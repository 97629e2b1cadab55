//! Karpenter API types (`karpenter.sh/v1`, `karpenter.k8s.aws/v1`, `karpenter.sh/v1alpha1`
//! NodeOverlay, `autoscaling.x-k8s.io/v1beta1` CapacityBuffer), their validation,
//! the generated CRDs, manifest checking and conversion from every released API.

pub mod capacitybuffer;
pub mod convert;
pub mod crds;
pub mod ec2nodeclass;
pub mod manifest;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod registration;
pub mod requirements;
mod rules;
pub mod schema;
pub mod unsupported;
pub mod validation;

pub use crate::vocab::Operator;
pub use crate::vocab::duration::{KDuration, NillableDuration};
pub use capacitybuffer::{CapacityBuffer, CapacityBufferSpec, CapacityBufferStatus};
pub use ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use nodeoverlay::{NodeOverlay, NodeOverlaySpec, NodeOverlayStatus};
pub use nodepool::{NodePool, NodePoolSpec, NodePoolStatus};
pub use requirements::NodeSelectorRequirementWithMinValues;
pub use validation::{FieldPath, Problem, Problems, Validate};
