//! Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and server-side apply.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::ApiError;

/// Applies a JSON merge patch in place.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(fields) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            fields.remove(key);
        } else {
            merge(fields.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The reference tokens of a JSON pointer.
fn tokens(pointer: &str) -> Result<Vec<String>, ApiError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer.strip_prefix('/').ok_or_else(|| {
        ApiError::unprocessable(format!("JSON pointer {pointer:?} must start with '/'"))
    })?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn parent_and_last<'a>(
    doc: &'a mut Value,
    pointer: &str,
) -> Result<(&'a mut Value, String), ApiError> {
    let mut path = tokens(pointer)?;
    let last = path
        .pop()
        .ok_or_else(|| ApiError::unprocessable("cannot address the whole document".to_owned()))?;
    let mut at = doc;
    for token in &path {
        at = match at {
            Value::Object(m) => m.get_mut(token),
            Value::Array(a) => token.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| ApiError::unprocessable(format!("path {pointer:?} does not exist")))?;
    }
    Ok((at, last))
}

fn add(doc: &mut Value, pointer: &str, value: Value) -> Result<(), ApiError> {
    if pointer.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = parent_and_last(doc, pointer)?;
    match parent {
        Value::Object(m) => {
            m.insert(last, value);
        }
        Value::Array(a) if last == "-" => a.push(value),
        Value::Array(a) => {
            let i = last
                .parse::<usize>()
                .ok()
                .filter(|i| *i <= a.len())
                .ok_or_else(|| {
                    ApiError::unprocessable(format!("bad array index in {pointer:?}"))
                })?;
            a.insert(i, value);
        }
        _ => {
            return Err(ApiError::unprocessable(format!(
                "{pointer:?} is not in a container"
            )));
        }
    }
    Ok(())
}

fn remove(doc: &mut Value, pointer: &str) -> Result<Value, ApiError> {
    let (parent, last) = parent_and_last(doc, pointer)?;
    let removed = match parent {
        Value::Object(m) => m.remove(&last),
        Value::Array(a) => last
            .parse::<usize>()
            .ok()
            .filter(|i| *i < a.len())
            .map(|i| a.remove(i)),
        _ => None,
    };
    removed.ok_or_else(|| ApiError::unprocessable(format!("path {pointer:?} does not exist")))
}

fn get<'a>(doc: &'a Value, pointer: &str) -> Option<&'a Value> {
    doc.pointer(pointer)
}

/// Applies a JSON patch (a list of operations) to a copy of `doc`; all or nothing.
pub fn json_patch(doc: &Value, operations: &Value) -> Result<Value, ApiError> {
    let operations = operations.as_array().ok_or_else(|| {
        ApiError::bad_request("a JSON patch must be a list of operations".to_owned())
    })?;
    let mut out = doc.clone();
    for op in operations {
        let field = |name: &str| {
            op.get(name).and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_request(format!("JSON patch operation {op} lacks {name:?}"))
            })
        };
        let path = field("path")?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| ApiError::bad_request(format!("operation {op} lacks \"value\"")))
        };
        match field("op")? {
            "add" => add(&mut out, path, value()?)?,
            "remove" => {
                remove(&mut out, path)?;
            }
            "replace" => {
                remove(&mut out, path)?;
                add(&mut out, path, value()?)?;
            }
            "move" => {
                let moved = remove(&mut out, field("from")?)?;
                add(&mut out, path, moved)?;
            }
            "copy" => {
                let copied = get(&out, field("from")?).cloned().ok_or_else(|| {
                    ApiError::unprocessable(format!("copy source of {op} does not exist"))
                })?;
                add(&mut out, path, copied)?;
            }
            "test" => {
                if get(&out, path) != Some(&value()?) {
                    return Err(ApiError::unprocessable(format!(
                        "test operation {op} failed"
                    )));
                }
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown JSON patch operation {other:?}"
                )));
            }
        }
    }
    Ok(out)
}

/// A field's path from the object's root; lists and scalars are leaves (lists are atomic).
pub type FieldPath = Vec<String>;

/// Fields server-side apply neither owns nor compares: identity and server-set metadata.
fn unowned(path: &[String]) -> bool {
    matches!(
        path,
        [a] if a == "apiVersion" || a == "kind"
    ) || matches!(
        path,
        [m, f, ..] if m == "metadata" && matches!(
            f.as_str(),
            "name" | "namespace" | "uid" | "resourceVersion" | "generation"
                | "creationTimestamp" | "deletionTimestamp" | "managedFields"
        )
    )
}

/// The leaf paths of `value` under `prefix`.
pub fn leaf_paths(value: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                prefix.push(k.clone());
                leaf_paths(v, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            if !unowned(prefix) {
                out.insert(prefix.clone());
            }
        }
    }
}

fn at<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, k| v.get(k))
}

fn set(doc: &mut Value, path: &[String], value: Value) {
    let mut here = doc;
    for key in path {
        if !here.is_object() {
            *here = Value::Object(Map::new());
        }
        let Value::Object(m) = here else { return };
        here = m.entry(key.clone()).or_insert(Value::Null);
    }
    *here = value;
}

fn unset(doc: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut here = doc;
    for key in parents {
        match here.get_mut(key) {
            Some(next) => here = next,
            None => return,
        }
    }
    if let Value::Object(m) = here {
        m.remove(last);
    }
}

/// Who owns which fields of one object through server-side apply.
pub type Owners = BTreeMap<String, BTreeSet<FieldPath>>;

/// Server-side apply of `applied` (the manager's whole intent) onto `live`: fields another
/// manager owns with a different value conflict unless `force` (which takes them over);
/// fields this manager applied before and no longer does are removed unless someone else
/// owns them; then every applied field is set. Lists are atomic. `scope` limits the apply
/// to fields under it (`["status"]` for the status subresource, empty for the main one,
/// which then leaves `status` alone).
pub fn apply(
    live: &Value,
    applied: &Value,
    manager: &str,
    force: bool,
    owners: &mut Owners,
    scope: &[String],
) -> Result<Value, ApiError> {
    let in_scope = |p: &FieldPath| {
        if scope.is_empty() {
            p.first().is_none_or(|f| f != "status")
        } else {
            p.starts_with(scope)
        }
    };
    let mut fields = BTreeSet::new();
    leaf_paths(applied, &mut Vec::new(), &mut fields);
    fields.retain(in_scope);
    let overlaps = |a: &FieldPath, b: &FieldPath| a.starts_with(b) || b.starts_with(a);
    let mut conflicts = Vec::new();
    for (other, owned) in owners.iter_mut().filter(|(m, _)| m.as_str() != manager) {
        let clashing: Vec<FieldPath> = owned
            .iter()
            .filter(|o| {
                fields
                    .iter()
                    .any(|f| overlaps(f, o) && at(live, f) != at(applied, f))
            })
            .cloned()
            .collect();
        if clashing.is_empty() {
            continue;
        }
        if force {
            for path in &clashing {
                owned.remove(path);
            }
        } else {
            conflicts.extend(
                clashing
                    .iter()
                    .map(|p| format!("{:?}: .{}", other, p.join("."))),
            );
        }
    }
    if !conflicts.is_empty() {
        return Err(ApiError::conflict_with_reason(
            format!(
                "Apply failed with {} conflicts: conflicts with {}",
                conflicts.len(),
                conflicts.join(", ")
            ),
            "Conflict",
        ));
    }
    let mut out = live.clone();
    let previously = owners.get(manager).cloned().unwrap_or_default();
    for path in previously
        .iter()
        .filter(|p| in_scope(p) && !fields.contains(*p))
    {
        let shared = owners
            .iter()
            .any(|(m, owned)| m != manager && owned.iter().any(|o| overlaps(o, path)));
        if !shared {
            unset(&mut out, path);
        }
    }
    for path in &fields {
        if let Some(value) = at(applied, path) {
            set(&mut out, path, value.clone());
        }
    }
    let mine = owners.entry(manager.to_owned()).or_default();
    mine.retain(|p| !in_scope(p));
    mine.extend(fields);
    Ok(out)
}

/// `metadata.managedFields` entries for the owners, in the `FieldsV1` format.
pub fn managed_fields(owners: &Owners, api_version: &str, time: &str) -> Value {
    let entries: Vec<Value> = owners
        .iter()
        .filter(|(_, fields)| !fields.is_empty())
        .map(|(manager, fields)| {
            let mut tree = Value::Object(Map::new());
            for path in fields {
                let keyed: Vec<String> = path.iter().map(|k| format!("f:{k}")).collect();
                set(&mut tree, &keyed, Value::Object(Map::new()));
            }
            serde_json::json!({
                "manager": manager,
                "operation": "Apply",
                "apiVersion": api_version,
                "time": time,
                "fieldsType": "FieldsV1",
                "fieldsV1": tree,
            })
        })
        .collect();
    Value::Array(entries)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn merge_patch_sets_and_removes() {
        let mut doc = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]});
        merge(&mut doc, &json!({"a": null, "b": {"c": 5}, "l": [3]}));
        assert_eq!(doc, json!({"b": {"c": 5, "d": 3}, "l": [3]}));
    }

    #[test]
    fn json_patch_tests_then_edits_all_or_nothing() {
        let doc = json!({"metadata": {"finalizers": ["a"]}});
        let patched = json_patch(
            &doc,
            &json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["a"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "b"},
                {"op": "remove", "path": "/metadata/finalizers/0"}
            ]),
        )
        .unwrap();
        assert_eq!(patched, json!({"metadata": {"finalizers": ["b"]}}));
        let failed = json_patch(
            &doc,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": []}]),
        );
        assert!(failed.is_err());
        let escaped = json_patch(
            &json!({"metadata": {"labels": {}}}),
            &json!([{"op": "add", "path": "/metadata/labels/karpenter.sh~1nodepool", "value": "x"}]),
        )
        .unwrap();
        assert_eq!(escaped["metadata"]["labels"]["karpenter.sh/nodepool"], "x");
    }

    #[test]
    fn apply_owns_removes_and_conflicts() {
        let mut owners = Owners::new();
        let live = json!({"metadata": {"name": "n"}, "spec": {}});
        let first = apply(
            &live,
            &json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            "karpenter",
            false,
            &mut owners,
            &[],
        )
        .unwrap();
        assert_eq!(first["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        // Dropping a field it applied removes it.
        let second = apply(
            &first,
            &json!({"metadata": {"labels": {"a": "1"}}}),
            "karpenter",
            false,
            &mut owners,
            &[],
        )
        .unwrap();
        assert_eq!(second["metadata"]["labels"], json!({"a": "1"}));
        // Another manager changing its value conflicts, unless forced.
        let clash = json!({"metadata": {"labels": {"a": "9"}}});
        assert!(apply(&second, &clash, "other", false, &mut owners, &[]).is_err());
        let forced = apply(&second, &clash, "other", true, &mut owners, &[]).unwrap();
        assert_eq!(forced["metadata"]["labels"]["a"], "9");
        assert!(owners["karpenter"].is_empty());
        // The main resource ignores status; the status scope touches only status.
        let with_status = apply(
            &forced,
            &json!({"status": {"x": 1}}),
            "k",
            false,
            &mut owners,
            &[],
        )
        .unwrap();
        assert!(with_status.get("status").is_none());
        let status_only = apply(
            &forced,
            &json!({"spec": {"y": 1}, "status": {"x": 1}}),
            "k",
            false,
            &mut owners,
            &["status".to_owned()],
        )
        .unwrap();
        assert_eq!(status_only["status"]["x"], 1);
        assert!(status_only["spec"].get("y").is_none());
    }
}
