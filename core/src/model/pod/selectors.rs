//! A pod's constraints on other pods: label selectors, topology spread and pod (anti-)
//! affinity terms, read from the Kubernetes shapes.

use std::collections::BTreeMap;

use crate::vocab::labels::normalize_label;

/// A `matchExpressions` entry of a pod label selector.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct SelectorExpression {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: SelectorOperator,
    /// Values for `In` and `NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// The operators of a pod label selector expression.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum SelectorOperator {
    /// The label is set to one of the values.
    In,
    /// The label is absent or set to none of the values.
    NotIn,
    /// The label is set.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl SelectorExpression {
    pub(super) fn from_kube(
        e: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement,
    ) -> Result<Self, String> {
        let operator = match e.operator.as_str() {
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            other => return Err(format!("label selector operator {other:?}")),
        };
        Ok(SelectorExpression {
            key: e.key.clone(),
            operator,
            values: e.values.clone().unwrap_or_default(),
        })
    }

    /// Whether pod labels satisfy it.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// Whether pod labels satisfy a selector: every `matchLabels` pair and every expression.
pub fn selector_matches(
    match_labels: &BTreeMap<String, String>,
    expressions: &[SelectorExpression],
    labels: &BTreeMap<String, String>,
) -> bool {
    match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
        && expressions.iter().all(|e| e.matches(labels))
}

/// Whether `labels` satisfy a Kubernetes label selector (`matchLabels` and
/// `matchExpressions`); `Err` names an expression that cannot be read.
pub fn label_selector_matches(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let (match_labels, expressions) = selector_parts(Some(selector))?;
    Ok(selector_matches(&match_labels, &expressions, labels))
}

/// A label selector's two parts, or the part that cannot be read.
type SelectorParts = (BTreeMap<String, String>, Vec<SelectorExpression>);

fn selector_parts(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> Result<SelectorParts, String> {
    let Some(selector) = selector else {
        return Ok(Default::default());
    };
    let expressions = selector
        .match_expressions
        .iter()
        .flatten()
        .map(SelectorExpression::from_kube)
        .collect::<Result<_, _>>()?;
    Ok((
        selector.match_labels.clone().unwrap_or_default(),
        expressions,
    ))
}

/// A topology spread constraint.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct TopologySpread {
    /// The node label whose values are the domains (zone, hostname, capacity type, any).
    pub topology_key: String,
    /// Largest allowed difference between the fullest and the emptiest domain.
    pub max_skew: i64,
    /// Pods counted: those in the same namespace whose labels include all of these…
    pub selector: BTreeMap<String, String>,
    /// …and satisfy all of these (`matchExpressions`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expressions: Vec<SelectorExpression>,
    /// `ScheduleAnyway`: a preference, relaxed when it cannot be met.
    pub schedule_anyway: bool,
    /// `minDomains`: while fewer eligible domains exist, the emptiest counts as holding none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_domains: Option<i64>,
    /// `nodeAffinityPolicy: Ignore`: domains of nodes the pod's node affinity excludes count
    /// too (by default they do not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only domains of nodes whose taints the pod tolerates count
    /// (by default all do).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub honor_node_taints: bool,
}

impl TopologySpread {
    pub(super) fn from_kube(
        c: &k8s_openapi::api::core::v1::TopologySpreadConstraint,
        pod_labels: &BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let key = normalize_label(&c.topology_key).to_owned();
        let (selector, mut expressions) = selector_parts(c.label_selector.as_ref())
            .map_err(|what| format!("topology spread {what}"))?;
        expressions.extend(label_key_expressions(
            c.match_label_keys.as_deref(),
            SelectorOperator::In,
            pod_labels,
        ));
        let policy = |value: Option<&str>, field: &str| match value {
            None | Some("Honor") => Ok(true),
            Some("Ignore") => Ok(false),
            Some(other) => Err(format!(
                "topology spread {field} {other:?} (expected Honor or Ignore)"
            )),
        };
        let honor_affinity = policy(c.node_affinity_policy.as_deref(), "nodeAffinityPolicy")?;
        let honor_taints = c.node_taints_policy.is_some()
            && policy(c.node_taints_policy.as_deref(), "nodeTaintsPolicy")?;
        Ok(TopologySpread {
            topology_key: key,
            max_skew: i64::from(c.max_skew.max(1)),
            selector,
            expressions,
            schedule_anyway: c.when_unsatisfiable == "ScheduleAnyway",
            min_domains: c.min_domains.filter(|n| *n > 1).map(i64::from),
            ignore_node_affinity: !honor_affinity,
            honor_node_taints: honor_taints,
        })
    }

    /// Whether a pod with `labels` in `namespace` counts for this constraint of a pod in
    /// `own_namespace`.
    pub fn counts(
        &self,
        own_namespace: &str,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        own_namespace == namespace && selector_matches(&self.selector, &self.expressions, labels)
    }
}

/// A pod affinity or anti-affinity term.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct PodAffinityTerm {
    /// The node label whose values are the domains (zone, hostname, capacity type, any).
    pub topology_key: String,
    /// Labels the other pods must have…
    pub selector: BTreeMap<String, String>,
    /// …and expressions their labels must satisfy (`matchExpressions`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expressions: Vec<SelectorExpression>,
    /// Namespaces of the other pods; empty means the pod's own.
    pub namespaces: Vec<String>,
    /// Every namespace (an empty `namespaceSelector`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_namespaces: bool,
    /// A `namespaceSelector` on namespace labels: the namespaces it selects count besides
    /// `namespaces` (resolved against the cluster's namespaces before a round).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<NamespaceSelector>,
    /// Anti-affinity: no matching pod may share the domain. Affinity: one must.
    pub anti: bool,
}

impl PodAffinityTerm {
    pub(super) fn from_kube(
        term: &k8s_openapi::api::core::v1::PodAffinityTerm,
        anti: bool,
        pod_labels: &BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let kind = if anti {
            "pod anti-affinity"
        } else {
            "pod affinity"
        };
        let key = normalize_label(&term.topology_key).to_owned();
        if key.is_empty() {
            return Err(format!("{kind} without a topologyKey"));
        }
        // An empty namespace selector means every namespace; one on namespace labels is
        // resolved against the cluster's namespaces when a round starts.
        let (all_namespaces, namespace_selector) = match &term.namespace_selector {
            None => (false, None),
            Some(s)
                if s.match_labels.as_ref().is_none_or(|l| l.is_empty())
                    && s.match_expressions.as_ref().is_none_or(|e| e.is_empty()) =>
            {
                (true, None)
            }
            Some(s) => {
                let (match_labels, expressions) = selector_parts(Some(s))
                    .map_err(|what| format!("{kind} namespaceSelector {what}"))?;
                (
                    false,
                    Some(NamespaceSelector {
                        match_labels,
                        expressions,
                    }),
                )
            }
        };
        let (selector, mut expressions) = selector_parts(term.label_selector.as_ref())
            .map_err(|what| format!("{kind} {what}"))?;
        expressions.extend(label_key_expressions(
            term.match_label_keys.as_deref(),
            SelectorOperator::In,
            pod_labels,
        ));
        expressions.extend(label_key_expressions(
            term.mismatch_label_keys.as_deref(),
            SelectorOperator::NotIn,
            pod_labels,
        ));
        Ok(PodAffinityTerm {
            topology_key: key,
            selector,
            expressions,
            namespaces: term.namespaces.clone().unwrap_or_default(),
            all_namespaces,
            namespace_selector,
            anti,
        })
    }
}

/// `matchLabelKeys` (`In`) or `mismatchLabelKeys` (`NotIn`) as selector expressions on the
/// pod's own values; keys the pod does not carry are skipped, as kube-scheduler does.
fn label_key_expressions(
    keys: Option<&[String]>,
    operator: SelectorOperator,
    pod_labels: &BTreeMap<String, String>,
) -> Vec<SelectorExpression> {
    keys.into_iter()
        .flatten()
        .filter_map(|key| {
            pod_labels.get(key).map(|value| SelectorExpression {
                key: key.clone(),
                operator,
                values: vec![value.clone()],
            })
        })
        .collect()
}

/// A label selector over namespaces.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct NamespaceSelector {
    /// Labels the namespace must have…
    pub match_labels: BTreeMap<String, String>,
    /// …and expressions its labels must satisfy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expressions: Vec<SelectorExpression>,
}

impl NamespaceSelector {
    /// Whether a namespace with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        selector_matches(&self.match_labels, &self.expressions, labels)
    }
}
