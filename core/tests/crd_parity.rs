//! Our CRDs against upstream's and against kube-apiserver's CEL cost budget.
//!
//! Parity: our generated schemas are walked side by side with upstream's generated CRDs
//! (`tests/reference/upstream-crds/`, byte-for-byte copies), path by path, and every attribute
//! but descriptions is compared: types and formats, bounds, patterns, enums, defaults, required
//! fields, nullability, the `x-kubernetes-*` markers, CEL rules with their messages, and, per
//! CRD, names, scope, versions, printer columns and subresources. A difference fails the test
//! unless it is on the deliberate list below, which `docs/upstream-differences.md` states
//! with its reasons.
//!
//! Cost: the apiserver model's CRD check must accept upstream's CRDs (a real kube-apiserver
//! does), refuse the CRDs karpenter-rs generated before its schemas were bounded with exactly
//! the errors a real kube-apiserver gave (`tests/reference/refused-crds/`), and accept ours.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_core::api::crds;
use kube_admission::crd;
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn load(dir: &str) -> Vec<CustomResourceDefinition> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(doc).unwrap();
            if !value.is_null() {
                out.push(serde_json::from_value(value).unwrap());
            }
        }
    }
    out
}

/// A difference upstream's schema and ours have on purpose: the CRD kind, the schema path
/// (`.spec.x[]`, `{}` for map values, empty for the root), the attribute, and why.
struct Deliberate {
    kind: &'static str,
    path: &'static str,
    attribute: &'static str,
    why: &'static str,
}

const DELIBERATE: &[Deliberate] = &[
    Deliberate {
        kind: "EC2NodeClass",
        path: "",
        attribute: "required",
        why: "ours requires `spec`: an EC2NodeClass without one selects no subnets, security \
              groups or AMIs, so nothing can use it, and a stored object without `spec` would \
              not read into the controller's typed cache",
    },
    Deliberate {
        kind: "NodePool",
        path: ".spec.template.metadata.labels",
        attribute: "x-kubernetes-validations",
        why: "upstream's karpenter.k8s.aws label-domain rule lists \
              `karpenter.k8s.aws/capacity-reservation-interruptible` twice; ours lists it once \
              (the same set of allowed labels, 100 cost units less)",
    },
];

/// One place where the two schemas differ.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Difference {
    kind: String,
    path: String,
    attribute: String,
    upstream: String,
    ours: String,
}

/// Keys that hold child schemas (walked, not compared) or prose (not compared).
const STRUCTURE: &[&str] = &["properties", "items", "additionalProperties", "description"];

fn note(
    out: &mut Vec<Difference>,
    kind: &str,
    path: &str,
    attribute: &str,
    a: Option<&Value>,
    b: Option<&Value>,
) {
    let show = |v: Option<&Value>| v.map_or("-".to_owned(), |v| v.to_string());
    out.push(Difference {
        kind: kind.to_owned(),
        path: path.to_owned(),
        attribute: attribute.to_owned(),
        upstream: show(a),
        ours: show(b),
    });
}

fn compare_schema(
    kind: &str,
    path: &str,
    upstream: &Value,
    ours: &Value,
    out: &mut Vec<Difference>,
) {
    let empty = serde_json::Map::new();
    let (u, o) = (
        upstream.as_object().unwrap_or(&empty),
        ours.as_object().unwrap_or(&empty),
    );
    let keys: BTreeSet<&String> = u.keys().chain(o.keys()).collect();
    for key in keys {
        if STRUCTURE.contains(&key.as_str()) {
            continue;
        }
        let (a, b) = (u.get(key), o.get(key));
        let equal = if key == "required" {
            // Required fields are a set.
            let set = |v: Option<&Value>| -> BTreeSet<String> {
                v.and_then(Value::as_array)
                    .map(|a| a.iter().map(ToString::to_string).collect())
                    .unwrap_or_default()
            };
            set(a) == set(b)
        } else {
            a == b
        };
        if !equal {
            note(out, kind, path, key, a, b);
        }
    }
    let names = |m: &serde_json::Map<String, Value>| -> BTreeSet<String> {
        m.get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (un, on) = (names(u), names(o));
    if un != on {
        let list =
            |names: &BTreeSet<String>| Value::from(names.iter().cloned().collect::<Vec<_>>());
        note(
            out,
            kind,
            path,
            "properties",
            Some(&list(&un)),
            Some(&list(&on)),
        );
    }
    for name in un.intersection(&on) {
        compare_schema(
            kind,
            &format!("{path}.{name}"),
            &u["properties"][name],
            &o["properties"][name],
            out,
        );
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        match (u.get(key), o.get(key)) {
            (Some(a), Some(b)) if a.is_object() || b.is_object() => {
                compare_schema(kind, &format!("{path}{suffix}"), a, b, out);
            }
            (a, b) if a != b => note(out, kind, path, key, a, b),
            _ => {}
        }
    }
}

fn compare_crd(
    upstream: &CustomResourceDefinition,
    ours: &CustomResourceDefinition,
) -> Vec<Difference> {
    let kind = upstream.spec.names.kind.clone();
    let mut out = Vec::new();
    let top = |out: &mut Vec<Difference>, attribute: &str, a: Value, b: Value| {
        if a != b {
            note(out, &kind, "", attribute, Some(&a), Some(&b));
        }
    };
    top(
        &mut out,
        "metadata.name",
        json(&upstream.metadata.name),
        json(&ours.metadata.name),
    );
    top(
        &mut out,
        "spec.group",
        json(&upstream.spec.group),
        json(&ours.spec.group),
    );
    top(
        &mut out,
        "spec.names",
        json(&upstream.spec.names),
        json(&ours.spec.names),
    );
    top(
        &mut out,
        "spec.scope",
        json(&upstream.spec.scope),
        json(&ours.spec.scope),
    );
    assert_eq!(
        upstream.spec.versions.len(),
        ours.spec.versions.len(),
        "{kind}: versions"
    );
    for (u, o) in upstream.spec.versions.iter().zip(&ours.spec.versions) {
        top(&mut out, "version.name", json(&u.name), json(&o.name));
        top(&mut out, "version.served", json(&u.served), json(&o.served));
        top(
            &mut out,
            "version.storage",
            json(&u.storage),
            json(&o.storage),
        );
        top(
            &mut out,
            "additionalPrinterColumns",
            json(&u.additional_printer_columns),
            json(&o.additional_printer_columns),
        );
        top(
            &mut out,
            "subresources",
            json(&u.subresources),
            json(&o.subresources),
        );
        let schema = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
            serde_json::to_value(v.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref())).unwrap()
        };
        compare_schema(&kind, "", &schema(u), &schema(o), &mut out);
    }
    out
}

fn json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap()
}

#[test]
fn our_schemas_match_upstreams_but_for_the_deliberate_differences() {
    let upstream = load("tests/reference/upstream-crds");
    let ours = crds::all().unwrap();
    assert_eq!(upstream.len(), 5);
    let mut differences = Vec::new();
    for u in &upstream {
        let o = ours
            .iter()
            .find(|o| o.spec.names.kind == u.spec.names.kind)
            .unwrap_or_else(|| panic!("we have no {} CRD", u.spec.names.kind));
        differences.extend(compare_crd(u, o));
    }
    let undeclared: Vec<String> = differences
        .iter()
        .filter(|d| {
            !DELIBERATE
                .iter()
                .any(|x| x.kind == d.kind && x.path == d.path && x.attribute == d.attribute)
        })
        .map(|d| {
            format!(
                "{} {} {}:\n    upstream: {}\n    ours:     {}",
                d.kind,
                if d.path.is_empty() { "<root>" } else { &d.path },
                d.attribute,
                d.upstream,
                d.ours
            )
        })
        .collect();
    assert!(
        undeclared.is_empty(),
        "{} difference(s) from upstream's CRDs that are not on the deliberate list:\n{}",
        undeclared.len(),
        undeclared.join("\n")
    );
    for x in DELIBERATE {
        assert!(
            differences
                .iter()
                .any(|d| x.kind == d.kind && x.path == d.path && x.attribute == d.attribute),
            "the deliberate difference {} {} {} is gone: take it off the list (and out of docs/upstream-differences.md)",
            x.kind,
            x.path,
            x.attribute
        );
    }
}

#[test]
fn every_deliberate_difference_is_stated_in_the_differences_page() {
    let architecture =
        std::fs::read_to_string(repo().join("docs/upstream-differences.md")).unwrap();
    for x in DELIBERATE {
        let place = format!(
            "{} `{}` {}",
            x.kind,
            if x.path.is_empty() { "<root>" } else { x.path },
            x.attribute
        );
        assert!(
            architecture.contains(&place),
            "docs/upstream-differences.md must state the deliberate difference \"{place}\" ({})",
            x.why
        );
    }
}

fn errors(crd: &CustomResourceDefinition) -> Vec<String> {
    crd::validate(crd)
        .errors
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn upstreams_crds_pass_the_cost_check_as_they_pass_kube_apiserver() {
    for crd in load("tests/reference/upstream-crds") {
        assert_eq!(
            errors(&crd),
            Vec::<String>::new(),
            "{:?}",
            crd.metadata.name
        );
    }
}

#[test]
fn our_crds_pass_the_cost_check() {
    for crd in crds::all().unwrap() {
        let report = crd::validate(&crd);
        assert_eq!(report.errors, Vec::new(), "{:?}", crd.metadata.name);
        // Far inside the budgets, as upstream's are: no rule above a tenth of its limit.
        for rule in &report.rules {
            assert!(
                rule.cost < crd::STATIC_ESTIMATED_COST_LIMIT,
                "{} costs {}",
                rule.path,
                rule.cost
            );
        }
    }
}

#[test]
fn the_refused_crds_fail_as_kube_apiserver_failed_them() {
    let refused = load("tests/reference/refused-crds");
    let by_name = |name: &str| {
        refused
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .unwrap()
    };
    const HINT: &str = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";
    let over = |path: &str, factor: &str| {
        format!(
            "spec.validation.openAPIV3Schema.{path}: Forbidden: estimated rule cost exceeds budget by factor of {factor} {HINT}"
        )
    };
    let total = format!(
        "spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x {HINT}"
    );
    let forbidden = |found: &[String]| -> Vec<String> {
        found
            .iter()
            .filter(|e| e.contains("exceeds budget"))
            .cloned()
            .collect()
    };

    // NodeClaim: rules [1]–[4] on requirements[].key and rule [1] on requirements[], and the total.
    let claim = errors(by_name("nodeclaims.karpenter.sh"));
    let key = "properties[spec].properties[requirements].items.properties[key]";
    let mut expected: Vec<String> = (1..=4)
        .map(|i| {
            over(
                &format!("{key}.x-kubernetes-validations[{i}].rule"),
                "more than 100x",
            )
        })
        .collect();
    expected.push(over(
        "properties[spec].properties[requirements].items.x-kubernetes-validations[1].rule",
        "more than 100x",
    ));
    expected.push(total.clone());
    let mut found = forbidden(&claim);
    found.sort();
    expected.sort();
    assert_eq!(found, expected);

    // NodePool: the same on requirements[] and its key (rules [2]–[5]: [1] is the cheap
    // nodepool rule), labels rules [2]–[5] at 3.5x, and the total.
    let pool = errors(by_name("nodepools.karpenter.sh"));
    let requirements =
        "properties[spec].properties[template].properties[spec].properties[requirements]";
    let labels = "properties[spec].properties[template].properties[metadata].properties[labels]";
    let mut expected: Vec<String> = (2..=5)
        .map(|i| {
            over(
                &format!("{requirements}.items.properties[key].x-kubernetes-validations[{i}].rule"),
                "more than 100x",
            )
        })
        .chain((2..=5).map(|i| {
            over(
                &format!("{labels}.x-kubernetes-validations[{i}].rule"),
                "3.5x",
            )
        }))
        .collect();
    expected.push(over(
        &format!("{requirements}.items.x-kubernetes-validations[1].rule"),
        "more than 100x",
    ));
    expected.push(total);
    let mut found = forbidden(&pool);
    found.sort();
    expected.sort();
    assert_eq!(found, expected);

    // The EC2NodeClass CRD was created.
    assert_eq!(
        errors(by_name("ec2nodeclasses.karpenter.k8s.aws")),
        Vec::<String>::new()
    );
}
