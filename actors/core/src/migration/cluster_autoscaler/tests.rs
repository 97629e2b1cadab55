use super::*;
use crate::api::manifest::ManifestChecker;

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
    }
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
    let proposal = propose(&node_groups(&cluster()), "my-cluster");
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
    assert_eq!(proposal.manual.len(), 6, "{:#?}", proposal.manual);
    assert!(proposal.manual[0].starts_with("EC2NodeClass/al2: spec.subnetSelectorTerms"));
}
