//! `karpenter migrate from-cluster-autoscaler` against the API server, as a user runs it: the
//! Nodes of an EKS managed node group, of a self-managed spot group and one Karpenter
//! launched; the command proposes a NodePool per group (none for Karpenter's node) that
//! keeps the group's labels and taints, and `karpenter validate` accepts what it printed.

use super::*;

/// A Node as its kubelet registered it, with its OS image in its status.
async fn register(
    nodes: &Api<Node>,
    name: &str,
    labels: serde_json::Value,
    taints: serde_json::Value,
    os_image: &str,
) {
    let mut labels = labels;
    labels["kubernetes.io/hostname"] = json!(name);
    labels["kubernetes.io/os"] = json!("linux");
    labels["kubernetes.io/arch"] = json!("amd64");
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints}
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
    let karpenter = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
                .args(args)
                .output()
                .unwrap()
        })
    };
    let proposed = karpenter(vec![
        "migrate".into(),
        "from-cluster-autoscaler".into(),
        "--cluster-name".into(),
        "demo".into(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
    ])
    .await
    .unwrap();
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
    let documents: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&stdout)
        .map(|d| <serde_json::Value as serde::Deserialize>::deserialize(d).unwrap())
        .collect();
    let kinds: Vec<(&str, &str)> = documents
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
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
    let requirement = |pool: &serde_json::Value, key: &str| {
        pool["spec"]["requirements"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == key)
            .map(|r| r["values"].clone())
    };
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

    let file = dir.path().join("nodepools.yaml");
    std::fs::write(&file, &stdout).unwrap();
    let validated = karpenter(vec!["validate".into(), file.display().to_string()])
        .await
        .unwrap();
    assert!(
        validated.status.success(),
        "{}{}",
        String::from_utf8_lossy(&validated.stdout),
        String::from_utf8_lossy(&validated.stderr)
    );
}
