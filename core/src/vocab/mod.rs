//! The words every layer shares, at the bottom of the core: well-known labels and label
//! rules ([`labels`]), Karpenter's duration strings ([`duration`]) and requirement operators
//! ([`Operator`]). Depends on nothing else in the crate.

pub mod duration;
pub mod labels;
mod operator;

pub use operator::Operator;
