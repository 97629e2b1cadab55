use super::*;

fn cluster() -> ClusterInfo {
    ClusterInfo {
        name: "prod".into(),
        endpoint: "https://ABC.gr7.us-west-2.eks.amazonaws.com".into(),
        ca_bundle: Some("Q0E=".into()),
        service_cidr: Some("10.100.0.0/16".into()),
    }
}

fn labels() -> BTreeMap<String, String> {
    [
        ("karpenter.sh/nodepool".to_owned(), "default".to_owned()),
        ("team".to_owned(), "web".to_owned()),
    ]
    .into()
}

fn taints() -> Vec<Taint> {
    vec![
        Taint::new("karpenter.sh/unregistered", "", "NoExecute"),
        Taint::new("dedicated", "gpu", "NoSchedule"),
    ]
}

fn node<'a>(
    cluster: &'a ClusterInfo,
    labels: &'a BTreeMap<String, String>,
    taints: &'a [Taint],
    kubelet: Option<&'a KubeletConfiguration>,
    user_data: Option<&'a str>,
) -> NodeBootstrap<'a> {
    NodeBootstrap {
        cluster,
        labels,
        taints,
        kubelet,
        user_data,
    }
}

#[test]
fn al2023_is_a_mime_document_ending_with_our_node_config() {
    let (c, l, t) = (cluster(), labels(), taints());
    let kubelet = KubeletConfiguration {
        max_pods: Some(42),
        ..Default::default()
    };
    let user = "#!/bin/bash\necho hello";
    let out = user_data(
        AmiFamily::AL2023,
        &node(&c, &l, &t, Some(&kubelet), Some(user)),
    )
    .unwrap();
    assert!(out.starts_with("MIME-Version: 1.0\n"));
    let script = out.find("echo hello").unwrap();
    let config = out.find("kind: NodeConfig").unwrap();
    assert!(script < config, "the user's part comes first:\n{out}");
    assert!(out.contains("apiServerEndpoint: \"https://ABC.gr7.us-west-2.eks.amazonaws.com\""));
    assert!(out.contains("certificateAuthority: \"Q0E=\""));
    assert!(out.contains("cidr: \"10.100.0.0/16\""));
    assert!(out.contains(r#"config: {"maxPods":42}"#), "{out}");
    assert!(out.contains(r#"- "--node-labels=karpenter.sh/nodepool=default,team=web""#));
    assert!(out.contains(
        r#"- "--register-with-taints=karpenter.sh/unregistered=:NoExecute,dedicated=gpu:NoSchedule""#
    ));
    assert!(out.trim_end().ends_with("--//--"));
}

#[test]
fn al2023_merges_the_parts_of_a_users_mime_document() {
    let (c, l, t) = (cluster(), labels(), taints());
    let user = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\n--BOUNDARY\nContent-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n\n--BOUNDARY\nContent-Type: text/x-shellscript\n\n#!/bin/bash\necho two\n\n--BOUNDARY--\n";
    let out = user_data(AmiFamily::AL2023, &node(&c, &l, &t, None, Some(user))).unwrap();
    assert_eq!(out.matches("--//\n").count(), 3, "{out}");
    assert!(out.contains("shutdownGracePeriod: 30s"));
    assert!(out.contains("echo two"));
    assert!(!out.contains("BOUNDARY"));
}

#[test]
fn bottlerocket_sets_cluster_labels_and_taints_over_the_users_toml() {
    let (c, l, t) = (cluster(), labels(), taints());
    let user = "[settings.kubernetes]\ncluster-name = \"wrong\"\nimage-gc-high-threshold-percent = \"85\"\n[settings.host-containers.admin]\nenabled = true\n";
    let out = user_data(AmiFamily::Bottlerocket, &node(&c, &l, &t, None, Some(user))).unwrap();
    let parsed: toml::Table = out.parse().unwrap();
    let k = &parsed["settings"]["kubernetes"];
    assert_eq!(k["cluster-name"].as_str(), Some("prod"));
    assert_eq!(
        k["api-server"].as_str(),
        Some("https://ABC.gr7.us-west-2.eks.amazonaws.com")
    );
    assert_eq!(k["image-gc-high-threshold-percent"].as_str(), Some("85"));
    assert_eq!(k["node-labels"]["team"].as_str(), Some("web"));
    assert_eq!(
        k["node-taints"]["dedicated"].as_array().unwrap()[0].as_str(),
        Some("gpu:NoSchedule")
    );
    assert_eq!(
        parsed["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
        Some(true)
    );
    let bad = user_data(
        AmiFamily::Bottlerocket,
        &node(&c, &l, &t, None, Some("[[oops")),
    );
    assert!(matches!(bad, Err(UserDataError::Invalid(m)) if m.contains("not valid TOML")));
}

#[test]
fn al2_calls_bootstrap_sh_with_kubelet_args() {
    let (c, l, t) = (cluster(), labels(), taints());
    let kubelet = KubeletConfiguration {
        max_pods: Some(20),
        ..Default::default()
    };
    let out = user_data(AmiFamily::AL2, &node(&c, &l, &t, Some(&kubelet), None)).unwrap();
    assert!(out.contains("/etc/eks/bootstrap.sh 'prod' --apiserver-endpoint 'https://ABC.gr7.us-west-2.eks.amazonaws.com' --b64-cluster-ca 'Q0E=' --service-ipv4-cidr '10.100.0.0/16' --use-max-pods false"), "{out}");
    assert!(out.contains("--max-pods=20"));
    assert!(out.contains("--register-with-taints=karpenter.sh/unregistered=:NoExecute"));
    let ipv6 = ClusterInfo {
        service_cidr: Some("fd00:10:96::/112".into()),
        ..cluster()
    };
    let out = user_data(AmiFamily::AL2, &node(&ipv6, &l, &t, None, None)).unwrap();
    assert!(
        out.contains("--ip-family ipv6 --service-ipv6-cidr 'fd00:10:96::/112'"),
        "{out}"
    );
}

#[test]
fn custom_passes_user_data_through_and_windows_is_refused() {
    let (c, l, t) = (cluster(), labels(), taints());
    let out = user_data(AmiFamily::Custom, &node(&c, &l, &t, None, Some("raw"))).unwrap();
    assert_eq!(out, "raw");
    assert!(matches!(
        user_data(AmiFamily::Windows2022, &node(&c, &l, &t, None, None)),
        Err(UserDataError::Unsupported(_))
    ));
}
