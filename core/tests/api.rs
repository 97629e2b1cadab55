//! The v1 API as users meet it: example manifests, mistakes and their messages, defaults,
//! and v1beta1 conversion. Data-driven: each case is a manifest and what must be reported.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;

use karpenter_core::api::convert::convert;
use karpenter_core::api::manifest::{KarpenterObject, ManifestChecker};
use karpenter_core::api::{NillableDuration, crds};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Checks `yaml` and returns "path: message" lines.
fn problems(yaml: &str) -> Vec<String> {
    let checker = ManifestChecker::new().unwrap();
    checker
        .check_str(yaml)
        .into_iter()
        .flat_map(|r| r.problems)
        .map(|p| p.to_string())
        .collect()
}

/// Asserts that checking `yaml` reports exactly the expected problems (each a substring of
/// one reported line, in any order).
#[track_caller]
fn check(yaml: &str, expected: &[&str]) {
    let found = problems(yaml);
    for want in expected {
        assert!(
            found.iter().any(|f| f.contains(want)),
            "missing {want:?} in {found:#?}"
        );
    }
    assert_eq!(
        found.len(),
        expected.len(),
        "unexpected problems: {found:#?}"
    );
}

const NODEPOOL_HEAD: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: p\n";

fn nodepool(template_spec_extra: &str, spec_extra: &str) -> String {
    format!(
        "{NODEPOOL_HEAD}spec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n        - {{key: karpenter.sh/capacity-type, operator: In, values: [spot]}}\n{template_spec_extra}{spec_extra}"
    )
}

fn nodeclass(spec: &str) -> String {
    format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: c\nspec:\n{spec}"
    )
}

const TERMS: &str =
    "  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]\n";

#[test]
fn every_example_in_deploy_is_valid() {
    let mut count = 0;
    for entry in std::fs::read_dir(repo().join("deploy/examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let found = problems(&std::fs::read_to_string(&path).unwrap());
            assert!(found.is_empty(), "{}: {found:#?}", path.display());
            count += 1;
        }
    }
    assert!(count >= 4, "expected the four example files, found {count}");
}

#[test]
fn five_mistakes_are_all_reported_as_the_api_server_reports_them() {
    let yaml = std::fs::read_to_string(repo().join("tests/fixtures/five-mistakes.yaml")).unwrap();
    check(
        &yaml,
        &[
            "spec.template.metadata.labels: Invalid value: \"object\": label \"kubernetes.io/hostname\" is restricted",
            "spec.template.spec.requirements: Invalid value: \"array\": requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
            "spec.disruption.consolidateAfter: Invalid value: \"5 minutes\": spec.disruption.consolidateAfter in body should match '^(([0-9]+(s|m|h))+|Never)$'",
            "spec.disruption.budgets: Invalid value: \"array\": 'schedule' must be set with 'duration'",
            "spec.weight: Invalid value: 1000: spec.weight in body should be less than or equal to 100",
        ],
    );
}

#[test]
fn a_blocking_mistake_keeps_the_cel_rules_from_running_as_on_the_server() {
    let yaml = std::fs::read_to_string(repo().join("tests/fixtures/five-mistakes.yaml"))
        .unwrap()
        .replace(
            "consolidateAfter: 5 minutes",
            "consolidationPolicy: WhenUnderutilized",
        );
    check(
        &yaml,
        &[
            "spec.disruption.consolidationPolicy: Unsupported value: \"WhenUnderutilized\": supported values: \"WhenEmpty\", \"WhenEmptyOrUnderutilized\", \"Balanced\"",
            "spec.disruption.consolidateAfter: Required value",
            "spec.weight: Invalid value: 1000",
            "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid",
        ],
    );
}

#[test]
fn a_minimal_nodepool_gets_upstreams_defaults() {
    let checker = ManifestChecker::new().unwrap();
    let reports = checker.check_str(&nodepool("", ""));
    assert!(reports[0].problems.is_empty(), "{:?}", reports[0].problems);
    let Some(KarpenterObject::NodePool(pool)) = &reports[0].object else {
        panic!("no NodePool")
    };
    assert_eq!(
        pool.spec.template.spec.expire_after,
        NillableDuration::from_secs(720 * 3600)
    );
    assert_eq!(
        pool.spec.disruption.consolidate_after,
        NillableDuration::from_secs(0)
    );
    assert_eq!(
        format!("{:?}", pool.spec.disruption.consolidation_policy),
        "WhenEmptyOrUnderutilized"
    );
    assert_eq!(pool.spec.disruption.budgets.len(), 1);
    assert_eq!(pool.spec.disruption.budgets[0].nodes, "10%");
}

#[test]
fn a_minimal_nodeclass_gets_imdsv2_by_default() {
    let checker = ManifestChecker::new().unwrap();
    let yaml = nodeclass(&format!(
        "  role: r\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n{TERMS}"
    ));
    let reports = checker.check_str(&yaml);
    assert!(reports[0].problems.is_empty(), "{:?}", reports[0].problems);
    let Some(KarpenterObject::EC2NodeClass(class)) = &reports[0].object else {
        panic!("no EC2NodeClass")
    };
    let options = &class.spec.metadata_options;
    assert_eq!(
        (
            options.http_endpoint.as_str(),
            options.http_protocol_ipv6.as_str(),
            options.http_put_response_hop_limit,
            options.http_tokens.as_str()
        ),
        ("enabled", "disabled", 1, "required")
    );
}

#[test]
fn nodepool_rules() {
    const BLOCKED: &str = "<nil>: Invalid value: \"null\": some validation rules were not checked";
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "",
            "  weight: 0\n",
            &[
                "spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1",
            ],
        ),
        (
            "      expireAfter: 30d\n",
            "",
            &[
                "spec.template.spec.expireAfter: Invalid value: \"30d\": spec.template.spec.expireAfter in body should match '^(([0-9]+(s|m|h))+|Never)$'",
            ],
        ),
        (
            "      expireAfter: Never\n      terminationGracePeriod: 1h30m\n",
            "",
            &[],
        ),
        (
            "      taints: [{key: a, effect: NoSchedule}]\n      startupTaints: [{key: a, effect: NoSchedule}]\n",
            "",
            &["spec.template.spec.startupTaints[0]: duplicate taint a:NoSchedule"],
        ),
        (
            "      taints: [{key: a, effect: Sometimes}]\n",
            "",
            &[
                "spec.template.spec.taints[0].effect: Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                BLOCKED,
            ],
        ),
        (
            "",
            "  disruption:\n    consolidateAfter: 1m\n    budgets: [{nodes: \"150%\"}, {nodes: \"1\", duration: 1h}]\n",
            &[
                "spec.disruption.budgets[0].nodes: Invalid value: \"150%\": spec.disruption.budgets[0].nodes in body should match '^((100|[0-9]{1,2})%|[0-9]+)$'",
                "spec.disruption.budgets: Invalid value: \"array\": 'schedule' must be set with 'duration'",
            ],
        ),
        (
            // The CRD leaves cron syntax open; the runtime rules check it.
            "",
            "  disruption:\n    consolidateAfter: 1m\n    budgets: [{nodes: \"1\", schedule: \"61 * * * *\", duration: 1h}]\n",
            &["spec.disruption.budgets[0].schedule: invalid minute field \"61\""],
        ),
        (
            "",
            "  disruption:\n    budgets: [{nodes: \"1\"}]\n",
            &["spec.disruption.consolidateAfter: Required value", BLOCKED],
        ),
        (
            "",
            "  disruption:\n    consolidationPolicy: Balanced\n    consolidateAfter: Never\n",
            &[],
        ),
        (
            "",
            "  limits: {cpu: 10 cores}\n",
            &["spec.limits.cpu: Invalid value: \"10 cores\": spec.limits.cpu in body should match"],
        ),
        (
            "",
            "  replicas: 3\n  weight: 10\n",
            &["spec: Invalid value: \"object\": 'weight' is not supported on static NodePools"],
        ),
        (
            "",
            "  disruptions: {}\n",
            &["spec.disruptions: unknown field (did you mean \"disruption\"?)"],
        ),
    ];
    for (template_extra, spec_extra, expected) in cases {
        check(&nodepool(template_extra, spec_extra), expected);
    }
}

#[test]
fn requirement_rules() {
    let with_requirement = |req: &str| {
        format!(
            "{NODEPOOL_HEAD}spec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n        - {req}\n"
        )
    };
    let list = "spec.template.spec.requirements: Invalid value: \"array\": ";
    let key = "spec.template.spec.requirements[0].key: Invalid value: \"string\": ";
    let cases: &[(&str, &[&str])] = &[
        (
            "{key: team, operator: In, values: []}",
            &["requirements with operator 'In' must have a value defined"],
        ),
        // Upstream's rule reads `values`, which is not there: the server reports the rule's
        // evaluation error rather than its message.
        (
            "{key: team, operator: In}",
            &["evaluating rule: requirements with operator 'In' must have a value defined"],
        ),
        // Upstream has no rule against values on Exists; neither do we.
        ("{key: team, operator: Exists, values: [a]}", &[]),
        (
            "{key: karpenter.k8s.aws/instance-cpu, operator: Lt, values: [\"-1\"]}",
            &[
                "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
            ],
        ),
        (
            "{key: karpenter.k8s.aws/instance-cpu, operator: Gte, values: [\"4\"]}",
            &[],
        ),
        (
            "{key: team, operator: In, values: [a], minValues: 2}",
            &[
                "requirements with 'minValues' must have at least that many values specified in the 'values' field",
            ],
        ),
        (
            "{key: team, operator: Maybe, values: [a]}",
            &[
                "spec.template.spec.requirements[0].operator: Unsupported value: \"Maybe\": supported values: \"Gte\", \"Lte\", \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\", \"Gt\", \"Lt\"",
                "some validation rules were not checked",
            ],
        ),
        (
            "{key: karpenter.sh/nodepool, operator: In, values: [a]}",
            &["label \"karpenter.sh/nodepool\" is restricted"],
        ),
        (
            "{key: karpenter.sh/custom, operator: Exists}",
            &["label domain \"karpenter.sh\" is restricted"],
        ),
        // Upstream lifted the kubernetes.io restriction.
        ("{key: example.kubernetes.io/x, operator: Exists}", &[]),
        (
            "{key: karpenter.k8s.aws/made-up, operator: Exists}",
            &["label domain \"karpenter.k8s.aws\" is restricted"],
        ),
        (
            "{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large], minValues: 1}",
            &[],
        ),
        (
            "{key: \"Bad Key\", operator: Exists}",
            &[
                "spec.template.spec.requirements[0].key: Invalid value: \"Bad Key\": spec.template.spec.requirements[0].key in body should match",
            ],
        ),
    ];
    for (req, expected) in cases {
        let expected: Vec<String> = expected
            .iter()
            .map(|e| {
                if e.starts_with("spec.") || e.starts_with("some ") || e.contains("evaluating") {
                    (*e).to_owned()
                } else if e.starts_with("label") {
                    format!("{key}{e}")
                } else {
                    format!("{list}{e}")
                }
            })
            .collect();
        let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
        check(&with_requirement(req), &expected);
    }
}

#[test]
fn ec2nodeclass_rules() {
    let alias = "  amiSelectorTerms: [{alias: al2023@latest}]\n";
    const BLOCKED: &str = "some validation rules were not checked";
    let cases: Vec<(String, &[&str])> = vec![
        (
            format!("{alias}{TERMS}"),
            &[
                "spec: Invalid value: \"object\": must specify exactly one of ['role', 'instanceProfile']",
            ],
        ),
        (
            format!("  role: r\n  instanceProfile: p\n{alias}{TERMS}"),
            &[
                "spec: Invalid value: \"object\": must specify exactly one of ['role', 'instanceProfile']",
            ],
        ),
        (
            format!(
                "  role: r\n  amiSelectorTerms: [{{alias: al2023@latest}}, {{id: ami-123}}]\n{TERMS}"
            ),
            &[
                "spec.amiSelectorTerms: Invalid value: \"array\": 'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
            ],
        ),
        (
            format!("  role: r\n  amiSelectorTerms: [{{alias: windows2022@v1}}]\n{TERMS}"),
            &[
                "spec.amiSelectorTerms[0].alias: Invalid value: \"string\": windows families may only specify version 'latest'",
            ],
        ),
        (
            format!("  role: r\n  amiSelectorTerms: [{{alias: ubuntu@latest}}]\n{TERMS}"),
            &[
                "spec.amiSelectorTerms[0].alias: Invalid value: \"string\": family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
            ],
        ),
        (
            format!("  role: r\n  amiSelectorTerms: [{{name: my-ami}}]\n{TERMS}"),
            &[
                "spec: Invalid value: \"object\": must specify amiFamily if amiSelectorTerms does not contain an alias",
            ],
        ),
        (
            format!("  role: r\n  amiFamily: Bottlerocket\n{alias}{TERMS}"),
            &[
                "spec: Invalid value: \"object\": if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
            ],
        ),
        (
            format!(
                "  role: r\n  amiFamily: Custom\n  amiSelectorTerms: [{{id: ami-1, name: x}}]\n{TERMS}"
            ),
            &[
                "spec.amiSelectorTerms: Invalid value: \"array\": 'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            ],
        ),
        (
            format!(
                "  role: r\n{alias}  subnetSelectorTerms: [{{}}]\n  securityGroupSelectorTerms: [{{id: sg-1, name: web}}]\n"
            ),
            &[
                "spec.subnetSelectorTerms: Invalid value: \"array\": expected at least one, got none, ['tags', 'id']",
                "spec.securityGroupSelectorTerms: Invalid value: \"array\": 'id' is mutually exclusive",
                "spec.securityGroupSelectorTerms: Invalid value: \"array\": 'name' is mutually exclusive",
            ],
        ),
        (
            format!(
                "  role: r\n{alias}  subnetSelectorTerms: []\n  securityGroupSelectorTerms: [{{tags: {{a: \"\"}}}}]\n"
            ),
            &[
                "spec.subnetSelectorTerms: Invalid value: \"array\": subnetSelectorTerms cannot be empty",
                // Upstream's rule is `!self.all(x, has(x.id) && has(x.tags))`: vacuously
                // refused on an empty list, as a server with upstream's CRD refuses it too.
                "spec.subnetSelectorTerms: Invalid value: \"array\": 'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
                "spec.securityGroupSelectorTerms[0].tags: Invalid value: \"object\": empty tag keys or values aren't supported",
            ],
        ),
        (
            format!(
                "  role: r\n{alias}{TERMS}  tags: {{karpenter.sh/nodepool: x, kubernetes.io/cluster/c: owned, team: a}}\n"
            ),
            &[
                "spec.tags: Invalid value: \"object\": tag contains a restricted tag matching karpenter.sh/nodepool",
                "spec.tags: Invalid value: \"object\": tag contains a restricted tag matching kubernetes.io/cluster/",
            ],
        ),
        (
            format!(
                "  role: r\n{alias}{TERMS}  blockDeviceMappings:\n    - {{deviceName: /dev/xvda, rootVolume: true, ebs: {{volumeSize: 20Gi}}}}\n    - {{deviceName: /dev/xvdb, rootVolume: true, ebs: {{encrypted: true}}}}\n"
            ),
            &[
                "spec.blockDeviceMappings: Invalid value: \"array\": must have only one blockDeviceMappings with rootVolume",
                "spec.blockDeviceMappings[1].ebs: Invalid value: \"object\": snapshotID or volumeSize must be defined",
            ],
        ),
        (
            format!(
                "  role: r\n{alias}{TERMS}  blockDeviceMappings: [{{ebs: {{volumeSize: 100TB, volumeType: gp9}}}}]\n"
            ),
            &[
                "spec.blockDeviceMappings[0].ebs.volumeSize: Invalid value: \"100TB\": spec.blockDeviceMappings[0].ebs.volumeSize in body should match",
                "spec.blockDeviceMappings[0].ebs.volumeType: Unsupported value: \"gp9\"",
                BLOCKED,
            ],
        ),
        (
            format!(
                "  role: r\n{alias}{TERMS}  kubelet:\n    systemReserved: {{gpu: \"1\"}}\n    evictionSoft: {{memory.available: 5%}}\n    evictionSoftGracePeriod: {{nodefs.available: 1m}}\n    imageGCHighThresholdPercent: 50\n    imageGCLowThresholdPercent: 60\n"
            ),
            &[
                "spec.kubelet.systemReserved: Invalid value: \"object\": valid keys for systemReserved are ['cpu','memory','ephemeral-storage','pid']",
                "spec.kubelet: Invalid value: \"object\": evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
                "spec.kubelet: Invalid value: \"object\": evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
                "spec.kubelet: Invalid value: \"object\": imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
            ],
        ),
        (
            format!(
                "  role: r\n{alias}{TERMS}  metadataOptions: {{httpTokens: sometimes, httpPutResponseHopLimit: 65}}\n"
            ),
            &[
                "spec.metadataOptions.httpTokens: Unsupported value: \"sometimes\"",
                "spec.metadataOptions.httpPutResponseHopLimit: Invalid value: 65: spec.metadataOptions.httpPutResponseHopLimit in body should be less than or equal to 64",
                BLOCKED,
            ],
        ),
        (
            format!(
                "  role: r\n{alias}{TERMS}  ipPrefixCount: -1\n  connectionTracking: {{udpTimeout: 10}}\n  blockDeviceMappings: [{{ebs: {{snapshotID: snap-1, volumeInitializationRate: 500}}}}]\n"
            ),
            &[
                "spec.ipPrefixCount: Invalid value: -1: spec.ipPrefixCount in body should be greater than or equal to 0",
                "spec.connectionTracking.udpTimeout: Invalid value: 10: spec.connectionTracking.udpTimeout in body should be greater than or equal to 30",
                "spec.blockDeviceMappings[0].ebs.volumeInitializationRate: Invalid value: 500: spec.blockDeviceMappings[0].ebs.volumeInitializationRate in body should be less than or equal to 300",
            ],
        ),
        (
            format!(
                "  role: r\n{alias}{TERMS}  placementGroupSelector: {{id: pg-0a1}}\n  networkInterfaces: [{{networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}}, {{networkCardIndex: 1, deviceIndex: 0, interfaceType: efa-only}}]\n  connectionTracking: {{tcpEstablishedTimeout: 3600}}\n"
            ),
            &[],
        ),
    ];
    for (spec, expected) in cases {
        check(&nodeclass(&spec), expected);
    }
}

#[test]
fn v1beta1_is_rejected_with_the_migration_named() {
    let yaml = std::fs::read_to_string(repo().join("tests/fixtures/v1beta1.yaml")).unwrap();
    let found = problems(&yaml);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found
            .iter()
            .all(|p| p.contains("v1beta1 → v1 migration") && p.contains("karpenter convert"))
    );
}

#[test]
fn v1beta1_converts_to_valid_v1_with_every_change_named() {
    let yaml = std::fs::read_to_string(repo().join("tests/fixtures/v1beta1.yaml")).unwrap();
    let conversion = convert(&yaml).unwrap();
    let changes: Vec<String> = conversion
        .changes
        .iter()
        .map(|c| format!("{}: {}", c.object, c.description))
        .collect();
    for want in [
        "NodePool/default: spec.disruption.consolidationPolicy: WhenUnderutilized → WhenEmptyOrUnderutilized",
        "NodePool/default: spec.disruption.expireAfter (\"720h\") → spec.template.spec.expireAfter",
        "nodeClassRef.group \"karpenter.k8s.aws\"",
        "EC2NodeClass/default: spec.amiFamily: AL2023 → spec.amiSelectorTerms: [{alias: al2023@latest}]",
        "EC2NodeClass/default: spec.kubelet set from NodePool/default",
    ] {
        assert!(
            changes.iter().any(|c| c.contains(want)),
            "missing {want:?} in {changes:#?}"
        );
    }
    assert!(conversion.changes.iter().all(|c| !c.manual));
    let mut out = String::new();
    for doc in &conversion.documents {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(doc).unwrap());
    }
    assert_eq!(problems(&out), Vec::<String>::new());
}

#[test]
fn other_kinds_are_skipped_and_unknown_karpenter_kinds_refused() {
    let checker = ManifestChecker::new().unwrap();
    let reports = checker.check_str("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n---\napiVersion: karpenter.sh/v1\nkind: Provisioner\nmetadata: {name: x}\n---\n: : :\n");
    assert!(reports[0].skipped);
    assert!(
        reports[1].problems[0]
            .message
            .contains("has no kind \"Provisioner\"")
    );
    assert!(reports[2].problems[0].message.starts_with("not valid YAML"));
}

#[test]
fn every_cel_rule_attaches_to_a_schema_node() {
    let all = crds::all().unwrap();
    let rules: usize = all
        .iter()
        .map(|crd| {
            serde_json::to_string(crd)
                .unwrap()
                .matches("\"rule\":")
                .count()
        })
        .sum();
    assert!(rules > 60, "only {rules} CEL rules attached");
}

/// Runs the CEL rules of the generated CRDs (as the API server would) on `yaml` and returns
/// the failed rules' messages with their field paths.
fn cel_failures(yaml: &str) -> Vec<String> {
    let crds = crds::all().unwrap();
    let mut out = Vec::new();
    for doc in karpenter_core::api::manifest::split_documents(yaml) {
        let doc = doc.unwrap();
        let kind = doc["kind"].as_str().unwrap_or_default();
        let crd = crds
            .iter()
            .find(|c| c.spec.names.kind == kind)
            .expect("a Karpenter kind");
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        let compiled = kube_cel::compile_schema(&schema);
        assert_no_compile_errors(&compiled, kind);
        if let Err(errors) = kube_cel::validate_compiled(&compiled, &doc, None) {
            out.extend(
                errors
                    .into_vec()
                    .into_iter()
                    .map(|e| format!("{}: {}", e.field_path, e.message)),
            );
        }
    }
    out
}

fn assert_no_compile_errors(schema: &kube_cel::CompiledSchema, kind: &str) {
    let errors: Vec<String> = schema
        .compilation_errors()
        .iter()
        .map(|e| format!("{e:?}"))
        .collect();
    assert!(
        errors.is_empty(),
        "{kind}: CEL rules that do not compile: {errors:#?}"
    );
    for child in schema.properties.values() {
        assert_no_compile_errors(child, kind);
    }
    if let Some(items) = &schema.items {
        assert_no_compile_errors(items, kind);
    }
    if let Some(values) = &schema.additional_properties {
        assert_no_compile_errors(values, kind);
    }
}

#[test]
fn cel_rules_compile_and_pass_every_example() {
    for entry in std::fs::read_dir(repo().join("deploy/examples")).unwrap() {
        let path = entry.unwrap().path();
        let failures = cel_failures(&std::fs::read_to_string(&path).unwrap());
        assert!(failures.is_empty(), "{}: {failures:#?}", path.display());
    }
}

const OVERLAY_HEAD: &str =
    "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata:\n  name: o\n";

#[test]
fn nodeoverlays_are_admitted_and_refused_as_upstreams_crd_does() {
    let good = format!(
        "{OVERLAY_HEAD}spec:\n  weight: 10\n  requirements:\n    - {{key: karpenter.k8s.aws/instance-family, operator: In, values: [c6i]}}\n    - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n  priceAdjustment: \"-30%\"\n  capacity: {{example.com/fpga: \"1\"}}\n"
    );
    check(&good, &[]);
    assert!(cel_failures(&good).is_empty());
    let checker = ManifestChecker::new().unwrap();
    let report = checker.check_str(&good).remove(0);
    let Some(KarpenterObject::NodeOverlay(overlay)) = report.object else {
        panic!("{report:?}")
    };
    assert_eq!(overlay.spec.weight(), 10);

    // Both kinds of price, and cpu in capacity: the server's messages, at their fields.
    let bad = format!(
        "{OVERLAY_HEAD}spec:\n  requirements: [{{key: karpenter.sh/do-not-sync, operator: Exists}}]\n  price: \"0.1\"\n  priceAdjustment: \"+10%\"\n  capacity: {{cpu: \"2\"}}\n"
    );
    let mut failures = cel_failures(&bad);
    failures.sort();
    assert_eq!(
        failures,
        [
            "spec.capacity: invalid resource restricted",
            "spec.requirements[0].key: label domain \"karpenter.sh\" is restricted",
            "spec: cannot set both 'price' and 'priceAdjustment'",
        ]
    );
    check(
        &bad,
        &[
            "spec: Invalid value: \"object\": cannot set both 'price' and 'priceAdjustment'",
            "spec.capacity: Invalid value: \"object\": invalid resource restricted",
            "spec.requirements[0].key: Invalid value: \"string\": label domain \"karpenter.sh\" is restricted",
        ],
    );
    // Patterns the schema enforces.
    check(
        &format!("{OVERLAY_HEAD}spec:\n  requirements: []\n  priceAdjustment: \"10%\"\n"),
        &["spec.priceAdjustment"],
    );
    check(
        &format!("{OVERLAY_HEAD}spec:\n  requirements: []\n  price: \"-1\"\n"),
        &["spec.price"],
    );
}
