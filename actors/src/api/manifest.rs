//! Reading Karpenter manifests: multi-document YAML in, typed objects and every problem out;
//! and the v1beta1 → v1 conversion.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::validation::{FieldPath, Problem, Problems, Validate};
use super::{EC2NodeClass, NodeClaim, NodePool, crds, schema_check};

/// A Karpenter object read from a manifest.
#[derive(Debug, Clone, PartialEq)]
pub enum KarpenterObject {
    /// `karpenter.sh/v1` NodePool.
    NodePool(Box<NodePool>),
    /// `karpenter.sh/v1` NodeClaim.
    NodeClaim(Box<NodeClaim>),
    /// `karpenter.k8s.aws/v1` EC2NodeClass.
    EC2NodeClass(Box<EC2NodeClass>),
}

/// What was found in one YAML document.
#[derive(Debug, Clone)]
pub struct DocumentReport {
    /// 1-based position of the document in its stream.
    pub index: usize,
    /// `kind`, when the document has one.
    pub kind: Option<String>,
    /// `metadata.name`, when the document has one.
    pub name: Option<String>,
    /// The typed object, when it could be read (it may still have problems).
    pub object: Option<KarpenterObject>,
    /// Every problem found.
    pub problems: Vec<Problem>,
    /// The document is not a Karpenter object and was not checked.
    pub skipped: bool,
}

impl DocumentReport {
    /// `Kind/name` or what is known of it.
    pub fn label(&self) -> String {
        format!(
            "{}/{}",
            self.kind.as_deref().unwrap_or("<no kind>"),
            self.name.as_deref().unwrap_or("<no name>")
        )
    }
}

/// Why manifests could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The CRDs could not be built (a bug: a CEL rule names a missing schema node).
    #[error(transparent)]
    Crds(#[from] crds::RuleTargetMissing),
}

/// Checks manifests against the CRD schemas and upstream's rules.
pub struct ManifestChecker {
    crds: Vec<CustomResourceDefinition>,
}

const V1BETA1_GROUPS: &[(&str, &str)] = &[
    ("karpenter.sh/v1beta1", "karpenter.sh/v1"),
    ("karpenter.k8s.aws/v1beta1", "karpenter.k8s.aws/v1"),
];

impl ManifestChecker {
    /// Builds the checker from the generated CRDs.
    pub fn new() -> Result<Self, ManifestError> {
        Ok(ManifestChecker { crds: crds::all()? })
    }

    fn schema_for(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Option<&k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps>
    {
        self.crds
            .iter()
            .find(|crd| {
                crd.spec.names.kind == kind
                    && crd
                        .spec
                        .versions
                        .iter()
                        .any(|v| format!("{}/{}", crd.spec.group, v.name) == api_version)
            })
            .and_then(|crd| crd.spec.versions.first())
            .and_then(|v| v.schema.as_ref())
            .and_then(|s| s.open_api_v3_schema.as_ref())
    }

    /// Checks every document of a YAML stream.
    pub fn check_str(&self, text: &str) -> Vec<DocumentReport> {
        split_documents(text)
            .into_iter()
            .enumerate()
            .filter_map(|(i, doc)| self.check_document(i + 1, doc))
            .collect()
    }

    fn check_document(&self, index: usize, doc: Result<Value, String>) -> Option<DocumentReport> {
        let mut report = DocumentReport {
            index,
            kind: None,
            name: None,
            object: None,
            problems: Vec::new(),
            skipped: false,
        };
        let mut problems = Problems::default();
        let value = match doc {
            Ok(Value::Null) => return None,
            Ok(value) => value,
            Err(message) => {
                problems.push(&FieldPath::root(), format!("not valid YAML: {message}"));
                report.problems = problems.into_vec();
                return Some(report);
            }
        };
        let Some(object) = value.as_object() else {
            problems.push(
                &FieldPath::root(),
                "a manifest document must be a mapping with apiVersion and kind",
            );
            report.problems = problems.into_vec();
            return Some(report);
        };
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        report.kind = text(object.get("kind"));
        report.name = text(object.get("metadata").and_then(|m| m.get("name")));
        let api_version = text(object.get("apiVersion")).unwrap_or_default();
        let kind = report.kind.clone().unwrap_or_default();
        if let Some((_, v1)) = V1BETA1_GROUPS.iter().find(|(old, _)| *old == api_version) {
            problems.push(
                &FieldPath::new("apiVersion"),
                format!(
                    "{api_version} is not served; this is the Karpenter v1beta1 → v1 migration: run `karpenter convert FILE` to rewrite it as {v1} (consolidationPolicy WhenUnderutilized → WhenEmptyOrUnderutilized, expireAfter moves into the template, nodeClassRef gains group and kind, kubelet moves to the EC2NodeClass, amiFamily becomes an amiSelectorTerms alias)"
                ),
            );
            report.problems = problems.into_vec();
            return Some(report);
        }
        if api_version == "karpenter.sh/v1alpha5" || api_version == "karpenter.k8s.aws/v1alpha1" {
            problems.push(
                &FieldPath::new("apiVersion"),
                format!("{api_version} ({kind}) predates v1beta1; migrate Provisioner/AWSNodeTemplate to v1beta1 NodePool/EC2NodeClass first (upstream's v1alpha5 → v1beta1 migration), then run `karpenter convert`"),
            );
            report.problems = problems.into_vec();
            return Some(report);
        }
        let Some(schema) = self.schema_for(&api_version, &kind) else {
            let ours = api_version.starts_with("karpenter.sh/")
                || api_version.starts_with("karpenter.k8s.aws/");
            if ours {
                problems.push(
                    &FieldPath::new("kind"),
                    format!("{api_version} has no kind {kind:?}; expected NodePool or NodeClaim (karpenter.sh/v1) or EC2NodeClass (karpenter.k8s.aws/v1)"),
                );
                report.problems = problems.into_vec();
            } else {
                report.skipped = true;
            }
            return Some(report);
        };
        schema_check::check(&value, schema, &mut problems);
        check_metadata(object, &mut problems);
        let structural: Vec<Problem> = problems.iter().cloned().collect();
        // Values the structural check refused are dropped (bounded) so that the typed rules
        // still run on the rest of the object: one mistake must not hide the others.
        let mut repaired = value.clone();
        let mut typed_result = read_typed(&kind, &repaired);
        for _ in 0..32 {
            let Err((_, segments)) = &typed_result else {
                break;
            };
            if segments.is_empty() || !remove_at(&mut repaired, segments) {
                break;
            }
            typed_result = read_typed(&kind, &repaired);
        }
        match typed_result {
            Ok(object) => {
                let semantic = match &object {
                    KarpenterObject::NodePool(o) => o.validate(),
                    KarpenterObject::NodeClaim(o) => o.validate(),
                    KarpenterObject::EC2NodeClass(o) => o.validate(),
                };
                for problem in semantic.into_vec() {
                    if !structural.iter().any(|s| s.path == problem.path) {
                        problems.push(&problem.path, problem.message);
                    }
                }
                if structural.is_empty() {
                    report.object = Some(object);
                }
            }
            // The structural check already names what stops the typed read.
            Err(_) if !structural.is_empty() => {}
            Err((problem, _)) => problems.push(&problem.path, problem.message),
        }
        let mut list = problems.into_vec();
        list.dedup();
        report.problems = list;
        Some(report)
    }
}

fn check_metadata(object: &Map<String, Value>, problems: &mut Problems) {
    let name = object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str);
    let path = FieldPath::new("metadata.name");
    match name {
        None => problems.push(&path, "required field is missing"),
        Some(name) => {
            let ok = !name.is_empty()
                && name.len() <= 253
                && name.split('.').all(|p| {
                    !p.is_empty()
                        && p.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                        && !p.starts_with('-')
                        && !p.ends_with('-')
                });
            if !ok {
                problems.push(&path, format!("invalid name {name:?}: must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.')"));
            }
        }
    }
}

/// Where a typed read failed, as JSON path segments (`Some(key)` or `None` + index).
type Segments = Vec<Segment>;

#[derive(Debug, Clone)]
enum Segment {
    Key(String),
    Index(usize),
}

fn read_typed(kind: &str, value: &Value) -> Result<KarpenterObject, (Problem, Segments)> {
    match kind {
        "NodePool" => typed::<NodePool>(value).map(|o| KarpenterObject::NodePool(Box::new(o))),
        "NodeClaim" => typed::<NodeClaim>(value).map(|o| KarpenterObject::NodeClaim(Box::new(o))),
        _ => typed::<EC2NodeClass>(value).map(|o| KarpenterObject::EC2NodeClass(Box::new(o))),
    }
}

fn typed<T: DeserializeOwned>(value: &Value) -> Result<T, (Problem, Segments)> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let segments = e
            .path()
            .iter()
            .filter_map(|segment| match segment {
                serde_path_to_error::Segment::Map { key } => Some(Segment::Key(key.clone())),
                serde_path_to_error::Segment::Seq { index } => Some(Segment::Index(*index)),
                _ => None,
            })
            .collect();
        let path = e.path().to_string();
        let problem = Problem {
            path: if path == "." {
                FieldPath::root()
            } else {
                FieldPath::new(&path)
            },
            message: e.into_inner().to_string(),
        };
        (problem, segments)
    })
}

/// Removes the value at `segments`; returns whether something was removed.
fn remove_at(value: &mut Value, segments: &[Segment]) -> bool {
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    let mut node = value;
    for segment in parents {
        node = match (segment, node) {
            (Segment::Key(k), Value::Object(map)) => match map.get_mut(k) {
                Some(child) => child,
                None => return false,
            },
            (Segment::Index(i), Value::Array(items)) => match items.get_mut(*i) {
                Some(child) => child,
                None => return false,
            },
            _ => return false,
        };
    }
    match (last, node) {
        (Segment::Key(k), Value::Object(map)) => map.remove(k).is_some(),
        (Segment::Index(i), Value::Array(items)) if *i < items.len() => {
            items.remove(*i);
            true
        }
        _ => false,
    }
}

/// Splits a YAML stream into documents, each parsed to JSON or an error with its location.
pub fn split_documents(text: &str) -> Vec<Result<Value, String>> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let parsed = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc)
            .and_then(|v| serde_json::to_value(v).map_err(serde::de::Error::custom))
            .map_err(|e| e.to_string());
        let failed = parsed.is_err();
        out.push(parsed);
        // After a syntax error the parser cannot find the next document boundary reliably.
        if failed {
            break;
        }
    }
    out
}

// ---- v1beta1 → v1 ----------------------------------------------------------------------

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
    /// The converted documents (v1), in input order; non-Karpenter documents unchanged.
    pub documents: Vec<Value>,
    /// What changed.
    pub changes: Vec<Change>,
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
}

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

/// Converts `karpenter.sh/v1beta1` NodePools/NodeClaims and `karpenter.k8s.aws/v1beta1`
/// EC2NodeClasses to v1. Kubelet settings move from NodePools to the EC2NodeClass they
/// reference when that EC2NodeClass is in the same stream; otherwise the change is reported
/// as manual.
pub fn convert_v1beta1(text: &str) -> Result<Conversion, ConvertError> {
    let mut documents = Vec::new();
    for (i, doc) in split_documents(text).into_iter().enumerate() {
        match doc {
            Ok(Value::Null) => {}
            Ok(value) => documents.push(value),
            Err(message) => {
                return Err(ConvertError::Yaml {
                    index: i + 1,
                    message,
                });
            }
        }
    }
    let mut changes = Vec::new();
    let mut kubelet_for_class: BTreeMap<String, (String, Value)> = BTreeMap::new();
    for doc in &mut documents {
        let api = doc["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or("<no name>")
            .to_owned();
        let label = format!("{kind}/{name}");
        let mut note = |description: String, manual: bool| {
            changes.push(Change {
                object: label.clone(),
                description,
                manual,
            });
        };
        match (api.as_str(), kind.as_str()) {
            ("karpenter.sh/v1beta1", "NodePool") => {
                doc["apiVersion"] = json!("karpenter.sh/v1");
                note(
                    "apiVersion: karpenter.sh/v1beta1 → karpenter.sh/v1".into(),
                    false,
                );
                let spec = &mut doc["spec"];
                if spec["disruption"]["consolidationPolicy"] == json!("WhenUnderutilized") {
                    spec["disruption"]["consolidationPolicy"] = json!("WhenEmptyOrUnderutilized");
                    note("spec.disruption.consolidationPolicy: WhenUnderutilized → WhenEmptyOrUnderutilized".into(), false);
                }
                if let Some(expire) = take(&mut spec["disruption"], "expireAfter") {
                    note(
                        format!(
                            "spec.disruption.expireAfter ({expire}) → spec.template.spec.expireAfter"
                        ),
                        false,
                    );
                    spec["template"]["spec"]["expireAfter"] = expire;
                }
                let template = &mut spec["template"]["spec"];
                convert_node_class_ref(template, &mut note);
                if let Some(resources) = take(template, "resources") {
                    note(
                        format!(
                            "spec.template.spec.resources ({resources}) removed: v1 has no template resources"
                        ),
                        false,
                    );
                }
                if let Some(kubelet) = take(template, "kubelet") {
                    let class = template["nodeClassRef"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    kubelet_for_class.insert(class.clone(), (label.clone(), kubelet.clone()));
                    note(
                        format!(
                            "spec.template.spec.kubelet moved to EC2NodeClass/{class} spec.kubelet"
                        ),
                        false,
                    );
                }
            }
            ("karpenter.sh/v1beta1", "NodeClaim") => {
                doc["apiVersion"] = json!("karpenter.sh/v1");
                note(
                    "apiVersion: karpenter.sh/v1beta1 → karpenter.sh/v1".into(),
                    false,
                );
                let spec = &mut doc["spec"];
                convert_node_class_ref(spec, &mut note);
                if take(spec, "kubelet").is_some() {
                    note(
                        "spec.kubelet removed: in v1 kubelet settings live on the EC2NodeClass"
                            .into(),
                        false,
                    );
                }
            }
            ("karpenter.k8s.aws/v1beta1", "EC2NodeClass") => {
                doc["apiVersion"] = json!("karpenter.k8s.aws/v1");
                note(
                    "apiVersion: karpenter.k8s.aws/v1beta1 → karpenter.k8s.aws/v1".into(),
                    false,
                );
                let spec = &mut doc["spec"];
                let has_terms = spec["amiSelectorTerms"]
                    .as_array()
                    .is_some_and(|t| !t.is_empty());
                let family = spec["amiFamily"].as_str().map(str::to_owned);
                match (has_terms, family.as_deref()) {
                    (false, Some(family)) => match alias_family(family) {
                        Some(alias) => {
                            take(spec, "amiFamily");
                            spec["amiSelectorTerms"] =
                                json!([{ "alias": format!("{alias}@latest") }]);
                            note(
                                format!(
                                    "spec.amiFamily: {family} → spec.amiSelectorTerms: [{{alias: {alias}@latest}}] (pin a version instead of @latest for controlled rollouts)"
                                ),
                                false,
                            );
                        }
                        None => note(
                            format!(
                                "spec.amiFamily {family} needs amiSelectorTerms in v1; add terms that select your AMIs"
                            ),
                            true,
                        ),
                    },
                    (false, None) => {
                        spec["amiSelectorTerms"] = json!([{ "alias": "al2@latest" }]);
                        note("spec.amiSelectorTerms: [{alias: al2@latest}] added (v1beta1 defaulted amiFamily to AL2)".into(), false);
                    }
                    (true, _) => {}
                }
            }
            _ => {}
        }
    }
    for doc in &mut documents {
        if doc["apiVersion"] == json!("karpenter.k8s.aws/v1")
            && doc["kind"] == json!("EC2NodeClass")
        {
            let name = doc["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if let Some((from, kubelet)) = kubelet_for_class.remove(&name) {
                if doc["spec"].get("kubelet").is_some_and(|k| *k != kubelet) {
                    changes.push(Change {
                        object: format!("EC2NodeClass/{name}"),
                        description: format!("spec.kubelet already set and differs from {from}'s kubelet {kubelet}; reconcile them by hand"),
                        manual: true,
                    });
                } else {
                    doc["spec"]["kubelet"] = kubelet;
                    changes.push(Change {
                        object: format!("EC2NodeClass/{name}"),
                        description: format!("spec.kubelet set from {from}"),
                        manual: false,
                    });
                }
            }
        }
    }
    for (class, (from, kubelet)) in kubelet_for_class {
        changes.push(Change {
            object: from,
            description: format!("kubelet {kubelet} must be added to EC2NodeClass/{class} spec.kubelet, which is not in this input; convert both together or add it by hand"),
            manual: true,
        });
    }
    Ok(Conversion { documents, changes })
}

fn take(value: &mut Value, key: &str) -> Option<Value> {
    value.as_object_mut().and_then(|m| m.remove(key))
}

fn convert_node_class_ref(spec: &mut Value, note: &mut impl FnMut(String, bool)) {
    let reference = &mut spec["nodeClassRef"];
    if !reference.is_object() {
        return;
    }
    if let Some(api_version) = take(reference, "apiVersion") {
        let group = api_version
            .as_str()
            .and_then(|a| a.split('/').next())
            .unwrap_or("karpenter.k8s.aws")
            .to_owned();
        reference["group"] = json!(group);
        note(
            format!("nodeClassRef.apiVersion {api_version} → nodeClassRef.group {group:?}"),
            false,
        );
    }
    if reference.get("group").is_none() {
        reference["group"] = json!("karpenter.k8s.aws");
        note("nodeClassRef.group: karpenter.k8s.aws added".into(), false);
    }
    if reference.get("kind").is_none() {
        reference["kind"] = json!("EC2NodeClass");
        note("nodeClassRef.kind: EC2NodeClass added".into(), false);
    }
}
