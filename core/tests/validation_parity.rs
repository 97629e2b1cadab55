//! Validation both ways: every manifest of `tests/fixtures/validation-parity.yaml` (valid
//! ones, and one mistake per rule) is admitted by the kube-apiserver model through upstream's
//! CRDs and through ours; both must accept or refuse it with exactly the field errors the
//! fixture states, in upstream's wording. Accepted manifests must also read into the typed
//! objects and pass the controller's runtime validation, and every CEL rule of upstream's CRDs
//! must be broken by some case (so a rule added upstream needs a case here).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use karpenter_core::api::{
    CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool, Validate, crds,
};
use kube_admission::object::Admission;
use serde::Deserialize;
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fixture {
    bases: BTreeMap<String, Value>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    base: String,
    #[serde(default)]
    patch: Option<Value>,
    #[serde(default)]
    update: Option<Value>,
    expect: Vec<String>,
}

/// A JSON merge patch (RFC 7386): maps merge, anything else replaces, null removes.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

/// The stored version's schema of each CRD (v1, or v1alpha1 for NodeOverlay), by kind.
fn schemas(crds: Vec<CustomResourceDefinition>) -> BTreeMap<String, JSONSchemaProps> {
    crds.into_iter()
        .map(|crd| {
            let version = crd.spec.versions.into_iter().find(|v| v.storage).unwrap();
            let schema = version.schema.unwrap().open_api_v3_schema.unwrap();
            (crd.spec.names.kind, schema)
        })
        .collect()
}

fn upstream_crds() -> Vec<CustomResourceDefinition> {
    let dir = repo().join("tests/reference/upstream-crds");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        out.push(serde_yaml_ng::from_str(&text).unwrap());
    }
    out
}

fn fixture() -> Fixture {
    let path = repo().join("tests/fixtures/validation-parity.yaml");
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The object a case admits, and the one it replaces when it is an update.
fn objects(fixture: &Fixture, case: &Case) -> (Value, Option<Value>) {
    let mut object = fixture.bases[&case.base].clone();
    if let Some(patch) = &case.patch {
        merge(&mut object, patch);
    }
    match &case.update {
        None => (object, None),
        Some(update) => {
            let old = object.clone();
            merge(&mut object, update);
            (object, Some(old))
        }
    }
}

fn errors(admission: &Admission, object: &Value, old: Option<&Value>) -> Vec<String> {
    admission
        .check(object.clone(), old)
        .errors
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// The controller's runtime validation of an admitted object (which must read into its type).
fn runtime_problems(kind: &str, object: Value) -> Vec<String> {
    let problems = match kind {
        "NodePool" => serde_json::from_value::<NodePool>(object)
            .unwrap()
            .validate(),
        "NodeClaim" => serde_json::from_value::<NodeClaim>(object)
            .unwrap()
            .validate(),
        "NodeOverlay" => serde_json::from_value::<NodeOverlay>(object)
            .unwrap()
            .validate(),
        "CapacityBuffer" => serde_json::from_value::<CapacityBuffer>(object)
            .unwrap()
            .validate(),
        // Everything upstream checks of an EC2NodeClass is in its CRD: it only has to read.
        "EC2NodeClass" => {
            serde_json::from_value::<EC2NodeClass>(object).unwrap();
            return Vec::new();
        }
        other => panic!("no base {other}"),
    };
    problems.iter().map(ToString::to_string).collect()
}

#[test]
fn upstreams_crds_and_ours_accept_and_refuse_the_same_manifests_with_the_same_errors() {
    let fixture = fixture();
    let upstream: BTreeMap<String, Admission> = schemas(upstream_crds())
        .into_iter()
        .map(|(kind, schema)| (kind, Admission::new(schema)))
        .collect();
    let ours: BTreeMap<String, Admission> = schemas(crds::all().unwrap())
        .into_iter()
        .map(|(kind, schema)| (kind, Admission::new(schema)))
        .collect();
    let mut failures = Vec::new();
    for case in &fixture.cases {
        let (object, old) = objects(&fixture, case);
        let kind = case.base.as_str();
        let by_upstream = errors(&upstream[kind], &object, old.as_ref());
        let by_ours = errors(&ours[kind], &object, old.as_ref());
        if by_upstream != case.expect {
            failures.push(format!(
                "{}: upstream's CRD gives {by_upstream:#?}, the fixture expects {:#?}",
                case.name, case.expect
            ));
        }
        if by_ours != by_upstream {
            failures.push(format!(
                "{}: ours gives {by_ours:#?}, upstream's {by_upstream:#?}",
                case.name
            ));
        }
        if by_ours.is_empty() {
            let admitted = ours[kind].check(object, old.as_ref()).object;
            let problems = runtime_problems(kind, admitted);
            if !problems.is_empty() {
                failures.push(format!(
                    "{}: admitted, but the controller refuses it: {problems:#?}",
                    case.name
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every CEL rule of a schema: (kind, path with `[]` for list items, message).
fn rules(
    kind: &str,
    schema: &JSONSchemaProps,
    path: &str,
    out: &mut BTreeSet<(String, String, String)>,
) {
    for rule in schema.x_kubernetes_validations.iter().flatten() {
        let message = rule.message.clone().unwrap_or_default();
        out.insert((kind.to_owned(), path.to_owned(), message));
    }
    for (name, child) in schema.properties.iter().flatten() {
        let child_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        rules(kind, child, &child_path, out);
    }
    if let Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(items)) = &schema.items {
        rules(kind, items, &format!("{path}[]"), out);
    }
}

#[test]
fn every_upstream_cel_rule_is_broken_by_some_case() {
    let fixture = fixture();
    let mut all = BTreeSet::new();
    for (kind, schema) in schemas(upstream_crds()) {
        rules(&kind, &schema, "", &mut all);
    }
    let index = regex::Regex::new(r"\[\d+\]").unwrap();
    let broken: BTreeSet<(String, String, String)> = fixture
        .cases
        .iter()
        .flat_map(|case| {
            case.expect.iter().filter_map(|error| {
                let (path, rest) = error.split_once(": Invalid value: ")?;
                let (_, message) = rest.split_once(": ")?;
                Some((
                    case.base.clone(),
                    index.replace_all(path, "[]").into_owned(),
                    message.to_owned(),
                ))
            })
        })
        .collect();
    let missing: Vec<_> = all.difference(&broken).collect();
    assert!(missing.is_empty(), "rules no case breaks: {missing:#?}");
}
