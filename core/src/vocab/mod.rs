//! The words every layer shares, at the bottom of the core: well-known labels and label
//! rules ([`labels`]), Karpenter's duration strings ([`duration`]), requirement operators
//! ([`Operator`]) and the admin endpoint's query strings ([`query`]). Depends on nothing else
//! in the crate.

pub mod duration;
pub mod labels;
mod operator;
pub mod query;

pub use operator::Operator;
