//! Reading Karpenter manifests: multi-document YAML in, typed objects and every problem out;
//! and the v1beta1 → v1 conversion.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::validation::{FieldPath, Problem, Problems, Validate};
use super::{EC2NodeClass, NodeClaim, NodePool, crds};
use kube_admission::object::Admission;

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
    /// The typed object as the API server would store it (defaulted), when it has no problems.
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

/// One served kind and how the API server admits it.
struct Kind {
    api_version: String,
    kind: String,
    admission: Admission,
    /// Property names by schema path, for "did you mean" hints.
    schema: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
}

/// Checks manifests as the API server would admit them (the CRDs' schemas and CEL rules, with
/// its messages), then with upstream's runtime validation.
pub struct ManifestChecker {
    kinds: Vec<Kind>,
}

const V1BETA1_GROUPS: &[(&str, &str)] = &[
    ("karpenter.sh/v1beta1", "karpenter.sh/v1"),
    ("karpenter.k8s.aws/v1beta1", "karpenter.k8s.aws/v1"),
];

impl ManifestChecker {
    /// Builds the checker from the generated CRDs.
    pub fn new() -> Result<Self, ManifestError> {
        let mut kinds = Vec::new();
        for crd in crds::all()? {
            for version in &crd.spec.versions {
                if let Some(schema) = version
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.clone())
                {
                    kinds.push(Kind {
                        api_version: format!("{}/{}", crd.spec.group, version.name),
                        kind: crd.spec.names.kind.clone(),
                        admission: Admission::new(schema.clone()),
                        schema,
                    });
                }
            }
        }
        Ok(ManifestChecker { kinds })
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
        let Some(served) = self
            .kinds
            .iter()
            .find(|k| k.kind == kind && k.api_version == api_version)
        else {
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
        // Unknown fields are refused, as `kubectl apply` asks the server to.
        let checked = served.admission.check(value, None);
        for field in &checked.unknown {
            let hint = did_you_mean(&served.schema, field)
                .map(|k| format!(" (did you mean {k:?}?)"))
                .unwrap_or_default();
            problems.push(&FieldPath::new(field), format!("unknown field{hint}"));
        }
        for error in &checked.errors {
            problems.push(&FieldPath::new(&error.field), error.body());
        }
        let admitted = checked.errors.is_empty().then_some(checked.object);
        if let Some(admitted) = admitted {
            match read_typed(&kind, &admitted) {
                Ok(object) => {
                    let runtime = match &object {
                        KarpenterObject::NodePool(o) => o.validate(),
                        KarpenterObject::NodeClaim(o) => o.validate(),
                        KarpenterObject::EC2NodeClass(_) => Problems::default(),
                    };
                    let admission_problems: Vec<Problem> = problems.iter().cloned().collect();
                    for problem in runtime.into_vec() {
                        if !admission_problems.iter().any(|s| s.path == problem.path) {
                            problems.push(&problem.path, problem.message);
                        }
                    }
                    if problems.is_empty() {
                        report.object = Some(object);
                    }
                }
                Err(problem) => problems.push(&problem.path, problem.message),
            }
        }
        let mut list = problems.into_vec();
        list.dedup();
        report.problems = list;
        Some(report)
    }
}

/// The declared property closest to an unknown field's last name, if close enough to be a typo.
fn did_you_mean(
    schema: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
    field: &str,
) -> Option<String> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray;
    let mut node = schema;
    let steps: Vec<&str> = field.split('.').collect();
    let (last, parents) = steps.split_last()?;
    for step in parents {
        let name = step.split('[').next().unwrap_or(step);
        node = node.properties.as_ref()?.get(name)?;
        if step.contains('[')
            && let Some(JSONSchemaPropsOrArray::Schema(items)) = &node.items
        {
            node = items;
        }
    }
    let lower = last.to_ascii_lowercase();
    node.properties
        .as_ref()?
        .keys()
        .map(|k| (edit_distance(&lower, &k.to_ascii_lowercase()), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.clone())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn read_typed(kind: &str, value: &Value) -> Result<KarpenterObject, Problem> {
    match kind {
        "NodePool" => typed::<NodePool>(value).map(|o| KarpenterObject::NodePool(Box::new(o))),
        "NodeClaim" => typed::<NodeClaim>(value).map(|o| KarpenterObject::NodeClaim(Box::new(o))),
        _ => typed::<EC2NodeClass>(value).map(|o| KarpenterObject::EC2NodeClass(Box::new(o))),
    }
}

/// Reads an admitted object into its Rust type. Admission guarantees the shape, so a failure
/// here is a mismatch between the CRD and the type, reported rather than hidden.
fn typed<T: DeserializeOwned>(value: &Value) -> Result<T, Problem> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        Problem {
            path: if path == "." {
                FieldPath::root()
            } else {
                FieldPath::new(&path)
            },
            message: e.into_inner().to_string(),
        }
    })
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
    /// A field the conversion rewrites holds something other than a mapping.
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
}

/// The fields a conversion of `api`/`kind` writes into: each must be a mapping or absent.
fn rewritten_fields(api: &str, kind: &str) -> &'static [&'static str] {
    match (api, kind) {
        ("karpenter.sh/v1beta1", "NodePool") => &[
            "spec",
            "spec.disruption",
            "spec.template",
            "spec.template.spec",
            "spec.template.spec.nodeClassRef",
        ],
        ("karpenter.sh/v1beta1", "NodeClaim") => &["spec", "spec.nodeClassRef"],
        ("karpenter.k8s.aws/v1beta1" | "karpenter.k8s.aws/v1", "EC2NodeClass") => &["spec"],
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

/// Refuses a document whose rewritten fields are not mappings (indexing into them to write
/// would otherwise fail), naming the field.
fn check_shape(index: usize, doc: &Value) -> Result<(), ConvertError> {
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    for field in rewritten_fields(api, kind) {
        let mut value = doc;
        for part in field.split('.') {
            value = &value[part];
        }
        if !value.is_null() && !value.is_object() {
            return Err(ConvertError::NotAMapping {
                index,
                object: format!(
                    "{kind}/{}",
                    doc["metadata"]["name"].as_str().unwrap_or("<no name>")
                ),
                field: (*field).to_owned(),
                found: kind_of_value(value),
            });
        }
    }
    Ok(())
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
            Ok(value) => {
                check_shape(i + 1, &value)?;
                documents.push(value);
            }
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
                if let Some(disruption) = spec.get_mut("disruption").and_then(Value::as_object_mut)
                    && !disruption.contains_key("consolidateAfter")
                {
                    // v1 requires it once `disruption` is given; unset meant at once.
                    disruption.insert("consolidateAfter".into(), json!("0s"));
                    note(
                        "spec.disruption.consolidateAfter: unset → \"0s\" (required in v1; v1beta1 consolidated at once when it was unset)".into(),
                        false,
                    );
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
