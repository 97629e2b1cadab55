//! `karpenter.sh/v1alpha1` NodeOverlay (upstream's `NodeOverlay` feature gate): a selector
//! over instance types (and offerings: zone, capacity type) that changes what the scheduler
//! believes of them: their price, fixed (`price`) or adjusted (`priceAdjustment`: `+10%`,
//! `-15%`, `-0.5`), and extended resources added to their capacity (`capacity`).
//!
//! How overlays combine (precedence, conflicts) is [`crate::model::overlay`]'s to say; an
//! overlay left out for a conflict says so on its `Ready` condition.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::requirements::MSG_IN_NEEDS_VALUE;
use super::validation::{FieldPath, Problems, Validate};
use crate::model::Requirements;
use crate::model::ResourceName;
use crate::model::overlay::Overlay;
pub use crate::model::overlay::PriceChange;
use crate::vocab::Operator;
use crate::vocab::labels::{HOSTNAME, label_value_problem, qualified_name_problem};

/// Upstream's pattern of `price`: a non-negative decimal.
pub const PRICE_PATTERN: &str = r"^\d+(\.\d+)?$";
/// Upstream's pattern of `priceAdjustment`: `±amount`, `+N%`, `-N%` below 100, or `-100%`.
pub const PRICE_ADJUSTMENT_PATTERN: &str =
    r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$";
/// Upstream's NodeOverlay message for a numeric comparison without exactly one non-negative
/// integer (worded without the NodePool message's last comma).
pub const MSG_OVERLAY_NUMERIC: &str =
    "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value";
/// Resources an overlay may not change: it only adds extended resources.
pub const RESTRICTED_CAPACITY: &[&str] = &["cpu", "memory", "ephemeral-storage", "pods"];
/// `karpenter.sh` labels an overlay may select on.
const ALLOWED_KARPENTER_LABELS: &[&str] = &["karpenter.sh/capacity-type", "karpenter.sh/nodepool"];

/// The desired state of a NodeOverlay.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    singular = "nodeoverlay",
    shortname = "overlays",
    category = "karpenter",
    status = "NodeOverlayStatus",
    derive = "PartialEq",
    doc = "NodeOverlay changes the price and capacity the scheduler sees for the instance types it selects",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlaySpec {
    /// Which instance types and offerings the overlay applies to: well-known labels
    /// (instance type, zone, capacity type, …) and the NodePool's own labels.
    #[schemars(length(max = 100), transform = super::schema::atomic_list)]
    pub requirements: Vec<OverlayRequirement>,
    /// The price change for matching offerings: `+10%`, `-15%`, `+0.2` or `-0.5` (USD/hour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = PRICE_ADJUSTMENT_PATTERN))]
    pub price_adjustment: Option<String>,
    /// The price (USD/hour) of matching offerings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = PRICE_PATTERN))]
    pub price: Option<String>,
    /// Extended resources added to matching instance types' capacity (never `cpu`, `memory`,
    /// `ephemeral-storage` or `pods`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<BTreeMap<String, Quantity>>,
    /// Precedence among overlays: higher first (1..10000; none counts as 0), then the name
    /// later in the alphabet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// A node selector requirement of an overlay (no `minValues`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverlayRequirement {
    /// The label key that the selector applies to.
    #[schemars(length(max = 316), regex(pattern = super::schema::QUALIFIED_NAME_PATTERN))]
    pub key: String,
    /// Represents a key's relationship to a set of values.
    #[schemars(schema_with = "overlay_operator")]
    pub operator: Operator,
    /// In and NotIn need values; Exists and DoesNotExist take none; Gt, Lt, Gte and Lte take
    /// exactly one non-negative integer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::requirement_values)]
    pub values: Vec<String>,
}

/// The operators in the order upstream's NodeOverlay CRD lists them (its NodePool CRD lists
/// `Gte` and `Lte` first).
fn overlay_operator(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "description": "Represents a key's relationship to a set of values.",
        "enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"],
    })
}

/// The observed state of a NodeOverlay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlayStatus {
    /// `ValidationSucceeded` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::conditions)]
    pub conditions: Vec<Condition>,
}

fn matches(pattern: &'static std::sync::LazyLock<Option<regex::Regex>>, text: &str) -> bool {
    pattern.as_ref().is_some_and(|re| re.is_match(text))
}

static PRICE: std::sync::LazyLock<Option<regex::Regex>> =
    std::sync::LazyLock::new(|| regex::Regex::new(PRICE_PATTERN).ok());
static PRICE_ADJUSTMENT: std::sync::LazyLock<Option<regex::Regex>> =
    std::sync::LazyLock::new(|| regex::Regex::new(PRICE_ADJUSTMENT_PATTERN).ok());

/// Why `price` does not parse.
fn price_problem(text: &str) -> Option<String> {
    (!matches(&PRICE, text))
        .then(|| format!("{text:?} is not a price: give USD per hour, e.g. \"0.35\""))
}

/// Why `priceAdjustment` does not parse.
fn adjustment_problem(text: &str) -> Option<String> {
    (!matches(&PRICE_ADJUSTMENT, text)).then(|| format!(
        "{text:?} is not a price adjustment: give a signed amount (\"-0.05\", \"+0.1\") or percentage (\"+10%\", \"-15%\"; at most -100%)"
    ))
}

impl NodeOverlaySpec {
    /// The price change it asks for, if it asks for one and it parses.
    pub fn price_change(&self) -> Option<PriceChange> {
        if let Some(price) = &self.price {
            return price.parse().ok().map(PriceChange::Set);
        }
        let text = self.price_adjustment.as_deref()?;
        if adjustment_problem(text).is_some() {
            return None;
        }
        match text.strip_suffix('%') {
            Some(pct) => pct.parse().ok().map(PriceChange::Percent),
            None => text.parse().ok().map(PriceChange::Add),
        }
    }

    /// Its weight (none counts as 0).
    pub fn weight(&self) -> i32 {
        self.weight.unwrap_or(0)
    }
}

impl NodeOverlay {
    /// What it does to prices and capacity, for the model; `None` when it is invalid or
    /// changes nothing. Extended resources get their places here
    /// ([`ResourceName::register`]); one left without ([`NodeOverlay::untracked_capacity`])
    /// is not applied.
    pub fn overlay(&self) -> Option<Overlay> {
        if !self.validate().is_empty() {
            return None;
        }
        let capacity: Vec<(ResourceName, i64)> = (self.spec.capacity.iter().flatten())
            .filter_map(|(name, quantity)| {
                let amount = crate::model::quantity::Quantity::parse(&quantity.0).ok()?;
                Some((ResourceName::register(name)?, amount.units_ceil()))
            })
            .collect();
        let price = self.spec.price_change();
        if price.is_none() && capacity.is_empty() {
            return None;
        }
        Some(Overlay {
            name: self.metadata.name.clone().unwrap_or_default(),
            weight: self.spec.weight(),
            requirements: Requirements::from_entries(
                self.spec
                    .requirements
                    .iter()
                    .map(|r| (r.key.as_str(), r.operator, r.values.as_slice(), None)),
            ),
            price,
            capacity,
        })
    }

    /// Capacity resources it names that found no place to be tracked in (every place for
    /// extended resources taken by others): they are not applied, and its status says so.
    pub fn untracked_capacity(&self) -> Vec<String> {
        (self.spec.capacity.iter().flatten())
            .map(|(name, _)| name)
            .filter(|name| !RESTRICTED_CAPACITY.contains(&name.as_str()))
            .filter(|name| ResourceName::register(name).is_none())
            .cloned()
            .collect()
    }
}

impl Validate for NodeOverlay {
    fn validate(&self) -> Problems {
        let mut problems = Problems::default();
        let spec = FieldPath::new("spec");
        let s = &self.spec;
        let requirements = spec.field("requirements");
        if s.requirements.len() > 100 {
            problems.push(&requirements, "must have at most 100 items");
        }
        for (i, req) in s.requirements.iter().enumerate() {
            let at = requirements.index(i);
            let key = at.field("key");
            if let Some(problem) = qualified_name_problem(&req.key) {
                problems.push(&key, format!("invalid label key {:?}: {problem}", req.key));
            }
            let first_segment = req.key.split('/').next().unwrap_or_default();
            if first_segment.ends_with("karpenter.sh")
                && !ALLOWED_KARPENTER_LABELS.contains(&req.key.as_str())
            {
                problems.push(&key, "label domain \"karpenter.sh\" is restricted");
            }
            if req.key == HOSTNAME {
                problems.push(&key, format!("label {HOSTNAME:?} is restricted"));
            }
            let values = at.field("values");
            match req.operator {
                Operator::In | Operator::NotIn => {
                    if req.values.is_empty() {
                        problems.push(
                            &values,
                            if req.operator == Operator::In {
                                MSG_IN_NEEDS_VALUE
                            } else {
                                "requirements with operator 'NotIn' must have a value defined"
                            },
                        );
                    }
                    for (j, value) in req.values.iter().enumerate() {
                        problems.push_opt(&values.index(j), label_value_problem(value));
                    }
                }
                Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                    let one =
                        req.values.len() == 1 && req.values[0].parse::<i64>().is_ok_and(|v| v >= 0);
                    if !one {
                        problems.push(&values, MSG_OVERLAY_NUMERIC);
                    }
                }
                Operator::Exists | Operator::DoesNotExist => {}
            }
        }
        if s.price.is_some() && s.price_adjustment.is_some() {
            problems.push(
                &spec,
                "cannot set both 'price' and 'priceAdjustment': keep one (price replaces, priceAdjustment changes)",
            );
        }
        if let Some(price) = &s.price {
            problems.push_opt(&spec.field("price"), price_problem(price));
        }
        if let Some(adjustment) = &s.price_adjustment {
            problems.push_opt(
                &spec.field("priceAdjustment"),
                adjustment_problem(adjustment),
            );
        }
        let capacity = spec.field("capacity");
        for (name, quantity) in s.capacity.iter().flatten() {
            let at = capacity.key(name);
            if RESTRICTED_CAPACITY.contains(&name.as_str()) {
                problems.push(
                    &at,
                    format!(
                        "invalid resource restricted: an overlay adds extended resources only; {name} comes from the instance type"
                    ),
                );
            } else if crate::model::quantity::Quantity::parse(&quantity.0).is_err() {
                problems.push(&at, format!("{:?} is not a quantity", quantity.0));
            }
        }
        if let Some(weight) = s.weight
            && !(1..=10000).contains(&weight)
        {
            problems.push(&spec.field("weight"), "must be between 1 and 10000");
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(yaml: &str) -> NodeOverlay {
        serde_yaml_ng::from_str(yaml).expect("overlay parses")
    }

    fn problems(yaml: &str) -> Vec<String> {
        overlay(yaml)
            .validate()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn price_changes_parse_and_apply_as_upstream_describes_them() {
        let change = |field: &str, value: &str| {
            overlay(&format!(
                "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: o}}\nspec:\n  requirements: []\n  {field}: \"{value}\"\n"
            ))
            .spec
            .price_change()
        };
        assert_eq!(change("price", "0.35"), Some(PriceChange::Set(0.35)));
        assert_eq!(
            change("priceAdjustment", "+10%"),
            Some(PriceChange::Percent(10.0))
        );
        assert_eq!(
            change("priceAdjustment", "-30%"),
            Some(PriceChange::Percent(-30.0))
        );
        assert_eq!(
            change("priceAdjustment", "-0.5"),
            Some(PriceChange::Add(-0.5))
        );
        assert_eq!(
            change("priceAdjustment", "-100%"),
            Some(PriceChange::Percent(-100.0))
        );
        assert_eq!(change("priceAdjustment", "-150%"), None);
        assert_eq!(change("priceAdjustment", "10%"), None);
        assert!((PriceChange::Percent(-30.0).apply(0.34) - 0.238).abs() < 1e-12);
        assert_eq!(PriceChange::Add(-0.5).apply(0.34), 0.0);
        assert_eq!(PriceChange::Set(0.1).apply(0.34), 0.1);
    }

    #[test]
    fn bad_overlays_are_refused_naming_the_field() {
        let both = problems(
            "metadata: {name: o}\nspec:\n  requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [c6i]}]\n  price: \"0.1\"\n  priceAdjustment: \"-10%\"\n",
        );
        assert_eq!(both.len(), 1, "{both:?}");
        assert!(both[0].starts_with("spec: cannot set both 'price' and 'priceAdjustment'"));

        let cpu = problems(
            "metadata: {name: o}\nspec:\n  requirements: []\n  capacity: {cpu: \"2\", example.com/fpga: \"1\"}\n",
        );
        assert_eq!(cpu.len(), 1, "{cpu:?}");
        assert!(
            cpu[0].starts_with("spec.capacity[cpu]: invalid resource restricted"),
            "{cpu:?}"
        );

        let keys = problems(
            "metadata: {name: o}\nspec:\n  requirements:\n    - {key: karpenter.sh/nodepool, operator: In, values: [a]}\n    - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}\n    - {key: karpenter.sh/do-not-sync, operator: Exists}\n    - {key: kubernetes.io/hostname, operator: Exists}\n    - {key: karpenter.k8s.aws/instance-cpu, operator: Gt, values: [\"-1\"]}\n    - {key: team, operator: NotIn}\n  priceAdjustment: \"10%\"\n  weight: 0\n",
        );
        assert_eq!(
            keys,
            [
                "spec.requirements[2].key: label domain \"karpenter.sh\" is restricted",
                "spec.requirements[3].key: label \"kubernetes.io/hostname\" is restricted",
                "spec.requirements[4].values: requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
                "spec.requirements[5].values: requirements with operator 'NotIn' must have a value defined",
                "spec.priceAdjustment: \"10%\" is not a price adjustment: give a signed amount (\"-0.05\", \"+0.1\") or percentage (\"+10%\", \"-15%\"; at most -100%)",
                "spec.weight: must be between 1 and 10000",
            ]
        );
    }
}
