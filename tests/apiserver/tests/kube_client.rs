//! The test API server as kube-rs sees it: every verb the Kubernetes adapter uses, through a
//! real `kube::Client` and kube-runtime watchers.
#![allow(missing_docs, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_test_apiserver::{ApiServer, Options};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Api, Client, Config};
use serde_json::json;

async fn client(server: &ApiServer) -> Client {
    let mut config = Config::new(server.url().parse().unwrap());
    // kube's default retries a 429 up to 15 times with backoff up to 1,000 s, so an eviction a
    // PodDisruptionBudget refuses would block for minutes; callers that drain handle 429.
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

fn nodeclaims(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

fn nodepools(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

fn dynamic(kind: &str, value: serde_json::Value) -> DynamicObject {
    let mut value = value;
    value["apiVersion"] = json!("karpenter.sh/v1");
    value["kind"] = json!(kind);
    serde_json::from_value(value).unwrap()
}

/// Installs karpenter-rs's CRDs, as `karpenter install` would.
async fn install_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // The generated CRDs karpenter-rs ships (`tests/cli.rs` keeps them equal to the code's).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 5, "{files:?}");
    for file in files {
        let crd: CustomResourceDefinition =
            serde_yaml_ng::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
}

/// A valid NodePool named `name`.
fn pool(name: &str) -> DynamicObject {
    dynamic(
        "NodePool",
        json!({"metadata": {"name": name}, "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
        }}}}),
    )
}

/// A valid NodeClaim spec.
fn claim_spec() -> serde_json::Value {
    json!({
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}],
    })
}

fn error_code(result: Result<impl std::fmt::Debug, kube::Error>) -> u16 {
    match result {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn objects_are_created_read_replaced_patched_and_deleted() {
    let server = ApiServer::start().await.unwrap();
    let nodes: Api<Node> = Api::all(client(&server).await);
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"zone": "a"}},
        "status": {"allocatable": {"cpu": "2"}},
    }))
    .unwrap();
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();
    assert!(created.metadata.uid.is_some());
    // A node keeps the status it registers with.
    assert!(created.status.as_ref().unwrap().allocatable.is_some());
    assert_eq!(
        error_code(nodes.create(&PostParams::default(), &node).await),
        409
    );

    let listed = nodes
        .list(&ListParams::default().labels("zone=a"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert!(
        nodes
            .list(&ListParams::default().labels("zone=b"))
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // Optimistic concurrency: a replace from a stale copy conflicts.
    let mut fresh = nodes.get("n1").await.unwrap();
    fresh
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("k".into(), "v".into());
    nodes
        .replace("n1", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_eq!(
        error_code(nodes.replace("n1", &PostParams::default(), &fresh).await),
        409
    );

    // The main resource leaves status alone; the status subresource changes only status.
    let patched = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}, "status": {"phase": "x"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.unwrap().unschedulable, Some(true));
    assert!(patched.status.unwrap().phase.is_none());
    let status = nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().phase.as_deref(), Some("Running"));

    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    assert_eq!(error_code(nodes.get("n1").await), 404);
    server.stop().await;
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let server = ApiServer::start().await.unwrap();
    let client = client(&server).await;
    install_crds(&client).await;
    let claims = nodeclaims(&client);
    let claim = dynamic(
        "NodeClaim",
        json!({"metadata": {"generateName": "default-", "finalizers": ["karpenter.sh/termination"]}, "spec": claim_spec(), "status": {"nodeName": "x"}}),
    );
    let created = claims.create(&PostParams::default(), &claim).await.unwrap();
    let name = created.metadata.name.clone().unwrap();
    assert!(
        name.starts_with("default-") && name.len() == "default-".len() + 5,
        "{name}"
    );
    // Custom resources with a status subresource drop status on create.
    assert!(created.data.get("status").is_none());

    claims
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    let deleting = claims.get(&name).await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    // No new finalizer once deleting.
    let add =
        Patch::Merge(json!({"metadata": {"finalizers": ["karpenter.sh/termination", "other"]}}));
    assert_eq!(
        error_code(claims.patch(&name, &PatchParams::default(), &add).await),
        422
    );
    // kube-runtime's finalizer helper removes it with a JSON patch guarded by a test.
    let remove: json_patch_ops::Ops = json_patch_ops::remove_first();
    claims
        .patch(&name, &PatchParams::default(), &Patch::<()>::Json(remove))
        .await
        .unwrap();
    assert_eq!(error_code(claims.get(&name).await), 404);
    server.stop().await;
}

/// JSON patch documents, built from their wire form.
mod json_patch_ops {
    pub type Ops = json_patch::Patch;

    pub fn remove_first() -> Ops {
        serde_json::from_value(serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "karpenter.sh/termination"},
            {"op": "remove", "path": "/metadata/finalizers/0"}
        ]))
        .unwrap()
    }
}

#[tokio::test]
async fn dependents_are_collected_with_their_owner() {
    let server = ApiServer::start().await.unwrap();
    let client = client(&server).await;
    install_crds(&client).await;
    let pool = nodepools(&client)
        .create(&PostParams::default(), &pool("default"))
        .await
        .unwrap();
    let owned = json!({"metadata": {"name": "default-abcde", "ownerReferences": [{
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": "default",
        "uid": pool.metadata.uid.unwrap(), "blockOwnerDeletion": true,
    }]}, "spec": claim_spec()});
    let claims = nodeclaims(&client);
    claims
        .create(&PostParams::default(), &dynamic("NodeClaim", owned))
        .await
        .unwrap();
    nodepools(&client)
        .delete("default", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(error_code(claims.get("default-abcde").await), 404);
    server.stop().await;
}

#[tokio::test]
async fn server_side_apply_owns_fields_per_manager() {
    let server = ApiServer::start().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client(&server).await, "default");
    let apply = |data: serde_json::Value| {
        Patch::Apply(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data}),
        )
    };
    let karpenter = PatchParams::apply("karpenter");
    let before = server.resource_version();
    let made = maps
        .patch("c", &karpenter, &apply(json!({"a": "1", "b": "2"})))
        .await
        .unwrap();
    // Creating by apply is one change, as watchers see it.
    assert_eq!(server.resource_version(), before + 1);
    assert_eq!(made.data.unwrap().len(), 2);
    let managed = made.metadata.managed_fields.unwrap();
    assert_eq!(managed[0].manager.as_deref(), Some("karpenter"));
    // Applying less removes what it no longer applies.
    let less = maps
        .patch("c", &karpenter, &apply(json!({"a": "1"})))
        .await
        .unwrap();
    assert_eq!(
        less.data.unwrap(),
        BTreeMap::from([("a".to_owned(), "1".to_owned())])
    );
    // Another manager changing an owned field conflicts unless it forces.
    let other = PatchParams::apply("someone-else");
    assert_eq!(
        error_code(maps.patch("c", &other, &apply(json!({"a": "2"}))).await),
        409
    );
    let forced = maps
        .patch("c", &other.force(), &apply(json!({"a": "2"})))
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["a"], "2");
    server.stop().await;
}

fn ready_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "i"}], "nodeName": "n1"},
    }))
    .unwrap()
}

#[tokio::test]
async fn eviction_honours_disruption_budgets() {
    let server = ApiServer::start().await.unwrap();
    let client = client(&server).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let running = Patch::Merge(
        json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    for name in ["a", "b"] {
        let created = pods
            .create(&PostParams::default(), &ready_pod(name))
            .await
            .unwrap();
        // Pods start Pending whatever status they are created with.
        assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
        pods.patch_status(name, &PatchParams::default(), &running)
            .await
            .unwrap();
    }
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .unwrap();
    budgets.create(&PostParams::default(), &pdb).await.unwrap();
    let refused = pods.evict("a", &Default::default()).await;
    match refused {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 429);
            assert_eq!(status.reason, "TooManyRequests");
        }
        other => panic!("expected 429, got {other:?}"),
    }
    pods.create(&PostParams::default(), &ready_pod("c"))
        .await
        .unwrap();
    pods.patch_status("c", &PatchParams::default(), &running)
        .await
        .unwrap();
    pods.evict("a", &Default::default()).await.unwrap();
    // The pod is bound, so it terminates gracefully: the kubelet finishes it.
    let terminating = pods.get("a").await.unwrap();
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    pods.delete("a", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert_eq!(error_code(pods.get("a").await), 404);
    server.stop().await;
}

#[tokio::test]
async fn bound_pods_terminate_gracefully_and_unbound_ones_go_at_once() {
    let server = ApiServer::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&server).await, "default");
    let mut bound = ready_pod("bound");
    bound
        .spec
        .as_mut()
        .unwrap()
        .termination_grace_period_seconds = Some(5);
    pods.create(&PostParams::default(), &bound).await.unwrap();
    let mut unbound = ready_pod("unbound");
    unbound.spec.as_mut().unwrap().node_name = None;
    pods.create(&PostParams::default(), &unbound).await.unwrap();

    pods.delete("unbound", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(error_code(pods.get("unbound").await), 404);

    let before = std::time::SystemTime::now();
    pods.delete("bound", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = pods.get("bound").await.unwrap();
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(5));
    let at = terminating.metadata.deletion_timestamp.unwrap().0;
    let ahead = at.duration_since(jiff::Timestamp::try_from(before).unwrap());
    assert!(ahead.as_secs() >= 4 && ahead.as_secs() <= 6, "{ahead:?}");
    // Status writes do not end it (no finalizers, but a grace period to wait out).
    let running = Patch::Merge(json!({"status": {"phase": "Running"}}));
    pods.patch_status("bound", &PatchParams::default(), &running)
        .await
        .unwrap();
    assert!(pods.get("bound").await.is_ok());
    // A shorter grace period shortens the wait; none ends it.
    pods.delete("bound", &DeleteParams::default().grace_period(1))
        .await
        .unwrap();
    assert_eq!(
        pods.get("bound")
            .await
            .unwrap()
            .metadata
            .deletion_grace_period_seconds,
        Some(1)
    );
    pods.delete("bound", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert_eq!(error_code(pods.get("bound").await), 404);
    server.stop().await;
}

/// The status a refused request got.
fn status(result: Result<impl std::fmt::Debug, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn custom_resources_are_served_once_their_crd_is_and_admitted_against_it() {
    let server = ApiServer::start().await.unwrap();
    let client = client(&server).await;
    // No CRD, no resource.
    assert_eq!(
        error_code(
            nodepools(&client)
                .create(&PostParams::default(), &pool("p"))
                .await
        ),
        404
    );
    install_crds(&client).await;
    let pools = nodepools(&client);

    // Defaults are applied as the server applies them.
    let created = pools
        .create(&PostParams::default(), &pool("p"))
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["disruption"]["consolidateAfter"], "0s");
    assert_eq!(
        created.data["spec"]["disruption"]["budgets"],
        json!([{"nodes": "10%"}])
    );
    assert_eq!(
        created.data["spec"]["template"]["spec"]["expireAfter"],
        "720h"
    );

    // The schema and the CEL rules refuse with the server's status and message.
    let mut bad = pool("bad");
    bad.data["spec"]["weight"] = json!(101);
    bad.data["spec"]["template"]["spec"]["requirements"][0]["key"] = json!("karpenter.sh/custom");
    let refused = status(pools.create(&PostParams::default(), &bad).await);
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    // A bound broken is not blocking, so the CEL rules ran too; errors are bracketed.
    assert_eq!(
        refused.message,
        "NodePool.karpenter.sh \"bad\" is invalid: [spec.weight: Invalid value: 101: spec.weight in body should be less than or equal to 100, spec.template.spec.requirements[0].key: Invalid value: \"string\": label domain \"karpenter.sh\" is restricted]"
    );
    // An unsupported value is blocking: CEL rules are not run, as the server says.
    let mut bad = pool("bad");
    bad.data["spec"]["template"]["spec"]["requirements"][0]["operator"] = json!("Equals");
    bad.data["spec"]["template"]["spec"]["requirements"][0]["key"] = json!("karpenter.sh/custom");
    let refused = status(pools.create(&PostParams::default(), &bad).await);
    assert_eq!(
        refused.message,
        "NodePool.karpenter.sh \"bad\" is invalid: [spec.template.spec.requirements[0].operator: Unsupported value: \"Equals\": supported values: \"Gte\", \"Lte\", \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\", \"Gt\", \"Lt\", <nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
    );
    let mut bad = pool("bad");
    bad.data["spec"]["template"]["spec"]["requirements"][0]["key"] = json!("karpenter.sh/custom");
    let refused = status(pools.create(&PostParams::default(), &bad).await);
    assert_eq!(
        refused.message,
        "NodePool.karpenter.sh \"bad\" is invalid: spec.template.spec.requirements[0].key: Invalid value: \"string\": label domain \"karpenter.sh\" is restricted"
    );
    let details = refused.details.unwrap();
    assert_eq!(details.causes[0].reason, "FieldValueInvalid");
    assert_eq!(
        details.causes[0].field,
        "spec.template.spec.requirements[0].key"
    );

    // Transition rules compare with the stored object, on patch as on update.
    let regroup = Patch::Merge(
        json!({"spec": {"template": {"spec": {"nodeClassRef": {"group": "other.example.com"}}}}}),
    );
    let refused = status(pools.patch("p", &PatchParams::default(), &regroup).await);
    assert!(
        refused.message.ends_with("spec.template.spec.nodeClassRef: Invalid value: \"object\": nodeClassRef.group is immutable"),
        "{}",
        refused.message
    );

    // Unknown fields: refused under strict validation, dropped with a warning otherwise.
    let typo = Patch::Merge(json!({"spec": {"wieght": 5}}));
    let refused = status(
        pools
            .patch("p", &PatchParams::default().validation_strict(), &typo)
            .await,
    );
    assert_eq!(refused.code, 400);
    assert_eq!(
        refused.message,
        "NodePool in version \"v1\" cannot be handled as a NodePool: strict decoding error: unknown field \"spec.wieght\""
    );
    let kept = pools
        .patch("p", &PatchParams::default(), &typo)
        .await
        .unwrap();
    assert!(kept.data["spec"].get("wieght").is_none());

    // A dry run is checked and answered, not stored.
    let before = server.resource_version();
    let dry = pools
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &pool("dry"),
        )
        .await
        .unwrap();
    assert_eq!(dry.metadata.name.as_deref(), Some("dry"));
    assert_eq!(error_code(pools.get("dry").await), 404);
    assert_eq!(server.resource_version(), before);

    // Deleting the CRD takes its objects and stops serving them.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("nodepools.karpenter.sh", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(error_code(pools.get("p").await), 404);
    server.stop().await;
}

#[tokio::test]
async fn crds_over_the_cel_cost_budget_are_refused_as_kube_apiserver_refuses_them() {
    let server = ApiServer::start().await.unwrap();
    let client = client(&server).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let refused_dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../reference/refused-crds");
    let text = std::fs::read_to_string(refused_dir.join("karpenter.sh_nodeclaims.yaml")).unwrap();
    let crd: CustomResourceDefinition = serde_yaml_ng::from_str(&text).unwrap();
    let refused = status(crds.create(&PostParams::default(), &crd).await);
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    assert!(
        refused.message.starts_with("CustomResourceDefinition.apiextensions.k8s.io \"nodeclaims.karpenter.sh\" is invalid: ["),
        "{}",
        refused.message
    );
    assert!(refused.message.contains("spec.validation.openAPIV3Schema.properties[spec].properties[requirements].items.properties[key].x-kubernetes-validations[1].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x"));
    // Nothing was created, nothing is served.
    assert_eq!(error_code(crds.get("nodeclaims.karpenter.sh").await), 404);
    assert_eq!(
        error_code(nodeclaims(&client).list(&ListParams::default()).await),
        404
    );
    server.stop().await;
}

/// Names seen by a watcher: per name, how often it arrived outside an initial list.
#[derive(Default)]
struct Seen {
    names: BTreeSet<String>,
    applied_live: BTreeMap<String, usize>,
    restarts: usize,
}

async fn watch_until(
    stream: &mut (impl futures_util::Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Unpin),
    seen: &mut Seen,
    wanted: usize,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.names.len() < wanted {
        let next = tokio::time::timeout_at(deadline, stream.next()).await;
        match next.expect("watcher stalled").expect("watcher ended") {
            Ok(Event::Apply(cm)) => {
                let name = cm.metadata.name.unwrap();
                *seen.applied_live.entry(name.clone()).or_default() += 1;
                seen.names.insert(name);
            }
            Ok(Event::InitApply(cm)) => {
                seen.names.insert(cm.metadata.name.unwrap());
            }
            Ok(Event::Init) => seen.restarts += 1,
            Ok(_) => {}
            // Errors are retried by the watcher's backoff.
            Err(_) => {}
        }
    }
}

#[tokio::test]
async fn watches_resume_after_disconnects_and_relist_after_compaction() {
    let server = ApiServer::start_with(Options {
        bookmark_interval: Duration::from_millis(100),
        ..Options::default()
    })
    .await
    .unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client(&server).await, "default");
    let config = watcher::Config::default().timeout(30);
    let mut stream = Box::pin(watch(maps.clone(), config).default_backoff());
    let mut seen = Seen::default();
    let make = |name: String| {
        let maps = maps.clone();
        async move {
            let cm: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
            maps.create(&PostParams::default(), &cm).await.unwrap();
        }
    };
    for i in 0..3 {
        make(format!("before-{i}")).await;
    }
    watch_until(&mut stream, &mut seen, 3).await;
    let restarts = seen.restarts;

    // A dropped connection: the watcher re-watches from the last version it saw.
    server.disconnect_watches();
    for i in 0..2 {
        make(format!("after-disconnect-{i}")).await;
    }
    watch_until(&mut stream, &mut seen, 5).await;
    assert_eq!(seen.restarts, restarts, "a resumed watch does not relist");
    assert!(
        seen.applied_live.values().all(|n| *n == 1),
        "{:?}",
        seen.applied_live
    );

    // History compacted: the watcher's version is gone, the server answers 410 and the
    // watcher lists again.
    server.compact();
    server.disconnect_watches();
    make("after-compaction".to_owned()).await;
    watch_until(&mut stream, &mut seen, 6).await;
    assert!(
        seen.restarts > restarts,
        "410 Gone makes the watcher relist"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_selective_watch_sees_objects_enter_and_leave_its_view() {
    let server = ApiServer::start().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client(&server).await, "default");
    let config = watcher::Config::default().labels("tier=web");
    let mut stream = Box::pin(watch(maps.clone(), config).default_backoff());
    // The initial (empty) list.
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
        {
            Some(Ok(Event::InitDone)) => break,
            Some(_) => {}
            None => panic!("watcher ended"),
        }
    }
    let labelled = |tier: &str| Patch::Merge(json!({"metadata": {"labels": {"tier": tier}}}));
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c", "labels": {"tier": "db"}}}))
            .unwrap();
    maps.create(&PostParams::default(), &cm).await.unwrap();
    maps.patch("c", &PatchParams::default(), &labelled("web"))
        .await
        .unwrap();
    maps.patch("c", &PatchParams::default(), &labelled("db"))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
        {
            Some(Ok(Event::Apply(cm))) => {
                seen.push(("apply", cm.metadata.labels.unwrap()["tier"].clone()))
            }
            Some(Ok(Event::Delete(cm))) => {
                seen.push(("delete", cm.metadata.labels.unwrap()["tier"].clone()))
            }
            Some(_) => {}
            None => panic!("watcher ended"),
        }
    }
    // Created outside the view: nothing; labelled into it: added; out again: deleted.
    assert_eq!(
        seen,
        vec![("apply", "web".to_owned()), ("delete", "db".to_owned())]
    );
    server.stop().await;
}

/// The `Priority` admission plugin: classes resolve to `spec.priority`, the system classes
/// exist from the start, a missing class is refused, and so is a second global default.
#[tokio::test]
async fn pod_priority_is_resolved_from_its_class() {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let server = ApiServer::start().await.unwrap();
    let client = client(&server).await;
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let names: BTreeSet<String> = classes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(names.contains("system-node-critical") && names.contains("system-cluster-critical"));
    let class = |name: &str, value: i64, default: bool| -> PriorityClass {
        serde_json::from_value(
            json!({"metadata": {"name": name}, "value": value, "globalDefault": default}),
        )
        .unwrap()
    };
    let pod = |name: &str, spec: serde_json::Value| -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "i"}]);
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let post = PostParams::default();
    let priority = |p: Pod| p.spec.unwrap().priority;
    // No class and no default: 0.
    let plain = pods.create(&post, &pod("plain", json!({}))).await.unwrap();
    assert_eq!(priority(plain), Some(0));
    let critical = pods
        .create(
            &post,
            &pod(
                "critical",
                json!({"priorityClassName": "system-cluster-critical"}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(priority(critical), Some(2_000_000_000));
    let missing = pods
        .create(&post, &pod("missing", json!({"priorityClassName": "gold"})))
        .await;
    match missing {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403);
            assert!(
                status
                    .message
                    .contains("no PriorityClass with name gold was found"),
                "{}",
                status.message
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
    classes
        .create(&post, &class("gold", 1000, true))
        .await
        .unwrap();
    // The global default applies to pods without a class, with its name.
    let defaulted = pods
        .create(&post, &pod("defaulted", json!({})))
        .await
        .unwrap();
    let spec = defaulted.spec.unwrap();
    assert_eq!(
        (spec.priority, spec.priority_class_name.as_deref()),
        (Some(1000), Some("gold"))
    );
    // A priority that disagrees with the class is refused.
    let wrong = pods
        .create(
            &post,
            &pod("wrong", json!({"priorityClassName": "gold", "priority": 5})),
        )
        .await;
    assert_eq!(error_code(wrong), 403);
    // One global default; user classes up to 1e9; `system-` is reserved.
    assert_eq!(
        error_code(classes.create(&post, &class("silver", 10, true)).await),
        422
    );
    assert_eq!(
        error_code(
            classes
                .create(&post, &class("huge", 2_000_000_000, false))
                .await
        ),
        422
    );
    assert_eq!(
        error_code(classes.create(&post, &class("system-mine", 1, false)).await),
        422
    );
    server.stop().await;
}

#[tokio::test]
async fn injected_faults_answer_as_a_real_server_and_a_restart_keeps_the_store() {
    let mut server = ApiServer::start().await.unwrap();
    let client = client(&server).await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "kept"}})).unwrap();
    maps.create(&PostParams::default(), &cm).await.unwrap();

    // Every request gets a fault: the API errors carry the real server's codes and reasons,
    // 429 and 503 say when to come back, and a reset list fails to read.
    server.inject_faults(1.0, 3);
    let mut codes = BTreeMap::<u16, usize>::new();
    let mut unreadable = 0;
    for _ in 0..80 {
        match maps.list(&ListParams::default()).await {
            Err(kube::Error::Api(status)) => *codes.entry(status.code).or_default() += 1,
            Err(_) => unreadable += 1,
            Ok(_) => {}
        }
    }
    let injected = server.faults_injected();
    server.inject_faults(0.0, 0);
    assert!(
        codes.contains_key(&429) && codes.contains_key(&500),
        "{codes:?}"
    );
    assert!(
        unreadable > 0 && injected["reset mid-list"] > 0,
        "{injected:?}"
    );
    // Retry-After rides on the 429s and 503s.
    server.inject_faults(1.0, 5);
    let mut seen_retry_after = false;
    for _ in 0..40 {
        let response = raw_get(&server, "/api/v1/namespaces/default/configmaps").await;
        if matches!(response.0, 429 | 503) {
            assert_eq!(response.1.as_deref(), Some("1"), "{:?}", response.0);
            seen_retry_after = true;
        }
    }
    server.inject_faults(0.0, 0);
    assert!(seen_retry_after);

    // `/metrics` counts requests by verb, resource and code.
    let metrics = raw_get(&server, "/metrics").await.2;
    assert!(
        metrics.contains(
            "apiserver_request_total{code=\"429\",resource=\"configmaps\",subresource=\"\",verb=\"list\"}"
        ),
        "{metrics}"
    );
    let requests = server.requests();
    assert_eq!(requests[&("create", "configmaps".to_owned(), 201)], 1);

    // A restart: the port refuses connections, then the same store is served there again.
    let url = server.url();
    server.restart(Duration::from_millis(300)).await.unwrap();
    assert_eq!(server.url(), url);
    let kept = maps.get("kept").await.unwrap();
    assert_eq!(kept.metadata.name.as_deref(), Some("kept"));
    server.stop().await;
}

/// A GET's status code and `Retry-After` header, over a plain connection.
async fn raw_get(server: &ApiServer, path: &str) -> (u16, Option<String>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = server.url().trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    // A reset list ends the read early; the status line came first.
    let _ = stream.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let retry_after = text.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("retry-after: ")
            .map(str::to_owned)
    });
    (code, retry_after, text.into_owned())
}
