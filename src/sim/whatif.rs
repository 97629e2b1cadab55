//! What-if replays: the workload a simulation journal recorded (its scenario, kept beside the
//! journal as [`SCENARIO_FILE`]) run again under other NodePools and EC2NodeClasses.
//!
//! Everything that is not the autoscaler's to choose stays as recorded: deployments and
//! their scale changes, jobs, DaemonSets, PDBs, capacity shortages, interruptions and image
//! releases, on the same virtual clock. Timeline steps that edit manifests (`apply`) belong
//! to the recorded NodePools, so they are dropped unless the replay is under the recorded
//! manifests themselves (then it is a pure replay, and decides what the recording decided);
//! steps naming a NodePool or EC2NodeClass the new manifests lack are dropped too. Every
//! step dropped is said.

use anyhow::{Context as _, bail};
use serde_yaml_ng::{Mapping, Value};

/// The scenario a simulation ran, as given, kept in its journal directory.
pub const SCENARIO_FILE: &str = "scenario.yaml";

/// A what-if scenario and what was left out of the recording to make it.
#[derive(Debug, Clone, PartialEq)]
pub struct WhatIf {
    /// The scenario text to run.
    pub scenario: String,
    /// Whether the manifests are the recorded ones (a pure replay).
    pub same_manifests: bool,
    /// One line per timeline step dropped, and why.
    pub dropped: Vec<String>,
}

/// The names of the objects of `kind` in a multi-document manifest text.
fn names(manifests: &str, kind: &str) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(manifests) {
        let value = <Value as serde::Deserialize>::deserialize(document)
            .context("the manifests are not YAML")?;
        if value.get("kind").and_then(Value::as_str) == Some(kind)
            && let Some(name) = value
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
        {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

/// Every document of a manifest text, parsed (so layout and comments do not count).
fn documents(manifests: &str) -> anyhow::Result<Vec<Value>> {
    serde_yaml_ng::Deserializer::from_str(manifests)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).map_err(anyhow::Error::from))
        .filter(|v| !matches!(v, Ok(Value::Null)))
        .collect()
}

/// The recorded scenario with `manifests` in place of its own.
pub fn whatif(recorded: &str, manifests: &str) -> anyhow::Result<WhatIf> {
    let mut scenario: Mapping = serde_yaml_ng::from_str(recorded)
        .with_context(|| format!("the recorded {SCENARIO_FILE} is not a YAML mapping"))?;
    let old = scenario
        .get("manifests")
        .and_then(Value::as_str)
        .with_context(|| format!("the recorded {SCENARIO_FILE} has no manifests"))?;
    let same_manifests = documents(old)? == documents(manifests)?;
    let pools = names(manifests, "NodePool")?;
    let classes = names(manifests, "EC2NodeClass")?;
    if pools.is_empty() {
        bail!(
            "--manifests: no NodePool in it; give the NodePools (and EC2NodeClasses) to replay under"
        );
    }
    let mut dropped = Vec::new();
    if let Some(Value::Sequence(steps)) = scenario.get_mut("timeline") {
        steps.retain(|step| {
            let at = step
                .get("at")
                .map(|v| serde_yaml_ng::to_string(v).unwrap_or_default())
                .unwrap_or_default();
            let at = at.trim();
            let why = if step.get("apply").is_some() && !same_manifests {
                Some("apply: it edits the recorded NodePools and EC2NodeClasses".to_owned())
            } else if let Some(pool) = ["deleteNodeClaim", "interrupt"]
                .iter()
                .find_map(|k| step.get(*k))
                .and_then(|a| a.get("nodepool"))
                .and_then(Value::as_str)
                .filter(|p| !pools.iter().any(|n| n == p))
            {
                Some(format!(
                    "it names NodePool {pool}, which the new manifests lack"
                ))
            } else {
                step.get("amiRelease")
                    .and_then(|a| a.get("nodeClass"))
                    .and_then(Value::as_str)
                    .filter(|c| !classes.iter().any(|n| n == c))
                    .map(|class| {
                        format!(
                            "amiRelease: it names EC2NodeClass {class}, which the new manifests lack"
                        )
                    })
            };
            match why {
                Some(why) => {
                    dropped.push(format!("timeline step at {at} dropped: {why}"));
                    false
                }
                None => true,
            }
        });
    }
    scenario.insert("manifests".into(), Value::String(manifests.to_owned()));
    if let Some(Value::String(name)) = scenario.get_mut("name") {
        name.push_str(" (what-if)");
    }
    Ok(WhatIf {
        scenario: serde_yaml_ng::to_string(&scenario)?,
        same_manifests,
        dropped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORDED: &str = include_str!("builtin.yaml");

    fn manifests_of(scenario: &str) -> String {
        let value: Value = serde_yaml_ng::from_str(scenario).unwrap();
        value["manifests"].as_str().unwrap().to_owned()
    }

    #[test]
    fn the_recorded_manifests_replay_the_whole_timeline() {
        let own = manifests_of(RECORDED);
        // Layout does not make manifests different.
        let reformatted = format!("\n{}\n", own.replace(": ", ":  "));
        let replay = whatif(RECORDED, &reformatted).unwrap();
        assert!(replay.same_manifests);
        assert!(replay.dropped.is_empty(), "{:?}", replay.dropped);
        let again = crate::sim::scenario::parse(&replay.scenario, "what-if").unwrap();
        let original = crate::sim::scenario::parse(RECORDED, "builtin").unwrap();
        assert_eq!(again.file.timeline.len(), original.file.timeline.len());
        assert_eq!(again.nodepools, original.nodepools);
    }

    #[test]
    fn other_manifests_drop_what_only_the_recording_can_do() {
        let own = manifests_of(RECORDED);
        let on_demand = own.replace("values: [spot, on-demand]", "values: [on-demand]");
        assert_ne!(
            own, on_demand,
            "the built-in scenario allows spot somewhere"
        );
        let changed = whatif(RECORDED, &on_demand).unwrap();
        assert!(!changed.same_manifests);
        assert_eq!(changed.dropped.len(), 1, "{:?}", changed.dropped);
        assert!(
            changed.dropped[0].contains("at 45m dropped: apply"),
            "{:?}",
            changed.dropped
        );
        let scenario = crate::sim::scenario::parse(&changed.scenario, "what-if").unwrap();
        assert!(scenario.file.name.ends_with("(what-if)"));
        assert_eq!(manifests_of(&changed.scenario), on_demand);
    }

    #[test]
    fn steps_naming_missing_pools_are_dropped_and_said() {
        let own = manifests_of(RECORDED);
        // Only the system pool and its class.
        let system: Vec<&str> = own
            .split("\n---")
            .filter(|d| {
                d.contains("metadata:\n  name: system\n") || d.contains("\nkind: EC2NodeClass\n")
            })
            .collect();
        let changed = whatif(RECORDED, &system.join("\n---")).unwrap();
        let text = changed.dropped.join("\n");
        assert!(
            text.contains("at 20m dropped: it names NodePool general-purpose"),
            "{text}"
        );
        assert!(
            text.contains("at 25m dropped: it names NodePool general-purpose"),
            "{text}"
        );
        assert!(
            whatif(RECORDED, "kind: EC2NodeClass\nmetadata: {name: x}\n")
                .unwrap_err()
                .to_string()
                .contains("no NodePool")
        );
    }
}
