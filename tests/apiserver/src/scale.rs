//! The `scale` subresource of custom resources whose CRD declares one
//! (`subresources.scale`), as kube-apiserver serves it: an `autoscaling/v1` `Scale` whose
//! `spec.replicas` is the object's value at `specReplicasPath` (0 when unset), whose
//! `status.replicas` is the value at `statusReplicasPath` (0 when unset), and whose
//! `status.selector` is the string at `labelSelectorPath`, if any. A `PUT` or `PATCH` of the
//! Scale writes only `spec.replicas` back into the object, which is then admitted as any
//! update of it (schema and CEL rules, transition rules against the stored object), so a
//! scale that the object's own validation refuses is refused with the same `422`. A `PUT`
//! carrying a `resourceVersion` that is not the object's current one is a `409 Conflict`.

use serde_json::{Value, json};

use crate::ApiError;
use crate::patch::{json_patch, merge};

/// Where a CRD's scale subresource reads and writes, as JSON paths (`.spec.replicas`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// `specReplicasPath`.
    pub spec_replicas: String,
    /// `statusReplicasPath`.
    pub status_replicas: String,
    /// `labelSelectorPath`.
    pub label_selector: Option<String>,
}

/// The keys of a `.a.b` path.
fn keys(path: &str) -> Vec<&str> {
    path.trim_start_matches('.').split('.').collect()
}

fn at<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    keys(path).into_iter().try_fold(object, |v, k| v.get(k))
}

/// The Scale of `object`.
pub fn scale_of(paths: &ScalePaths, object: &Value) -> Value {
    let replicas = |path: &str| at(object, path).and_then(Value::as_i64).unwrap_or(0);
    let metadata = &object["metadata"];
    let mut scale_metadata = json!({
        "name": metadata["name"],
        "uid": metadata["uid"],
        "resourceVersion": metadata["resourceVersion"],
        "creationTimestamp": metadata["creationTimestamp"],
    });
    if let Some(namespace) = metadata.get("namespace") {
        scale_metadata["namespace"] = namespace.clone();
    }
    let mut status = json!({"replicas": replicas(&paths.status_replicas)});
    if let Some(selector) = paths
        .label_selector
        .as_deref()
        .and_then(|p| at(object, p))
        .and_then(Value::as_str)
    {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_metadata,
        "spec": {"replicas": replicas(&paths.spec_replicas)},
        "status": status,
    })
}

/// How a Scale is changed.
pub enum ScaleChange<'a> {
    /// `PUT` of a whole Scale.
    Replace(&'a Value),
    /// `PATCH` with a JSON merge (or strategic merge) patch.
    Merge(&'a Value),
    /// `PATCH` with a JSON patch.
    Json(&'a Value),
}

/// `object` with the replicas `change` gives its Scale written at `specReplicasPath`.
pub fn scaled(
    paths: &ScalePaths,
    object: &Value,
    change: ScaleChange<'_>,
) -> Result<Value, ApiError> {
    let current = scale_of(paths, object);
    let wanted = match change {
        ScaleChange::Replace(body) => {
            let version = body["metadata"]["resourceVersion"].as_str().unwrap_or("");
            if !version.is_empty()
                && Some(version) != current["metadata"]["resourceVersion"].as_str()
            {
                return Err(ApiError {
                    code: 409,
                    reason: "Conflict",
                    message: format!(
                        "Operation cannot be fulfilled on {}: the object has been modified; please apply your changes to the latest version and try again",
                        current["metadata"]["name"].as_str().unwrap_or_default()
                    ),
                    details: None,
                });
            }
            body.clone()
        }
        ScaleChange::Merge(patch) => {
            let mut scale = current.clone();
            merge(&mut scale, patch);
            scale
        }
        ScaleChange::Json(operations) => json_patch(&current, operations)?,
    };
    let replicas = match &wanted["spec"]["replicas"] {
        Value::Null => 0,
        value => value.as_i64().filter(|r| *r >= 0).ok_or_else(|| {
            ApiError::new(
                422,
                "Invalid",
                format!(
                    "Scale.autoscaling {} is invalid: spec.replicas: Invalid value: {value}: must be greater than or equal to 0",
                    current["metadata"]["name"]
                ),
            )
        })?,
    };
    let mut out = object.clone();
    let path = keys(&paths.spec_replicas);
    let Some((last, parents)) = path.split_last() else {
        return Ok(out);
    };
    let mut cursor = &mut out;
    for key in parents {
        if !cursor.get(*key).is_some_and(Value::is_object) {
            cursor[*key] = json!({});
        }
        cursor = &mut cursor[*key];
    }
    cursor[*last] = json!(replicas);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> ScalePaths {
        ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.nodes".into(),
            label_selector: None,
        }
    }

    #[test]
    fn a_scale_reads_and_writes_the_declared_paths() {
        let pool = json!({"metadata": {"name": "p", "resourceVersion": "7"}, "spec": {"replicas": 3}, "status": {"nodes": 2}});
        let scale = scale_of(&paths(), &pool);
        assert_eq!(scale["spec"]["replicas"], 3);
        assert_eq!(scale["status"]["replicas"], 2);
        assert_eq!(scale["apiVersion"], "autoscaling/v1");
        let patched = scaled(
            &paths(),
            &pool,
            ScaleChange::Merge(&json!({"spec": {"replicas": 5}})),
        )
        .unwrap();
        assert_eq!(patched["spec"]["replicas"], 5);
        assert_eq!(patched["status"]["nodes"], 2);
        // Unset replicas read as 0; a stale resourceVersion conflicts; negative is invalid.
        assert_eq!(
            scale_of(&paths(), &json!({"metadata": {}}))["spec"]["replicas"],
            0
        );
        let stale = json!({"metadata": {"resourceVersion": "6"}, "spec": {"replicas": 1}});
        assert_eq!(
            scaled(&paths(), &pool, ScaleChange::Replace(&stale))
                .unwrap_err()
                .code,
            409
        );
        let negative = json!({"spec": {"replicas": -1}});
        assert_eq!(
            scaled(&paths(), &pool, ScaleChange::Merge(&negative))
                .unwrap_err()
                .code,
            422
        );
    }
}
