//! The operators of node selector requirements.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a requirement's values constrain a label. The variants are in the order upstream's CRD
/// lists them, which is the order the API server names them in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Operator {
    /// The label's value, as an integer, is at least the single value.
    Gte,
    /// The label's value, as an integer, is at most the single value.
    Lte,
    /// The label's value is one of `values`.
    In,
    /// The label is absent or its value is none of `values`.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label's value, as an integer, is greater than the single value.
    Gt,
    /// The label's value, as an integer, is less than the single value.
    Lt,
}

impl std::fmt::Display for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl Operator {
    /// The operators a core/v1 `NodeSelectorRequirement` may use (`In`, `NotIn`, `Exists`,
    /// `DoesNotExist`, `Gt`, `Lt`); `None` for anything else.
    pub fn from_node_selector(op: &str) -> Option<Operator> {
        Some(match op {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            _ => return None,
        })
    }
}
