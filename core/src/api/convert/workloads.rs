//! Workloads that name retired Karpenter labels and annotations: a pod pinned with
//! `karpenter.sh/provisioner-name` would never schedule on a v1 node, and
//! `karpenter.sh/do-not-evict` / `do-not-consolidate` no longer protect anything. Their
//! v1 names are written in their place wherever they appear as a key (labels, annotations,
//! `nodeSelector`) or as a selector term's `key`.

use serde_json::Value;

use super::{Notes, join};

/// Retired names and their v1 replacements.
const RENAMED: &[(&str, &str)] = &[
    ("karpenter.sh/provisioner-name", "karpenter.sh/nodepool"),
    ("karpenter.sh/do-not-evict", "karpenter.sh/do-not-disrupt"),
    (
        "karpenter.sh/do-not-consolidate",
        "karpenter.sh/do-not-disrupt",
    ),
];

/// The retired name `name` is, with its replacement.
fn renamed(name: &str) -> Option<(&'static str, &'static str)> {
    RENAMED.iter().find(|(old, _)| *old == name).copied()
}

/// Rewrites the retired names in one document, noting each path.
pub(super) fn rewrite(value: &mut Value, label: &str, notes: &mut Notes) {
    let mut changed = Vec::new();
    walk(value, "", &mut changed);
    for (path, old, new) in changed {
        notes.changed(label, format!("{path}: {old} → {new}"));
    }
}

fn walk(value: &mut Value, path: &str, changed: &mut Vec<(String, &'static str, &'static str)>) {
    match value {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let Some((old, new)) = renamed(&key) else {
                    continue;
                };
                // A key that has its v1 name beside it already keeps that one.
                if let Some(v) = map.remove(&key)
                    && !map.contains_key(new)
                {
                    map.insert(new.to_owned(), v);
                }
                changed.push((path.to_owned(), old, new));
            }
            if let Some(Value::String(key)) = map.get_mut("key")
                && let Some((old, new)) = renamed(key)
            {
                *key = new.to_owned();
                changed.push((join(path, "key"), old, new));
            }
            for (key, child) in map.iter_mut() {
                walk(child, &join(path, key), changed);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                walk(item, &format!("{path}[{i}]"), changed);
            }
        }
        _ => {}
    }
}
