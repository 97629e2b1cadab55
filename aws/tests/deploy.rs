//! The CloudFormation template in deploy/aws grants what the controller calls, and no more
//! than the actions it names.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;

fn template() -> serde_yaml_ng::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/aws/cloudformation.yaml"
    );
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A statement's actions, one or a list.
fn actions(statement: &serde_json::Value) -> Vec<String> {
    match &statement["Action"] {
        serde_json::Value::String(a) => vec![a.clone()],
        serde_json::Value::Array(list) => list
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect(),
        other => panic!("bad Action {other}"),
    }
}

fn untag(value: &serde_yaml_ng::Value) -> &serde_yaml_ng::Value {
    match value {
        serde_yaml_ng::Value::Tagged(t) => &t.value,
        v => v,
    }
}

#[test]
fn the_controller_policy_grants_every_call_the_controller_makes() {
    let template = template();
    let policy = untag(&template["Resources"]["ControllerPolicy"]["Properties"]["PolicyDocument"])
        .as_str()
        .expect("the policy is a !Sub JSON string");
    // What CloudFormation substitutes, with example values.
    let policy = policy
        .replace("${AWS::Partition}", "aws")
        .replace("${AWS::Region}", "us-west-2")
        .replace("${AWS::AccountId}", "123456789012")
        .replace("${ClusterName}", "prod")
        .replace(
            "${InterruptionQueue.Arn}",
            "arn:aws:sqs:us-west-2:123456789012:prod",
        );
    assert!(!policy.contains("${"), "unsubstituted variable in {policy}");
    let document: serde_json::Value = serde_json::from_str(&policy).expect("valid JSON");
    let mut granted = BTreeSet::new();
    for statement in document["Statement"].as_array().unwrap() {
        assert_eq!(statement["Effect"], "Allow");
        assert!(statement.get("Sid").is_some());
        granted.extend(actions(statement));
        // Every mutating statement is scoped by the cluster's tag or to named resources.
        let text = statement.to_string();
        let mutating = !text.contains("Describe") && !text.contains("Get");
        if mutating && statement["Resource"] == "*" {
            panic!("unscoped mutating statement {text}");
        }
    }
    let required: BTreeSet<String> = karpenter_aws::REQUIRED_PERMISSIONS
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let missing: Vec<_> = required.difference(&granted).collect();
    assert!(missing.is_empty(), "not granted: {missing:?}");
    let unused: Vec<_> = granted.difference(&required).collect();
    assert!(unused.is_empty(), "granted but never called: {unused:?}");
}

#[test]
fn the_interruption_rules_route_every_kind_the_parser_knows() {
    let template = template();
    let resources = template["Resources"].as_mapping().unwrap();
    let mut detail_types = BTreeSet::new();
    for (_, resource) in resources {
        if resource["Type"] == "AWS::Events::Rule" {
            for t in resource["Properties"]["EventPattern"]["detail-type"]
                .as_sequence()
                .unwrap()
            {
                detail_types.insert(t.as_str().unwrap().to_owned());
            }
        }
    }
    for kind in [
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
        "AWS Health Event",
    ] {
        assert!(detail_types.contains(kind), "no rule for {kind}");
    }
}

#[test]
fn the_journal_bucket_policy_grants_what_the_history_store_calls_on_that_bucket_only() {
    let template = template();
    let resources = &template["Resources"];
    assert_eq!(resources["JournalBucket"]["Condition"], "HasJournalBucket");
    let policy = untag(&resources["JournalBucketPolicy"]["Properties"]["PolicyDocument"])
        .as_str()
        .expect("the policy is a !Sub JSON string")
        .replace("${AWS::Partition}", "aws")
        .replace("${JournalBucketName}", "journals");
    assert!(!policy.contains("${"), "unsubstituted variable in {policy}");
    let document: serde_json::Value = serde_json::from_str(&policy).expect("valid JSON");
    let mut granted = BTreeSet::new();
    for statement in document["Statement"].as_array().unwrap() {
        let resource = statement["Resource"].as_str().unwrap();
        assert!(
            resource == "arn:aws:s3:::journals" || resource == "arn:aws:s3:::journals/*",
            "{resource}"
        );
        granted.extend(actions(statement));
    }
    let required: BTreeSet<String> = karpenter_aws::history::REQUIRED_PERMISSIONS
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(granted, required);
}
