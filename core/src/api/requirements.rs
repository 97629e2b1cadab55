//! Node selector requirements with `minValues`, as in NodePool and NodeClaim specs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::validation::{FieldPath, Problems};
use crate::model::Requirements;
use crate::vocab::Operator;
use crate::vocab::labels::{
    LabelUse, label_restriction, label_value_problem, qualified_name_problem,
};

/// A node selector requirement with an optional minimum number of distinct values.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// The label key that the selector applies to.
    #[schemars(length(max = 316), regex(pattern = super::schema::QUALIFIED_NAME_PATTERN))]
    pub key: String,
    /// Represents a key's relationship to a set of values.
    pub operator: Operator,
    /// An array of string values. In and NotIn need values; Exists and DoesNotExist take none;
    /// Gt, Lt, Gte and Lte take exactly one non-negative integer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::requirement_values)]
    pub values: Vec<String>,
    /// The minimum number of distinct values of this key the launched instance types must span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50), transform = super::schema::without_format)]
    pub min_values: Option<i64>,
}

impl NodeSelectorRequirementWithMinValues {
    /// A requirement `key operator values`.
    pub fn new(key: &str, operator: Operator, values: &[&str]) -> Self {
        NodeSelectorRequirementWithMinValues {
            key: key.to_owned(),
            operator,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
            min_values: None,
        }
    }
}

/// Upstream's message for `In` without values.
pub const MSG_IN_NEEDS_VALUE: &str = "requirements with operator 'In' must have a value defined";
/// Upstream's message for a numeric comparison without exactly one non-negative integer.
pub const MSG_NUMERIC_NEEDS_ONE_VALUE: &str =
    "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value";
/// Upstream's message for `minValues` above the number of `In` values.
pub const MSG_MIN_VALUES: &str = "requirements with 'minValues' must have at least that many values specified in the 'values' field";

/// Checks a requirement list as upstream's CRD rules and runtime validation do.
pub fn validate_requirements(
    requirements: &[NodeSelectorRequirementWithMinValues],
    path: &FieldPath,
    usage: LabelUse,
    problems: &mut Problems,
) {
    if requirements.len() > 100 {
        problems.push(path, "must have at most 100 items");
    }
    for (i, req) in requirements.iter().enumerate() {
        let at = path.index(i);
        let key_path = at.field("key");
        if let Some(problem) = qualified_name_problem(&req.key) {
            problems.push(
                &key_path,
                format!("invalid label key {:?}: {problem}", req.key),
            );
        }
        problems.push_opt(&key_path, label_restriction(&req.key, usage));
        let values_path = at.field("values");
        if matches!(req.operator, Operator::In | Operator::NotIn) {
            for (j, value) in req.values.iter().enumerate() {
                problems.push_opt(&values_path.index(j), label_value_problem(value));
            }
        }
        match req.operator {
            Operator::In if req.values.is_empty() => {
                problems.push(&values_path, MSG_IN_NEEDS_VALUE);
            }
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let single_non_negative =
                    req.values.len() == 1 && req.values[0].parse::<i64>().is_ok_and(|v| v >= 0);
                if !single_non_negative {
                    problems.push(&values_path, MSG_NUMERIC_NEEDS_ONE_VALUE);
                }
            }
            _ => {}
        }
        if let Some(min) = req.min_values {
            if !(1..=50).contains(&min) {
                problems.push(&at.field("minValues"), "must be between 1 and 50");
            }
            if req.operator == Operator::In && (req.values.len() as i64) < min {
                problems.push(&at.field("minValues"), MSG_MIN_VALUES);
            }
        }
    }
}

impl super::NodePool {
    /// The labels its template gives nodes, and the requirements its NodeClaims are planned
    /// under: the template's, narrowed by those labels and by the pool's name (every node
    /// carries it as `karpenter.sh/nodepool`, so pods can select a pool).
    pub fn node_requirements(&self) -> (Requirements, std::collections::BTreeMap<String, String>) {
        let labels = self
            .spec
            .template
            .metadata
            .as_ref()
            .map(|m| m.labels.clone())
            .unwrap_or_default();
        let mut requirements = Requirements::from_api(&self.spec.template.spec.requirements);
        requirements.intersect_with(&Requirements::from_labels(&labels));
        requirements.add(
            crate::vocab::labels::NODEPOOL,
            crate::model::Requirement::is_in([self.metadata.name.clone().unwrap_or_default()]),
        );
        (requirements, labels)
    }
}

impl Requirements {
    /// From API requirements, normalising deprecated label aliases.
    pub fn from_api(list: &[NodeSelectorRequirementWithMinValues]) -> Self {
        Requirements::from_entries(list.iter().map(|r| {
            (
                r.key.as_str(),
                r.operator,
                r.values.as_slice(),
                r.min_values,
            )
        }))
    }

    /// The API form (see [`Requirements::entries`]), which [`Requirements::from_api`] reads
    /// back.
    pub fn to_api(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        self.entries()
            .into_iter()
            .map(
                |(key, operator, values, min_values)| NodeSelectorRequirementWithMinValues {
                    key,
                    operator,
                    values,
                    min_values,
                },
            )
            .collect()
    }
}
