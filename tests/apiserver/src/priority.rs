//! The API server's `Priority` admission plugin and its bootstrap PriorityClasses, as
//! kube-apiserver runs them (enabled by default):
//!
//! - at start the server creates `system-node-critical` (2000001000) and
//!   `system-cluster-critical` (2000000000);
//! - a pod created with `priorityClassName` gets that class's value as `spec.priority` (and
//!   its `preemptionPolicy`), a class that does not exist is refused (`403`, "no
//!   PriorityClass with name … was found"); without a class it gets the `globalDefault`
//!   class's name and value, or priority 0; a `spec.priority` given that differs from what
//!   the class says is refused;
//! - a PriorityClass above 1000000000 or named `system-…` (other than the two) is refused,
//!   and so is a second `globalDefault`.
//!
//! Not done: updates of a pod's priority (the real server's pod validation makes it
//! immutable; here an update keeps what is sent).

use serde_json::{Value, json};

use crate::ApiError;

/// The largest value a user's PriorityClass may have.
pub const HIGHEST_USER_DEFINABLE: i64 = 1_000_000_000;

/// The classes the server creates at start.
pub fn system_classes() -> [Value; 2] {
    let class = |name: &str, value: i64, description: &str| {
        json!({
            "metadata": {"name": name},
            "value": value,
            "description": description,
            "preemptionPolicy": "PreemptLowerPriority",
        })
    };
    [
        class(
            "system-node-critical",
            2_000_001_000,
            "Used for system critical pods that must not be moved from their current node.",
        ),
        class(
            "system-cluster-critical",
            2_000_000_000,
            "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
        ),
    ]
}

fn forbidden(kind: &str, name: &str, why: String) -> ApiError {
    ApiError::forbidden(format!("{kind} {name:?} is forbidden: {why}"))
}

/// Admits a pod being created: resolves its priority from its class. `class` looks a
/// PriorityClass up by name; `default` is the `globalDefault` class, if any.
pub fn admit_pod(
    pod: &mut Value,
    name: &str,
    class: impl Fn(&str) -> Option<Value>,
    default: Option<Value>,
) -> Result<(), ApiError> {
    let spec = pod
        .get("spec")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let class_name = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    let (class_name, found) = match class_name {
        Some(n) => match class(n) {
            Some(found) => (Some(n.to_owned()), Some(found)),
            None => {
                return Err(forbidden(
                    "pods",
                    name,
                    format!("no PriorityClass with name {n} was found"),
                ));
            }
        },
        None => match default {
            Some(d) => (
                d.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                Some(d),
            ),
            None => (None, None),
        },
    };
    let priority = found
        .as_ref()
        .and_then(|c| c.get("value"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != priority
    {
        return Err(forbidden(
            "pods",
            name,
            format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
            ),
        ));
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    spec.insert("priority".into(), json!(priority));
    if let Some(class_name) = class_name {
        spec.insert("priorityClassName".into(), Value::String(class_name));
    }
    let policy = found
        .as_ref()
        .and_then(|c| c.get("preemptionPolicy"))
        .cloned()
        .unwrap_or_else(|| json!("PreemptLowerPriority"));
    spec.entry("preemptionPolicy").or_insert(policy);
    Ok(())
}

/// Validates a PriorityClass being created. `other_default` names another class that is
/// `globalDefault` already, if one is.
pub fn validate_class(class: &Value, other_default: Option<&str>) -> Result<(), ApiError> {
    let name = class
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let value = class.get("value").and_then(Value::as_i64);
    let mut errors = Vec::new();
    match value {
        None => errors.push("value: Required value".to_owned()),
        Some(v) if v > HIGHEST_USER_DEFINABLE && !is_system(name) => errors.push(format!(
            "value: Forbidden: maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE}"
        )),
        Some(_) => {}
    }
    if name.starts_with("system-") && !is_system(name) {
        errors.push(
            "metadata.name: Invalid value: \"".to_owned()
                + name
                + "\": priority class names with 'system-' prefix are reserved for system use only",
        );
    }
    if class.get("globalDefault").and_then(Value::as_bool) == Some(true)
        && let Some(other) = other_default
    {
        errors.push(format!(
            "globalDefault: Invalid value: true: PriorityClass {other} is already marked as default. Only one default can exist"
        ));
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(ApiError::unprocessable(format!(
        "PriorityClass.scheduling.k8s.io {name:?} is invalid: {}",
        errors.join(", ")
    )))
}

fn is_system(name: &str) -> bool {
    matches!(name, "system-node-critical" | "system-cluster-critical")
}
