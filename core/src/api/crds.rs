//! The CRDs, generated from the types plus the CEL rules in [`super::rules`].

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
    ValidationRule,
};
use kube::CustomResourceExt;

use super::rules::{CelRule, cel_rules};
use super::schema::QUANTITY_PATTERN;
use super::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};

/// Why a CEL rule could not be attached (a rule names a path the schema does not have).
#[derive(Debug, thiserror::Error)]
#[error("CEL rule for {crd} at {path}: no such schema node")]
pub struct RuleTargetMissing {
    crd: String,
    path: String,
}

/// Every CRD karpenter-rs serves, with CEL rules attached, in a stable order.
pub fn all() -> Result<Vec<CustomResourceDefinition>, RuleTargetMissing> {
    let mut crds = vec![
        NodePool::crd(),
        NodeClaim::crd(),
        EC2NodeClass::crd(),
        NodeOverlay::crd(),
        CapacityBuffer::crd(),
    ];
    for crd in &mut crds {
        crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
        for version in &mut crd.spec.versions {
            if let Some(schema) = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            {
                tidy(schema);
                add_type_and_object_meta(schema);
            }
        }
        let kind = crd.spec.names.kind.clone();
        for rule in cel_rules(&kind) {
            attach(crd, &rule)?;
        }
    }
    Ok(crds)
}

/// What every resource root has, declared as controller-gen declares it.
fn add_type_and_object_meta(root: &mut JSONSchemaProps) {
    let string = |description: &str| JSONSchemaProps {
        type_: Some("string".into()),
        description: Some(description.into()),
        ..JSONSchemaProps::default()
    };
    let properties = root.properties.get_or_insert_with(Default::default);
    properties.insert(
        "apiVersion".into(),
        string("APIVersion defines the versioned schema of this representation of an object."),
    );
    properties.insert(
        "kind".into(),
        string("Kind is a string value representing the REST resource this object represents."),
    );
    properties.insert(
        "metadata".into(),
        JSONSchemaProps {
            type_: Some("object".into()),
            ..JSONSchemaProps::default()
        },
    );
}

/// Gives the schema the shape upstream's generated CRDs have: quantities as int-or-string with
/// the quantity pattern (instead of k8s-openapi's page-long description), no `nullable` (an
/// optional field may be left out; a `null` the API server drops before validating) and no
/// `title`.
fn tidy(node: &mut JSONSchemaProps) {
    node.nullable = None;
    node.title = None;
    if node.x_kubernetes_int_or_string == Some(true) {
        node.description = None;
        node.pattern = Some(QUANTITY_PATTERN.to_owned());
        node.any_of = Some(vec![
            JSONSchemaProps {
                type_: Some("integer".into()),
                ..JSONSchemaProps::default()
            },
            JSONSchemaProps {
                type_: Some("string".into()),
                ..JSONSchemaProps::default()
            },
        ]);
    }
    for child in node.properties.iter_mut().flat_map(|p| p.values_mut()) {
        tidy(child);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = node.items.as_mut() {
        tidy(items);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(values)) = node.additional_properties.as_mut() {
        tidy(values);
    }
}

/// The file name a CRD is stored under in `deploy/crds/`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

fn attach(crd: &mut CustomResourceDefinition, rule: &CelRule) -> Result<(), RuleTargetMissing> {
    let missing = || RuleTargetMissing {
        crd: crd.spec.names.kind.clone(),
        path: rule.path.to_owned(),
    };
    let mut node = crd
        .spec
        .versions
        .first_mut()
        .and_then(|v| v.schema.as_mut())
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .ok_or_else(missing)?;
    for segment in rule.path.split('.').filter(|s| !s.is_empty()) {
        node = step(node, segment).ok_or_else(missing)?;
    }
    node.x_kubernetes_validations
        .get_or_insert_with(Vec::new)
        .push(ValidationRule {
            rule: rule.rule.clone(),
            message: Some(rule.message.clone()),
            ..ValidationRule::default()
        });
    Ok(())
}

/// One path step: a property name, optionally followed by `[]` (list items) or `{}` (map values).
fn step<'a>(node: &'a mut JSONSchemaProps, segment: &str) -> Option<&'a mut JSONSchemaProps> {
    let (name, suffix) = match segment.find(['[', '{']) {
        Some(i) => segment.split_at(i),
        None => (segment, ""),
    };
    let node = node.properties.as_mut()?.get_mut(name)?;
    match suffix {
        "" => Some(node),
        "[]" => match node.items.as_mut()? {
            JSONSchemaPropsOrArray::Schema(s) => Some(s),
            JSONSchemaPropsOrArray::Schemas(_) => None,
        },
        "{}" => match node.additional_properties.as_mut()? {
            JSONSchemaPropsOrBool::Schema(s) => Some(s),
            JSONSchemaPropsOrBool::Bool(_) => None,
        },
        _ => None,
    }
}

/// The CRDs as one multi-document YAML stream (what `karpenter crds` prints).
pub fn to_yaml(crds: &[CustomResourceDefinition]) -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(crd)?);
    }
    Ok(out)
}
