//! Schema shapes the CRDs share, written as upstream's generated CRDs have them: the bounds and
//! patterns of label keys and values, taints and status conditions (k8s-openapi's own schemas
//! for `Taint` and `Condition` carry none of them), and the list and map markers server-side
//! apply reads. Each is a schemars `transform` applied to a field.

use schemars::Schema;
use serde_json::{Value, json};

/// A Kubernetes qualified name (`[prefix/]name`), as upstream's CRDs match label and taint keys.
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
/// A label value (empty, or the label alphabet starting and ending alphanumeric).
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// A condition type, `CamelCase` or `example.com/CamelCase`.
const CONDITION_TYPE_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";
/// A condition reason: `CamelCase` (NodePool and EC2NodeClass conditions).
const CONDITION_REASON_PATTERN: &str = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";
/// A condition reason that may also be empty (NodeClaim conditions).
const OPTIONAL_CONDITION_REASON_PATTERN: &str = r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$";

fn set(schema: &mut Schema, key: &str, value: Value) {
    schema.insert(key.to_owned(), value);
}

/// The schema of `items`, or of property `name` of an object schema.
fn child<'a>(
    schema: &'a mut Schema,
    path: &[&str],
) -> Option<&'a mut serde_json::Map<String, Value>> {
    let mut node = schema.as_object_mut()?;
    for step in path {
        node = node.get_mut(*step)?.as_object_mut()?;
    }
    Some(node)
}

fn property<'a>(
    schema: &'a mut Schema,
    items: bool,
    name: &str,
) -> Option<&'a mut serde_json::Map<String, Value>> {
    if items {
        child(schema, &["items", "properties", name])
    } else {
        child(schema, &["properties", name])
    }
}

/// Drops `format` (upstream's `*int` fields carry none).
pub fn without_format(schema: &mut Schema) {
    schema.remove("format");
}

/// An atomic list (`x-kubernetes-list-type: atomic`): replaced whole by server-side apply.
pub fn atomic_list(schema: &mut Schema) {
    set(schema, "x-kubernetes-list-type", json!("atomic"));
}

/// A set (`x-kubernetes-list-type: set`).
pub fn set_list(schema: &mut Schema) {
    set(schema, "x-kubernetes-list-type", json!("set"));
}

/// A map merged key by key (`x-kubernetes-map-type: granular`).
pub fn granular_map(schema: &mut Schema) {
    set(schema, "x-kubernetes-map-type", json!("granular"));
}

/// Requirement values: an atomic list. Upstream's markers put the label-value bounds on the
/// list itself, where the API server ignores them; they are kept there for parity.
pub fn requirement_values(schema: &mut Schema) {
    atomic_list(schema);
    set(schema, "maxLength", json!(63));
    set(schema, "pattern", json!(LABEL_VALUE_PATTERN));
}

/// Node labels: at most 100, values label-shaped, replaced whole by server-side apply.
pub fn node_labels(schema: &mut Schema) {
    set(schema, "maxProperties", json!(100));
    set(schema, "x-kubernetes-map-type", json!("atomic"));
    if let Some(values) = child(schema, &["additionalProperties"]) {
        values.insert("maxLength".into(), json!(63));
        values.insert("pattern".into(), json!(LABEL_VALUE_PATTERN));
    }
}

/// A resource quantity, as the API server documents it.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
/// An eviction threshold: a percentage or a quantity.
const EVICTION_THRESHOLD_PATTERN: &str = r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%||(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$";

fn value_pattern(schema: &mut Schema, pattern: &str) {
    if let Some(values) = child(schema, &["additionalProperties"]) {
        values.insert("pattern".into(), json!(pattern));
    }
}

/// A map of resource quantities written as strings (kubelet reservations).
pub fn quantity_values(schema: &mut Schema) {
    value_pattern(schema, QUANTITY_PATTERN);
}

/// A map of eviction thresholds (percentages or quantities).
pub fn eviction_threshold_values(schema: &mut Schema) {
    value_pattern(schema, EVICTION_THRESHOLD_PATTERN);
}

/// Plain node selector requirements, as an EC2NodeClass status lists them: any operator, no
/// `minValues`, no bounds on keys or values.
pub fn plain_node_selector_requirements(_: &mut schemars::SchemaGenerator) -> Schema {
    let schema = json!({
        "type": "array",
        "items": {
            "type": "object",
            "description": "A node selector requirement: a key, an operator and values.",
            "required": ["key", "operator"],
            "properties": {
                "key": {"type": "string", "description": "The label key."},
                "operator": {"type": "string", "description": "How the values constrain the label."},
                "values": {
                    "type": "array",
                    "description": "The values.",
                    "items": {"type": "string"},
                    "x-kubernetes-list-type": "atomic",
                },
            },
        },
    });
    Schema::try_from(schema).unwrap_or_default()
}

/// A list of taints: an atomic list whose effects, keys and values are checked.
pub fn taints(schema: &mut Schema) {
    atomic_list(schema);
    if let Some(effect) = property(schema, true, "effect") {
        effect.insert(
            "enum".into(),
            json!(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
        );
    }
    if let Some(key) = property(schema, true, "key") {
        key.insert("minLength".into(), json!(1));
        key.insert("pattern".into(), json!(QUALIFIED_NAME_PATTERN));
    }
    if let Some(value) = property(schema, true, "value") {
        value.insert("pattern".into(), json!(QUALIFIED_NAME_PATTERN));
    }
    if let Some(item) = child(schema, &["items"]) {
        item.insert("required".into(), json!(["effect", "key"]));
    }
}

fn conditions_with(schema: &mut Schema, reason_pattern: &str, reason_required: bool) {
    if let Some(message) = property(schema, true, "message") {
        message.insert("maxLength".into(), json!(32768));
    }
    if let Some(generation) = property(schema, true, "observedGeneration") {
        generation.insert("minimum".into(), json!(0));
    }
    if let Some(reason) = property(schema, true, "reason") {
        reason.insert("maxLength".into(), json!(1024));
        if reason_required {
            reason.insert("minLength".into(), json!(1));
        }
        reason.insert("pattern".into(), json!(reason_pattern));
    }
    if let Some(status) = property(schema, true, "status") {
        status.insert("enum".into(), json!(["True", "False", "Unknown"]));
    }
    if let Some(kind) = property(schema, true, "type") {
        kind.insert("maxLength".into(), json!(316));
        kind.insert("pattern".into(), json!(CONDITION_TYPE_PATTERN));
    }
    let required = if reason_required {
        json!(["lastTransitionTime", "message", "reason", "status", "type"])
    } else {
        json!(["lastTransitionTime", "status", "type"])
    };
    if let Some(item) = child(schema, &["items"]) {
        item.insert("required".into(), required);
    }
}

fn keyed_by_type(schema: &mut Schema) {
    set(schema, "x-kubernetes-list-type", json!("map"));
    set(schema, "x-kubernetes-list-map-keys", json!(["type"]));
}

/// NodePool status conditions: a list keyed by `type`, every field required.
pub fn conditions(schema: &mut Schema) {
    keyed_by_type(schema);
    conditions_with(schema, CONDITION_REASON_PATTERN, true);
}

/// EC2NodeClass status conditions: as [`conditions`], but an atomic list as upstream has it.
pub fn unkeyed_conditions(schema: &mut Schema) {
    conditions_with(schema, CONDITION_REASON_PATTERN, true);
}

/// NodeClaim status conditions: keyed by `type`; `reason` and `message` may be left out.
pub fn nodeclaim_conditions(schema: &mut Schema) {
    keyed_by_type(schema);
    conditions_with(schema, OPTIONAL_CONDITION_REASON_PATTERN, false);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_accept_and_refuse_what_upstream_does() {
        let key = regex::Regex::new(QUALIFIED_NAME_PATTERN).expect("a regex");
        for ok in [
            "a",
            "example.com/a-b_c.d",
            "karpenter.sh/capacity-type",
            "A1",
        ] {
            assert!(key.is_match(ok), "{ok}");
        }
        for bad in ["", "-a", "a/", "Example.com/x", "a b"] {
            assert!(!key.is_match(bad), "{bad}");
        }
        let value = regex::Regex::new(LABEL_VALUE_PATTERN).expect("a regex");
        assert!(value.is_match("") && value.is_match("m5.large") && !value.is_match("a/b"));
    }
}
