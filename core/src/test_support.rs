//! Helpers shared by this crate's unit tests.

use serde_json::Value;

/// Lays `from` over `into`: objects merge key by key, anything else replaces.
pub fn overlay(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                overlay(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}
