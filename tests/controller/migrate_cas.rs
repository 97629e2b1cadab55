//! `karpenter migrate from-cluster-autoscaler` against the API server, as a user runs it: the
//! Nodes of an EKS managed node group, of a self-managed spot group and one Karpenter
//! launched; the command proposes a NodePool per group (none for Karpenter's node) that
//! keeps the group's labels and taints, and `karpenter validate` accepts what it printed.

use super::*;

/// Runs `karpenter ARGS` to its end.
async fn karpenter(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// The YAML documents a proposal printed.
fn documents(stdout: &str) -> Vec<serde_json::Value> {
    serde_yaml_ng::Deserializer::from_str(stdout)
        .map(|d| <serde_json::Value as serde::Deserialize>::deserialize(d).unwrap())
        .collect()
}

/// Each document's kind and name.
fn kinds(documents: &[serde_json::Value]) -> Vec<(&str, &str)> {
    documents
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect()
}

/// The values a NodePool template requires of `key`.
fn requirement(template: &serde_json::Value, key: &str) -> Option<serde_json::Value> {
    template["spec"]["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .map(|r| r["values"].clone())
}

/// `karpenter validate` accepts what the proposal printed.
async fn validates(dir: &std::path::Path, stdout: &str) {
    let file = dir.join("nodepools.yaml");
    std::fs::write(&file, stdout).unwrap();
    let validated = karpenter(vec!["validate".into(), file.display().to_string()]).await;
    assert!(
        validated.status.success(),
        "{}{}\n{stdout}",
        String::from_utf8_lossy(&validated.stdout),
        String::from_utf8_lossy(&validated.stderr)
    );
}

/// A Node as its kubelet registered it, with its OS image in its status.
async fn register(
    nodes: &Api<Node>,
    name: &str,
    labels: serde_json::Value,
    taints: serde_json::Value,
    os_image: &str,
) {
    register_instance(nodes, name, labels, taints, os_image, None).await;
}

/// A Node as its kubelet registered it, running on `instance` (in us-west-2a) if given.
async fn register_instance(
    nodes: &Api<Node>,
    name: &str,
    labels: serde_json::Value,
    taints: serde_json::Value,
    os_image: &str,
    instance: Option<&str>,
) {
    let mut labels = labels;
    labels["kubernetes.io/hostname"] = json!(name);
    labels["kubernetes.io/os"] = json!("linux");
    labels["kubernetes.io/arch"] = json!("amd64");
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints,
            "providerID": instance.map(|id| format!("aws:///us-west-2a/{id}"))}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let info = json!({"status": {"nodeInfo": {
        "architecture": "amd64", "bootID": "b", "containerRuntimeVersion": "containerd://1.7.22",
        "kernelVersion": "6.1.112", "kubeProxyVersion": "v1.31.2", "kubeletVersion": "v1.31.2",
        "machineID": "m", "operatingSystem": "linux", "osImage": os_image, "systemUUID": "s"
    }}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&info))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_groups_on_the_api_server_become_nodepools_that_validate() {
    let server = ApiServer::start().await.unwrap();
    let nodes: Api<Node> = Api::all(client(&server));
    for (i, zone) in ["us-west-2a", "us-west-2b"].into_iter().enumerate() {
        register(
            &nodes,
            &format!("ip-10-0-1-{i}.us-west-2.compute.internal"),
            json!({
                "eks.amazonaws.com/nodegroup": "web",
                "eks.amazonaws.com/capacityType": "ON_DEMAND",
                "node.kubernetes.io/instance-type": "m5.xlarge",
                "topology.kubernetes.io/zone": zone,
                "team": "web"
            }),
            json!([{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]),
            "Amazon Linux 2023.6.20241031",
        )
        .await;
    }
    register(
        &nodes,
        "ip-10-0-2-0.us-west-2.compute.internal",
        json!({
            "node.kubernetes.io/instance-type": "c5.2xlarge",
            "node.kubernetes.io/lifecycle": "spot",
            "topology.kubernetes.io/zone": "us-west-2c",
            "workload": "batch"
        }),
        json!([]),
        "Bottlerocket OS 1.26.1 (aws-k8s-1.31)",
    )
    .await;
    register(
        &nodes,
        "ip-10-0-3-0.us-west-2.compute.internal",
        json!({
            "karpenter.sh/nodepool": "general",
            "node.kubernetes.io/instance-type": "m6i.large",
            "topology.kubernetes.io/zone": "us-west-2a"
        }),
        json!([]),
        "Amazon Linux 2023.6.20241031",
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let proposed = karpenter(vec![
        "migrate".into(),
        "from-cluster-autoscaler".into(),
        "--cluster-name".into(),
        "demo".into(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
    ])
    .await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&proposed.stdout).into_owned(),
        String::from_utf8_lossy(&proposed.stderr).into_owned(),
    );
    assert!(proposed.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "node group web (EksManaged): 2 node(s), m5.xlarge in us-west-2a, us-west-2b"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("(Inferred): 1 node(s), c5.2xlarge in us-west-2c"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("m6i.large"),
        "Karpenter's node is no group's: {stderr}"
    );
    let documents = documents(&stdout);
    assert_eq!(
        kinds(&documents),
        [
            ("NodePool", "c5-2xlarge-1"),
            ("NodePool", "web"),
            ("EC2NodeClass", "al2023"),
            ("EC2NodeClass", "bottlerocket")
        ],
        "{stdout}"
    );
    let web = &documents[1]["spec"]["template"];
    assert_eq!(web["metadata"]["labels"], json!({"team": "web"}));
    assert_eq!(
        web["spec"]["taints"],
        json!([{"key": "dedicated", "value": "web", "effect": "NoSchedule"}])
    );
    assert_eq!(web["spec"]["nodeClassRef"]["name"], "al2023");
    assert_eq!(
        requirement(web, "karpenter.k8s.aws/instance-family"),
        Some(json!(["m5"]))
    );
    assert_eq!(
        requirement(web, "karpenter.sh/capacity-type"),
        Some(json!(["on-demand"]))
    );
    let batch = &documents[0]["spec"]["template"];
    assert_eq!(
        requirement(batch, "karpenter.sh/capacity-type"),
        Some(json!(["spot"]))
    );
    assert_eq!(batch["spec"]["nodeClassRef"]["name"], "bottlerocket");

    validates(dir.path(), &stdout).await;
}

/// With `--cloud aws` the command also reads the Auto Scaling groups (on moto): an EKS
/// managed group of two types with a launch template, a self-managed spot group on a launch
/// configuration, a GPU group at zero that only Cluster Autoscaler's node-template tags
/// describe, and another cluster's group. The node classes take the groups' exact subnets,
/// security groups, instance profiles, AMIs and volumes; the NodePools their maximum sizes
/// as CPU limits; the group at zero its labels and taints from its tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_scaling_groups_on_moto_give_exact_node_classes_and_limits() {
    use karpenter_aws::testing::{
        Moto, NodeGroupSpec, connection, create_node_group, register_image,
    };
    let (_lock, clients, fixture) = super::moto_for_test_cluster().await;
    let moto = Moto::shared();
    let aws = connection(&moto.endpoint());
    // Two subnets, in us-west-2a and us-west-2b.
    let subnets: Vec<String> = fixture.subnets.values().cloned().collect();
    assert_eq!(
        fixture.subnets.keys().collect::<Vec<_>>(),
        ["us-west-2a", "us-west-2b"]
    );
    let groups = std::slice::from_ref(&fixture.security_group);
    let al2023 = fixture.amis["x86_64"].clone();
    let bottlerocket = register_image(
        &clients,
        "bottlerocket-aws-k8s-1.31-x86_64-v1.26.1-943d9a41",
    )
    .await
    .unwrap();
    let web = create_node_group(
        &aws,
        &clients,
        &NodeGroupSpec {
            name: "eks-web-4ac9e2d1",
            image_id: &al2023,
            instance_types: &["m5.xlarge", "m5.2xlarge"],
            subnets: &subnets[..2],
            security_groups: groups,
            instance_profile: "eks-web-node",
            volume_gib: 80,
            user_data: Some("IyEvYmluL2Jhc2g="),
            desired: 2,
            max: 6,
            tags: &[("eks:nodegroup-name", "web"), ("eks:cluster-name", "test")],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let batch = create_node_group(
        &aws,
        &clients,
        &NodeGroupSpec {
            name: "batch-spot",
            image_id: &bottlerocket,
            instance_types: &["c5.2xlarge"],
            spot: true,
            subnets: &subnets[1..],
            security_groups: groups,
            instance_profile: "batch-node",
            desired: 1,
            max: 10,
            tags: &[("kubernetes.io/cluster/test", "owned")],
            launch_configuration: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    create_node_group(
        &aws,
        &clients,
        &NodeGroupSpec {
            name: "gpu",
            image_id: &al2023,
            instance_types: &["g5.xlarge"],
            spot: true,
            subnets: &subnets[..1],
            security_groups: groups,
            instance_profile: "gpu-node",
            max: 3,
            tags: &[
                ("k8s.io/cluster-autoscaler/enabled", "true"),
                ("k8s.io/cluster-autoscaler/test", "owned"),
                ("k8s.io/cluster-autoscaler/node-template/label/team", "ml"),
                (
                    "k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu",
                    "true:NoSchedule",
                ),
            ],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    create_node_group(
        &aws,
        &clients,
        &NodeGroupSpec {
            name: "staging-web",
            image_id: &al2023,
            instance_types: &["m5.large"],
            subnets: &subnets[..1],
            security_groups: groups,
            instance_profile: "staging-node",
            max: 4,
            tags: &[("kubernetes.io/cluster/staging", "owned")],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // A group whose launch template was deleted under it.
    create_node_group(
        &aws,
        &clients,
        &NodeGroupSpec {
            name: "legacy",
            image_id: &al2023,
            instance_types: &["m5.large"],
            subnets: &subnets[..1],
            security_groups: groups,
            instance_profile: "legacy-node",
            max: 2,
            tags: &[("k8s.io/cluster-autoscaler/test", "owned")],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    clients
        .ec2
        .delete_launch_template()
        .launch_template_name("legacy")
        .send()
        .await
        .unwrap();
    assert_eq!((web.len(), batch.len()), (2, 1));

    let server = ApiServer::start().await.unwrap();
    let nodes: Api<Node> = Api::all(client(&server));
    for (i, instance) in web.iter().enumerate() {
        register_instance(
            &nodes,
            &format!("ip-10-0-1-{i}.us-west-2.compute.internal"),
            json!({
                "eks.amazonaws.com/nodegroup": "web",
                "eks.amazonaws.com/capacityType": "ON_DEMAND",
                "node.kubernetes.io/instance-type": "m5.xlarge",
                "topology.kubernetes.io/zone": "us-west-2a",
                "team": "web"
            }),
            json!([]),
            "Amazon Linux 2023.6.20241031",
            Some(instance),
        )
        .await;
    }
    register_instance(
        &nodes,
        "ip-10-0-2-0.us-west-2.compute.internal",
        json!({
            "node.kubernetes.io/instance-type": "c5.2xlarge",
            "node.kubernetes.io/lifecycle": "spot",
            "topology.kubernetes.io/zone": "us-west-2b",
            "workload": "batch"
        }),
        json!([]),
        "Bottlerocket OS 1.26.1 (aws-k8s-1.31)",
        Some(&batch[0]),
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let proposed = karpenter(
        [
            "migrate",
            "from-cluster-autoscaler",
            "--cluster-name",
            "test",
            "--kubeconfig",
            &kubeconfig.display().to_string(),
            "--cloud",
            "aws",
            "--aws-region",
            karpenter_aws::testing::REGION,
            "--aws-endpoint",
            &moto.endpoint(),
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&proposed.stdout).into_owned(),
        String::from_utf8_lossy(&proposed.stderr).into_owned(),
    );
    assert!(proposed.status.success(), "{stderr}");
    for line in [
        "read 5 Auto Scaling group(s); 1 of them neither tagged for cluster test nor holding one of its nodes, left out: staging-web",
        "node group web (EksManaged): 2 node(s), m5.2xlarge, m5.xlarge in us-west-2a, us-west-2b; Auto Scaling group eks-web-4ac9e2d1 (max 6)",
        "node group batch-spot (AutoScalingGroup): 1 node(s), c5.2xlarge in us-west-2b; Auto Scaling group batch-spot (max 10)",
        "node group gpu (AutoScalingGroup): 0 node(s), g5.xlarge in us-west-2a; Auto Scaling group gpu (max 3)",
    ] {
        assert!(stderr.contains(line), "{line}\n{stderr}");
    }
    let documents = documents(&stdout);
    assert_eq!(
        kinds(&documents),
        [
            ("NodePool", "batch-spot"),
            ("NodePool", "gpu"),
            ("NodePool", "legacy"),
            ("NodePool", "web"),
            ("EC2NodeClass", "al2023"),
            ("EC2NodeClass", "bottlerocket"),
            ("EC2NodeClass", "legacy"),
            ("EC2NodeClass", "web"),
        ],
        "{stdout}"
    );
    // Maximum sizes as vCPUs: 10 × c5.2xlarge (8), 3 × g5.xlarge (4), 6 × m5.2xlarge (8).
    let limits: Vec<&serde_json::Value> = documents[..4]
        .iter()
        .map(|d| &d["spec"]["limits"]["cpu"])
        .collect();
    assert_eq!(
        limits,
        [
            &json!("80"),
            &json!("12"),
            &serde_json::Value::Null,
            &json!("48")
        ]
    );
    let gpu = &documents[1]["spec"]["template"];
    assert_eq!(gpu["metadata"]["labels"], json!({"team": "ml"}));
    assert_eq!(
        gpu["spec"]["taints"],
        json!([{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}])
    );
    assert_eq!(
        requirement(gpu, "karpenter.sh/capacity-type"),
        Some(json!(["spot"]))
    );
    assert_eq!(
        requirement(
            &documents[3]["spec"]["template"],
            "karpenter.k8s.aws/instance-family"
        ),
        Some(json!(["m5"]))
    );
    let ids = |ids: &[String]| -> serde_json::Value {
        ids.iter().map(|id| json!({ "id": id })).collect()
    };
    // The first group of a family (gpu) names its class after the family; the next, after
    // itself.
    assert_eq!(documents[4]["spec"]["instanceProfile"], "gpu-node");
    assert_eq!(
        documents[7]["spec"],
        json!({
            "amiFamily": "AL2023",
            "amiSelectorTerms": [{"id": al2023}],
            "subnetSelectorTerms": ids(&subnets[..2]),
            "securityGroupSelectorTerms": ids(groups),
            "instanceProfile": "eks-web-node",
            "blockDeviceMappings": [{"deviceName": "/dev/xvda",
                "ebs": {"volumeSize": "80Gi", "volumeType": "gp3", "encrypted": true}}],
        }),
        "{stdout}"
    );
    assert_eq!(
        documents[5]["spec"],
        json!({
            "amiFamily": "Bottlerocket",
            "amiSelectorTerms": [{"id": bottlerocket}],
            "subnetSelectorTerms": ids(&subnets[1..]),
            "securityGroupSelectorTerms": ids(groups),
            "instanceProfile": "batch-node",
        }),
        "{stdout}"
    );
    assert!(
        stderr.contains("CHECK: EC2NodeClass/web: launch template lt-"),
        "{stderr}"
    );
    // What could not be read is said, and only there do discovery tags stand in.
    let legacy = &documents[2]["spec"]["template"];
    assert_eq!(
        requirement(legacy, "karpenter.k8s.aws/instance-family"),
        None
    );
    // Its subnets are the group's own; its security groups were the template's.
    assert_eq!(
        documents[6]["spec"]["subnetSelectorTerms"],
        ids(&subnets[..1])
    );
    assert_eq!(
        documents[6]["spec"]["securityGroupSelectorTerms"],
        json!([{"tags": {"karpenter.sh/discovery": "test"}}])
    );
    for line in [
        "CHECK: NodePool/legacy: AutoScalingGroup/legacy has no launch template or launch configuration that could be read",
        "CHECK: NodePool/legacy: AutoScalingGroup/legacy names no instance type",
        "CHECK: NodePool/legacy: spec.limits is left out: no instance type of the group is known",
    ] {
        assert!(stderr.contains(line), "{line}\n{stderr}");
    }
    let discovery: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("karpenter.sh/discovery"))
        .collect();
    assert!(
        discovery
            .iter()
            .all(|l| l.starts_with("CHECK: EC2NodeClass/legacy:")),
        "{stderr}"
    );

    validates(dir.path(), &stdout).await;
}
