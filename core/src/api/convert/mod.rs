//! `karpenter convert`: manifests of every released Karpenter API to v1, in one step.
//!
//! - `karpenter.sh/v1alpha5` `Provisioner` and `karpenter.k8s.aws/v1alpha1` `AWSNodeTemplate`
//!   (Karpenter v0.2x–v0.31) become a v1 `NodePool` and `EC2NodeClass` ([`v1alpha5`]);
//! - `karpenter.sh/v1beta1` `NodePool`/`NodeClaim` and `karpenter.k8s.aws/v1beta1`
//!   `EC2NodeClass` (v0.32–v0.37) become v1 ([`v1beta1`]);
//! - kubelet settings move to the EC2NodeClass the pools use, and a class whose pools
//!   disagree on them is split ([`kubelet`]);
//! - workloads' selectors and annotations on retired Karpenter labels are rewritten
//!   ([`workloads`]);
//! - what the API server would prune (`null`s, server-set metadata, status) is dropped, so
//!   what `kubectl apply` accepts, `karpenter validate` accepts.
//!
//! Every change is named; a step that needs a person is marked manual with the exact field.

mod kubelet;
mod v1alpha5;
mod v1beta1;
mod workloads;

use serde_json::Value;

use super::manifest::split_documents;

/// One change the conversion made, or a step it could not make for you.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `Kind/name` of the object.
    pub object: String,
    /// What changed, e.g. `spec.disruption.consolidationPolicy: WhenUnderutilized → WhenEmptyOrUnderutilized`.
    pub description: String,
    /// The change needs a person: the conversion could not complete it.
    pub manual: bool,
}

/// The result of converting a YAML stream.
#[derive(Debug, Clone)]
pub struct Conversion {
    /// The converted documents (v1), in input order; a Provisioner's inline provider and a
    /// split EC2NodeClass follow the object they came from; other documents unchanged but
    /// for retired Karpenter labels and annotations.
    pub documents: Vec<Value>,
    /// What changed.
    pub changes: Vec<Change>,
}

impl Conversion {
    /// The documents as one YAML stream, each after `---`.
    pub fn yaml(&self) -> Result<String, serde_yaml_ng::Error> {
        let mut out = String::new();
        for doc in &self.documents {
            out.push_str("---\n");
            out.push_str(&serde_yaml_ng::to_string(doc)?);
        }
        Ok(out)
    }
}

/// Why a stream could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// A document is not valid YAML.
    #[error("document {index}: not valid YAML: {message}")]
    Yaml {
        /// 1-based document index.
        index: usize,
        /// Parser message.
        message: String,
    },
    /// A field the conversion reads or rewrites holds something other than a mapping.
    #[error(
        "document {index} ({object}): {field} must be a mapping, not {found}; fix it and convert again"
    )]
    NotAMapping {
        /// 1-based document index.
        index: usize,
        /// `Kind/name`.
        object: String,
        /// The field's path, e.g. `spec.template.spec`.
        field: String,
        /// What it holds (`a string`, `a list`, …).
        found: &'static str,
    },
    /// A field holds a value its API version never accepted.
    #[error("document {index} ({object}): {field}: {message}")]
    Invalid {
        /// 1-based document index.
        index: usize,
        /// `Kind/name`.
        object: String,
        /// The field's path.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

/// The changes of one conversion, as they are found.
#[derive(Debug, Default)]
struct Notes(Vec<Change>);

impl Notes {
    /// A change made.
    fn changed(&mut self, object: &str, description: impl Into<String>) {
        self.push(object, description.into(), false);
    }

    /// A step a person has to take.
    fn manual(&mut self, object: &str, description: impl Into<String>) {
        self.push(object, description.into(), true);
    }

    fn push(&mut self, object: &str, description: String, manual: bool) {
        self.0.push(Change {
            object: object.to_owned(),
            description,
            manual,
        });
    }
}

/// A document being converted: where it was, and what it is.
struct Doc {
    index: usize,
    value: Value,
}

impl Doc {
    fn api(&self) -> &str {
        self.value["apiVersion"].as_str().unwrap_or_default()
    }

    fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.value["metadata"]["name"]
            .as_str()
            .unwrap_or("<no name>")
    }

    fn label(&self) -> String {
        format!("{}/{}", self.kind(), self.name())
    }

    /// `Err` naming `field` unless it is a mapping or absent.
    fn mapping_at(&self, field: &str) -> Result<(), ConvertError> {
        let mut value = &self.value;
        for part in field.split('.') {
            value = &value[part];
        }
        if value.is_null() || value.is_object() {
            return Ok(());
        }
        Err(ConvertError::NotAMapping {
            index: self.index,
            object: self.label(),
            field: field.to_owned(),
            found: kind_of_value(value),
        })
    }

    fn invalid(&self, field: &str, message: impl Into<String>) -> ConvertError {
        ConvertError::Invalid {
            index: self.index,
            object: self.label(),
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// The fields a conversion of `api`/`kind` reads or writes into: each must be a mapping or
/// absent.
fn mapping_fields(api: &str, kind: &str) -> &'static [&'static str] {
    match (api, kind) {
        ("karpenter.sh/v1alpha5", "Provisioner") => &[
            "metadata",
            "spec",
            "spec.limits",
            "spec.consolidation",
            "spec.providerRef",
            "spec.provider",
            "spec.kubeletConfiguration",
        ],
        ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate") => &[
            "metadata",
            "spec",
            "spec.subnetSelector",
            "spec.securityGroupSelector",
            "spec.amiSelector",
        ],
        ("karpenter.sh/v1beta1", "NodePool") => &[
            "metadata",
            "spec",
            "spec.disruption",
            "spec.template",
            "spec.template.spec",
            "spec.template.spec.nodeClassRef",
        ],
        ("karpenter.sh/v1beta1", "NodeClaim") => &["metadata", "spec", "spec.nodeClassRef"],
        // Kubelet settings are written into v1 classes too.
        ("karpenter.k8s.aws/v1beta1" | "karpenter.k8s.aws/v1", "EC2NodeClass") => {
            &["metadata", "spec"]
        }
        _ => &[],
    }
}

fn kind_of_value(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Choices a conversion cannot read from the manifests.
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// The instance profile of classes that name none: v1alpha1 took it from the
    /// `aws.defaultInstanceProfile` setting, which v1 does not have.
    pub default_instance_profile: Option<String>,
}

/// Converts every Karpenter object of a YAML stream to v1 (see the module's documentation).
pub fn convert(text: &str) -> Result<Conversion, ConvertError> {
    convert_with(text, &ConvertOptions::default())
}

/// [`convert`] with choices the manifests cannot say.
pub fn convert_with(text: &str, options: &ConvertOptions) -> Result<Conversion, ConvertError> {
    let mut docs = Vec::new();
    for (i, parsed) in split_documents(text).into_iter().enumerate() {
        match parsed {
            Ok(Value::Null) => {}
            Ok(value) => {
                let doc = Doc {
                    index: i + 1,
                    value,
                };
                for field in mapping_fields(doc.api(), doc.kind()) {
                    doc.mapping_at(field)?;
                }
                docs.push(doc);
            }
            Err(message) => {
                return Err(ConvertError::Yaml {
                    index: i + 1,
                    message,
                });
            }
        }
    }
    let mut notes = Notes::default();
    let mut kubelets = kubelet::Kubelets::default();
    let mut out: Vec<Value> = Vec::with_capacity(docs.len());
    for mut doc in docs {
        let karpenter = is_karpenter(doc.api());
        if karpenter {
            strip_server_fields(&mut doc, &mut notes);
        }
        match (doc.api(), doc.kind()) {
            ("karpenter.sh/v1alpha5", "Provisioner") => {
                let converted = v1alpha5::provisioner(&doc, options, &mut notes)?;
                if let Some(source) = converted.kubelet {
                    kubelets.add(source, out.len());
                }
                out.push(converted.nodepool);
                out.extend(converted.nodeclass);
            }
            ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate") => {
                out.push(v1alpha5::node_template(&doc, options, &mut notes)?);
            }
            ("karpenter.sh/v1alpha5", "Machine") => notes.changed(
                &doc.label(),
                "dropped: Machines are made by the controller, never applied; karpenter-rs makes NodeClaims for its NodePools itself",
            ),
            ("karpenter.sh/v1beta1", "NodePool") => {
                if let Some(source) = v1beta1::nodepool(&mut doc, &mut notes) {
                    kubelets.add(source, out.len());
                }
                out.push(doc.value);
            }
            ("karpenter.sh/v1beta1", "NodeClaim") => {
                v1beta1::nodeclaim(&mut doc, &mut notes);
                out.push(doc.value);
            }
            ("karpenter.k8s.aws/v1beta1", "EC2NodeClass") => {
                v1beta1::nodeclass(&mut doc, &mut notes);
                out.push(doc.value);
            }
            _ if karpenter => out.push(doc.value),
            _ => {
                let label = doc.label();
                workloads::rewrite(&mut doc.value, &label, &mut notes);
                out.push(doc.value);
            }
        }
    }
    kubelets.apply(&mut out, &mut notes);
    for value in out.iter_mut().filter(|v| is_karpenter_v1(v)) {
        let label = format!(
            "{}/{}",
            value["kind"].as_str().unwrap_or_default(),
            value["metadata"]["name"].as_str().unwrap_or("<no name>")
        );
        let mut pruned = Vec::new();
        prune_nulls(value, "", &mut pruned);
        for path in pruned {
            notes.changed(
                &label,
                format!("{path}: null dropped (the API server prunes it and applies the default)"),
            );
        }
    }
    Ok(Conversion {
        documents: out,
        changes: notes.0,
    })
}

fn is_karpenter(api: &str) -> bool {
    api.starts_with("karpenter.sh/") || api.starts_with("karpenter.k8s.aws/")
}

fn is_karpenter_v1(value: &Value) -> bool {
    matches!(
        value["apiVersion"].as_str(),
        Some("karpenter.sh/v1" | "karpenter.k8s.aws/v1")
    )
}

/// Metadata the API server sets, and status: an export (`kubectl get -o yaml`) carries
/// them, and applying them to another cluster or version is refused or meaningless.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// The client-side apply record, which names the old API version.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn strip_server_fields(doc: &mut Doc, notes: &mut Notes) {
    let label = doc.label();
    let mut dropped = Vec::new();
    if let Some(metadata) = doc.value.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in SERVER_METADATA {
            if metadata.remove(*key).is_some() {
                dropped.push(format!("metadata.{key}"));
            }
        }
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
            && annotations.remove(LAST_APPLIED).is_some()
        {
            dropped.push(format!("metadata.annotations[{LAST_APPLIED}]"));
            if annotations.is_empty() {
                metadata.remove("annotations");
            }
        }
    }
    if let Some(object) = doc.value.as_object_mut()
        && object.remove("status").is_some()
    {
        dropped.push("status".into());
    }
    if !dropped.is_empty() {
        notes.changed(
            &label,
            format!("{} dropped (set by the API server)", dropped.join(", ")),
        );
    }
}

/// Drops `null` values (none of the v1 fields is nullable), recording their paths.
fn prune_nulls(value: &mut Value, path: &str, pruned: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let nulls: Vec<String> = map
                .iter()
                .filter(|(_, v)| v.is_null())
                .map(|(k, _)| k.clone())
                .collect();
            for key in nulls {
                map.remove(&key);
                pruned.push(join(path, &key));
            }
            for (key, child) in map.iter_mut() {
                prune_nulls(child, &join(path, key), pruned);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                prune_nulls(item, &format!("{path}[{i}]"), pruned);
            }
        }
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn take(value: &mut Value, key: &str) -> Option<Value> {
    value.as_object_mut().and_then(|m| m.remove(key))
}

/// The alias family of a v1beta1/v1alpha1 `amiFamily`, if v1 has an alias for it.
fn alias_family(family: &str) -> Option<&'static str> {
    Some(match family {
        "AL2" => "al2",
        "AL2023" => "al2023",
        "Bottlerocket" => "bottlerocket",
        "Windows2019" => "windows2019",
        "Windows2022" => "windows2022",
        _ => return None,
    })
}

/// `nodeClassRef` as v1 wants it: `group` and `kind` beside `name`.
fn convert_node_class_ref(spec: &mut Value, label: &str, notes: &mut Notes) {
    let Some(reference) = spec.get_mut("nodeClassRef") else {
        return;
    };
    if !reference.is_object() {
        return;
    }
    if let Some(api_version) = take(reference, "apiVersion") {
        let group = api_version
            .as_str()
            .and_then(|a| a.split('/').next())
            .unwrap_or("karpenter.k8s.aws")
            .to_owned();
        reference["group"] = Value::String(group.clone());
        notes.changed(
            label,
            format!("nodeClassRef.apiVersion {api_version} → nodeClassRef.group {group:?}"),
        );
    }
    if reference.get("group").is_none() {
        reference["group"] = Value::String("karpenter.k8s.aws".into());
        notes.changed(label, "nodeClassRef.group: karpenter.k8s.aws added");
    }
    if reference.get("kind").is_none() {
        reference["kind"] = Value::String("EC2NodeClass".into());
        notes.changed(label, "nodeClassRef.kind: EC2NodeClass added");
    }
}

#[cfg(test)]
mod tests;
