#![allow(clippy::unwrap_used)]

use super::*;

/// `text` with the image and the cluster named (what every install must give).
fn read(text: &str, origin: &str) -> anyhow::Result<Values> {
    let required = [
        "image.repository=r.example/k".to_owned(),
        "settings.clusterName=prod".to_owned(),
    ];
    Values::from_yaml_with(text, origin, &required)
}

#[test]
fn values_name_the_wrong_key() {
    let error = read("settings:\n  batchIdle: 1s\n", "v.yaml").unwrap_err();
    assert!(error.to_string().contains("settings"), "{error}");
    assert!(error.to_string().contains("batchIdle"), "{error}");
    let error = read("replicas: two\n", "v.yaml").unwrap_err();
    assert!(error.to_string().contains("replicas"), "{error}");
    let error = read("settings:\n  batchIdleDuration: soon\n", "v.yaml").unwrap_err();
    assert!(
        format!("{error:#}").contains("settings.batchIdleDuration"),
        "{error:#}"
    );
    let error = read("settings:\n  metricsBindAddress: pod-ip\n", "v.yaml").unwrap_err();
    assert!(
        format!("{error:#}").contains("settings.metricsBindAddress"),
        "{error:#}"
    );
}

#[test]
fn one_replica_needs_no_election_and_irsa_annotates_the_account() {
    let values = read(
        "replicas: 1\nserviceAccount:\n  annotations:\n    eks.amazonaws.com/role-arn: arn:aws:iam::1:role/k\n",
        "v.yaml",
    )
    .unwrap();
    let objects = manifests(&values).unwrap();
    let account = objects
        .iter()
        .find(|o| o["kind"] == "ServiceAccount")
        .unwrap();
    assert_eq!(
        account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::1:role/k"
    );
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    let disabled = env
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "DISABLE_LEADER_ELECTION")
        .unwrap();
    assert_eq!(disabled["value"], "true");
}

#[test]
fn ec2_needs_the_cluster_and_grants_no_node_writes() {
    let repository = ["image.repository=r.example/k".to_owned()];
    let error =
        Values::from_yaml_with("settings:\n  cloud: aws\n", "v.yaml", &repository).unwrap_err();
    assert!(
        format!("{error:#}").contains("settings.clusterName"),
        "{error:#}"
    );
    let error = read("settings:\n  cloud: gce\n", "v.yaml").unwrap_err();
    assert!(format!("{error:#}").contains("settings.cloud"), "{error:#}");
    let values = read(
        "settings:\n  cloud: aws\n  clusterName: prod\n  clusterEndpoint: https://ABC.gr7.us-west-2.eks.amazonaws.com\n  interruptionQueue: prod-karpenter\n",
        "v.yaml",
    )
    .unwrap();
    let objects = manifests(&values).unwrap();
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let env = |name: &str| {
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap()["value"]
            .clone()
    };
    assert_eq!(env("CLUSTER_NAME"), "prod");
    assert_eq!(env("INTERRUPTION_QUEUE"), "prod-karpenter");
    assert_eq!(container["args"][2], "aws");
    let role = objects.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
    let node_writes = role["rules"].as_array().unwrap().iter().any(|r| {
        r["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x == "nodes")
            && r["verbs"].as_array().unwrap().iter().any(|v| v == "create")
    });
    assert!(!node_writes, "EC2 nodes register themselves");
}

#[test]
fn set_takes_dotted_keys_with_escaped_dots() {
    let values = Values::from_yaml_with(
        "",
        "defaults",
        &[
            "image.repository=r.example/k".into(),
            "settings.clusterName=prod".into(),
            "replicas=1".into(),
            r"serviceAccount.annotations.eks\.amazonaws\.com/role-arn=arn:aws:iam::1:role/k".into(),
        ],
    )
    .unwrap();
    assert_eq!(values.replicas, 1);
    assert_eq!(
        values.service_account.annotations["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::1:role/k"
    );
    for (set, named) in [
        ("replicas", "KEY=VALUE"),
        ("settings..cloud=aws", "dotted key"),
        ("image.repository.deeper=x", "image.repository"),
    ] {
        let error = Values::from_yaml_with("", "defaults", &[set.into()]).unwrap_err();
        assert!(format!("{error:#}").contains(named), "{set}: {error:#}");
    }
}
