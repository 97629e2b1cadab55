use serde_json::json;

use super::*;

fn changes(conversion: &Conversion) -> Vec<String> {
    conversion
        .changes
        .iter()
        .map(|c| {
            let marker = if c.manual { "MANUAL" } else { "changed" };
            format!("{marker}: {}: {}", c.object, c.description)
        })
        .collect()
}

fn names(conversion: &Conversion) -> Vec<String> {
    conversion
        .documents
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap_or_default(),
                d["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

const CLASS: &str = "apiVersion: karpenter.k8s.aws/v1beta1\nkind: EC2NodeClass\nmetadata: {name: shared}\nspec:\n  amiFamily: AL2023\n  role: r\n  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]\n";

fn pool(name: &str, kubelet: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{name: shared}}\n      {kubelet}\n      requirements: []\n"
    )
}

/// Pools that share a class but not their kubelet settings each keep theirs: the first
/// group keeps the class, the others get copies right after it.
#[test]
fn a_class_whose_pools_differ_in_kubelet_settings_is_split() {
    let text = [
        pool("a", "kubelet: {maxPods: 110}"),
        CLASS.to_owned(),
        pool("b", "kubelet: {maxPods: 58}"),
        pool("c", "kubelet: {maxPods: 110}"),
    ]
    .join("---\n");
    let conversion = convert(&text).unwrap();
    assert_eq!(
        names(&conversion),
        [
            "NodePool/a",
            "EC2NodeClass/shared",
            "EC2NodeClass/shared-b",
            "NodePool/b",
            "NodePool/c"
        ]
    );
    let docs = &conversion.documents;
    assert_eq!(docs[1]["spec"]["kubelet"], json!({"maxPods": 110}));
    assert_eq!(docs[2]["spec"]["kubelet"], json!({"maxPods": 58}));
    assert_eq!(docs[2]["spec"]["role"], "r");
    let class_of = |i: usize| docs[i]["spec"]["template"]["spec"]["nodeClassRef"]["name"].clone();
    assert_eq!(
        [class_of(0), class_of(3), class_of(4)],
        ["shared", "shared-b", "shared"]
    );
    let changes = changes(&conversion);
    assert!(
        changes.contains(
            &"changed: EC2NodeClass/shared: spec.kubelet set from NodePool/a, NodePool/c".into()
        ),
        "{changes:#?}"
    );
    assert!(
        changes.contains(
            &"changed: NodePool/b: spec.template.spec.nodeClassRef.name: shared → shared-b".into()
        ),
        "{changes:#?}"
    );
    assert!(conversion.changes.iter().all(|c| !c.manual));
}

/// A pool without kubelet settings keeps the class as it is; the one with some gets a copy.
#[test]
fn pools_without_kubelet_settings_keep_the_class() {
    let text = [
        pool("a", "kubelet: {maxPods: 110}"),
        pool("b", ""),
        CLASS.to_owned(),
    ]
    .join("---\n");
    let conversion = convert(&text).unwrap();
    let docs = &conversion.documents;
    assert_eq!(
        names(&conversion),
        [
            "NodePool/a",
            "NodePool/b",
            "EC2NodeClass/shared",
            "EC2NodeClass/shared-a"
        ]
    );
    assert!(docs[2]["spec"].get("kubelet").is_none());
    assert_eq!(docs[3]["spec"]["kubelet"], json!({"maxPods": 110}));
}

/// A v1 class that has kubelet settings of its own keeps them for whoever uses it.
#[test]
fn a_v1_class_keeps_its_own_kubelet_settings() {
    let class = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: shared}\nspec:\n  kubelet: {maxPods: 20}\n  role: r\n";
    let conversion =
        convert(&[pool("a", "kubelet: {maxPods: 110}"), class.into()].join("---\n")).unwrap();
    let docs = &conversion.documents;
    assert_eq!(docs[1]["spec"]["kubelet"], json!({"maxPods": 20}));
    assert_eq!(docs[2]["metadata"]["name"], "shared-a");
    assert_eq!(docs[2]["spec"]["kubelet"], json!({"maxPods": 110}));
}

#[test]
fn kubelet_settings_for_a_class_not_in_the_input_are_a_manual_step() {
    let conversion = convert(&pool("a", "kubelet: {maxPods: 110}")).unwrap();
    let manual: Vec<_> = conversion.changes.iter().filter(|c| c.manual).collect();
    assert_eq!(manual.len(), 1, "{:#?}", conversion.changes);
    assert!(
        manual[0]
            .description
            .contains("EC2NodeClass/shared spec.kubelet")
    );
}

/// The API server prunes a null and defaults what it stood for: so does the conversion.
#[test]
fn nulls_are_dropped_as_the_api_server_drops_them() {
    let text = "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: a}\nspec:\n  disruption:\n  template:\n    spec:\n      nodeClassRef: {name: x}\n      requirements: []\n";
    let conversion = convert(text).unwrap();
    assert!(conversion.documents[0]["spec"].get("disruption").is_none());
    assert!(
        changes(&conversion)
            .contains(&"changed: NodePool/a: spec.disruption: null dropped (the API server prunes it and applies the default)".into())
    );
}

#[test]
fn workloads_naming_retired_labels_are_rewritten() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {karpenter.sh/do-not-consolidate: \"true\"}\nspec:\n  nodeSelector: {karpenter.sh/provisioner-name: default}\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n          - matchExpressions: [{key: karpenter.sh/provisioner-name, operator: Exists}]\n  containers: []\n";
    let conversion = convert(text).unwrap();
    let pod = &conversion.documents[0];
    assert_eq!(
        pod["spec"]["nodeSelector"],
        json!({"karpenter.sh/nodepool": "default"})
    );
    assert_eq!(
        pod["metadata"]["annotations"],
        json!({"karpenter.sh/do-not-disrupt": "true"})
    );
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["key"],
        "karpenter.sh/nodepool"
    );
    assert_eq!(
        changes(&conversion),
        [
            "changed: Pod/p: metadata.annotations: karpenter.sh/do-not-consolidate → karpenter.sh/do-not-disrupt",
            "changed: Pod/p: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key: karpenter.sh/provisioner-name → karpenter.sh/nodepool",
            "changed: Pod/p: spec.nodeSelector: karpenter.sh/provisioner-name → karpenter.sh/nodepool",
        ]
    );
}

#[test]
fn bad_values_are_refused_with_the_field_and_the_fix() {
    for (spec, expected) in [
        (
            "consolidation: {enabled: true}\n  ttlSecondsAfterEmpty: 30",
            "document 1 (Provisioner/p): spec.ttlSecondsAfterEmpty: cannot be set together with spec.consolidation.enabled: true (v1alpha5 refused both); keep one and convert again",
        ),
        (
            "ttlSecondsUntilExpired: soon",
            "document 1 (Provisioner/p): spec.ttlSecondsUntilExpired: must be a whole number of seconds, not \"soon\"",
        ),
        (
            "consolidation: {enabled: yes please}",
            "document 1 (Provisioner/p): spec.consolidation.enabled: must be true or false, not a string",
        ),
        (
            "kubeletConfiguration: [maxPods]",
            "document 1 (Provisioner/p): spec.kubeletConfiguration must be a mapping, not a list; fix it and convert again",
        ),
        (
            "requirements: {key: a}",
            "document 1 (Provisioner/p): spec.requirements: must be a list, not a mapping",
        ),
        (
            "providerRef: {kind: AWSNodeTemplate}",
            "document 1 (Provisioner/p): spec.providerRef.name: must name an AWSNodeTemplate; add it and convert again",
        ),
    ] {
        let text = format!(
            "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {{name: p}}\nspec:\n  {spec}\n"
        );
        let error = convert(&text).unwrap_err();
        assert_eq!(error.to_string(), expected, "{spec}");
    }
    let template = "apiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata: {name: t}\nspec:\n  subnetSelector: {karpenter.sh/discovery: 7}\n";
    assert_eq!(
        convert(template).unwrap_err().to_string(),
        "document 1 (AWSNodeTemplate/t): spec.subnetSelector.karpenter.sh/discovery: must be a string, not a number"
    );
}

/// A default instance profile fills the classes that name none, as v1alpha1's setting did.
#[test]
fn the_default_instance_profile_fills_classes_without_one() {
    let template = "apiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata: {name: t}\nspec:\n  subnetSelector: {a: b}\n  securityGroupSelector: {a: b}\n";
    let without = convert(template).unwrap();
    assert!(without.changes.iter().any(|c| {
        c.manual
            && c.description
                .starts_with("spec.role or spec.instanceProfile")
    }));
    let with = convert_with(
        template,
        &ConvertOptions {
            default_instance_profile: Some("KarpenterNodeInstanceProfile".into()),
        },
    )
    .unwrap();
    assert!(
        with.changes.iter().all(|c| !c.manual),
        "{:#?}",
        with.changes
    );
    assert_eq!(
        with.documents[0]["spec"]["instanceProfile"],
        "KarpenterNodeInstanceProfile"
    );
}
