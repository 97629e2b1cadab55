use super::*;

fn pending(extra: serde_json::Value) -> KubePod {
    let mut pod = serde_json::json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]},
    });
    crate::test_support::overlay(&mut pod, &extra);
    serde_json::from_value(pod).unwrap()
}

#[test]
fn provisionable_pods_are_unschedulable_unbound_and_ours() {
    use serde_json::json;
    assert_eq!(provisionable(&pending(json!({}))), Ok(()));
    let cases = [
        (json!({"spec": {"nodeName": "n1"}}), NotProvisionable::Bound),
        (
            json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}]}}),
            NotProvisionable::NotUnschedulable,
        ),
        (
            json!({"status": {"nominatedNodeName": "n1"}}),
            NotProvisionable::Preempting,
        ),
        (
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}}),
            NotProvisionable::DaemonSet,
        ),
        (
            json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]}}),
            NotProvisionable::NodeOwned,
        ),
        (
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
            NotProvisionable::Terminating,
        ),
        (
            json!({"status": {"phase": "Failed"}}),
            NotProvisionable::Terminating,
        ),
        (
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}]
            }}}}}),
            NotProvisionable::OptedOut,
        ),
    ];
    for (patch, why) in cases {
        assert_eq!(provisionable(&pending(patch.clone())), Err(why), "{patch}");
    }
    // One alternative term that allows NodePool nodes keeps it ours.
    let either = json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
        ]
    }}}}});
    assert_eq!(provisionable(&pending(either)), Ok(()));
}

fn pod(yaml: &str) -> KubePod {
    serde_yaml_ng::from_str(yaml).expect("pod yaml")
}

#[test]
fn requests_follow_kube_scheduler() {
    // Containers 300m; a sidecar 100m; an init container 500m started after the sidecar;
    // overhead 50m. Running = 300 + 100, init peak = 100 + 500 → 600 + 50 overhead.
    let p = pod(r#"
metadata: {name: p, namespace: ns, uid: u1}
spec:
  overhead: {cpu: 50m}
  initContainers:
    - {name: sidecar, restartPolicy: Always, resources: {requests: {cpu: 100m}}}
    - {name: init, resources: {requests: {cpu: 500m, memory: 1Gi}}}
  containers:
    - {name: a, resources: {requests: {cpu: 200m, memory: 256Mi}}}
    - {name: b, resources: {limits: {cpu: 100m, memory: 128Mi, example.com/dongle: "1"}}}
"#);
    let converted = Pod::try_from(&p).unwrap();
    assert_eq!(converted.requests.get(ResourceName::Cpu), 650);
    assert_eq!(converted.requests.get(ResourceName::Memory), 1 << 30);
    assert_eq!(converted.requests.get(ResourceName::Pods), 1);
    // An extended resource takes a place of its own, so instance types a NodeOverlay gives
    // it can serve the pod.
    assert!(converted.unknown_resources.is_empty());
    let dongle = ResourceName::parse("example.com/dongle").unwrap();
    assert_eq!(converted.requests.get(dongle), 1);
}

#[test]
fn required_pod_affinity_is_read_and_bad_selectors_are_named() {
    let p = pod(r#"
metadata: {name: p, uid: u3, labels: {app: nginx}}
spec:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: nginx}}}
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchExpressions: [{key: app, operator: In, values: [db]}]}}
        - topologyKey: topology.kubernetes.io/zone
          namespaceSelector: {}
          labelSelector: {matchExpressions: [{key: tier, operator: Exists}, {key: app, operator: NotIn, values: [nginx]}]}
        - {topologyKey: topology.kubernetes.io/zone, namespaceSelector: {matchLabels: {team: a}}}
        - {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchExpressions: [{key: app, operator: Near}]}}
  containers: [{name: c}]
"#);
    let converted = Pod::try_from(&p).unwrap();
    assert_eq!(converted.pod_affinity.len(), 4);
    assert!(converted.pod_affinity[3].anti);
    let team_a = converted.pod_affinity[2]
        .namespace_selector
        .as_ref()
        .unwrap();
    assert!(team_a.matches(&[("team".to_owned(), "a".to_owned())].into()));
    assert!(!team_a.matches(&[("team".to_owned(), "b".to_owned())].into()));
    let db = &converted.pod_affinity[0];
    let db_pod: BTreeMap<String, String> = [("app".to_owned(), "db".to_owned())].into();
    assert!(selector_matches(&db.selector, &db.expressions, &db_pod));
    let any_namespace = &converted.pod_affinity[1];
    assert!(any_namespace.all_namespaces);
    let tiered: BTreeMap<String, String> = [("tier".to_owned(), "web".to_owned())].into();
    assert!(selector_matches(
        &any_namespace.selector,
        &any_namespace.expressions,
        &tiered
    ));
    assert!(!selector_matches(
        &any_namespace.selector,
        &any_namespace.expressions,
        &db_pod
    ));
    assert_eq!(
        converted.unsupported,
        vec!["pod affinity label selector operator \"Near\"".to_owned()]
    );
}

#[test]
fn selectors_affinity_and_unsupported_constraints() {
    let p = pod(r#"
metadata: {name: p, uid: u2}
spec:
  nodeSelector: {failure-domain.beta.kubernetes.io/zone: us-east-1a}
  tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
          - matchExpressions: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]
  topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}
  containers: [{name: c}]
"#);
    let converted = Pod::try_from(&p).unwrap();
    assert!(
        converted
            .node_selector
            .has_key("topology.kubernetes.io/zone")
    );
    assert_eq!(converted.requirement_alternatives().len(), 2);
    assert_eq!(converted.tolerations.len(), 1);
    assert!(
        converted.unsupported.is_empty(),
        "{:?}",
        converted.unsupported
    );
    assert_eq!(converted.spread.len(), 1);
    assert_eq!(
        converted.spread[0].topology_key,
        "topology.kubernetes.io/zone"
    );
}

#[test]
fn preferences_are_read_with_their_weights() {
    let p = pod(r#"
metadata: {name: p, uid: u4, labels: {app: nginx}}
spec:
  affinity:
    nodeAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 20
          preference: {matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}]}
        - weight: 5
          preference: {matchFields: [{key: metadata.name, operator: In, values: [n1]}]}
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 10
          podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: nginx}}}
    podAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 3
          podAffinityTerm: {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: db}}}
  containers: [{name: c}]
"#);
    let converted = Pod::try_from(&p).unwrap();
    // The matchFields preference cannot be modelled and is dropped, as relaxing would.
    assert_eq!(converted.preferred_node_affinity.len(), 1);
    assert_eq!(converted.preferred_node_affinity[0].0, 20);
    assert_eq!(converted.preferred_pod_affinity.len(), 2);
    assert!(
        converted
            .preferred_pod_affinity
            .iter()
            .any(|(w, t)| *w == 10 && t.anti && t.topology_key == "kubernetes.io/hostname")
    );
    assert!(
        converted.unsupported.is_empty(),
        "{:?}",
        converted.unsupported
    );
    assert!(converted.has_preferences());
    assert!(!converted.without_preferences().has_preferences());
}

#[test]
fn label_keys_policies_min_domains_any_key_and_host_ports_are_read() {
    let p = pod(r#"
metadata: {name: p, uid: u5, labels: {app: web, pod-template-hash: abc, tenant: t1}}
spec:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: example.com/rack
          labelSelector: {matchLabels: {app: web}}
          matchLabelKeys: [pod-template-hash, missing]
          mismatchLabelKeys: [tenant]
  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: DoNotSchedule
      labelSelector: {matchLabels: {app: web}}
      matchLabelKeys: [pod-template-hash]
      minDomains: 3
      nodeAffinityPolicy: Ignore
      nodeTaintsPolicy: Honor
    - {maxSkew: 1, topologyKey: example.com/rack, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Sometimes}
  initContainers:
    - {name: init, ports: [{containerPort: 53, hostPort: 53, protocol: UDP}]}
  containers:
    - name: c
      ports:
        - {containerPort: 8080, hostPort: 8080}
        - {containerPort: 9090}
        - {containerPort: 8443, hostPort: 8443, hostIP: 10.0.0.1}
"#);
    let converted = Pod::try_from(&p).unwrap();
    let spread = &converted.spread[0];
    assert_eq!(spread.min_domains, Some(3));
    assert!(spread.ignore_node_affinity && spread.honor_node_taints);
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let same_revision = labels(&[("app", "web"), ("pod-template-hash", "abc")]);
    let other_revision = labels(&[("app", "web"), ("pod-template-hash", "def")]);
    assert!(spread.counts("default", "default", &same_revision));
    assert!(!spread.counts("default", "default", &other_revision));
    // The anti-affinity on a custom key selects the same revision of other tenants;
    // `missing` is not a label of the pod and is skipped.
    let anti = &converted.pod_affinity[0];
    assert_eq!(anti.topology_key, "example.com/rack");
    let mut other_tenant = same_revision.clone();
    other_tenant.insert("tenant".into(), "t2".into());
    let mut same_tenant = same_revision.clone();
    same_tenant.insert("tenant".into(), "t1".into());
    assert!(selector_matches(
        &anti.selector,
        &anti.expressions,
        &other_tenant
    ));
    assert!(!selector_matches(
        &anti.selector,
        &anti.expressions,
        &same_tenant
    ));
    assert!(!selector_matches(
        &anti.selector,
        &anti.expressions,
        &other_revision
    ));
    // A policy value the API would reject is named.
    assert_eq!(
        converted.unsupported,
        vec![
            "topology spread nodeTaintsPolicy \"Sometimes\" (expected Honor or Ignore)".to_owned()
        ]
    );
    let port = |ip: &str, protocol: &str, port: i32| HostPort {
        ip: ip.into(),
        protocol: protocol.into(),
        port,
    };
    assert_eq!(
        converted.host_ports,
        vec![
            port("0.0.0.0", "TCP", 8080),
            port("0.0.0.0", "UDP", 53),
            port("10.0.0.1", "TCP", 8443),
        ]
    );
    assert!(port("0.0.0.0", "TCP", 8443).conflicts_with(&port("10.0.0.1", "TCP", 8443)));
    assert!(!port("10.0.0.2", "TCP", 8443).conflicts_with(&port("10.0.0.1", "TCP", 8443)));
    assert!(!port("0.0.0.0", "UDP", 8080).conflicts_with(&port("0.0.0.0", "TCP", 8080)));
}

/// Upstream's "Pod Eviction Cost" suite (disruption suite_test): a pod with neither priority
/// nor deletion cost costs 1; a positive deletion cost ("100") or priority (1) costs more, a
/// negative one less, and higher deletion costs cost more ("101" > "100" > "99"). Both are
/// read from the Kubernetes pod, and the clamp to [-10, 10] holds at the extremes.
#[test]
fn eviction_cost_weighs_priority_and_deletion_cost_as_upstream() {
    let cost = |yaml: &str| Pod::try_from(&pod(yaml)).unwrap().eviction_cost();
    let annotated = |value: &str| {
        cost(&format!(
            "metadata: {{name: p, annotations: {{controller.kubernetes.io/pod-deletion-cost: \"{value}\"}}}}\nspec: {{containers: []}}"
        ))
    };
    let standard = cost("metadata: {name: p}\nspec: {containers: []}");
    assert_eq!(standard, 1.0);
    assert!(annotated("100") > standard);
    assert!(annotated("-100") < standard);
    assert!(annotated("101") > annotated("100") && annotated("100") > annotated("99"));
    let prioritized = |p: i64| {
        cost(&format!(
            "metadata: {{name: p}}\nspec: {{containers: [], priority: {p}}}"
        ))
    };
    assert!(prioritized(1) > standard);
    assert!(prioritized(-1) < standard);
    // system-cluster-critical weighs the most a pod can; the lowest deletion cost the least.
    assert_eq!(prioritized(2_000_000_000), 10.0);
    assert_eq!(annotated("-2147483648"), -10.0);
    // Not an int32: read as none, as the ReplicaSet controller reads it.
    assert_eq!(annotated("cheap"), standard);
    assert_eq!(annotated("4294967296"), standard);
    assert_eq!(
        Pod::try_from(&pod(
            "metadata: {name: p}\nspec: {containers: [], priority: 7}"
        ))
        .unwrap()
        .priority,
        7
    );
}
