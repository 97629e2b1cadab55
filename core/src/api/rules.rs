//! Upstream's validation, in its two parts.
//!
//! Admission: the CEL rules of upstream's CRDs, verbatim (rule and message) and at upstream's
//! schema paths, attached to our CRDs by [`super::crds`]. The API server enforces them; the test
//! API server, `karpenter validate` and the suite run them through [`kube_admission`].
//!
//! Runtime: what upstream's controller checks on top of admission (`RuntimeValidate`): label
//! and taint keys and values, requirements, restricted labels, and here also budget schedules
//! and durations, whose syntax the CRD leaves open. That is Rust in `Validate::validate`,
//! reported on a NodePool's `ValidationSucceeded` condition.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Taint;

use super::nodepool::Budget;
use super::requirements::{
    MSG_IN_NEEDS_VALUE, MSG_MIN_VALUES, MSG_NUMERIC_NEEDS_ONE_VALUE, validate_requirements,
};
use super::validation::{FieldPath, Problems, Validate};
use super::{NodeClaim, NodePool};
use crate::vocab::labels::{self, AWS_WELL_KNOWN_LABELS, KARPENTER_WELL_KNOWN_LABELS, LabelUse};

/// A CEL rule and where in the CRD schema it is attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CelRule {
    /// Dotted property path from the schema root; `[]` steps into list items, `{}` into map values.
    pub path: &'static str,
    /// The CEL expression.
    pub rule: String,
    /// The message shown when it fails.
    pub message: String,
}

fn rule(path: &'static str, rule: impl Into<String>, message: impl Into<String>) -> CelRule {
    CelRule {
        path,
        rule: rule.into(),
        message: message.into(),
    }
}

const MSG_SCHEDULE_DURATION: &str = "'schedule' must be set with 'duration'";

/// `["a", "b"]`, as upstream's rules write string lists.
fn quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

/// `['a','b']`, as upstream's EC2NodeClass rules write them.
fn single_quoted_list(items: &[&str], separator: &str) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("'{i}'")).collect();
    format!("[{}]", quoted.join(separator))
}

/// The label-key rules of requirements (`var` is `self`) and label maps (`var` is `x`), each an
/// (expression over `var`, message) pair, in upstream's order.
fn label_key_rules(var: &str, usage: LabelUse) -> Vec<(String, String)> {
    let domain = |domain: &str, allowed: &[&str]| {
        (
            format!(
                "{var} in {} || !{var}.find(\"^([^/]+)\").endsWith(\"{domain}\")",
                quoted_list(allowed)
            ),
            format!("label domain {domain:?} is restricted"),
        )
    };
    let exact = |label: &str| {
        (
            format!("{var} != {label:?}"),
            format!("label {label:?} is restricted"),
        )
    };
    let mut rules = vec![domain("karpenter.sh", KARPENTER_WELL_KNOWN_LABELS)];
    if usage == LabelUse::NodePool {
        rules.push(exact(labels::NODEPOOL));
    }
    rules.push(exact(labels::HOSTNAME));
    rules.push(domain("karpenter.k8s.aws", AWS_WELL_KNOWN_LABELS));
    rules
}

/// The rules of a requirement list and of its items' keys.
fn requirement_rules(list: &'static str, key: &'static str, usage: LabelUse) -> Vec<CelRule> {
    let mut rules = vec![
        rule(
            list,
            "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
            MSG_IN_NEEDS_VALUE,
        ),
        rule(
            list,
            "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
            MSG_NUMERIC_NEEDS_ONE_VALUE,
        ),
        rule(
            list,
            "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
            MSG_MIN_VALUES,
        ),
    ];
    for (expr, message) in label_key_rules("self", usage) {
        rules.push(rule(key, expr, message));
    }
    rules
}

/// `self != ''` on each part of a node class reference.
fn node_class_ref_rules(
    group: &'static str,
    kind: &'static str,
    name: &'static str,
) -> Vec<CelRule> {
    vec![
        rule(group, "self != ''", "group may not be empty"),
        rule(kind, "self != ''", "kind may not be empty"),
        rule(name, "self != ''", "name may not be empty"),
    ]
}

/// The CEL rules of one CRD kind.
pub fn cel_rules(kind: &str) -> Vec<CelRule> {
    match kind {
        "NodePool" => nodepool_rules(),
        "NodeClaim" => nodeclaim_rules(),
        "EC2NodeClass" => ec2nodeclass_rules(),
        "NodeOverlay" => nodeoverlay_rules(),
        "CapacityBuffer" => capacitybuffer_rules(),
        _ => Vec::new(),
    }
}

fn nodepool_rules() -> Vec<CelRule> {
    let mut rules = vec![
        rule(
            "spec",
            "has(self.replicas) == has(oldSelf.replicas)",
            "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
        ),
        rule(
            "spec",
            "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))",
            "only 'limits.nodes' is supported on static NodePools",
        ),
        rule(
            "spec",
            "!has(self.replicas) || !has(self.weight)",
            "'weight' is not supported on static NodePools",
        ),
        rule(
            "spec.disruption.budgets",
            "self.all(x, has(x.schedule) == has(x.duration))",
            MSG_SCHEDULE_DURATION,
        ),
    ];
    for (expr, message) in label_key_rules("x", LabelUse::NodePool) {
        rules.push(rule(
            "spec.template.metadata.labels",
            format!("self.all(x, {expr})"),
            message,
        ));
    }
    rules.extend(node_class_ref_rules(
        "spec.template.spec.nodeClassRef.group",
        "spec.template.spec.nodeClassRef.kind",
        "spec.template.spec.nodeClassRef.name",
    ));
    rules.push(rule(
        "spec.template.spec.nodeClassRef",
        "self.group == oldSelf.group",
        "nodeClassRef.group is immutable",
    ));
    rules.push(rule(
        "spec.template.spec.nodeClassRef",
        "self.kind == oldSelf.kind",
        "nodeClassRef.kind is immutable",
    ));
    rules.extend(requirement_rules(
        "spec.template.spec.requirements",
        "spec.template.spec.requirements[].key",
        LabelUse::NodePool,
    ));
    rules
}

fn capacitybuffer_rules() -> Vec<CelRule> {
    use crate::api::capacitybuffer::{MSG_BOTH_REFS, MSG_TEMPLATE_NEEDS_SIZE};
    vec![
        rule(
            "spec",
            "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",
            MSG_TEMPLATE_NEEDS_SIZE,
        ),
        rule(
            "spec",
            "!(has(self.podTemplateRef) && has(self.scalableRef))",
            MSG_BOTH_REFS,
        ),
    ]
}

fn nodeoverlay_rules() -> Vec<CelRule> {
    vec![
        rule(
            "spec",
            "!has(self.price) || !has(self.priceAdjustment)",
            "cannot set both 'price' and 'priceAdjustment'",
        ),
        rule(
            "spec.capacity",
            "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))",
            "invalid resource restricted",
        ),
        rule(
            "spec.requirements",
            "self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)",
            "requirements with operator 'NotIn' must have a value defined",
        ),
        rule(
            "spec.requirements",
            "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
            MSG_IN_NEEDS_VALUE,
        ),
        rule(
            "spec.requirements",
            "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
            crate::api::nodeoverlay::MSG_OVERLAY_NUMERIC,
        ),
        rule(
            "spec.requirements[].key",
            format!(
                "self in {} || !self.find(\"^([^/]+)\").endsWith(\"karpenter.sh\")",
                quoted_list(&[labels::CAPACITY_TYPE, labels::NODEPOOL])
            ),
            "label domain \"karpenter.sh\" is restricted",
        ),
        rule(
            "spec.requirements[].key",
            format!("self != {:?}", labels::HOSTNAME),
            format!("label {:?} is restricted", labels::HOSTNAME),
        ),
    ]
}

fn nodeclaim_rules() -> Vec<CelRule> {
    let mut rules = node_class_ref_rules(
        "spec.nodeClassRef.group",
        "spec.nodeClassRef.kind",
        "spec.nodeClassRef.name",
    );
    rules.extend(requirement_rules(
        "spec.requirements",
        "spec.requirements[].key",
        LabelUse::NodeClaim,
    ));
    rules.push(rule("spec", "self == oldSelf", "spec is immutable"));
    rules
}

/// AMI alias families, as `amiSelectorTerms[].alias` names them.
const ALIAS_FAMILIES: &[&str] = &[
    "al2",
    "al2023",
    "bottlerocket",
    "windows2019",
    "windows2022",
    "windows2025",
];
/// The alias families and the `amiFamily` each goes with.
const ALIAS_AMI_FAMILIES: &[(&str, &str)] = &[
    ("al2", "AL2"),
    ("al2023", "AL2023"),
    ("bottlerocket", "Bottlerocket"),
    ("windows2019", "Windows2019"),
    ("windows2022", "Windows2022"),
    ("windows2025", "Windows2025"),
];
const WINDOWS_ALIAS_FAMILIES: &[&str] = &["windows2019", "windows2022", "windows2025"];
const RESERVED_RESOURCE_KEYS: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];
const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];
const MSG_EMPTY_TAGS: &str = "empty tag keys or values aren't supported";

fn tag_rule(path: &'static str) -> CelRule {
    rule(
        path,
        "self.all(k, k != '' && self[k] != '')",
        MSG_EMPTY_TAGS,
    )
}

fn ec2nodeclass_rules() -> Vec<CelRule> {
    let mut rules = vec![rule(
        "spec",
        "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))",
        "must specify exactly one of ['role', 'instanceProfile']",
    )];
    for (alias, family) in ALIAS_AMI_FAMILIES {
        let article = if family.starts_with('A') { "an" } else { "a" };
        rules.push(rule(
            "spec",
            format!(
                "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == '{alias}') ? (self.amiFamily == 'Custom' || self.amiFamily == '{family}') : true)"
            ),
            format!("if set, amiFamily must be '{family}' or 'Custom' when using {article} {family} alias"),
        ));
    }
    rules.push(rule(
        "spec",
        "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)",
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
    ));
    rules.extend([
        rule(
            "spec.amiSelectorTerms",
            "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))",
            "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
        ),
        rule(
            "spec.amiSelectorTerms",
            "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))",
            "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        ),
        rule(
            "spec.amiSelectorTerms",
            "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))",
            "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        ),
        rule(
            "spec.amiSelectorTerms",
            "!(self.exists(x, has(x.alias)) && self.size() != 1)",
            "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
        ),
        rule(
            "spec.amiSelectorTerms[].alias",
            "self.matches('^[a-zA-Z0-9]+@.+$')",
            "'alias' is improperly formatted, must match the format 'family@version'",
        ),
        rule(
            "spec.amiSelectorTerms[].alias",
            format!("self.split('@')[0] in {}", single_quoted_list(ALIAS_FAMILIES, ",")),
            format!(
                "family is not supported, must be one of the following: {}",
                ALIAS_FAMILIES.iter().map(|f| format!("'{f}'")).collect::<Vec<_>>().join(", ")
            ),
        ),
        rule(
            "spec.amiSelectorTerms[].alias",
            format!(
                "self.split('@')[0] in {} ? self.split('@')[1] == 'latest' : true",
                single_quoted_list(WINDOWS_ALIAS_FAMILIES, ",")
            ),
            "windows families may only specify version 'latest'",
        ),
        tag_rule("spec.amiSelectorTerms[].tags"),
        rule(
            "spec.blockDeviceMappings",
            "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1",
            "must have only one blockDeviceMappings with rootVolume",
        ),
        rule(
            "spec.blockDeviceMappings[].ebs",
            "has(self.snapshotID) || has(self.volumeSize)",
            "snapshotID or volumeSize must be defined",
        ),
        rule(
            "spec.blockDeviceMappings[].ebs",
            "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')",
            "snapshotID must be set when volumeInitializationRate is set",
        ),
        rule(
            "spec.capacityReservationSelectorTerms",
            "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))",
            "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
        ),
        rule(
            "spec.capacityReservationSelectorTerms",
            "!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)))",
            "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
        ),
        tag_rule("spec.capacityReservationSelectorTerms[].tags"),
        rule(
            "spec.connectionTracking",
            "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)",
            "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
        ),
        rule("spec.instanceProfile", "self != ''", "instanceProfile cannot be empty"),
        rule(
            "spec.kubelet",
            "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ?  self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent  : true",
            "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
        ),
        rule(
            "spec.kubelet",
            "has(self.evictionSoft) ? self.evictionSoft.all(e, (e in self.evictionSoftGracePeriod)):true",
            "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
        ),
        rule(
            "spec.kubelet",
            "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, (e in self.evictionSoft)):true",
            "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
        ),
    ]);
    for (field, path) in [
        ("evictionHard", "spec.kubelet.evictionHard"),
        ("evictionSoft", "spec.kubelet.evictionSoft"),
        (
            "evictionSoftGracePeriod",
            "spec.kubelet.evictionSoftGracePeriod",
        ),
    ] {
        let signals = single_quoted_list(EVICTION_SIGNALS, ",");
        rules.push(rule(
            path,
            format!("self.all(x, x in {signals})"),
            format!("valid keys for {field} are {signals}"),
        ));
    }
    for (field, path) in [
        ("kubeReserved", "spec.kubelet.kubeReserved"),
        ("systemReserved", "spec.kubelet.systemReserved"),
    ] {
        let keys: Vec<String> = RESERVED_RESOURCE_KEYS
            .iter()
            .map(|k| format!("x=='{k}'"))
            .collect();
        rules.push(rule(
            path,
            format!("self.all(x, {})", keys.join(" || ")),
            format!(
                "valid keys for {field} are {}",
                single_quoted_list(RESERVED_RESOURCE_KEYS, ",")
            ),
        ));
        rules.push(rule(
            path,
            "self.all(x, !self[x].startsWith('-'))",
            format!("{field} value cannot be a negative resource quantity"),
        ));
    }
    rules.extend([
        rule(
            "spec.networkInterfaces",
            "self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && x.interfaceType == 'interface')",
            "networkInterfaces must include a primary interface with interfaceType='interface'",
        ),
        rule(
            "spec.networkInterfaces",
            "self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only').size() == 1))",
            "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card",
        ),
        rule(
            "spec.placementGroupSelector",
            "has(self.name) || has(self.id)",
            "expected at least one, got none, ['name', 'id']",
        ),
        rule(
            "spec.placementGroupSelector",
            "!(has(self.name) && has(self.id))",
            "'name' and 'id' are mutually exclusive",
        ),
        rule("spec.role", "self != ''", "role cannot be empty"),
        rule(
            "spec.securityGroupSelectorTerms",
            "self.size() != 0",
            "securityGroupSelectorTerms cannot be empty",
        ),
        rule(
            "spec.securityGroupSelectorTerms",
            "self.all(x, has(x.tags) || has(x.id) || has(x.name))",
            "expected at least one, got none, ['tags', 'id', 'name']",
        ),
        rule(
            "spec.securityGroupSelectorTerms",
            "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))",
            "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
        ),
        rule(
            "spec.securityGroupSelectorTerms",
            "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))",
            "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
        ),
        tag_rule("spec.securityGroupSelectorTerms[].tags"),
        rule(
            "spec.subnetSelectorTerms",
            "self.size() != 0",
            "subnetSelectorTerms cannot be empty",
        ),
        rule(
            "spec.subnetSelectorTerms",
            "self.all(x, has(x.tags) || has(x.id))",
            "expected at least one, got none, ['tags', 'id']",
        ),
        rule(
            "spec.subnetSelectorTerms",
            "!self.all(x, has(x.id) && has(x.tags))",
            "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
        ),
        tag_rule("spec.subnetSelectorTerms[].tags"),
        rule("spec.tags", "self.all(k, k != '')", "empty tag keys aren't supported"),
        rule(
            "spec.tags",
            "self.all(k, k !='eks:eks-cluster-name')",
            "tag contains a restricted tag matching eks:eks-cluster-name",
        ),
        rule(
            "spec.tags",
            "self.all(k, !k.startsWith('kubernetes.io/cluster') )",
            "tag contains a restricted tag matching kubernetes.io/cluster/",
        ),
        rule(
            "spec.tags",
            "self.all(k, k != 'karpenter.sh/nodepool')",
            "tag contains a restricted tag matching karpenter.sh/nodepool",
        ),
        rule(
            "spec.tags",
            "self.all(k, k !='karpenter.sh/nodeclaim')",
            "tag contains a restricted tag matching karpenter.sh/nodeclaim",
        ),
        rule(
            "spec.tags",
            "self.all(k, k !='karpenter.k8s.aws/ec2nodeclass')",
            "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
        ),
    ]);
    rules
}

// ---- Runtime validation -----------------------------------------------------------------

fn validate_labels(labels: &BTreeMap<String, String>, path: &FieldPath, problems: &mut Problems) {
    for (key, value) in labels {
        let at = path.key(key);
        if let Some(problem) = labels::qualified_name_problem(key) {
            problems.push(&at, format!("invalid label key: {problem}"));
        }
        problems.push_opt(&at, labels::label_restriction(key, LabelUse::NodePool));
        if let Some(problem) = labels::label_value_problem(value) {
            problems.push(&at, format!("invalid label value {value:?}: {problem}"));
        }
    }
}

fn validate_taints(taints: &[Taint], startup: &[Taint], spec: &FieldPath, problems: &mut Problems) {
    let mut seen = BTreeSet::new();
    for (field, list) in [("taints", taints), ("startupTaints", startup)] {
        for (i, taint) in list.iter().enumerate() {
            let at = spec.field(field).index(i);
            if let Some(problem) = labels::qualified_name_problem(&taint.key) {
                problems.push(
                    &at.field("key"),
                    format!("invalid taint key {:?}: {problem}", taint.key),
                );
            }
            // Upstream checks a taint's value as a qualified name, as its CRD pattern does.
            if let Some(value) = taint.value.as_deref().filter(|v| !v.is_empty())
                && let Some(problem) = labels::qualified_name_problem(value)
            {
                problems.push(
                    &at.field("value"),
                    format!("invalid taint value: {problem}"),
                );
            }
            if !matches!(
                taint.effect.as_str(),
                "NoSchedule" | "PreferNoSchedule" | "NoExecute" | ""
            ) {
                problems.push(
                    &at.field("effect"),
                    format!(
                        "invalid taint effect {:?}: must be NoSchedule, PreferNoSchedule or NoExecute",
                        taint.effect
                    ),
                );
            }
            if !seen.insert((taint.key.clone(), taint.effect.clone())) {
                problems.push(
                    &at,
                    format!(
                        "duplicate taint {}:{} (each key and effect may appear once across taints and startupTaints)",
                        taint.key, taint.effect
                    ),
                );
            }
        }
    }
}

/// Checks a cron expression as upstream's budgets accept it (5 fields, or a macro), UTC only.
pub fn cron_problem(schedule: &str) -> Option<String> {
    const MACROS: &[&str] = &[
        "@annually",
        "@yearly",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
    ];
    if schedule.starts_with('@') {
        return (!MACROS.contains(&schedule)).then(|| {
            format!(
                "unknown schedule macro {schedule:?}; use one of {}",
                MACROS.join(", ")
            )
        });
    }
    if schedule.starts_with("TZ=") || schedule.starts_with("CRON_TZ=") {
        return Some("time zones are not supported; schedules are evaluated in UTC".into());
    }
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    if fields.len() != 5 {
        return Some(format!(
            "expected 5 cron fields (minute hour day-of-month month day-of-week), got {}",
            fields.len()
        ));
    }
    const NAMES: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];
    const RANGES: [(u32, u32); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)];
    const MONTHS: &[&str] = &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ];
    const DAYS: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    for (i, field) in fields.iter().enumerate() {
        let (lo, hi) = RANGES[i];
        let value = |text: &str| -> Option<u32> {
            if let Ok(n) = text.parse::<u32>() {
                return (lo..=hi).contains(&n).then_some(n);
            }
            let upper = text.to_ascii_uppercase();
            match i {
                3 => MONTHS
                    .iter()
                    .position(|m| *m == upper)
                    .map(|p| p as u32 + 1),
                4 => DAYS.iter().position(|d| *d == upper).map(|p| p as u32),
                _ => None,
            }
        };
        let ok = field.split(',').all(|part| {
            let (range, step) = match part.split_once('/') {
                Some((range, step)) => (range, Some(step)),
                None => (part, None),
            };
            let step_ok = step.is_none_or(|s| s.parse::<u32>().is_ok_and(|s| s > 0));
            let range_ok = match range {
                "*" | "?" => true,
                _ => match range.split_once('-') {
                    Some((a, b)) => matches!((value(a), value(b)), (Some(a), Some(b)) if a <= b),
                    None => value(range).is_some(),
                },
            };
            step_ok && range_ok
        });
        if !ok {
            return Some(format!(
                "invalid {} field {field:?} (allowed {lo}-{hi}, '*', ranges, lists and steps)",
                NAMES[i]
            ));
        }
    }
    None
}

fn budget_duration_ok(text: &str) -> bool {
    // Hours and/or minutes, optionally followed by "0s" (how Go prints such durations).
    let text = text
        .strip_suffix("0s")
        .filter(|t| !t.is_empty())
        .unwrap_or(text);
    let (hours, rest) = match text.split_once('h') {
        Some((h, rest)) => (Some(h), rest),
        None => (None, text),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let minutes_ok = match rest {
        "" => hours.is_some(),
        m => m.strip_suffix('m').is_some_and(digits),
    };
    hours.is_none_or(digits) && minutes_ok
}

fn validate_budgets(budgets: &[Budget], path: &FieldPath, problems: &mut Problems) {
    for (i, budget) in budgets.iter().enumerate() {
        let at = path.index(i);
        if let Some(schedule) = &budget.schedule {
            problems.push_opt(&at.field("schedule"), cron_problem(schedule));
        }
        if let Some(duration) = &budget.duration
            && !budget_duration_ok(duration)
        {
            problems.push(
                &at.field("duration"),
                format!("invalid duration {duration:?}: use hours and/or minutes, e.g. \"8h\", \"30m\" or \"1h30m\""),
            );
        }
    }
}

/// A requirement that a pool's nodes must not have the pool label is self-contradictory.
fn validate_no_nodepool_does_not_exist(
    requirements: &[super::NodeSelectorRequirementWithMinValues],
    path: &FieldPath,
    problems: &mut Problems,
) {
    for (i, req) in requirements.iter().enumerate() {
        if req.key == labels::NODEPOOL && req.operator == super::Operator::DoesNotExist {
            problems.push(
                &path.index(i),
                format!(
                    "requirement {} {} would exclude every node of this NodePool",
                    req.key, req.operator
                ),
            );
        }
    }
}

impl Validate for NodePool {
    fn validate(&self) -> Problems {
        let mut problems = Problems::default();
        let spec = FieldPath::new("spec");
        let template = spec.field("template");
        if let Some(metadata) = &self.spec.template.metadata {
            validate_labels(
                &metadata.labels,
                &template.field("metadata").field("labels"),
                &mut problems,
            );
        }
        let tspec = template.field("spec");
        let t = &self.spec.template.spec;
        let requirements = tspec.field("requirements");
        validate_requirements(
            &t.requirements,
            &requirements,
            LabelUse::NodePool,
            &mut problems,
        );
        validate_no_nodepool_does_not_exist(&t.requirements, &requirements, &mut problems);
        validate_taints(&t.taints, &t.startup_taints, &tspec, &mut problems);
        validate_budgets(
            &self.spec.disruption.budgets,
            &spec.field("disruption").field("budgets"),
            &mut problems,
        );
        problems
    }
}

impl Validate for NodeClaim {
    fn validate(&self) -> Problems {
        let mut problems = Problems::default();
        let spec = FieldPath::new("spec");
        validate_requirements(
            &self.spec.requirements,
            &spec.field("requirements"),
            LabelUse::NodeClaim,
            &mut problems,
        );
        validate_taints(
            &self.spec.taints,
            &self.spec.startup_taints,
            &spec,
            &mut problems,
        );
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_expressions() {
        for ok in [
            "0 9 * * 1-5",
            "*/15 * * * *",
            "0 0 1 JAN *",
            "@daily",
            "0 22 * * sat,sun",
            "30 2 1,15 * ?",
        ] {
            assert_eq!(cron_problem(ok), None, "{ok}");
        }
        for bad in [
            "0 9 * *",
            "60 * * * *",
            "@sometimes",
            "TZ=UTC 0 9 * * *",
            "0 9 * * 1-",
            "*/0 * * * *",
        ] {
            assert!(cron_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn budget_durations() {
        for ok in ["10m", "8h", "1h30m", "1h30m0s", "90m"] {
            assert!(budget_duration_ok(ok), "{ok}");
        }
        for bad in ["", "10s", "1d", "h", "1h30", "0s"] {
            assert!(!budget_duration_ok(bad), "{bad}");
        }
    }
}
