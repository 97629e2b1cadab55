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
        match &statement["Action"] {
            serde_json::Value::String(a) => {
                granted.insert(a.clone());
            }
            serde_json::Value::Array(list) => {
                granted.extend(list.iter().map(|a| a.as_str().unwrap().to_owned()));
            }
            other => panic!("bad Action {other}"),
        }
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
