//! Admitting a custom resource as kube-apiserver does on create, update, patch and apply:
//!
//! 1. unknown fields are pruned; under `fieldValidation=Strict` they refuse the request (`400`,
//!    `strict decoding error: unknown field "spec.x"`), under `Warn` (the default) each becomes
//!    a warning;
//! 2. `null` in a field that is not `nullable` is dropped;
//! 3. defaults are applied, from the top down;
//! 4. the object is validated: `metadata.name`, then the structural schema (kube-openapi's
//!    checks and wording: types, enums, patterns, bounds, sizes, required fields), then, only
//!    when nothing blocking was found, the CEL rules: each node's rules with `self` bound to the
//!    node and, on update, `oldSelf` to the stored node where the two correlate (object fields,
//!    map values, items of `x-kubernetes-list-type: map` lists by key); a transition rule without
//!    an old value is skipped.
//!
//! On update, errors in parts the update left unchanged are ratcheted away, as with the
//! `CRDValidationRatcheting` feature (on since Kubernetes 1.30): a stored object that a newer
//! schema would refuse can still have its status written.

use std::collections::HashMap;
use std::sync::Arc;

use super::{additional_properties, items};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use kube_cel::KubeCelExt;
use kube_cel::cel;
use serde_json::{Map, Value};

use super::decl::escape;
use super::{BadValue, ErrorType, FieldError};

/// How unknown fields are treated (`fieldValidation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Dropped silently.
    Ignore,
    /// Dropped, each with a warning (the server's default).
    #[default]
    Warn,
    /// Refused.
    Strict,
}

/// A `fieldValidation` value the API server does not take (`400 BadRequest`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fieldValidation parameter unsupported: {0:?}, valid values are Ignore, Warn and Strict")]
pub struct UnsupportedFieldValidation(pub String);

impl FieldValidation {
    /// Reads the `fieldValidation` query parameter.
    pub fn parse(value: Option<&str>) -> Result<FieldValidation, UnsupportedFieldValidation> {
        match value.unwrap_or("") {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(UnsupportedFieldValidation(other.to_owned())),
        }
    }
}

/// Why an object was not admitted.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// Strict field validation found fields the schema does not have (`400 BadRequest`).
    UnknownFields(Vec<String>),
    /// The object is invalid (`422 Invalid`).
    Invalid(Vec<FieldError>),
}

impl Rejection {
    /// The status message, for a kind named `kind` in `group`.
    pub fn message(&self, kind: &str, group: &str, version: &str, name: &str) -> String {
        match self {
            Rejection::UnknownFields(fields) => {
                let fields: Vec<String> = fields
                    .iter()
                    .map(|f| format!("unknown field {f:?}"))
                    .collect();
                format!(
                    "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
                    fields.join(", ")
                )
            }
            Rejection::Invalid(errors) => {
                super::invalid_message(&format!("{kind}.{group}"), name, errors)
            }
        }
    }
}

/// What admission made of an object.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    /// The object as it is stored: pruned and defaulted.
    pub object: Value,
    /// Warnings for the client (unknown fields dropped).
    pub warnings: Vec<String>,
}

/// What admission found in an object.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The object pruned and defaulted.
    pub object: Value,
    /// The paths of the fields the schema does not declare (dropped).
    pub unknown: Vec<String>,
    /// Why it is invalid; empty when it is not.
    pub errors: Vec<FieldError>,
}

/// The fields of `metadata` (ObjectMeta) the server knows.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// One CRD version's admission: its schema and its compiled CEL rules.
pub struct Admission {
    schema: JSONSchemaProps,
    programs: HashMap<String, Result<Arc<cel::Program>, String>>,
    context: cel::Context<'static>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission").finish_non_exhaustive()
    }
}

impl Admission {
    /// Admission for objects of a CRD version with this schema.
    pub fn new(schema: JSONSchemaProps) -> Admission {
        let mut programs = HashMap::new();
        collect_programs(&schema, &mut programs);
        Admission {
            schema,
            programs,
            context: cel::Context::default().with_all(),
        }
    }

    /// Everything admission finds, without deciding: the pruned and defaulted object, the
    /// unknown fields dropped, the validation errors.
    pub fn check(&self, mut object: Value, old: Option<&Value>) -> Checked {
        let mut unknown = Vec::new();
        prune(&mut object, &self.schema, "", true, &mut unknown);
        drop_nulls(&mut object, &self.schema);
        apply_defaults(&mut object, &self.schema);
        let errors = self.validate(&object, old);
        Checked {
            object,
            unknown,
            errors,
        }
    }

    /// Admits `object` (a create when `old` is `None`, an update of `old` otherwise).
    pub fn admit(
        &self,
        object: Value,
        old: Option<&Value>,
        mode: FieldValidation,
    ) -> Result<Admitted, Rejection> {
        let checked = self.check(object, old);
        if mode == FieldValidation::Strict && !checked.unknown.is_empty() {
            return Err(Rejection::UnknownFields(checked.unknown));
        }
        if !checked.errors.is_empty() {
            return Err(Rejection::Invalid(checked.errors));
        }
        let warnings = match mode {
            FieldValidation::Warn => checked
                .unknown
                .iter()
                .map(|f| format!("unknown field {f:?}"))
                .collect(),
            _ => Vec::new(),
        };
        Ok(Admitted {
            object: checked.object,
            warnings,
        })
    }

    /// Validates an already pruned and defaulted object.
    pub fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errors = Vec::new();
        validate_name(object, &mut errors);
        let mut schema_errors = Vec::new();
        structural(object, old, &self.schema, "", &mut schema_errors);
        errors.extend(schema_errors);
        let blocking = errors.iter().any(|e| {
            matches!(
                e.kind,
                ErrorType::NotSupported
                    | ErrorType::Required
                    | ErrorType::TooLong
                    | ErrorType::TooMany
                    | ErrorType::TypeInvalid
            )
        });
        if blocking {
            errors.push(FieldError::invalid(
                "<nil>",
                BadValue::Str("null".into()),
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ));
        } else {
            self.rules(object, old, &self.schema, "", &mut errors);
        }
        errors
    }

    fn rules(
        &self,
        value: &Value,
        old: Option<&Value>,
        schema: &JSONSchemaProps,
        path: &str,
        errors: &mut Vec<FieldError>,
    ) {
        let unchanged = old.is_some_and(|o| o == value);
        let validations = schema
            .x_kubernetes_validations
            .as_deref()
            .unwrap_or_default();
        if !validations.is_empty() {
            let this = to_cel(value, schema);
            let previous = old.map(|o| to_cel(o, schema));
            for rule in validations {
                let program = match self.programs.get(&rule.rule) {
                    Some(Ok(program)) => program,
                    Some(Err(message)) => {
                        errors.push(FieldError::invalid(
                            display_path(path),
                            BadValue::Str(type_name(schema).into()),
                            format!("compilation failed: {message}"),
                        ));
                        continue;
                    }
                    None => continue,
                };
                let uses_old_self = program.references().variables().contains(&"oldSelf");
                // Transition rules need the stored value; unchanged values are ratcheted.
                if (uses_old_self && previous.is_none()) || (!uses_old_self && unchanged) {
                    continue;
                }
                let mut scope = self.context.new_inner_scope();
                scope.add_variable_from_value("self", this.clone());
                if let Some(previous) = &previous {
                    scope.add_variable_from_value("oldSelf", previous.clone());
                }
                let message = rule
                    .message
                    .as_deref()
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("failed rule: {}", rule.rule.trim()));
                let at = match rule.field_path.as_deref() {
                    Some(relative) if !relative.is_empty() => {
                        format!("{}{relative}", display_path(path))
                    }
                    _ => display_path(path),
                };
                let failure = match program.execute(&scope) {
                    Ok(cel::Value::Bool(true)) => None,
                    Ok(cel::Value::Bool(false)) => Some(message),
                    Ok(other) => Some(format!(
                        "rule {:?} did not evaluate to a bool: {other:?}",
                        rule.rule
                    )),
                    Err(error) => Some(format!(
                        "{} evaluating rule: {message}",
                        cel_go_error(&error)
                    )),
                };
                if let Some(detail) = failure {
                    errors.push(FieldError::invalid(
                        at,
                        BadValue::Str(type_name(schema).into()),
                        detail,
                    ));
                }
            }
        }
        match value {
            Value::Object(map) => {
                if let Some(properties) = &schema.properties {
                    for (name, property) in properties {
                        if let Some(child) = map.get(name) {
                            let old_child = old.and_then(|o| o.get(name));
                            self.rules(child, old_child, property, &join(path, name), errors);
                        }
                    }
                } else if let Some(values) = additional_properties(schema) {
                    for (key, child) in map {
                        let old_child = old.and_then(|o| o.get(key));
                        self.rules(child, old_child, values, &join(path, key), errors);
                    }
                }
            }
            Value::Array(list) => {
                if let Some(item) = items(schema) {
                    for (i, child) in list.iter().enumerate() {
                        let old_child = old.and_then(|o| correlated_item(child, o, schema));
                        self.rules(child, old_child, item, &format!("{path}[{i}]"), errors);
                    }
                }
            }
            _ => {}
        }
    }
}

fn collect_programs(
    schema: &JSONSchemaProps,
    out: &mut HashMap<String, Result<Arc<cel::Program>, String>>,
) {
    for rule in schema.x_kubernetes_validations.iter().flatten() {
        out.entry(rule.rule.clone()).or_insert_with(|| {
            cel::Program::compile(&rule.rule)
                .map(Arc::new)
                .map_err(|e| e.to_string())
        });
    }
    for property in schema.properties.iter().flat_map(|p| p.values()) {
        collect_programs(property, out);
    }
    if let Some(item) = items(schema) {
        collect_programs(item, out);
    }
    if let Some(values) = additional_properties(schema) {
        collect_programs(values, out);
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// The path as errors print it: `<nil>` at the root.
fn display_path(path: &str) -> String {
    if path.is_empty() {
        "<nil>".to_owned()
    } else {
        path.to_owned()
    }
}

fn type_name(schema: &JSONSchemaProps) -> &str {
    if schema.x_kubernetes_int_or_string == Some(true) {
        return "string";
    }
    schema.type_.as_deref().unwrap_or("")
}

/// The stored item an item of a list corresponds to: by key in a `map` list, none otherwise.
fn correlated_item<'a>(
    item: &Value,
    old: &'a Value,
    schema: &JSONSchemaProps,
) -> Option<&'a Value> {
    if schema.x_kubernetes_list_type.as_deref() != Some("map") {
        return None;
    }
    let keys = schema
        .x_kubernetes_list_map_keys
        .as_deref()
        .unwrap_or_default();
    old.as_array()?
        .iter()
        .find(|candidate| keys.iter().all(|k| candidate.get(k) == item.get(k)))
}

/// Drops fields the schema does not declare, collecting their paths.
fn prune(
    value: &mut Value,
    schema: &JSONSchemaProps,
    path: &str,
    root: bool,
    unknown: &mut Vec<String>,
) {
    if schema.x_kubernetes_preserve_unknown_fields == Some(true) {
        return;
    }
    match value {
        Value::Object(map) => {
            if let Some(values) = additional_properties(schema) {
                for (key, child) in map.iter_mut() {
                    prune(child, values, &join(path, key), false, unknown);
                }
                return;
            }
            let properties = schema.properties.as_ref();
            let mut dropped = Vec::new();
            for (key, child) in map.iter_mut() {
                let child_path = join(path, key);
                if root && matches!(key.as_str(), "apiVersion" | "kind") {
                    continue;
                }
                if root && key == "metadata" {
                    if let Value::Object(meta) = child {
                        let unknown_meta: Vec<String> = meta
                            .keys()
                            .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
                            .cloned()
                            .collect();
                        for k in unknown_meta {
                            meta.remove(&k);
                            unknown.push(format!("metadata.{k}"));
                        }
                    }
                    continue;
                }
                match properties.and_then(|p| p.get(key)) {
                    Some(property) => prune(child, property, &child_path, false, unknown),
                    None => {
                        dropped.push(key.clone());
                        unknown.push(child_path);
                    }
                }
            }
            for key in dropped {
                map.remove(&key);
            }
        }
        Value::Array(list) => {
            if let Some(item) = items(schema) {
                for (i, child) in list.iter_mut().enumerate() {
                    prune(child, item, &format!("{path}[{i}]"), false, unknown);
                }
            }
        }
        _ => {}
    }
}

/// Drops `null` from fields that are not `nullable` (a default then fills them in).
fn drop_nulls(value: &mut Value, schema: &JSONSchemaProps) {
    match value {
        Value::Object(map) => {
            if let Some(values) = additional_properties(schema) {
                let nullable = values.nullable == Some(true);
                map.retain(|_, v| nullable || !v.is_null());
                for child in map.values_mut() {
                    drop_nulls(child, values);
                }
            } else if let Some(properties) = &schema.properties {
                map.retain(|k, v| {
                    !v.is_null() || properties.get(k).is_none_or(|p| p.nullable == Some(true))
                });
                for (key, child) in map.iter_mut() {
                    if let Some(property) = properties.get(key) {
                        drop_nulls(child, property);
                    }
                }
            }
        }
        Value::Array(list) => {
            if let Some(item) = items(schema) {
                for child in list {
                    drop_nulls(child, item);
                }
            }
        }
        _ => {}
    }
}

/// Applies defaults from the top down: a missing field with a default gets it, and what it gets
/// is defaulted in turn.
fn apply_defaults(value: &mut Value, schema: &JSONSchemaProps) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = &schema.properties {
                for (name, property) in properties {
                    if !map.contains_key(name)
                        && let Some(default) = &property.default
                    {
                        map.insert(name.clone(), default.0.clone());
                    }
                    if let Some(child) = map.get_mut(name) {
                        apply_defaults(child, property);
                    }
                }
            } else if let Some(values) = additional_properties(schema) {
                for child in map.values_mut() {
                    apply_defaults(child, values);
                }
            }
        }
        Value::Array(list) => {
            if let Some(item) = items(schema) {
                for child in list {
                    apply_defaults(child, item);
                }
            }
        }
        _ => {}
    }
}

/// A custom resource's name must be a DNS subdomain.
fn validate_name(object: &Value, errors: &mut Vec<FieldError>) {
    let metadata = &object["metadata"];
    let name = metadata.get("name").and_then(Value::as_str).unwrap_or("");
    if name.is_empty() {
        if metadata
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            errors.push(FieldError::required(
                "metadata.name",
                "name or generateName is required",
            ));
        }
        return;
    }
    if let Some(problem) = dns_subdomain_problem(name) {
        errors.push(FieldError::invalid(
            "metadata.name",
            BadValue::Str(name.to_owned()),
            problem,
        ));
    }
}

/// `IsDNS1123Subdomain`'s message, or `None` when `name` is one.
pub fn dns_subdomain_problem(name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    let ok = name.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    });
    (!ok).then(|| {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into()
    })
}

/// JSON type names as kube-openapi reports them.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Go's `%v` of a float: `100` for whole numbers.
fn go_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e21 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// kube-openapi's structural validation, ratcheted on update: errors in a value equal to the
/// stored one are not reported.
fn structural(
    value: &Value,
    old: Option<&Value>,
    schema: &JSONSchemaProps,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if old.is_some_and(|o| o == value) {
        return;
    }
    let name = path;
    let invalid = |detail: String| FieldError::invalid(path, BadValue::json(value), detail);
    let int_or_string = schema.x_kubernetes_int_or_string == Some(true);
    let actual = json_type(value);
    let type_ok = match (schema.type_.as_deref(), actual) {
        _ if value.is_null() => schema.nullable == Some(true),
        _ if int_or_string => matches!(actual, "integer" | "string"),
        (None | Some(""), _) => true,
        (Some("number"), "integer") => true,
        (Some(expected), actual) => expected == actual,
    };
    if !type_ok {
        let expected = if int_or_string {
            "integer,string".to_owned()
        } else {
            schema.type_.clone().unwrap_or_default()
        };
        errors.push(FieldError::new(
            ErrorType::TypeInvalid,
            path,
            BadValue::Str(actual.into()),
            format!("{name} in body must be of type {expected}: {actual:?}"),
        ));
        return;
    }
    if let Some(allowed) = &schema.enum_
        && !allowed.iter().any(|a| &a.0 == value)
    {
        let supported: Vec<String> = allowed
            .iter()
            .map(|a| match &a.0 {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        let supported: Vec<&str> = supported.iter().map(String::as_str).collect();
        errors.push(FieldError::not_supported(
            path,
            BadValue::json(value),
            &supported,
        ));
    }
    match value {
        Value::String(s) => {
            let len = s.chars().count() as i64;
            if let Some(max) = schema.max_length
                && len > max
            {
                errors.push(FieldError::new(
                    ErrorType::TooLong,
                    path,
                    BadValue::Omit,
                    format!("may not be longer than {max}"),
                ));
            }
            if let Some(min) = schema.min_length
                && len < min
            {
                errors.push(invalid(format!(
                    "{name} in body should be at least {min} chars long"
                )));
            }
            if let Some(pattern) = &schema.pattern
                && !pattern_matches(pattern, s)
            {
                errors.push(invalid(format!("{name} in body should match '{pattern}'")));
            }
            if schema.format.as_deref() == Some("date-time")
                && s.parse::<jiff::Timestamp>().is_err()
            {
                errors.push(invalid(format!(
                    "{name} in body must be of type date-time: {s:?}"
                )));
            }
        }
        Value::Number(n) => {
            if let Some(v) = n.as_f64() {
                if let Some(max) = schema.maximum {
                    let exclusive = schema.exclusive_maximum == Some(true);
                    if v > max || (exclusive && v >= max) {
                        let relation = if exclusive {
                            "less than"
                        } else {
                            "less than or equal to"
                        };
                        errors.push(invalid(format!(
                            "{name} in body should be {relation} {}",
                            go_number(max)
                        )));
                    }
                }
                if let Some(min) = schema.minimum {
                    let exclusive = schema.exclusive_minimum == Some(true);
                    if v < min || (exclusive && v <= min) {
                        let relation = if exclusive {
                            "greater than"
                        } else {
                            "greater than or equal to"
                        };
                        errors.push(invalid(format!(
                            "{name} in body should be {relation} {}",
                            go_number(min)
                        )));
                    }
                }
            }
        }
        Value::Array(list) => {
            if let Some(item) = items(schema) {
                for (i, child) in list.iter().enumerate() {
                    let old_child = old.and_then(|o| correlated_item(child, o, schema));
                    structural(child, old_child, item, &format!("{path}[{i}]"), errors);
                }
            }
            if let Some(min) = schema.min_items
                && (list.len() as i64) < min
            {
                errors.push(FieldError::invalid(
                    path,
                    BadValue::Plain(list.len().to_string()),
                    format!("{name} in body should have at least {min} items"),
                ));
            }
            if let Some(max) = schema.max_items
                && (list.len() as i64) > max
            {
                errors.push(FieldError::too_many(path, list.len(), max));
            }
        }
        Value::Object(map) => {
            if let Some(max) = schema.max_properties
                && (map.len() as i64) > max
            {
                errors.push(FieldError::too_many(path, map.len(), max));
                return;
            }
            if let Some(min) = schema.min_properties
                && (map.len() as i64) < min
            {
                errors.push(FieldError::invalid(
                    path,
                    BadValue::Plain(map.len().to_string()),
                    format!("{name} in body should have at least {min} properties"),
                ));
                return;
            }
            if let Some(values) = additional_properties(schema) {
                for (key, child) in map {
                    let old_child = old.and_then(|o| o.get(key));
                    structural(child, old_child, values, &join(path, key), errors);
                }
            }
            if let Some(properties) = &schema.properties {
                for (key, property) in properties {
                    if path.is_empty() && key == "metadata" {
                        continue;
                    }
                    if let Some(child) = map.get(key) {
                        let old_child = old.and_then(|o| o.get(key));
                        structural(child, old_child, property, &join(path, key), errors);
                    }
                }
            }
            for required in schema.required.iter().flatten() {
                if !map.contains_key(required) {
                    errors.push(FieldError::required(join(path, required), ""));
                }
            }
        }
        _ => {}
    }
}

/// Whether `text` matches an OpenAPI (ECMA-ish) pattern; a pattern the regex engine cannot
/// compile matches nothing, so the problem is reported rather than skipped.
fn pattern_matches(pattern: &str, text: &str) -> bool {
    thread_local! {
        static CACHE: std::cell::RefCell<HashMap<String, Option<regex::Regex>>> = std::cell::RefCell::new(HashMap::new());
    }
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        let compiled = cache
            .entry(pattern.to_owned())
            .or_insert_with(|| regex::Regex::new(pattern).ok());
        compiled.as_ref().is_some_and(|re| re.is_match(text))
    })
}

/// A JSON value as CEL sees it under `schema`: object fields by CEL-escaped name (fields whose
/// names cannot be escaped are invisible), map keys as they are, `date-time` strings as
/// timestamps.
fn to_cel(value: &Value, schema: &JSONSchemaProps) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => {
            if schema.format.as_deref() == Some("date-time")
                && schema.x_kubernetes_int_or_string != Some(true)
                && let Ok(t) = chrono::DateTime::parse_from_rfc3339(s)
            {
                return cel::Value::Timestamp(t);
            }
            cel::Value::String(Arc::new(s.clone()))
        }
        Value::Array(list) => {
            let item = items(schema);
            let default = JSONSchemaProps::default();
            cel::Value::List(Arc::new(
                list.iter()
                    .map(|v| to_cel(v, item.unwrap_or(&default)))
                    .collect(),
            ))
        }
        Value::Object(map) => cel::Value::Map(cel::objects::Map {
            map: Arc::new(object_to_cel(map, schema)),
        }),
    }
}

fn object_to_cel(
    map: &Map<String, Value>,
    schema: &JSONSchemaProps,
) -> HashMap<cel::objects::Key, cel::Value> {
    let key = |k: String| cel::objects::Key::String(Arc::new(k));
    let default = JSONSchemaProps::default();
    if let Some(values) = additional_properties(schema) {
        return map
            .iter()
            .map(|(k, v)| (key(k.clone()), to_cel(v, values)))
            .collect();
    }
    map.iter()
        .filter_map(|(k, v)| {
            let property = schema
                .properties
                .as_ref()
                .and_then(|p| p.get(k))
                .unwrap_or(&default);
            escape(k).map(|name| (key(name), to_cel(v, property)))
        })
        .collect()
}

/// A CEL evaluation error as cel-go words it, where the two interpreters' texts are known to
/// differ (a missing field); others keep the Rust interpreter's text.
fn cel_go_error(error: &cel::ExecutionError) -> String {
    match error {
        cel::ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn admission(schema: Value) -> Admission {
        Admission::new(serde_json::from_value(schema).expect("a schema"))
    }

    fn pool_schema() -> Value {
        json!({
            "type": "object",
            "required": ["spec"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "x-kubernetes-validations": [{"rule": "self.size == oldSelf.size", "message": "size is immutable"}],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "tags": {
                            "type": "object",
                            "maxProperties": 2,
                            "additionalProperties": {"type": "string"},
                            "x-kubernetes-validations": [{"rule": "self.all(k, k != '')", "message": "empty keys"}],
                        },
                    },
                },
            },
        })
    }

    fn pool(spec: Value) -> Value {
        json!({"apiVersion": "x.io/v1", "kind": "Pool", "metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn prunes_defaults_and_validates() {
        let a = admission(pool_schema());
        let admitted = a
            .admit(
                pool(json!({"size": 3, "extra": 1, "tags": null})),
                None,
                FieldValidation::Warn,
            )
            .expect("admitted");
        assert_eq!(admitted.object["spec"], json!({"size": 3, "mode": "a"}));
        assert_eq!(admitted.warnings, vec!["unknown field \"spec.extra\""]);
        assert_eq!(
            a.admit(
                pool(json!({"size": 3, "extra": 1})),
                None,
                FieldValidation::Strict
            ),
            Err(Rejection::UnknownFields(vec!["spec.extra".into()]))
        );
        let Err(Rejection::Invalid(errors)) = a.admit(
            pool(json!({"size": 11, "mode": "c"})),
            None,
            FieldValidation::Warn,
        ) else {
            panic!("invalid")
        };
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            vec![
                "spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\"",
                "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10",
                "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ]
        );
    }

    #[test]
    fn transition_rules_and_ratcheting() {
        let a = admission(pool_schema());
        let stored = a
            .admit(pool(json!({"size": 3})), None, FieldValidation::Warn)
            .expect("ok")
            .object;
        let Err(Rejection::Invalid(errors)) = a.admit(
            pool(json!({"size": 4})),
            Some(&stored),
            FieldValidation::Warn,
        ) else {
            panic!("a transition rule refuses it")
        };
        assert_eq!(
            errors[0].to_string(),
            "spec: Invalid value: \"object\": size is immutable"
        );
        // A stored object the schema now refuses (too many tags) can still be written unchanged.
        let mut legacy = stored.clone();
        legacy["spec"]["tags"] = json!({"a": "1", "b": "2", "c": "3"});
        let again = a.validate(&legacy, Some(&legacy));
        assert!(again.is_empty(), "{again:?}");
        assert_eq!(
            a.validate(&legacy, None)[0].to_string(),
            "spec.tags: Too many: 3: must have at most 2 items"
        );
    }

    #[test]
    fn names_must_be_dns_subdomains() {
        let a = admission(pool_schema());
        let mut object = pool(json!({"size": 1}));
        object["metadata"]["name"] = json!("Bad_Name");
        let Err(Rejection::Invalid(errors)) = a.admit(object, None, FieldValidation::Warn) else {
            panic!("invalid name")
        };
        assert!(errors[0].to_string().starts_with(
            "metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"
        ));
    }
}
