//! `--log-format json` as a team's tooling reads upstream Karpenter's logs: every line one
//! JSON object with each key once, upstream's keys (`level`, `time`, `logger`, `message`,
//! `commit`, `controller`, …), and the lines its queries look for ("created nodeclaim",
//! "launched nodeclaim") with the objects as upstream logs them (`NodeClaim.name`,
//! `NodePool.name`), their requests and instance types, the launched instance's fields.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde::de::{Deserializer, MapAccess, Visitor};

const SCENARIO: &str = r#"
name: logs
duration: 10m
manifests: |
  apiVersion: karpenter.k8s.aws/v1
  kind: EC2NodeClass
  metadata: {name: default}
  spec:
    role: KarpenterNodeRole-sim
    amiSelectorTerms: [{alias: al2023@latest}]
    subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sim}}]
    securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sim}}]
  ---
  apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata: {name: general-purpose}
  spec:
    template:
      spec:
        nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
        requirements:
          - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
deployments:
  - name: web
    cpu: "1200m"
    memory: 1Gi
    replicas: 6
    labels: {app: web}
"#;

/// A JSON object's top-level keys, refusing a key given twice (which `serde_json::Value`
/// would silently keep once).
struct UniqueKeys(Vec<String>);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = UniqueKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if keys.contains(&key) {
                        return Err(serde::de::Error::custom(format!("{key} twice")));
                    }
                    map.next_value::<serde::de::IgnoredAny>()?;
                    keys.push(key);
                }
                Ok(UniqueKeys(keys))
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

#[test]
fn json_lines_have_upstreams_layout_with_each_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("logs.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["--log-format", "json", "--log-level", "info", "simulate"])
        .arg(&scenario)
        .arg("--quiet")
        .arg("--journal")
        .arg(dir.path().join("journal"))
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stderr}");

    let mut lines = Vec::new();
    for text in stderr.lines().filter(|l| !l.trim().is_empty()) {
        let keys: UniqueKeys = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(
            keys.0[..5],
            ["level", "time", "logger", "message", "commit"],
            "{text}"
        );
        let line: serde_json::Value = serde_json::from_str(text).unwrap();
        assert!(
            ["DEBUG", "INFO", "WARN", "ERROR"].contains(&line["level"].as_str().unwrap()),
            "{text}"
        );
        let time = line["time"].as_str().unwrap();
        assert!(
            time.ends_with('Z') && time.parse::<jiff::Timestamp>().is_ok(),
            "{text}"
        );
        assert_eq!(line["logger"], "controller");
        lines.push(line);
    }
    // The queries upstream's users run: NodeClaims created per NodePool, with what they asked.
    let created: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["message"] == "created nodeclaim")
        .collect();
    assert!(!created.is_empty(), "{stderr}");
    let mut claims = BTreeSet::new();
    for line in &created {
        assert_eq!(line["controller"], "provisioner", "{line}");
        assert_eq!(line["NodePool"]["name"], "general-purpose", "{line}");
        let name = line["NodeClaim"]["name"].as_str().unwrap();
        assert!(name.starts_with("general-purpose-"), "{line}");
        assert!(line["requests"]["cpu"].is_string(), "{line}");
        assert!(line["requests"]["memory"].is_string(), "{line}");
        assert!(
            line["instance-types"].as_str().unwrap().contains('.'),
            "{line}"
        );
        claims.insert(name.to_owned());
    }
    // Each created NodeClaim launched, with the instance upstream's line names.
    let mut launched = BTreeMap::new();
    for line in lines
        .iter()
        .filter(|l| l["message"] == "launched nodeclaim")
    {
        assert_eq!(line["controller"], "nodeclaim.lifecycle", "{line}");
        assert_eq!(line["controllerGroup"], "karpenter.sh");
        assert_eq!(line["controllerKind"], "NodeClaim");
        let name = line["NodeClaim"]["name"].as_str().unwrap();
        assert_eq!(line["name"], name, "{line}");
        for key in ["provider-id", "instance-type", "zone", "capacity-type"] {
            assert!(line[key].is_string(), "{key}: {line}");
        }
        assert_eq!(line["capacity-type"], "on-demand");
        launched.insert(name.to_owned(), line["instance-type"].clone());
    }
    assert_eq!(launched.keys().cloned().collect::<BTreeSet<_>>(), claims);
}
