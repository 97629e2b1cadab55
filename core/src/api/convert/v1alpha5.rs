//! Karpenter v0.2x–v0.31 in one step: `karpenter.sh/v1alpha5` `Provisioner` and
//! `karpenter.k8s.aws/v1alpha1` `AWSNodeTemplate` to v1 `NodePool` and `EC2NodeClass`.
//!
//! Behaviour is kept where v1 can say it, and said where it differs:
//! - no `ttlSecondsUntilExpired` meant nodes never expired: `expireAfter: Never` (v1's
//!   default is 720h);
//! - neither `consolidation.enabled` nor `ttlSecondsAfterEmpty` meant nodes were never
//!   removed for being empty or underused: `consolidateAfter: Never`;
//! - the requirements v1alpha5's defaulting webhook stored (on-demand, amd64, categories
//!   c/m/r of generation > 2) are written out when the Provisioner did not constrain them;
//! - an AWSNodeTemplate without `amiSelector` used its family's latest EKS-optimized AMI:
//!   an `@latest` alias.

use serde_json::{Map, Value, json};

use super::kubelet::Source;
use super::{ConvertError, ConvertOptions, Doc, Notes, alias_family, kind_of_value};

/// What a Provisioner becomes.
pub(super) struct Provisioner {
    /// The NodePool.
    pub nodepool: Value,
    /// The EC2NodeClass made from its inline `provider`, if it had one.
    pub nodeclass: Option<Value>,
    /// Its kubelet settings for its class, when it names a class.
    pub kubelet: Option<Source>,
}

/// Provisioner fields this conversion carries over.
const PROVISIONER_FIELDS: &[&str] = &[
    "requirements",
    "labels",
    "annotations",
    "taints",
    "startupTaints",
    "limits",
    "providerRef",
    "provider",
    "consolidation",
    "ttlSecondsAfterEmpty",
    "ttlSecondsUntilExpired",
    "weight",
    "kubeletConfiguration",
];

/// Keys whose requirement (or label) means the instance types were chosen by hand; without
/// any, v1alpha5 defaulted to categories c, m and r of generation > 2.
const INSTANCE_TYPE_KEYS: &[&str] = &[
    "node.kubernetes.io/instance-type",
    "karpenter.k8s.aws/instance-family",
    "karpenter.k8s.aws/instance-category",
    "karpenter.k8s.aws/instance-generation",
];

/// A Provisioner as a v1 NodePool (see the module's documentation).
pub(super) fn provisioner(
    doc: &Doc,
    options: &ConvertOptions,
    notes: &mut Notes,
) -> Result<Provisioner, ConvertError> {
    let name = doc.name().to_owned();
    let label = format!("NodePool/{name}");
    notes.changed(
        &label,
        "karpenter.sh/v1alpha5 Provisioner → karpenter.sh/v1 NodePool",
    );
    let empty = Map::new();
    let spec = doc.value["spec"].as_object().unwrap_or(&empty);
    for key in spec
        .keys()
        .filter(|k| !PROVISIONER_FIELDS.contains(&k.as_str()))
    {
        notes.manual(
            &label,
            format!(
                "spec.{key} has no v1 equivalent and was dropped; carry its intent over by hand"
            ),
        );
    }
    let mut template_meta = Map::new();
    let mut template = Map::new();
    let labels = object_at(doc, spec, "spec", "labels")?;
    let mut requirements = list_at(doc, spec, "requirements")?;
    add_webhook_defaults(&mut requirements, labels, &label, notes);
    template.insert("requirements".into(), Value::Array(requirements));
    for (old, in_metadata) in [
        ("labels", true),
        ("annotations", true),
        ("taints", false),
        ("startupTaints", false),
    ] {
        if let Some(value) = spec.get(old).filter(|v| !v.is_null()) {
            let (into, at) = if in_metadata {
                (&mut template_meta, "metadata")
            } else {
                (&mut template, "spec")
            };
            into.insert(old.into(), value.clone());
            notes.changed(&label, format!("spec.{old} → spec.template.{at}.{old}"));
        }
    }
    let (class, nodeclass) = node_class(doc, spec, options, &label, notes)?;
    if let Some(class) = &class {
        template.insert(
            "nodeClassRef".into(),
            json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class}),
        );
    }
    let expire = match seconds(doc, spec, "ttlSecondsUntilExpired")? {
        Some(s) => {
            notes.changed(
                &label,
                format!(
                    "spec.ttlSecondsUntilExpired: {s} → spec.template.spec.expireAfter: {}",
                    duration(s)
                ),
            );
            duration(s)
        }
        None => {
            notes.changed(
                &label,
                "spec.template.spec.expireAfter: Never (without ttlSecondsUntilExpired v1alpha5 never expired nodes; v1's default is 720h)",
            );
            "Never".into()
        }
    };
    template.insert("expireAfter".into(), Value::String(expire));
    let mut pool_spec = Map::new();
    pool_spec.insert("disruption".into(), disruption(doc, spec, &label, notes)?);
    if !template_meta.is_empty() {
        pool_spec.insert(
            "template".into(),
            json!({"metadata": template_meta, "spec": template}),
        );
    } else {
        pool_spec.insert("template".into(), json!({ "spec": template }));
    }
    if let Some(limits) = spec.get("limits").and_then(Value::as_object) {
        for key in limits.keys().filter(|k| *k != "resources") {
            notes.manual(
                &label,
                format!("spec.limits.{key} has no v1 equivalent and was dropped"),
            );
        }
        if let Some(resources) = limits.get("resources").filter(|r| !r.is_null()) {
            pool_spec.insert("limits".into(), resources.clone());
            notes.changed(&label, "spec.limits.resources → spec.limits");
        }
    }
    if let Some(weight) = spec.get("weight").filter(|w| !w.is_null()) {
        pool_spec.insert("weight".into(), weight.clone());
    }
    let kubelet = kubelet(doc, spec, &label, notes)?;
    let source = class.map(|class| Source::new(&name, &class, kubelet));
    Ok(Provisioner {
        nodepool: json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": doc.value["metadata"].clone(),
            "spec": pool_spec,
        }),
        nodeclass,
        kubelet: source,
    })
}

/// The requirements v1alpha5's defaulting webhook stored when the Provisioner did not
/// constrain them, written out so v1 chooses as it did.
fn add_webhook_defaults(
    requirements: &mut Vec<Value>,
    labels: &Map<String, Value>,
    label: &str,
    notes: &mut Notes,
) {
    let constrained = |requirements: &[Value], key: &str| {
        labels.contains_key(key) || requirements.iter().any(|r| r["key"] == key)
    };
    let mut add = |requirements: &mut Vec<Value>, key: &str, operator: &str, values: &[&str]| {
        requirements.push(json!({"key": key, "operator": operator, "values": values}));
        notes.changed(
            label,
            format!(
                "spec.template.spec.requirements: {key} {operator} {values:?} added (v1alpha5's defaulting webhook stored it)"
            ),
        );
    };
    if !constrained(requirements, "karpenter.sh/capacity-type") {
        add(
            requirements,
            "karpenter.sh/capacity-type",
            "In",
            &["on-demand"],
        );
    }
    if !constrained(requirements, "kubernetes.io/arch") {
        add(requirements, "kubernetes.io/arch", "In", &["amd64"]);
    }
    if !INSTANCE_TYPE_KEYS
        .iter()
        .any(|key| constrained(requirements, key))
    {
        add(
            requirements,
            "karpenter.k8s.aws/instance-category",
            "In",
            &["c", "m", "r"],
        );
        add(
            requirements,
            "karpenter.k8s.aws/instance-generation",
            "Gt",
            &["2"],
        );
    }
}

/// `spec.disruption` from `consolidation.enabled` and `ttlSecondsAfterEmpty`.
fn disruption(
    doc: &Doc,
    spec: &Map<String, Value>,
    label: &str,
    notes: &mut Notes,
) -> Result<Value, ConvertError> {
    let enabled = match spec.get("consolidation").map(|c| &c["enabled"]) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(doc.invalid(
                "spec.consolidation.enabled",
                format!("must be true or false, not {}", kind_of_value(other)),
            ));
        }
    };
    let empty = seconds(doc, spec, "ttlSecondsAfterEmpty")?;
    let (policy, after) = match (enabled, empty) {
        (true, Some(_)) => {
            return Err(doc.invalid(
                "spec.ttlSecondsAfterEmpty",
                "cannot be set together with spec.consolidation.enabled: true (v1alpha5 refused both); keep one and convert again",
            ));
        }
        (true, None) => {
            notes.changed(
                label,
                "spec.consolidation.enabled: true → spec.disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s}",
            );
            ("WhenEmptyOrUnderutilized", "0s".to_owned())
        }
        (false, Some(s)) => {
            notes.changed(
                label,
                format!(
                    "spec.ttlSecondsAfterEmpty: {s} → spec.disruption: {{consolidationPolicy: WhenEmpty, consolidateAfter: {}}}",
                    duration(s)
                ),
            );
            ("WhenEmpty", duration(s))
        }
        (false, None) => {
            notes.changed(
                label,
                "spec.disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: Never} (without consolidation or ttlSecondsAfterEmpty v1alpha5 removed no node for being empty or underused)",
            );
            ("WhenEmptyOrUnderutilized", "Never".to_owned())
        }
    };
    Ok(json!({"consolidationPolicy": policy, "consolidateAfter": after}))
}

/// The class a Provisioner's nodes use: its `providerRef`, or a class made from its inline
/// `provider`.
fn node_class(
    doc: &Doc,
    spec: &Map<String, Value>,
    options: &ConvertOptions,
    label: &str,
    notes: &mut Notes,
) -> Result<(Option<String>, Option<Value>), ConvertError> {
    let name = doc.name();
    if let Some(reference) = spec.get("providerRef").and_then(Value::as_object) {
        let Some(class) = reference.get("name").and_then(Value::as_str) else {
            return Err(doc.invalid(
                "spec.providerRef.name",
                "must name an AWSNodeTemplate; add it and convert again",
            ));
        };
        if let Some(kind) = reference.get("kind").and_then(Value::as_str)
            && kind != "AWSNodeTemplate"
        {
            notes.manual(
                label,
                format!("spec.providerRef.kind {kind} is not AWSNodeTemplate; point spec.template.spec.nodeClassRef at the EC2NodeClass that replaces it"),
            );
        }
        notes.changed(
            label,
            format!("spec.providerRef → spec.template.spec.nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {class}}}"),
        );
        return Ok((Some(class.to_owned()), None));
    }
    if let Some(provider) = spec.get("provider").and_then(Value::as_object) {
        let class = format!("{name}-provider");
        let class_label = format!("EC2NodeClass/{class}");
        notes.changed(
            &class_label,
            format!(
                "new: made from Provisioner/{name}'s inline spec.provider (which v1 does not have)"
            ),
        );
        let class_spec =
            nodeclass_spec(doc, provider, "spec.provider", options, &class_label, notes)?;
        notes.changed(
            label,
            format!("spec.provider → spec.template.spec.nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {class}}}"),
        );
        let nodeclass = json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": class},
            "spec": class_spec,
        });
        return Ok((Some(class), Some(nodeclass)));
    }
    notes.manual(
        label,
        "spec.template.spec.nodeClassRef: the Provisioner has neither providerRef nor provider; name the EC2NodeClass its nodes use",
    );
    Ok((None, None))
}

/// `kubeletConfiguration`, without what v1 has no place for.
fn kubelet(
    doc: &Doc,
    spec: &Map<String, Value>,
    label: &str,
    notes: &mut Notes,
) -> Result<Option<Value>, ConvertError> {
    let mut kubelet = object_at(doc, spec, "spec", "kubeletConfiguration")?.clone();
    if let Some(runtime) = kubelet.remove("containerRuntime") {
        if runtime == "containerd" {
            notes.changed(
                label,
                "spec.kubeletConfiguration.containerRuntime dropped (v1 nodes run containerd)",
            );
        } else {
            notes.manual(
                label,
                format!("spec.kubeletConfiguration.containerRuntime {runtime}: v1 nodes run containerd only; check the workloads that relied on it"),
            );
        }
    }
    Ok((!kubelet.is_empty()).then_some(Value::Object(kubelet)))
}

/// An AWSNodeTemplate as a v1 EC2NodeClass.
pub(super) fn node_template(
    doc: &Doc,
    options: &ConvertOptions,
    notes: &mut Notes,
) -> Result<Value, ConvertError> {
    let label = format!("EC2NodeClass/{}", doc.name());
    notes.changed(
        &label,
        "karpenter.k8s.aws/v1alpha1 AWSNodeTemplate → karpenter.k8s.aws/v1 EC2NodeClass",
    );
    let empty = Map::new();
    let spec = doc.value["spec"].as_object().unwrap_or(&empty);
    let spec = nodeclass_spec(doc, spec, "spec", options, &label, notes)?;
    Ok(json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": doc.value["metadata"].clone(),
        "spec": spec,
    }))
}

/// Fields of an AWSNodeTemplate (or an inline provider) v1 keeps as they are.
const KEPT: &[&str] = &[
    "instanceProfile",
    "userData",
    "blockDeviceMappings",
    "tags",
    "metadataOptions",
    "detailedMonitoring",
    "context",
];

/// The v1 EC2NodeClass spec for an AWSNodeTemplate spec (or a Provisioner's inline
/// provider) found at `at`.
fn nodeclass_spec(
    doc: &Doc,
    old: &Map<String, Value>,
    at: &str,
    options: &ConvertOptions,
    label: &str,
    notes: &mut Notes,
) -> Result<Map<String, Value>, ConvertError> {
    let mut spec = Map::new();
    for (key, value) in old {
        match key.as_str() {
            _ if KEPT.contains(&key.as_str()) => {
                if !value.is_null() {
                    spec.insert(key.clone(), value.clone());
                }
            }
            "subnetSelector" | "securityGroupSelector" | "amiSelector" | "amiFamily" => {}
            // An inline provider's own type marker.
            "apiVersion" | "kind" if at == "spec.provider" => {}
            "launchTemplate" => notes.manual(
                label,
                format!("{at}.launchTemplate: v1 launches from its own launch templates; move the template's AMI, user data, security groups and block devices into this EC2NodeClass"),
            ),
            _ => notes.manual(
                label,
                format!("{at}.{key} has no v1 equivalent and was dropped; carry its intent over by hand"),
            ),
        }
    }
    if !spec.contains_key("instanceProfile") {
        match &options.default_instance_profile {
            Some(profile) => {
                spec.insert("instanceProfile".into(), json!(profile));
                notes.changed(
                    label,
                    format!("spec.instanceProfile: {profile} (given as the default instance profile, as v1alpha1's aws.defaultInstanceProfile setting gave it)"),
                );
            }
            None => notes.manual(
                label,
                "spec.role or spec.instanceProfile: v1alpha1 fell back to the aws.defaultInstanceProfile setting, which v1 does not have; name the node role or instance profile (or convert with --default-instance-profile NAME)",
            ),
        }
    }
    for (old_key, new_key) in [
        ("subnetSelector", "subnetSelectorTerms"),
        ("securityGroupSelector", "securityGroupSelectorTerms"),
    ] {
        let selector = object_at(doc, old, at, old_key)?;
        let terms = tag_terms(doc, selector, &format!("{at}.{old_key}"), label, notes)?;
        if terms.is_empty() {
            notes.manual(
                label,
                format!(
                    "spec.{new_key}: {at}.{old_key} selects nothing; v1 needs at least one term"
                ),
            );
        } else {
            notes.changed(label, format!("{at}.{old_key} → spec.{new_key}"));
            spec.insert(new_key.into(), Value::Array(terms));
        }
    }
    ami(doc, old, at, &mut spec, label, notes)?;
    Ok(spec)
}

/// `amiSelector` and `amiFamily` as `amiSelectorTerms` (and `amiFamily` where v1 needs it).
fn ami(
    doc: &Doc,
    old: &Map<String, Value>,
    at: &str,
    spec: &mut Map<String, Value>,
    label: &str,
    notes: &mut Notes,
) -> Result<(), ConvertError> {
    let family = match old.get("amiFamily") {
        None | Some(Value::Null) => None,
        Some(Value::String(f)) => Some(f.as_str()),
        Some(other) => {
            return Err(doc.invalid(
                &format!("{at}.amiFamily"),
                format!("must be a string, not {}", kind_of_value(other)),
            ));
        }
    };
    let selector = object_at(doc, old, at, "amiSelector")?;
    let terms = ami_terms(doc, selector, &format!("{at}.amiSelector"), label, notes)?;
    if !terms.is_empty() {
        spec.insert("amiSelectorTerms".into(), Value::Array(terms));
        notes.changed(label, format!("{at}.amiSelector → spec.amiSelectorTerms"));
        match family {
            Some("Ubuntu") => notes.manual(
                label,
                "spec.amiFamily: Ubuntu is not a v1 family; use Custom with user data that bootstraps your Ubuntu AMIs",
            ),
            Some(f) => {
                spec.insert("amiFamily".into(), json!(f));
            }
            None => {
                spec.insert("amiFamily".into(), json!("AL2"));
                notes.changed(
                    label,
                    "spec.amiFamily: AL2 (v1alpha1's default, which v1 needs beside amiSelectorTerms without an alias)",
                );
            }
        }
        return Ok(());
    }
    let family = family.unwrap_or("AL2");
    match alias_family(family) {
        Some(alias) => {
            spec.insert(
                "amiSelectorTerms".into(),
                json!([{ "alias": format!("{alias}@latest") }]),
            );
            notes.changed(
                label,
                format!("spec.amiSelectorTerms: [{{alias: {alias}@latest}}] ({family}'s latest EKS-optimized AMI, as v1alpha1 chose without amiSelector; pin a version instead of @latest for controlled rollouts)"),
            );
        }
        None if family == "Ubuntu" => notes.manual(
            label,
            "spec.amiSelectorTerms: Ubuntu is not a v1 family; select your Ubuntu AMIs with amiSelectorTerms and use amiFamily Custom with user data that bootstraps them",
        ),
        None => notes.manual(
            label,
            format!("spec.amiSelectorTerms: amiFamily {family} without amiSelector selects no AMI in v1; add terms that select your AMIs"),
        ),
    }
    Ok(())
}

/// The string value of every selector entry.
fn string_entries<'a>(
    doc: &Doc,
    selector: &'a Map<String, Value>,
    field: &str,
) -> Result<Vec<(&'a str, &'a str)>, ConvertError> {
    selector
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.as_str(), s.as_str())),
            other => Err(doc.invalid(
                &format!("{field}.{k}"),
                format!("must be a string, not {}", kind_of_value(other)),
            )),
        })
        .collect()
}

fn split_list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Terms selecting by id (`aws-ids`/`aws::ids`, comma-separated), else one term ANDing the
/// tags.
fn tag_terms(
    doc: &Doc,
    selector: &Map<String, Value>,
    field: &str,
    label: &str,
    notes: &mut Notes,
) -> Result<Vec<Value>, ConvertError> {
    let mut ids = Vec::new();
    let mut tags = Map::new();
    for (key, value) in string_entries(doc, selector, field)? {
        match key {
            "aws-ids" | "aws::ids" => ids.extend(split_list(value).map(|id| json!({ "id": id }))),
            _ => {
                tags.insert(key.to_owned(), json!(value));
            }
        }
    }
    if !ids.is_empty() {
        if !tags.is_empty() {
            notes.manual(
                label,
                format!("{field}: ids and tags were both given (a match needed both); the v1 terms select by id alone, so check those ids carry {}", Value::Object(tags)),
            );
        }
        return Ok(ids);
    }
    Ok(if tags.is_empty() {
        Vec::new()
    } else {
        vec![json!({ "tags": tags })]
    })
}

/// AMI terms: by id; else by name and tags, once per owner.
fn ami_terms(
    doc: &Doc,
    selector: &Map<String, Value>,
    field: &str,
    label: &str,
    notes: &mut Notes,
) -> Result<Vec<Value>, ConvertError> {
    let mut ids = Vec::new();
    let mut name = None;
    let mut owners = Vec::new();
    let mut tags = Map::new();
    for (key, value) in string_entries(doc, selector, field)? {
        match key {
            "aws-ids" | "aws::ids" => ids.extend(split_list(value).map(|id| json!({ "id": id }))),
            "aws::name" => name = Some(value),
            "aws::owners" => owners.extend(split_list(value)),
            _ => {
                tags.insert(key.to_owned(), json!(value));
            }
        }
    }
    if !ids.is_empty() {
        if name.is_some() || !owners.is_empty() || !tags.is_empty() {
            notes.manual(
                label,
                format!("{field}: ids were given with other keys (a match needed all); the v1 terms select by id alone, so check those AMIs match the rest"),
            );
        }
        return Ok(ids);
    }
    let mut base = Map::new();
    if let Some(name) = name {
        base.insert("name".into(), json!(name));
    }
    if !tags.is_empty() {
        base.insert("tags".into(), Value::Object(tags));
    }
    if base.is_empty() {
        if !owners.is_empty() {
            notes.manual(
                label,
                format!("{field}: aws::owners alone selects nothing in v1; add aws::name or tags"),
            );
        }
        return Ok(Vec::new());
    }
    if owners.is_empty() {
        return Ok(vec![Value::Object(base)]);
    }
    Ok(owners
        .into_iter()
        .map(|owner| {
            let mut term = base.clone();
            term.insert("owner".into(), json!(owner));
            Value::Object(term)
        })
        .collect())
}

/// Whole seconds in `spec[key]`, if set.
fn seconds(doc: &Doc, spec: &Map<String, Value>, key: &str) -> Result<Option<u64>, ConvertError> {
    match spec.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or_else(|| {
            doc.invalid(
                &format!("spec.{key}"),
                format!("must be a whole number of seconds, not {value}"),
            )
        }),
    }
}

/// A v1 duration for whole seconds: `720h`, `1h30m`, `45s`.
fn duration(seconds: u64) -> String {
    if seconds == 0 {
        return "0s".into();
    }
    let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    let mut out = String::new();
    for (n, unit) in [(h, 'h'), (m, 'm'), (s, 's')] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// `spec[key]` as a mapping (empty when absent); `at` is where `spec` is, for messages.
fn object_at<'a>(
    doc: &Doc,
    spec: &'a Map<String, Value>,
    at: &str,
    key: &str,
) -> Result<&'a Map<String, Value>, ConvertError> {
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    match spec.get(key) {
        None | Some(Value::Null) => Ok(&EMPTY),
        Some(Value::Object(map)) => Ok(map),
        Some(other) => Err(ConvertError::NotAMapping {
            index: doc.index,
            object: doc.label(),
            field: format!("{at}.{key}"),
            found: kind_of_value(other),
        }),
    }
}

/// `spec[key]` as a list (empty when absent).
fn list_at(doc: &Doc, spec: &Map<String, Value>, key: &str) -> Result<Vec<Value>, ConvertError> {
    match spec.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items.clone()),
        Some(other) => Err(doc.invalid(
            &format!("spec.{key}"),
            format!("must be a list, not {}", kind_of_value(other)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::duration;

    #[test]
    fn durations_are_what_v1_accepts() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(30), "30s");
        assert_eq!(duration(2_592_000), "720h");
        assert_eq!(duration(5400), "1h30m");
        assert_eq!(duration(3661), "1h1m1s");
    }
}
