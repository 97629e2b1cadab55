use super::*;
use serde_json::json;

use crate::api::manifest::ManifestChecker;
use crate::model::catalog::Catalog;

fn node(name: &str, labels: &[(&str, &str)], taints: &[(&str, &str, &str)], os: &str) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .chain([("kubernetes.io/hostname".to_owned(), name.to_owned())])
            .collect(),
        taints: taints.iter().map(|(k, v, e)| Taint::new(k, v, e)).collect(),
        os_image: Some(os.into()),
        provider_id: None,
    }
}

/// The proposal's documents pass the API server's schema and CEL rules.
fn assert_valid(proposal: &Proposal) {
    let mut yaml = String::new();
    for doc in &proposal.documents {
        yaml.push_str("---\n");
        yaml.push_str(&serde_yaml_ng::to_string(doc).unwrap());
    }
    let problems: Vec<String> = ManifestChecker::new()
        .unwrap()
        .check_str(&yaml)
        .into_iter()
        .flat_map(|r| r.problems.into_iter().map(|p| p.to_string()))
        .collect();
    assert!(problems.is_empty(), "{problems:#?}\n{yaml}");
}

const AL2023: &str = "Amazon Linux 2023.6.20241031";

/// A cluster as Cluster Autoscaler runs it: an EKS managed group of two instance types, a
/// tainted spot group, an eksctl Bottlerocket group, a self-managed group, and a node
/// Karpenter already launched.
fn cluster() -> Vec<NodeFacts> {
    let general = |name: &str, t: &str, zone: &str| {
        node(
            name,
            &[
                ("eks.amazonaws.com/nodegroup", "general"),
                ("eks.amazonaws.com/capacityType", "ON_DEMAND"),
                ("node.kubernetes.io/instance-type", t),
                ("topology.kubernetes.io/zone", zone),
                ("kubernetes.io/arch", "amd64"),
                ("kubernetes.io/os", "linux"),
                ("team", "platform"),
            ],
            &[],
            AL2023,
        )
    };
    vec![
        general("ip-10-0-1-1", "m5.large", "us-west-2a"),
        general("ip-10-0-2-1", "m5.xlarge", "us-west-2b"),
        node(
            "ip-10-0-1-2",
            &[
                ("eks.amazonaws.com/nodegroup", "spot-batch"),
                ("eks.amazonaws.com/capacityType", "SPOT"),
                ("node.kubernetes.io/instance-type", "c6i.2xlarge"),
                ("topology.kubernetes.io/zone", "us-west-2a"),
                ("kubernetes.io/arch", "amd64"),
                ("kubernetes.io/os", "linux"),
                ("workload", "batch"),
            ],
            &[
                ("dedicated", "batch", "NoSchedule"),
                ("node.kubernetes.io/not-ready", "", "NoExecute"),
            ],
            AL2023,
        ),
        node(
            "ip-10-0-3-1",
            &[
                ("alpha.eksctl.io/nodegroup-name", "arm"),
                ("node.kubernetes.io/instance-type", "m7g.large"),
                ("topology.kubernetes.io/zone", "us-west-2c"),
                ("kubernetes.io/arch", "arm64"),
                ("kubernetes.io/os", "linux"),
            ],
            &[],
            "Bottlerocket OS 1.26.1 (aws-k8s-1.31)",
        ),
        node(
            "ip-10-0-4-1",
            &[
                ("node.kubernetes.io/instance-type", "r5.xlarge"),
                ("topology.kubernetes.io/zone", "us-west-2b"),
                ("kubernetes.io/arch", "amd64"),
                ("kubernetes.io/os", "linux"),
                ("node-role.kubernetes.io/cache", ""),
                ("cache", "redis"),
            ],
            &[],
            "Amazon Linux 2",
        ),
        node(
            "ip-10-0-5-1",
            &[
                ("karpenter.sh/nodepool", "default"),
                ("node.kubernetes.io/instance-type", "c7g.large"),
            ],
            &[],
            AL2023,
        ),
    ]
}

#[test]
fn node_groups_are_found_by_their_labels_or_what_their_nodes_share() {
    let groups = node_groups(&cluster());
    let names: Vec<(&str, GroupSource, usize)> = groups
        .iter()
        .map(|g| (g.name.as_str(), g.source, g.nodes.len()))
        .collect();
    assert_eq!(
        names,
        [
            ("arm", GroupSource::Eksctl, 1),
            ("general", GroupSource::EksManaged, 2),
            ("r5-xlarge-1", GroupSource::Inferred, 1),
            ("spot-batch", GroupSource::EksManaged, 1),
        ]
    );
    let general = &groups[1];
    assert_eq!(
        general.instance_types,
        ["m5.large", "m5.xlarge"].map(String::from).into()
    );
    assert_eq!(
        general.zones,
        ["us-west-2a", "us-west-2b"].map(String::from).into()
    );
    assert_eq!(
        general.labels,
        [("team".to_owned(), "platform".to_owned())].into()
    );
    assert_eq!(general.ami_family, Some("al2023"));
    let spot = &groups[3];
    assert_eq!(spot.capacity_types, ["spot".to_owned()].into());
    assert_eq!(
        spot.taints,
        [Taint::new("dedicated", "batch", "NoSchedule")]
    );
    assert_eq!(groups[0].ami_family, Some("bottlerocket"));
    assert_eq!(
        groups[2].labels,
        [("cache".to_owned(), "redis".to_owned())].into()
    );
    assert_eq!(groups[2].ami_family, Some("al2"));
}

#[test]
fn the_proposal_covers_each_group_and_validates() {
    let catalog = Catalog::embedded().unwrap();
    let proposal = propose(
        &node_groups(&cluster()),
        &ProposeContext {
            cluster: "my-cluster",
            instance_types: catalog.infos(),
        },
    );
    let kinds: Vec<String> = proposal
        .documents
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "NodePool/arm",
            "NodePool/general",
            "NodePool/r5-xlarge-1",
            "NodePool/spot-batch",
            "EC2NodeClass/al2",
            "EC2NodeClass/al2023",
            "EC2NodeClass/bottlerocket",
        ]
    );
    let general = &proposal.documents[1];
    assert_eq!(
        general["spec"]["template"]["spec"]["requirements"][0],
        json!({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]})
    );
    assert_eq!(
        general["spec"]["template"]["metadata"]["labels"],
        json!({"team": "platform"})
    );
    let spot = &proposal.documents[3];
    assert_eq!(
        spot["spec"]["template"]["spec"]["taints"],
        json!([{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}])
    );
    assert_eq!(
        spot["spec"]["template"]["spec"]["requirements"][1],
        json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]})
    );
    assert_valid(&proposal);
    assert_eq!(proposal.manual.len(), 9, "{:#?}", proposal.manual);
    assert!(proposal.manual[0].starts_with("EC2NodeClass/al2: spec.subnetSelectorTerms"));
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| (*v).to_owned()).collect()
}

/// The same cluster's Auto Scaling groups: the managed group `general` (holding both its
/// nodes), a self-managed group holding the r5 node, a GPU group at zero that only Cluster
/// Autoscaler's node-template tags describe, and another cluster's group.
fn asgs() -> Vec<AutoScalingGroup> {
    let general_launch = asg::LaunchSpec {
        source: "launch template lt-0general version 3".into(),
        image_id: Some("ami-0al2023".into()),
        image_name: Some("amazon-eks-node-al2023-x86_64-standard-1.31-v20241115".into()),
        instance_type: None,
        security_group_ids: strings(&["sg-0nodes", "sg-0cluster"]),
        instance_profile: Some("arn:aws:iam::123456789012:instance-profile/eks-node".into()),
        has_user_data: true,
        spot: false,
        block_devices: vec![asg::BlockDevice {
            device_name: "/dev/xvda".into(),
            volume_size_gib: Some(100),
            volume_type: Some("gp3".into()),
            encrypted: Some(true),
            ..Default::default()
        }],
    };
    vec![
        AutoScalingGroup {
            name: "eks-general-2ac9".into(),
            max_size: 10,
            instance_ids: strings(&["i-0general1", "i-0general2"]),
            zones: ["us-west-2a", "us-west-2b"].map(String::from).into(),
            subnet_ids: strings(&["subnet-0a", "subnet-0b"]),
            tags: tags(&[
                ("eks:nodegroup-name", "general"),
                ("eks:cluster-name", "my-cluster"),
            ]),
            override_types: strings(&["m5.large", "m5.xlarge"]),
            launch: Some(general_launch.clone()),
            ..Default::default()
        },
        AutoScalingGroup {
            name: "cache".into(),
            max_size: 3,
            instance_ids: strings(&["i-0cache"]),
            zones: ["us-west-2b"].map(String::from).into(),
            subnet_ids: strings(&["subnet-0b"]),
            launch: Some(asg::LaunchSpec {
                source: "launch configuration cache-v1".into(),
                image_id: Some("ami-0al2".into()),
                image_name: Some("amazon-eks-node-1.29-v20240117".into()),
                instance_type: Some("r5.xlarge".into()),
                security_group_ids: strings(&["sg-0nodes"]),
                instance_profile: Some("cache-node".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        AutoScalingGroup {
            name: "gpu".into(),
            max_size: 4,
            zones: ["us-west-2a"].map(String::from).into(),
            subnet_ids: strings(&["subnet-0a"]),
            tags: tags(&[
                ("k8s.io/cluster-autoscaler/enabled", "true"),
                ("k8s.io/cluster-autoscaler/my-cluster", "owned"),
                ("k8s.io/cluster-autoscaler/node-template/label/team", "ml"),
                (
                    "k8s.io/cluster-autoscaler/node-template/label/kubernetes.io/arch",
                    "amd64",
                ),
                (
                    "k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu",
                    "true:NoSchedule",
                ),
            ]),
            launch: Some(asg::LaunchSpec {
                source: "launch template lt-0gpu version 1".into(),
                image_id: Some("ami-0br".into()),
                image_name: Some("bottlerocket-aws-k8s-1.31-nvidia-x86_64-v1.26.1".into()),
                instance_type: Some("g5.xlarge".into()),
                security_group_ids: strings(&["sg-0nodes"]),
                instance_profile: Some("eks-node".into()),
                spot: true,
                ..Default::default()
            }),
            ..Default::default()
        },
        AutoScalingGroup {
            name: "staging-web".into(),
            max_size: 5,
            tags: tags(&[("kubernetes.io/cluster/staging", "owned")]),
            ..Default::default()
        },
    ]
}

/// The cluster's nodes with the providerIDs of their instances.
fn cluster_on_aws() -> Vec<NodeFacts> {
    let mut nodes = cluster();
    for (name, id) in [
        ("ip-10-0-1-1", "i-0general1"),
        ("ip-10-0-2-1", "i-0general2"),
        ("ip-10-0-4-1", "i-0cache"),
        ("ip-10-0-1-2", "i-0spot"),
    ] {
        let node = nodes.iter_mut().find(|n| n.name == name).unwrap();
        node.provider_id = Some(format!("aws:///us-west-2a/{id}"));
    }
    nodes
}

#[test]
fn auto_scaling_groups_name_self_managed_groups_and_add_those_at_zero() {
    let found = node_groups_with(&cluster_on_aws(), &asgs(), "my-cluster");
    let names: Vec<(&str, GroupSource, usize, usize)> = found
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.source, g.nodes.len(), g.asgs.len()))
        .collect();
    assert_eq!(
        names,
        [
            ("arm", GroupSource::Eksctl, 1, 0),
            ("cache", GroupSource::AutoScalingGroup, 1, 1),
            ("general", GroupSource::EksManaged, 2, 1),
            ("gpu", GroupSource::AutoScalingGroup, 0, 1),
            ("spot-batch", GroupSource::EksManaged, 1, 0),
        ]
    );
    assert_eq!(found.other_asgs, ["staging-web"]);
    let general = &found.groups[2];
    assert_eq!(
        general.instance_types,
        ["m5.large", "m5.xlarge"].map(String::from).into()
    );
    let gpu = &found.groups[3];
    assert_eq!(gpu.labels, tags(&[("team", "ml")]));
    assert_eq!(
        gpu.taints,
        [Taint::new("nvidia.com/gpu", "true", "NoSchedule")]
    );
    assert_eq!(gpu.archs, ["amd64".to_owned()].into());
    assert_eq!(gpu.capacity_types, ["spot".to_owned()].into());
    assert_eq!(gpu.instance_types, ["g5.xlarge".to_owned()].into());
    assert_eq!(gpu.ami_family, Some("bottlerocket"));
    assert_eq!(found.groups[1].labels, tags(&[("cache", "redis")]));
}

#[test]
fn a_proposal_from_auto_scaling_groups_takes_their_exact_launch_settings_and_limits() {
    let catalog = Catalog::embedded().unwrap();
    let found = node_groups_with(&cluster_on_aws(), &asgs(), "my-cluster");
    let proposal = propose(
        &found.groups,
        &ProposeContext {
            cluster: "my-cluster",
            instance_types: catalog.infos(),
        },
    );
    let by_name = |kind: &str, name: &str| {
        proposal
            .documents
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind}/{name} in {:#?}", proposal.documents))
    };
    // 10 nodes of at most 4 vCPUs (m5.xlarge); 4 of g5.xlarge (4 vCPUs); 3 of r5.xlarge.
    assert_eq!(
        by_name("NodePool", "general")["spec"]["limits"],
        json!({"cpu": "40"})
    );
    assert_eq!(
        by_name("NodePool", "gpu")["spec"]["limits"],
        json!({"cpu": "16"})
    );
    assert_eq!(
        by_name("NodePool", "cache")["spec"]["limits"],
        json!({"cpu": "12"})
    );
    assert!(by_name("NodePool", "arm")["spec"].get("limits").is_none());
    let gpu = &by_name("NodePool", "gpu")["spec"]["template"];
    assert_eq!(gpu["metadata"]["labels"], json!({"team": "ml"}));
    assert_eq!(
        gpu["spec"]["taints"],
        json!([{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}])
    );
    let general_class = by_name("NodePool", "general")["spec"]["template"]["spec"]["nodeClassRef"]
        ["name"]
        .as_str()
        .unwrap();
    // The first class of its family takes the family's name; the next, its NodePool's.
    assert_eq!(general_class, "al2023");
    assert_eq!(
        by_name("EC2NodeClass", "al2023")["spec"],
        json!({
            "amiFamily": "AL2023",
            "amiSelectorTerms": [{"id": "ami-0al2023"}],
            "subnetSelectorTerms": [{"id": "subnet-0a"}, {"id": "subnet-0b"}],
            "securityGroupSelectorTerms": [{"id": "sg-0nodes"}, {"id": "sg-0cluster"}],
            "instanceProfile": "eks-node",
            "blockDeviceMappings": [{"deviceName": "/dev/xvda",
                "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": true}}],
        })
    );
    assert_eq!(
        by_name("EC2NodeClass", "gpu")["spec"]["instanceProfile"],
        json!("eks-node")
    );
    assert_valid(&proposal);
    let manual = proposal.manual.join("\n");
    for expected in [
        "EC2NodeClass/al2023: spec.amiSelectorTerms pins ami-0al2023",
        "EC2NodeClass/al2023: launch template lt-0general version 3 carries user data",
        "EC2NodeClass/spot-batch: spec.subnetSelectorTerms selects what is tagged",
    ] {
        assert!(manual.contains(expected), "{expected}\n{manual}");
    }
    assert!(
        !manual.contains("EC2NodeClass/al2023: spec.subnetSelectorTerms"),
        "{manual}"
    );
}
