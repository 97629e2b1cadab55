//! Reading Karpenter manifests: multi-document YAML in, typed objects and every problem out.
//! Older APIs are named with the command that converts them ([`super::convert`]).

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::validation::{FieldPath, Problem, Problems, Validate};
use super::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool, crds};
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
    /// `karpenter.sh/v1alpha1` NodeOverlay.
    NodeOverlay(Box<NodeOverlay>),
    /// `autoscaling.x-k8s.io/v1beta1` CapacityBuffer.
    CapacityBuffer(Box<CapacityBuffer>),
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
                format!("{api_version} ({kind}) is the API of Karpenter v0.2x–v0.31 and is not served; run `karpenter convert FILE` to rewrite Provisioners and AWSNodeTemplates as v1 NodePools and EC2NodeClasses in one step (ttls become disruption and expireAfter settings, providerRef a nodeClassRef, selectors selector terms, kubeletConfiguration the class's kubelet)"),
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
                    format!("{api_version} has no kind {kind:?}; expected NodePool or NodeClaim (karpenter.sh/v1), NodeOverlay (karpenter.sh/v1alpha1) or EC2NodeClass (karpenter.k8s.aws/v1)"),
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
                        KarpenterObject::NodeOverlay(o) => o.validate(),
                        KarpenterObject::CapacityBuffer(o) => o.validate(),
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
        "NodeOverlay" => {
            typed::<NodeOverlay>(value).map(|o| KarpenterObject::NodeOverlay(Box::new(o)))
        }
        "CapacityBuffer" => {
            typed::<CapacityBuffer>(value).map(|o| KarpenterObject::CapacityBuffer(Box::new(o)))
        }
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
