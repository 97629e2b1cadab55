//! Upstream's validation rules, each in its two forms: a CEL rule attached to the generated
//! CRD (so the API server enforces it) and Rust in `validate()` (so `karpenter validate`,
//! the simulator and the controller report every problem with its field path). Both forms
//! of a rule use the same message.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Taint;

use super::ec2nodeclass::{AmiFamily, EC2NodeClassSpec, KubeletConfiguration};
use super::labels::{
    self, AWS_WELL_KNOWN_LABELS, LABEL_DOMAIN_EXCEPTIONS, LabelUse, RESTRICTED_LABEL_DOMAINS,
    WELL_KNOWN_LABELS,
};
use super::nodepool::Budget;
use super::requirements::validate_requirements;
use super::validation::{FieldPath, Problems, Validate};
use super::{EC2NodeClass, NodeClaim, NodePool};

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

pub(crate) const MSG_IN_NEEDS_VALUE: &str = "requirements operator 'In' must have a value defined";
pub(crate) const MSG_GT_LT: &str =
    "requirements operator 'Gt' or 'Lt' must have a single positive integer value";
pub(crate) const MSG_EXISTS_NO_VALUES: &str =
    "requirements operator 'Exists' or 'DoesNotExist' must not have values";
pub(crate) const MSG_MIN_VALUES: &str = "requirements with 'minValues' must have at least that many values specified in the 'values' field";
const MSG_SCHEDULE_DURATION: &str = "'schedule' must be set with 'duration'";
const MSG_ROLE_XOR_PROFILE: &str = "must specify exactly one of ['role', 'instanceProfile']";
const MSG_ROLE_PROFILE_SWITCH: &str = "changing between 'role' and 'instanceProfile' is not supported; delete and recreate this node class to change it";
const MSG_AMI_FAMILY_REQUIRED: &str =
    "must specify amiFamily if amiSelectorTerms does not contain an alias";
const MSG_AMI_FAMILY_MATCH: &str =
    "amiFamily must be 'Custom' or the family of the amiSelectorTerms alias";
const MSG_ALIAS_ALONE: &str =
    "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms";
const MSG_ALIAS_FIELDS: &str = "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms";
const MSG_AMI_ID_FIELDS: &str = "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms";
const MSG_AMI_TERM_EMPTY: &str =
    "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']";
const MSG_ALIAS_FAMILY: &str = "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'";
const MSG_WINDOWS_LATEST: &str = "windows families may only specify version 'latest'";
const MSG_EMPTY_TAGS: &str = "empty tag keys or values aren't supported";
const MSG_ONE_ROOT_VOLUME: &str = "must have only one blockDeviceMappings with rootVolume";
const MSG_EBS_SIZE: &str = "snapshotID or volumeSize must be defined";
const MSG_GC_THRESHOLDS: &str =
    "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent";
const MSG_SOFT_NEEDS_GRACE: &str =
    "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod";
const MSG_GRACE_NEEDS_SOFT: &str =
    "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft";

const MSG_PLACEMENT_GROUP: &str = "expected exactly one of ['name', 'id']";
const MSG_PRIMARY_INTERFACE: &str = "must include the primary network interface (networkCardIndex 0, deviceIndex 0, interfaceType interface)";
const MSG_UNIQUE_INTERFACES: &str = "networkCardIndex and deviceIndex pairs must be unique";
const MSG_ONE_EFA_ONLY: &str = "at most one efa-only network interface per network card";
const MSG_CONNECTION_TRACKING: &str =
    "at least one of ['tcpEstablishedTimeout', 'udpStreamTimeout', 'udpTimeout'] must be set";

const ALIAS_FAMILIES: &[&str] = &[
    "al2",
    "al2023",
    "bottlerocket",
    "windows2019",
    "windows2022",
    "windows2025",
];
const RESERVED_RESOURCE_KEYS: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];
const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];
/// Tag keys Karpenter owns on instances; users may not set them.
pub const RESTRICTED_TAG_KEYS: &[&str] = &[
    "eks:eks-cluster-name",
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.k8s.aws/ec2nodeclass",
];
const RESTRICTED_TAG_PREFIX: &str = "kubernetes.io/cluster";

fn cel_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("'{i}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// CEL for "the domain of `var` is `domain` or a subdomain of it".
fn cel_in_domain(var: &str, domain: &str) -> String {
    let dom = format!("{var}.find('^([^/]+)')");
    format!("({dom} == '{domain}' || {dom}.endsWith('.{domain}'))")
}

/// CEL rules (expression over `var`, message) for a label key used in a NodePool or NodeClaim.
fn label_key_rules(var: &str, usage: LabelUse) -> Vec<(String, String)> {
    let mut rules = vec![(
        format!("{var} != '{}'", labels::HOSTNAME),
        format!("label {:?} is restricted", labels::HOSTNAME),
    )];
    if usage == LabelUse::NodePool {
        rules.push((
            format!("{var} != '{}'", labels::NODEPOOL),
            format!("label {:?} is restricted", labels::NODEPOOL),
        ));
    }
    let mut allowed: Vec<&str> = WELL_KNOWN_LABELS.to_vec();
    allowed.extend_from_slice(AWS_WELL_KNOWN_LABELS);
    // These two have rules of their own above; the domain rules must not report them again.
    allowed.push(labels::HOSTNAME);
    allowed.push(labels::NODEPOOL);
    let exceptions: Vec<String> = LABEL_DOMAIN_EXCEPTIONS
        .iter()
        .map(|e| cel_in_domain(var, e))
        .collect();
    for domain in RESTRICTED_LABEL_DOMAINS {
        rules.push((
            format!(
                "{var} in {} || {} || !{}",
                cel_list(&allowed),
                exceptions.join(" || "),
                cel_in_domain(var, domain)
            ),
            format!("label domain {domain:?} is restricted"),
        ));
    }
    rules
}

fn requirement_rules(path: &'static str, key_path: &'static str, usage: LabelUse) -> Vec<CelRule> {
    let mut rules = vec![
        rule(
            path,
            "self.operator != 'In' || (has(self.values) && size(self.values) > 0)",
            MSG_IN_NEEDS_VALUE,
        ),
        rule(
            path,
            "!(self.operator in ['Gt', 'Lt']) || (has(self.values) && size(self.values) == 1 && self.values[0].matches('^[0-9]+$'))",
            MSG_GT_LT,
        ),
        rule(
            path,
            "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0",
            MSG_EXISTS_NO_VALUES,
        ),
        rule(
            path,
            "!(self.operator == 'In' && has(self.minValues)) || size(self.values) >= self.minValues",
            MSG_MIN_VALUES,
        ),
    ];
    for (expr, message) in label_key_rules("self", usage) {
        rules.push(rule(key_path, expr, message));
    }
    rules
}

fn tag_rules(path: &'static str) -> CelRule {
    rule(
        path,
        "self.all(k, k != '' && self[k] != '')",
        MSG_EMPTY_TAGS,
    )
}

/// The CEL rules of one CRD kind.
pub fn cel_rules(kind: &str) -> Vec<CelRule> {
    match kind {
        "NodePool" => nodepool_rules(),
        "NodeClaim" => nodeclaim_rules(),
        "EC2NodeClass" => ec2nodeclass_rules(),
        _ => Vec::new(),
    }
}

fn nodepool_rules() -> Vec<CelRule> {
    let mut rules = requirement_rules(
        "spec.template.spec.requirements[]",
        "spec.template.spec.requirements[].key",
        LabelUse::NodePool,
    );
    for (expr, message) in label_key_rules("x", LabelUse::NodePool) {
        rules.push(rule(
            "spec.template.metadata.labels",
            format!("self.all(x, {expr})"),
            message,
        ));
    }
    rules.push(rule(
        "spec.disruption.budgets",
        "self.all(x, has(x.schedule) == has(x.duration))",
        MSG_SCHEDULE_DURATION,
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
    rules
}

fn nodeclaim_rules() -> Vec<CelRule> {
    let mut rules = requirement_rules(
        "spec.requirements[]",
        "spec.requirements[].key",
        LabelUse::NodeClaim,
    );
    rules.push(rule("spec", "self == oldSelf", "spec is immutable"));
    rules
}

fn ec2nodeclass_rules() -> Vec<CelRule> {
    let alias_family_match: Vec<String> = ALIAS_FAMILIES
        .iter()
        .filter_map(|alias| {
            AmiFamily::from_alias(alias).map(|family| {
                format!("(x.alias.find('^[^@]+') == '{alias}' && self.amiFamily == '{family:?}')")
            })
        })
        .collect();
    let mut rules = vec![
        rule(
            "spec",
            "self.amiSelectorTerms.exists(x, has(x.alias)) || has(self.amiFamily)",
            MSG_AMI_FAMILY_REQUIRED,
        ),
        rule(
            "spec",
            format!(
                "!has(self.amiFamily) || self.amiFamily == 'Custom' || self.amiSelectorTerms.all(x, !has(x.alias) || {})",
                alias_family_match.join(" || ")
            ),
            MSG_AMI_FAMILY_MATCH,
        ),
        rule(
            "spec",
            "has(self.role) != has(self.instanceProfile)",
            MSG_ROLE_XOR_PROFILE,
        ),
        rule(
            "spec",
            "has(oldSelf.role) == has(self.role)",
            MSG_ROLE_PROFILE_SWITCH,
        ),
        rule(
            "spec.subnetSelectorTerms[]",
            "has(self.tags) || has(self.id)",
            "expected at least one, got none, ['tags', 'id']",
        ),
        rule(
            "spec.subnetSelectorTerms[]",
            "!has(self.id) || !has(self.tags)",
            "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
        ),
        tag_rules("spec.subnetSelectorTerms[].tags"),
        rule(
            "spec.securityGroupSelectorTerms[]",
            "has(self.tags) || has(self.id) || has(self.name)",
            "expected at least one, got none, ['tags', 'id', 'name']",
        ),
        rule(
            "spec.securityGroupSelectorTerms[]",
            "!has(self.id) || !(has(self.tags) || has(self.name))",
            "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
        ),
        rule(
            "spec.securityGroupSelectorTerms[]",
            "!has(self.name) || !(has(self.tags) || has(self.id))",
            "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
        ),
        tag_rules("spec.securityGroupSelectorTerms[].tags"),
        rule(
            "spec.capacityReservationSelectorTerms[]",
            "has(self.tags) || has(self.id) || has(self.instanceMatchCriteria)",
            "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
        ),
        rule(
            "spec.capacityReservationSelectorTerms[]",
            "!has(self.id) || !(has(self.tags) || has(self.ownerID) || has(self.instanceMatchCriteria))",
            "'id' is mutually exclusive, cannot be set with a combination of other fields in a capacity reservation selector term",
        ),
        tag_rules("spec.capacityReservationSelectorTerms[].tags"),
        rule(
            "spec.amiSelectorTerms",
            "!self.exists(x, has(x.alias)) || size(self) == 1",
            MSG_ALIAS_ALONE,
        ),
        rule(
            "spec.amiSelectorTerms[]",
            "has(self.alias) || has(self.tags) || has(self.id) || has(self.name) || has(self.ssmParameter)",
            MSG_AMI_TERM_EMPTY,
        ),
        rule(
            "spec.amiSelectorTerms[]",
            "!has(self.id) || !(has(self.alias) || has(self.tags) || has(self.name) || has(self.owner) || has(self.ssmParameter))",
            MSG_AMI_ID_FIELDS,
        ),
        rule(
            "spec.amiSelectorTerms[]",
            "!has(self.alias) || !(has(self.id) || has(self.tags) || has(self.name) || has(self.owner) || has(self.ssmParameter))",
            MSG_ALIAS_FIELDS,
        ),
        rule(
            "spec.amiSelectorTerms[].alias",
            format!("self.find('^[^@]+') in {}", cel_list(ALIAS_FAMILIES)),
            MSG_ALIAS_FAMILY,
        ),
        rule(
            "spec.amiSelectorTerms[].alias",
            "!(self.find('^[^@]+') in ['windows2019', 'windows2022', 'windows2025']) || self.find('[^@]+$') == 'latest'",
            MSG_WINDOWS_LATEST,
        ),
        tag_rules("spec.amiSelectorTerms[].tags"),
        rule(
            "spec.tags",
            "self.all(k, k != '')",
            "empty tag keys aren't supported",
        ),
        rule(
            "spec.tags",
            format!("self.all(k, !k.startsWith('{RESTRICTED_TAG_PREFIX}'))"),
            format!("tag contains a restricted tag matching {RESTRICTED_TAG_PREFIX}"),
        ),
        rule(
            "spec.blockDeviceMappings",
            "self.filter(x, has(x.rootVolume) && x.rootVolume).size() <= 1",
            MSG_ONE_ROOT_VOLUME,
        ),
        rule(
            "spec.blockDeviceMappings[].ebs",
            "has(self.snapshotID) || has(self.volumeSize)",
            MSG_EBS_SIZE,
        ),
        rule(
            "spec.kubelet",
            "!(has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent)) || self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent",
            MSG_GC_THRESHOLDS,
        ),
        rule(
            "spec.kubelet",
            "!has(self.evictionSoft) || (has(self.evictionSoftGracePeriod) && self.evictionSoft.all(e, e in self.evictionSoftGracePeriod))",
            MSG_SOFT_NEEDS_GRACE,
        ),
        rule(
            "spec.kubelet",
            "!has(self.evictionSoftGracePeriod) || (has(self.evictionSoft) && self.evictionSoftGracePeriod.all(e, e in self.evictionSoft))",
            MSG_GRACE_NEEDS_SOFT,
        ),
    ];
    rules.extend([
        rule(
            "spec.placementGroupSelector",
            "has(self.name) != has(self.id)",
            MSG_PLACEMENT_GROUP,
        ),
        rule(
            "spec.networkInterfaces",
            "self.exists(x, x.networkCardIndex == 0 && x.deviceIndex == 0 && x.interfaceType == 'interface')",
            MSG_PRIMARY_INTERFACE,
        ),
        rule(
            "spec.networkInterfaces",
            "self.all(x, self.exists_one(y, y.networkCardIndex == x.networkCardIndex && y.deviceIndex == x.deviceIndex))",
            MSG_UNIQUE_INTERFACES,
        ),
        rule(
            "spec.networkInterfaces",
            "self.all(x, x.interfaceType != 'efa-only' || self.exists_one(y, y.interfaceType == 'efa-only' && y.networkCardIndex == x.networkCardIndex))",
            MSG_ONE_EFA_ONLY,
        ),
        rule(
            "spec.connectionTracking",
            "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)",
            MSG_CONNECTION_TRACKING,
        ),
    ]);
    for key in RESTRICTED_TAG_KEYS {
        rules.push(rule(
            "spec.tags",
            format!("self.all(k, k != '{key}')"),
            format!("tag contains a restricted tag matching {key}"),
        ));
    }
    for (field, path) in [
        ("systemReserved", "spec.kubelet.systemReserved"),
        ("kubeReserved", "spec.kubelet.kubeReserved"),
    ] {
        rules.push(rule(
            path,
            format!("self.all(x, x in {})", cel_list(RESERVED_RESOURCE_KEYS)),
            format!(
                "valid keys for {field} are {}",
                cel_list(RESERVED_RESOURCE_KEYS)
            ),
        ));
        rules.push(rule(
            path,
            "self.all(x, !self[x].startsWith('-'))",
            format!("{field} value cannot be a negative resource quantity"),
        ));
    }
    for (field, path) in [
        ("evictionHard", "spec.kubelet.evictionHard"),
        ("evictionSoft", "spec.kubelet.evictionSoft"),
        (
            "evictionSoftGracePeriod",
            "spec.kubelet.evictionSoftGracePeriod",
        ),
    ] {
        rules.push(rule(
            path,
            format!("self.all(x, x in {})", cel_list(EVICTION_SIGNALS)),
            format!("valid keys for {field} are {}", cel_list(EVICTION_SIGNALS)),
        ));
    }
    rules
}

// ---- Rust forms -------------------------------------------------------------------------

fn validate_labels(labels: &BTreeMap<String, String>, path: &FieldPath, problems: &mut Problems) {
    if labels.len() > 100 {
        problems.push(path, "must have at most 100 labels");
    }
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
            if let Some(value) = &taint.value
                && let Some(problem) = labels::label_value_problem(value)
            {
                problems.push(
                    &at.field("value"),
                    format!("invalid taint value: {problem}"),
                );
            }
            if !matches!(
                taint.effect.as_str(),
                "NoSchedule" | "PreferNoSchedule" | "NoExecute"
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
    if budgets.len() > 50 {
        problems.push(path, "must have at most 50 budgets");
    }
    for (i, budget) in budgets.iter().enumerate() {
        let at = path.index(i);
        let nodes_ok = match budget.nodes.strip_suffix('%') {
            Some(pct) => pct.parse::<u32>().is_ok_and(|p| p <= 100) && pct.len() <= 3,
            None => !budget.nodes.is_empty() && budget.nodes.bytes().all(|b| b.is_ascii_digit()),
        };
        if !nodes_ok {
            problems.push(
                &at.field("nodes"),
                format!("invalid value {:?}: use a node count (\"5\") or a percentage from 0% to 100% (\"10%\")", budget.nodes),
            );
        }
        match (&budget.schedule, &budget.duration) {
            (Some(_), None) => problems.push(
                &at.field("schedule"),
                format!("requires duration ({MSG_SCHEDULE_DURATION})"),
            ),
            (None, Some(_)) => problems.push(
                &at.field("duration"),
                format!("requires schedule ({MSG_SCHEDULE_DURATION})"),
            ),
            _ => {}
        }
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

fn validate_quantity_map<V: AsRef<str>>(
    map: &BTreeMap<String, V>,
    path: &FieldPath,
    problems: &mut Problems,
) {
    for (key, value) in map {
        if crate::api::schema_check::quantity_problem(value.as_ref()).is_some() {
            problems.push(
                &path.key(key),
                format!(
                    "invalid quantity {:?}: write e.g. \"100\", \"500m\", \"4Gi\"",
                    value.as_ref()
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
        validate_requirements(
            &t.requirements,
            &tspec.field("requirements"),
            LabelUse::NodePool,
            &mut problems,
        );
        validate_taints(&t.taints, &t.startup_taints, &tspec, &mut problems);
        validate_node_class_ref(
            &t.node_class_ref,
            &tspec.field("nodeClassRef"),
            &mut problems,
        );
        validate_budgets(
            &self.spec.disruption.budgets,
            &spec.field("disruption").field("budgets"),
            &mut problems,
        );
        if let Some(weight) = self.spec.weight
            && !(1..=100).contains(&weight)
        {
            problems.push(
                &spec.field("weight"),
                format!("must be between 1 and 100, got {weight}"),
            );
        }
        if let Some(limits) = &self.spec.limits {
            let limits: BTreeMap<String, String> = limits
                .iter()
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect();
            validate_quantity_map(&limits, &spec.field("limits"), &mut problems);
        }
        problems
    }
}

fn validate_node_class_ref(
    reference: &super::nodepool::NodeClassReference,
    path: &FieldPath,
    problems: &mut Problems,
) {
    for (field, value) in [
        ("group", &reference.group),
        ("kind", &reference.kind),
        ("name", &reference.name),
    ] {
        if value.is_empty() {
            problems.push(&path.field(field), "must not be empty");
        }
    }
    if reference.group.contains('/') {
        problems.push(
            &path.field("group"),
            "must be an API group without a version (e.g. karpenter.k8s.aws)",
        );
    }
}

impl NodePool {
    /// Rules that compare an update with the stored object (`oldSelf` in CEL).
    pub fn validate_update(&self, old: &NodePool) -> Problems {
        let mut problems = Problems::default();
        let path = FieldPath::new("spec.template.spec.nodeClassRef");
        let (new, old) = (
            &self.spec.template.spec.node_class_ref,
            &old.spec.template.spec.node_class_ref,
        );
        if new.group != old.group {
            problems.push(&path.field("group"), "nodeClassRef.group is immutable");
        }
        if new.kind != old.kind {
            problems.push(&path.field("kind"), "nodeClassRef.kind is immutable");
        }
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
        validate_node_class_ref(
            &self.spec.node_class_ref,
            &spec.field("nodeClassRef"),
            &mut problems,
        );
        problems
    }
}

impl NodeClaim {
    /// Rules that compare an update with the stored object (`oldSelf` in CEL).
    pub fn validate_update(&self, old: &NodeClaim) -> Problems {
        let mut problems = Problems::default();
        if self.spec != old.spec {
            problems.push(&FieldPath::new("spec"), "spec is immutable");
        }
        problems
    }
}

fn validate_tags(
    tags: &Option<BTreeMap<String, String>>,
    path: &FieldPath,
    problems: &mut Problems,
) {
    if let Some(tags) = tags {
        if tags.len() > 20 {
            problems.push(path, "must have at most 20 tags");
        }
        if tags.iter().any(|(k, v)| k.is_empty() || v.is_empty()) {
            problems.push(path, MSG_EMPTY_TAGS);
        }
    }
}

impl Validate for EC2NodeClass {
    fn validate(&self) -> Problems {
        let mut problems = Problems::default();
        let spec = FieldPath::new("spec");
        validate_ec2nodeclass_spec(&self.spec, &spec, &mut problems);
        problems
    }
}

impl EC2NodeClass {
    /// Rules that compare an update with the stored object (`oldSelf` in CEL).
    pub fn validate_update(&self, old: &EC2NodeClass) -> Problems {
        let mut problems = Problems::default();
        if self.spec.role.is_some() != old.spec.role.is_some() {
            problems.push(&FieldPath::new("spec"), MSG_ROLE_PROFILE_SWITCH);
        }
        problems
    }
}

fn validate_ec2nodeclass_spec(s: &EC2NodeClassSpec, spec: &FieldPath, problems: &mut Problems) {
    let subnets = spec.field("subnetSelectorTerms");
    if s.subnet_selector_terms.is_empty() {
        problems.push(
            &subnets,
            "must have at least one term (e.g. tags: {karpenter.sh/discovery: my-cluster})",
        );
    }
    for (i, term) in s.subnet_selector_terms.iter().enumerate() {
        let at = subnets.index(i);
        if term.tags.is_none() && term.id.is_none() {
            problems.push(&at, "expected at least one, got none, ['tags', 'id']");
        }
        if term.id.is_some() && term.tags.is_some() {
            problems.push(&at, "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term");
        }
        validate_tags(&term.tags, &at.field("tags"), problems);
    }
    let groups = spec.field("securityGroupSelectorTerms");
    if s.security_group_selector_terms.is_empty() {
        problems.push(
            &groups,
            "must have at least one term (e.g. tags: {karpenter.sh/discovery: my-cluster})",
        );
    }
    for (i, term) in s.security_group_selector_terms.iter().enumerate() {
        let at = groups.index(i);
        if term.tags.is_none() && term.id.is_none() && term.name.is_none() {
            problems.push(
                &at,
                "expected at least one, got none, ['tags', 'id', 'name']",
            );
        }
        if term.id.is_some() && (term.tags.is_some() || term.name.is_some()) {
            problems.push(&at, "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term");
        }
        if term.name.is_some() && (term.tags.is_some() || term.id.is_some()) {
            problems.push(&at, "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term");
        }
        validate_tags(&term.tags, &at.field("tags"), problems);
    }
    let reservations = spec.field("capacityReservationSelectorTerms");
    for (i, term) in s.capacity_reservation_selector_terms.iter().enumerate() {
        let at = reservations.index(i);
        if term.tags.is_none() && term.id.is_none() && term.instance_match_criteria.is_none() {
            problems.push(
                &at,
                "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
            );
        }
        if term.id.is_some()
            && (term.tags.is_some()
                || term.owner_id.is_some()
                || term.instance_match_criteria.is_some())
        {
            problems.push(&at, "'id' is mutually exclusive, cannot be set with a combination of other fields in a capacity reservation selector term");
        }
        validate_tags(&term.tags, &at.field("tags"), problems);
    }
    validate_ami_terms(s, spec, problems);
    if s.role.is_some() == s.instance_profile.is_some() {
        problems.push(spec, MSG_ROLE_XOR_PROFILE);
    }
    for (field, value) in [("role", &s.role), ("instanceProfile", &s.instance_profile)] {
        if value.as_deref() == Some("") {
            problems.push(&spec.field(field), "must not be empty");
        }
    }
    let tags = spec.field("tags");
    for key in s.tags.keys() {
        if key.is_empty() {
            problems.push(&tags, "empty tag keys aren't supported");
        } else if RESTRICTED_TAG_KEYS.contains(&key.as_str()) {
            problems.push(
                &tags.key(key),
                format!("tag contains a restricted tag matching {key}"),
            );
        } else if key.starts_with(RESTRICTED_TAG_PREFIX) {
            problems.push(
                &tags.key(key),
                format!("tag contains a restricted tag matching {RESTRICTED_TAG_PREFIX}"),
            );
        }
    }
    let bdms = spec.field("blockDeviceMappings");
    if s.block_device_mappings
        .iter()
        .filter(|b| b.root_volume)
        .count()
        > 1
    {
        problems.push(&bdms, MSG_ONE_ROOT_VOLUME);
    }
    for (i, bdm) in s.block_device_mappings.iter().enumerate() {
        if let Some(ebs) = &bdm.ebs
            && ebs.snapshot_id.is_none()
            && ebs.volume_size.is_none()
        {
            problems.push(&bdms.index(i).field("ebs"), MSG_EBS_SIZE);
        }
    }
    if let Some(kubelet) = &s.kubelet {
        validate_kubelet(kubelet, &spec.field("kubelet"), problems);
    }
    if let Some(selector) = &s.placement_group_selector
        && selector.name.is_some() == selector.id.is_some()
    {
        problems.push(&spec.field("placementGroupSelector"), MSG_PLACEMENT_GROUP);
    }
    validate_network_interfaces(
        &s.network_interfaces,
        &spec.field("networkInterfaces"),
        problems,
    );
    if let Some(tracking) = &s.connection_tracking
        && tracking.tcp_established_timeout.is_none()
        && tracking.udp_stream_timeout.is_none()
        && tracking.udp_timeout.is_none()
    {
        problems.push(&spec.field("connectionTracking"), MSG_CONNECTION_TRACKING);
    }
    let hop = s.metadata_options.http_put_response_hop_limit;
    if !(1..=64).contains(&hop) {
        problems.push(
            &spec
                .field("metadataOptions")
                .field("httpPutResponseHopLimit"),
            "must be between 1 and 64",
        );
    }
}

fn validate_network_interfaces(
    interfaces: &[super::ec2nodeclass::NetworkInterface],
    path: &FieldPath,
    problems: &mut Problems,
) {
    use super::ec2nodeclass::InterfaceType;
    if interfaces.is_empty() {
        return;
    }
    let primary = interfaces.iter().any(|i| {
        i.network_card_index == 0
            && i.device_index == 0
            && i.interface_type == InterfaceType::Interface
    });
    if !primary {
        problems.push(path, MSG_PRIMARY_INTERFACE);
    }
    let mut slots = BTreeSet::new();
    let mut efa_cards = BTreeSet::new();
    let (mut duplicate, mut many_efa) = (false, false);
    for interface in interfaces {
        duplicate |= !slots.insert((interface.network_card_index, interface.device_index));
        if interface.interface_type == InterfaceType::EfaOnly {
            many_efa |= !efa_cards.insert(interface.network_card_index);
        }
    }
    if duplicate {
        problems.push(path, MSG_UNIQUE_INTERFACES);
    }
    if many_efa {
        problems.push(path, MSG_ONE_EFA_ONLY);
    }
}

fn validate_ami_terms(s: &EC2NodeClassSpec, spec: &FieldPath, problems: &mut Problems) {
    let terms = spec.field("amiSelectorTerms");
    if s.ami_selector_terms.is_empty() {
        problems.push(
            &terms,
            "must have at least one term (e.g. alias: al2023@latest)",
        );
    }
    let has_alias = s.ami_selector_terms.iter().any(|t| t.alias.is_some());
    if has_alias && s.ami_selector_terms.len() != 1 {
        problems.push(&terms, MSG_ALIAS_ALONE);
    }
    for (i, term) in s.ami_selector_terms.iter().enumerate() {
        let at = terms.index(i);
        let others_than_id = term.alias.is_some()
            || term.tags.is_some()
            || term.name.is_some()
            || term.owner.is_some()
            || term.ssm_parameter.is_some();
        if term.id.is_none() && !others_than_id {
            problems.push(&at, MSG_AMI_TERM_EMPTY);
        }
        if term.id.is_some() && others_than_id {
            problems.push(&at, MSG_AMI_ID_FIELDS);
        }
        let others_than_alias = term.id.is_some()
            || term.tags.is_some()
            || term.name.is_some()
            || term.owner.is_some()
            || term.ssm_parameter.is_some();
        if term.alias.is_some() && others_than_alias {
            problems.push(&at, MSG_ALIAS_FIELDS);
        }
        validate_tags(&term.tags, &at.field("tags"), problems);
        if let Some(alias) = &term.alias {
            let (family, version) = alias.split_once('@').unwrap_or((alias, ""));
            let alias_path = at.field("alias");
            match AmiFamily::from_alias(family) {
                None => problems.push(&alias_path, MSG_ALIAS_FAMILY),
                Some(f) => {
                    if f.is_windows() && version != "latest" {
                        problems.push(&alias_path, MSG_WINDOWS_LATEST);
                    }
                    if let Some(declared) = s.ami_family
                        && declared != AmiFamily::Custom
                        && declared != f
                    {
                        problems.push(&spec.field("amiFamily"), MSG_AMI_FAMILY_MATCH);
                    }
                }
            }
            if version.is_empty() {
                problems.push(
                    &alias_path,
                    "alias must be family@version, e.g. al2023@latest or al2023@v20240807",
                );
            }
        }
    }
    if !has_alias && s.ami_family.is_none() {
        problems.push(&spec.field("amiFamily"), MSG_AMI_FAMILY_REQUIRED);
    }
}

fn validate_kubelet(k: &KubeletConfiguration, path: &FieldPath, problems: &mut Problems) {
    for (field, map) in [
        ("systemReserved", &k.system_reserved),
        ("kubeReserved", &k.kube_reserved),
    ] {
        let at = path.field(field);
        for (key, value) in map {
            if !RESERVED_RESOURCE_KEYS.contains(&key.as_str()) {
                problems.push(
                    &at.key(key),
                    format!(
                        "valid keys for {field} are {}",
                        cel_list(RESERVED_RESOURCE_KEYS)
                    ),
                );
            }
            if value.starts_with('-') {
                problems.push(
                    &at.key(key),
                    format!("{field} value cannot be a negative resource quantity"),
                );
            }
        }
        validate_quantity_map(map, &at, problems);
    }
    for (field, map) in [
        ("evictionHard", &k.eviction_hard),
        ("evictionSoft", &k.eviction_soft),
        ("evictionSoftGracePeriod", &k.eviction_soft_grace_period),
    ] {
        for key in map.keys() {
            if !EVICTION_SIGNALS.contains(&key.as_str()) {
                problems.push(
                    &path.field(field).key(key),
                    format!("valid keys for {field} are {}", cel_list(EVICTION_SIGNALS)),
                );
            }
        }
    }
    if let (Some(high), Some(low)) = (
        k.image_gc_high_threshold_percent,
        k.image_gc_low_threshold_percent,
    ) && high <= low
    {
        problems.push(
            &path.field("imageGCHighThresholdPercent"),
            MSG_GC_THRESHOLDS,
        );
    }
    for key in k.eviction_soft.keys() {
        if !k.eviction_soft_grace_period.contains_key(key) {
            problems.push(&path.field("evictionSoft").key(key), MSG_SOFT_NEEDS_GRACE);
        }
    }
    for key in k.eviction_soft_grace_period.keys() {
        if !k.eviction_soft.contains_key(key) {
            problems.push(
                &path.field("evictionSoftGracePeriod").key(key),
                MSG_GRACE_NEEDS_SOFT,
            );
        }
    }
    for (field, value) in [("maxPods", k.max_pods), ("podsPerCore", k.pods_per_core)] {
        if value.is_some_and(|v| v < 0) {
            problems.push(&path.field(field), "must not be negative");
        }
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
