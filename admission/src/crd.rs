//! Validating a CustomResourceDefinition as kube-apiserver does on create and update: names,
//! versions, the structural-schema rules, printer columns, the scale subresource, and the CEL
//! rules: each must compile against the schema, use `oldSelf` only where old and new values
//! correlate (not under lists other than `x-kubernetes-list-type: map`), and stay within the
//! estimated cost budget: 10,000,000 per rule times the number of times it can run (the product
//! of the enclosing `maxItems`/`maxProperties`, or what fits in a request when one is
//! missing), 100,000,000 for all rules of a schema together.

use super::{additional_properties, items};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};

use super::cost::{self, CostError};
use super::decl::{MAX_REQUEST_SIZE_BYTES, schema_decl};
use super::{BadValue, FieldError, Path};

/// The largest estimated cost one rule may have (times how often it can run).
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// The largest estimated cost all rules of one schema may have together.
pub const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;

/// The estimated cost of one rule, as the CRD check counted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleReport {
    /// `…x-kubernetes-validations[i].rule`.
    pub path: String,
    /// The rule.
    pub rule: String,
    /// Worst-case cost of one evaluation.
    pub max_cost: u64,
    /// How many times it can run in one object.
    pub cardinality: u64,
    /// `max_cost × cardinality`, what the limit applies to.
    pub cost: u64,
}

/// What validating a CRD found.
#[derive(Debug, Clone, Default)]
pub struct CrdReport {
    /// The errors, as the server would list them.
    pub errors: Vec<FieldError>,
    /// Every rule's estimate, in schema order.
    pub rules: Vec<RuleReport>,
    /// The schema's total estimated cost (per version).
    pub totals: Vec<u64>,
}

/// kube-apiserver's wording of a cost over its limit.
pub fn cost_error_message(cost_name: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_owned()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{cost_name} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

fn is_dns1035_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Validates `crd` as a create would.
pub fn validate(crd: &CustomResourceDefinition) -> CrdReport {
    let mut report = CrdReport::default();
    let spec = &crd.spec;
    let path = Path::new("spec");
    let required = format!("{}.{}", spec.names.plural, spec.group);
    if crd.metadata.name.as_deref() != Some(required.as_str()) {
        report.errors.push(FieldError::invalid(
            "metadata.name",
            BadValue::Str(crd.metadata.name.clone().unwrap_or_default()),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if spec.group.split('.').count() < 2 {
        report.errors.push(FieldError::invalid(
            path.child("group").as_str(),
            BadValue::Str(spec.group.clone()),
            "should be a domain with at least one dot",
        ));
    }
    if !matches!(spec.scope.as_str(), "Cluster" | "Namespaced") {
        report.errors.push(FieldError::not_supported(
            path.child("scope").as_str(),
            BadValue::Str(spec.scope.clone()),
            &["Cluster", "Namespaced"],
        ));
    }
    let names = path.child("names");
    for (field, value) in [
        ("plural", &spec.names.plural),
        ("singular", &spec.names.singular.clone().unwrap_or_default()),
    ] {
        if !is_dns1035_label(value) {
            report.errors.push(FieldError::invalid(
                names.child(field).as_str(),
                BadValue::Str(value.clone()),
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            ));
        }
    }
    if spec.versions.iter().filter(|v| v.storage).count() != 1 {
        report.errors.push(FieldError::invalid(
            path.child("versions").as_str(),
            BadValue::Omit,
            "must have exactly one version marked as storage version",
        ));
    }
    // One schema for every version is validated once, where the server's internal form keeps it.
    let schemas: Vec<(&JSONSchemaProps, Path)> = {
        let all: Vec<Option<&JSONSchemaProps>> = spec
            .versions
            .iter()
            .map(|v| {
                v.schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
            })
            .collect();
        let identical = all.windows(2).all(|w| w[0] == w[1]);
        match (identical, all.first()) {
            (true, Some(Some(schema))) => {
                vec![(*schema, path.child("validation").child("openAPIV3Schema"))]
            }
            _ => spec
                .versions
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    let schema = v.schema.as_ref()?.open_api_v3_schema.as_ref()?;
                    Some((
                        schema,
                        path.child("versions")
                            .index(i)
                            .child("schema")
                            .child("openAPIV3Schema"),
                    ))
                })
                .collect(),
        }
    };
    for (schema, at) in schemas {
        let total = validate_schema(schema, &at, &mut report);
        report.totals.push(total);
    }
    for (i, version) in spec.versions.iter().enumerate() {
        let at = path.child("versions").index(i);
        for (j, column) in version
            .additional_printer_columns
            .iter()
            .flatten()
            .enumerate()
        {
            let col = at.child("additionalPrinterColumns").index(j);
            if !matches!(
                column.type_.as_str(),
                "integer" | "number" | "string" | "boolean" | "date"
            ) {
                report.errors.push(FieldError::invalid(
                    col.child("type").as_str(),
                    BadValue::Str(column.type_.clone()),
                    "must be one of boolean,date,integer,number,string",
                ));
            }
            if !column.json_path.starts_with('.') {
                report.errors.push(FieldError::invalid(
                    col.child("JSONPath").as_str(),
                    BadValue::Str(column.json_path.clone()),
                    "must be a simple json path starting with .",
                ));
            }
        }
        if let Some(scale) = version.subresources.as_ref().and_then(|s| s.scale.as_ref()) {
            let sub = at.child("subresources");
            if !scale.spec_replicas_path.starts_with(".spec.") {
                report.errors.push(FieldError::invalid(
                    sub.child("scale.specReplicasPath").as_str(),
                    BadValue::Str(scale.spec_replicas_path.clone()),
                    "should be a json path under .spec",
                ));
            }
            if !scale.status_replicas_path.starts_with(".status.") {
                report.errors.push(FieldError::invalid(
                    sub.child("scale.statusReplicasPath").as_str(),
                    BadValue::Str(scale.status_replicas_path.clone()),
                    "should be a json path under .status",
                ));
            }
        }
    }
    report
}

/// Where a schema node sits, for its CEL rules.
#[derive(Clone)]
struct Context {
    /// How many times a value here can occur in one object; `None` when an enclosing list or map
    /// has no bound.
    cardinality: Option<u64>,
    /// The first enclosing path whose values cannot be correlated with the stored object's.
    uncorrelatable: Option<Path>,
    is_root: bool,
}

struct Expensive {
    path: String,
    cost: u64,
}

/// Validates one version's schema; returns its total estimated rule cost.
fn validate_schema(schema: &JSONSchemaProps, at: &Path, report: &mut CrdReport) -> u64 {
    if schema.nullable == Some(true) {
        report.errors.push(FieldError::forbidden(
            at.child("nullable").as_str(),
            "nullable cannot be true at the root",
        ));
    }
    let root = Context {
        cardinality: Some(1),
        uncorrelatable: None,
        is_root: true,
    };
    let schema_errors_before = report.errors.len();
    let mut expensive = Vec::new();
    let mut total: u64 = 0;
    structural(schema, at, true, &mut report.errors);
    // CEL rules are only checked on a structurally valid schema, as on the server.
    if report.errors.len() == schema_errors_before {
        rules(schema, at, &root, report, &mut total, &mut expensive);
    }
    if total > STATIC_ESTIMATED_CRD_COST_LIMIT {
        expensive.sort_by_key(|a| std::cmp::Reverse(a.cost));
        for rule in expensive.iter().take(4) {
            report.errors.push(FieldError::forbidden(
                rule.path.clone(),
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        report.errors.push(FieldError::forbidden(
            at.as_str(),
            cost_error_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                total,
                STATIC_ESTIMATED_CRD_COST_LIMIT,
            ),
        ));
    }
    total
}

/// The structural-schema rules kube-apiserver enforces on `apiextensions.k8s.io/v1` CRDs.
fn structural(schema: &JSONSchemaProps, at: &Path, is_root: bool, errors: &mut Vec<FieldError>) {
    let int_or_string = schema.x_kubernetes_int_or_string == Some(true);
    let preserves = schema.x_kubernetes_preserve_unknown_fields == Some(true);
    if schema.type_.as_deref().unwrap_or("").is_empty() && !int_or_string && !preserves {
        errors.push(FieldError::required(
            at.child("type").as_str(),
            "must not be empty for specified object fields",
        ));
    }
    if schema.properties.as_ref().is_some_and(|p| !p.is_empty())
        && additional_properties(schema).is_some()
    {
        errors.push(FieldError::forbidden(
            at.child("additionalProperties").as_str(),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if schema.type_.as_deref() == Some("array") && items(schema).is_none() {
        errors.push(FieldError::required(
            at.child("items").as_str(),
            "must be specified",
        ));
    }
    if schema.unique_items == Some(true) {
        errors.push(FieldError::forbidden(
            at.child("uniqueItems").as_str(),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if let Some(list_type) = schema.x_kubernetes_list_type.as_deref() {
        if schema.type_.as_deref() != Some("array") {
            errors.push(FieldError::invalid(
                at.child("type").as_str(),
                BadValue::Str(schema.type_.clone().unwrap_or_default()),
                "must be array if x-kubernetes-list-type is specified",
            ));
        }
        if !matches!(list_type, "atomic" | "set" | "map") {
            errors.push(FieldError::not_supported(
                at.child("x-kubernetes-list-type").as_str(),
                BadValue::Str(list_type.to_owned()),
                &["atomic", "set", "map"],
            ));
        }
        if list_type == "map" {
            let keys = schema
                .x_kubernetes_list_map_keys
                .clone()
                .unwrap_or_default();
            if keys.is_empty() {
                errors.push(FieldError::required(
                    at.child("x-kubernetes-list-map-keys").as_str(),
                    "must not be empty if x-kubernetes-list-type is map",
                ));
            }
            if let Some(item) = items(schema) {
                let required = item.required.clone().unwrap_or_default();
                for key in &keys {
                    match item.properties.as_ref().and_then(|p| p.get(key)) {
                        None => errors.push(FieldError::invalid(
                            at.child("x-kubernetes-list-map-keys").as_str(),
                            BadValue::Omit,
                            "entries must all be names of item properties",
                        )),
                        Some(property) => {
                            if !required.contains(key) && property.default.is_none() {
                                errors.push(FieldError::required(
                                    at.child("items").child("properties").key(key).child("default").as_str(),
                                    "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                                ));
                            }
                        }
                    }
                }
            }
        }
    } else if schema
        .x_kubernetes_list_map_keys
        .as_ref()
        .is_some_and(|k| !k.is_empty())
    {
        errors.push(FieldError::required(
            at.child("x-kubernetes-list-type").as_str(),
            "must be map if x-kubernetes-list-map-keys is non-empty",
        ));
    }
    if let Some(map_type) = schema.x_kubernetes_map_type.as_deref() {
        if schema.type_.as_deref() != Some("object") {
            errors.push(FieldError::invalid(
                at.child("type").as_str(),
                BadValue::Str(schema.type_.clone().unwrap_or_default()),
                "must be object if x-kubernetes-map-type is specified",
            ));
        }
        if !matches!(map_type, "atomic" | "granular") {
            errors.push(FieldError::not_supported(
                at.child("x-kubernetes-map-type").as_str(),
                BadValue::Str(map_type.to_owned()),
                &["atomic", "granular"],
            ));
        }
    }
    for (i, rule) in schema.x_kubernetes_validations.iter().flatten().enumerate() {
        let at = at.child("x-kubernetes-validations").index(i);
        if rule.rule.trim().is_empty() {
            errors.push(FieldError::required(
                at.child("rule").as_str(),
                "rule is not specified",
            ));
        }
        if let Some(message) = &rule.message {
            if !message.is_empty() && message.trim().is_empty() {
                errors.push(FieldError::invalid(
                    at.child("message").as_str(),
                    BadValue::Str(message.clone()),
                    "message must be non-empty if specified",
                ));
            } else if message.contains(['\n', '\r']) {
                errors.push(FieldError::invalid(
                    at.child("message").as_str(),
                    BadValue::Str(message.clone()),
                    "message must not contain line breaks",
                ));
            }
        } else if rule.rule.contains(['\n', '\r']) {
            errors.push(FieldError::required(
                at.child("message").as_str(),
                "message must be specified if rule contains line breaks",
            ));
        }
    }
    for (name, property) in schema.properties.iter().flatten() {
        let child = at.child("properties").key(name);
        if is_root && name == "metadata" {
            metadata(property, &child, errors);
            continue;
        }
        structural(property, &child, false, errors);
    }
    if let Some(item) = items(schema) {
        structural(item, &at.child("items"), false, errors);
    }
    if let Some(values) = additional_properties(schema) {
        structural(values, &at.child("additionalProperties"), false, errors);
    }
}

/// At the root, `metadata` may only restrict `name` and `generateName`.
fn metadata(schema: &JSONSchemaProps, at: &Path, errors: &mut Vec<FieldError>) {
    if schema.type_.as_deref() != Some("object") {
        errors.push(FieldError::invalid(
            at.child("type").as_str(),
            BadValue::Str(schema.type_.clone().unwrap_or_default()),
            "must be object",
        ));
    }
    for name in schema.properties.iter().flatten().map(|(n, _)| n) {
        if name != "name" && name != "generateName" {
            errors.push(FieldError::forbidden(
                at.child("properties").key(name).as_str(),
                "must not be specified for metadata, only name and generateName",
            ));
        }
    }
}

/// The CEL rules at and below `schema`.
fn rules(
    schema: &JSONSchemaProps,
    at: &Path,
    context: &Context,
    report: &mut CrdReport,
    total: &mut u64,
    expensive: &mut Vec<Expensive>,
) {
    let validations = schema
        .x_kubernetes_validations
        .as_deref()
        .unwrap_or_default();
    if !validations.is_empty() {
        match schema_decl(schema, context.is_root) {
            None => report.errors.push(FieldError::new(
                super::ErrorType::Internal,
                at.child("x-kubernetes-validations").as_str(),
                BadValue::Omit,
                "internal error: failed to retrieve type information for x-kubernetes-validations",
            )),
            Some(decl) => {
                // Under an unbounded list or map, a rule runs as often as its smallest value fits
                // in a request.
                let cardinality = context
                    .cardinality
                    .unwrap_or(MAX_REQUEST_SIZE_BYTES / (decl.min_serialized_size + 1));
                for (i, rule) in validations.iter().enumerate() {
                    let rule_path = at.child("x-kubernetes-validations").index(i).child("rule");
                    match cost::estimate(&rule.rule, &decl) {
                        Ok(estimate) => {
                            let cost = if estimate.max_cost == 0 {
                                0
                            } else {
                                estimate.max_cost.saturating_mul(cardinality)
                            };
                            if cost > STATIC_ESTIMATED_COST_LIMIT {
                                report.errors.push(FieldError::forbidden(
                                    rule_path.as_str(),
                                    cost_error_message(
                                        "estimated rule cost",
                                        cost,
                                        STATIC_ESTIMATED_COST_LIMIT,
                                    ),
                                ));
                            }
                            *total = total.saturating_add(cost);
                            if cost >= STATIC_ESTIMATED_CRD_COST_LIMIT / 100 {
                                expensive.push(Expensive {
                                    path: rule_path.to_string(),
                                    cost,
                                });
                            }
                            if estimate.uses_old_self
                                && let Some(uncorrelatable) = &context.uncorrelatable
                            {
                                report.errors.push(FieldError::invalid(
                                    rule_path.as_str(),
                                    BadValue::Str(rule.rule.clone()),
                                    format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {uncorrelatable}"),
                                ));
                            }
                            report.rules.push(RuleReport {
                                path: rule_path.to_string(),
                                rule: rule.rule.clone(),
                                max_cost: estimate.max_cost,
                                cardinality,
                                cost,
                            });
                        }
                        Err(error @ (CostError::Compile(_) | CostError::NotBool)) => {
                            report.errors.push(FieldError::invalid(
                                rule_path.as_str(),
                                BadValue::Str(rule.rule.clone()),
                                error.to_string(),
                            ));
                        }
                        Err(error @ CostError::UnknownFunction(_)) => {
                            report.errors.push(FieldError::new(
                                super::ErrorType::Internal,
                                rule_path.as_str(),
                                BadValue::Omit,
                                format!("cost estimation failed: {error}"),
                            ));
                        }
                    }
                }
            }
        }
    }
    let times = |bound: Option<i64>| match (context.cardinality, bound) {
        (Some(c), Some(b)) => Some(c.saturating_mul(u64::try_from(b).unwrap_or(0))),
        _ => None,
    };
    for (name, property) in schema.properties.iter().flatten() {
        let child = Context {
            cardinality: context.cardinality,
            uncorrelatable: context.uncorrelatable.clone(),
            is_root: property.x_kubernetes_embedded_resource == Some(true),
        };
        rules(
            property,
            &at.child("properties").key(name),
            &child,
            report,
            total,
            expensive,
        );
    }
    if let Some(item) = items(schema) {
        let correlatable = schema.x_kubernetes_list_type.as_deref() == Some("map");
        let child = Context {
            cardinality: times(schema.max_items),
            uncorrelatable: match (&context.uncorrelatable, correlatable) {
                (Some(p), _) => Some(p.clone()),
                (None, false) => Some(at.clone()),
                (None, true) => None,
            },
            is_root: item.x_kubernetes_embedded_resource == Some(true),
        };
        rules(item, &at.child("items"), &child, report, total, expensive);
    }
    if let Some(values) = additional_properties(schema) {
        let child = Context {
            cardinality: times(schema.max_properties),
            uncorrelatable: context.uncorrelatable.clone(),
            is_root: values.x_kubernetes_embedded_resource == Some(true),
        };
        rules(
            values,
            &at.child("additionalProperties"),
            &child,
            report,
            total,
            expensive,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_messages_match_the_server() {
        assert_eq!(
            cost_error_message(
                "estimated rule cost",
                35_000_000,
                STATIC_ESTIMATED_COST_LIMIT
            ),
            "estimated rule cost exceeds budget by factor of 3.5x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
        );
        assert!(
            cost_error_message(
                "estimated rule cost",
                12_000_000,
                STATIC_ESTIMATED_COST_LIMIT
            )
            .contains("factor of 1.200000x")
        );
        assert!(
            cost_error_message("estimated rule cost", u64::MAX, STATIC_ESTIMATED_COST_LIMIT)
                .contains("more than 100x")
        );
    }
}
