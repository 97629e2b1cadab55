//! `karpenter install` and the Helm chart: every manifest is a valid typed Kubernetes object,
//! the in-memory API server accepts them all, and the chart holds the same objects, RBAC
//! rules, CRDs, environment and defaults.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_rs::install::{Values, chart_files, manifests};
use karpenter_test_apiserver::ApiServer;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client, Config};
use serde::Serialize;
use serde::de::DeserializeOwned;

fn chart() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/charts/karpenter-rs"
    ))
}

fn installed(args: &[&str]) -> Vec<serde_json::Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .arg("install")
        .args(args)
        .output()
        .expect("run karpenter install");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| serde_json::Value::deserialize(doc).unwrap())
        .collect()
}

use serde::Deserialize as _;

/// Deserialises into `T` and back: nothing may be dropped or renamed on the way.
fn round_trips<T: DeserializeOwned + Serialize>(value: &serde_json::Value) {
    let typed: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{} does not deserialise: {e}", value["kind"]));
    let mut back = serde_json::to_value(&typed).unwrap();
    back["apiVersion"] = value["apiVersion"].clone();
    back["kind"] = value["kind"].clone();
    assert_eq!(
        &back, value,
        "{} loses fields as a typed object",
        value["kind"]
    );
}

#[test]
fn every_manifest_is_a_valid_typed_object() {
    let objects = installed(&[]);
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Service",
            "PodDisruptionBudget",
            "Deployment"
        ]
    );
    for object in &objects {
        match object["kind"].as_str().unwrap() {
            "CustomResourceDefinition" => round_trips::<CustomResourceDefinition>(object),
            "ServiceAccount" => round_trips::<ServiceAccount>(object),
            "ClusterRole" => round_trips::<ClusterRole>(object),
            "ClusterRoleBinding" => round_trips::<ClusterRoleBinding>(object),
            "Role" => round_trips::<Role>(object),
            "RoleBinding" => round_trips::<RoleBinding>(object),
            "Service" => round_trips::<Service>(object),
            "PodDisruptionBudget" => round_trips::<PodDisruptionBudget>(object),
            "Deployment" => round_trips::<Deployment>(object),
            "Namespace" => round_trips::<Namespace>(object),
            other => panic!("unexpected kind {other}"),
        }
    }
    let deployment: Deployment = serde_json::from_value(objects[10].clone()).unwrap();
    let spec = deployment.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    let container = &pod.containers[0];
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(
        security.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .clone()
            .unwrap()
    };
    assert_eq!(probe_path(&container.liveness_probe), "/healthz");
    assert_eq!(probe_path(&container.readiness_probe), "/readyz");
    assert_eq!(pod.topology_spread_constraints.unwrap().len(), 2);
}

#[test]
fn bad_values_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, "settings:\n  batchIdle: 1s\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["install", "--values"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("batchIdle") && stderr.contains("settings"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_api_server_accepts_every_manifest() {
    let server = ApiServer::start().await.unwrap();
    let mut config = Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    let client = Client::try_from(config).unwrap();
    for object in installed(&[]) {
        let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (
                String::new(),
                object["apiVersion"].as_str().unwrap().to_owned(),
            ),
        };
        let gvk = GroupVersionKind::gvk(&group, &version, object["kind"].as_str().unwrap());
        let resource = ApiResource::from_gvk(&gvk);
        let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
        api.create(&PostParams::default(), &dynamic)
            .await
            .unwrap_or_else(|e| panic!("{} refused: {e}", object["kind"]));
    }
    server.stop().await;
}

#[test]
fn the_chart_holds_the_same_objects_rules_and_defaults() {
    // Generated files are current.
    for (path, text) in chart_files().unwrap() {
        let checked_in = std::fs::read_to_string(chart().join(&path))
            .unwrap_or_else(|_| panic!("{path} is missing from the chart"));
        assert_eq!(
            checked_in, text,
            "{path} differs; regenerate with `cargo run --release -- install --write-chart-files deploy/charts/karpenter-rs`"
        );
    }
    // values.yaml is the defaults `karpenter install` uses.
    let values = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    assert_eq!(
        Values::from_yaml(&values, "values.yaml").unwrap(),
        Values::default()
    );
    // The templates create the same kinds and set the same environment.
    let mut templates = String::new();
    for entry in std::fs::read_dir(chart().join("templates")).unwrap() {
        templates.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    let kind = regex::Regex::new(r"(?m)^kind: (\w+)").unwrap();
    let chart_kinds: BTreeSet<&str> = kind
        .captures_iter(&templates)
        .map(|c| c.get(1).unwrap().as_str())
        .collect();
    let objects = manifests(&Values::default()).unwrap();
    let install_kinds: BTreeSet<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .filter(|k| *k != "CustomResourceDefinition")
        .collect();
    assert_eq!(chart_kinds, install_kinds);
    let env_name = regex::Regex::new(r"(?m)^\s+- name: ([A-Z_]+)$").unwrap();
    let chart_env: BTreeSet<&str> = env_name
        .captures_iter(&templates)
        .map(|c| c.get(1).unwrap().as_str())
        .collect();
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let install_env: BTreeSet<&str> =
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
    assert_eq!(chart_env, install_env);
}
