//! What kube-apiserver does with CustomResourceDefinitions and custom resources, modelled so
//! that what a real server refuses is refused here too, with its wording:
//!
//! - [`crd`]: validating a CRD when it is created or updated: the structural-schema rules and the
//!   CEL rules (they must compile against the schema, may use `oldSelf` only where old and new
//!   values correlate, and must stay within the estimated cost budget, per rule and per CRD);
//! - [`cost`] and [`decl`]: the static CEL cost estimate those budgets are checked against;
//! - [`object`]: admitting a custom resource: unknown fields pruned (or refused under strict
//!   field validation), `null`s dropped, defaults applied, the structural schema checked and the
//!   CEL rules evaluated (transition rules against the stored object; unchanged values ratcheted
//!   on update).
//!
//! Pure: no I/O. The test API server serves with it, `karpenter validate` checks manifests with
//! it, and the suite checks our CRDs with it.

pub mod cost;
pub mod crd;
pub mod decl;
pub mod object;

use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

/// The schema of a list's items (a tuple schema, which structural schemas forbid, has none).
pub(crate) fn items(schema: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match schema.items.as_ref()? {
        JSONSchemaPropsOrArray::Schema(s) => Some(s),
        JSONSchemaPropsOrArray::Schemas(_) => None,
    }
}

/// The schema of a map's values (`additionalProperties: true` gives none).
pub(crate) fn additional_properties(schema: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match schema.additional_properties.as_ref()? {
        JSONSchemaPropsOrBool::Schema(s) => Some(s),
        JSONSchemaPropsOrBool::Bool(_) => None,
    }
}

/// The kind of a field error, as `k8s.io/apimachinery/pkg/util/validation/field` has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// A value was not found.
    NotFound,
    /// A required value is missing.
    Required,
    /// A value appears twice.
    Duplicate,
    /// A value is invalid.
    Invalid,
    /// A value is not one of the supported ones.
    NotSupported,
    /// A value is not allowed here.
    Forbidden,
    /// A value is too long.
    TooLong,
    /// A list or map has too many entries.
    TooMany,
    /// The server failed.
    Internal,
    /// A value has the wrong type.
    TypeInvalid,
}

impl ErrorType {
    /// How the message names it (`Invalid value`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::NotFound => "Not found",
            ErrorType::Required => "Required value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Invalid | ErrorType::TypeInvalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
            ErrorType::Internal => "Internal error",
        }
    }

    /// `Status.details.causes[].reason` (`FieldValueInvalid`).
    pub fn cause(self) -> &'static str {
        match self {
            ErrorType::NotFound => "FieldValueNotFound",
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::Internal => "InternalError",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
        }
    }
}

/// The offending value, printed as the server prints it.
#[derive(Debug, Clone, PartialEq)]
pub enum BadValue {
    /// Not shown.
    Omit,
    /// Quoted.
    Str(String),
    /// As is: numbers, booleans, `null`.
    Plain(String),
}

impl BadValue {
    /// A JSON value as the server shows one it decoded.
    pub fn json(value: &serde_json::Value) -> BadValue {
        match value {
            serde_json::Value::String(s) => BadValue::Str(s.clone()),
            serde_json::Value::Null => BadValue::Plain("null".into()),
            serde_json::Value::Number(n) => BadValue::Plain(n.to_string()),
            serde_json::Value::Bool(b) => BadValue::Plain(b.to_string()),
            other => BadValue::Plain(go_debug(other)),
        }
    }
}

/// Go's `%v` of a decoded JSON container: `map[a:1 b:[x y]]`.
fn go_debug(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Object(map) => {
            let entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_debug(v)))
                .collect();
            format!("map[{}]", entries.join(" "))
        }
        serde_json::Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_debug).collect();
            format!("[{}]", items.join(" "))
        }
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One problem with one field, as kube-apiserver reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Its kind.
    pub kind: ErrorType,
    /// The field path (`spec.template.spec.requirements[0].key`).
    pub field: String,
    /// The value, when shown.
    pub value: BadValue,
    /// What is wrong.
    pub detail: String,
}

impl FieldError {
    /// An error of `kind` at `field`.
    pub fn new(
        kind: ErrorType,
        field: impl Into<String>,
        value: BadValue,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            kind,
            field: field.into(),
            value,
            detail: detail.into(),
        }
    }

    /// `Required value`.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Required, field, BadValue::Omit, detail)
    }

    /// `Forbidden`.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Forbidden, field, BadValue::Omit, detail)
    }

    /// `Invalid value`.
    pub fn invalid(field: impl Into<String>, value: BadValue, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Invalid, field, value, detail)
    }

    /// `Unsupported value` with the supported ones listed.
    pub fn not_supported(field: impl Into<String>, value: BadValue, supported: &[&str]) -> Self {
        let quoted: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        let detail = if quoted.is_empty() {
            String::new()
        } else {
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(ErrorType::NotSupported, field, value, detail)
    }

    /// `Too many`: more than `max` items.
    pub fn too_many(field: impl Into<String>, actual: usize, max: i64) -> Self {
        let detail = if max >= 0 {
            format!(
                "must have at most {max} {}",
                if max == 1 { "item" } else { "items" }
            )
        } else {
            "has too many items".to_owned()
        };
        Self::new(
            ErrorType::TooMany,
            field,
            BadValue::Plain(actual.to_string()),
            detail,
        )
    }

    /// `Too long`: more than `max` characters.
    pub fn too_long(field: impl Into<String>, max: i64) -> Self {
        let detail = if max >= 0 {
            format!(
                "may not be more than {max} {}",
                if max == 1 { "byte" } else { "bytes" }
            )
        } else {
            "value is too long".to_owned()
        };
        Self::new(ErrorType::TooLong, field, BadValue::Omit, detail)
    }

    /// The message after the field path: `Invalid value: "x": detail`.
    pub fn body(&self) -> String {
        let mut s = self.kind.as_str().to_owned();
        let shows_value = !matches!(
            self.kind,
            ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong | ErrorType::Internal
        );
        if shows_value {
            match &self.value {
                BadValue::Omit => {}
                BadValue::Str(v) => s.push_str(&format!(": {v:?}")),
                BadValue::Plain(v) => s.push_str(&format!(": {v}")),
            }
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// The message of a `422 Invalid` status: `Kind.group "name" is invalid: …` with the errors
/// deduplicated, bracketed when there are several.
pub fn invalid_message(qualified_kind: &str, name: &str, errors: &[FieldError]) -> String {
    let mut seen = Vec::new();
    for error in errors {
        let text = error.to_string();
        if !seen.contains(&text) {
            seen.push(text);
        }
    }
    match seen.len() {
        0 => format!("{qualified_kind} {name:?} is invalid"),
        1 => format!("{qualified_kind} {name:?} is invalid: {}", seen[0]),
        _ => format!(
            "{qualified_kind} {name:?} is invalid: [{}]",
            seen.join(", ")
        ),
    }
}

/// The `causes` of a `422 Invalid` status.
pub fn causes(errors: &[FieldError]) -> serde_json::Value {
    serde_json::Value::Array(
        errors
            .iter()
            .map(|e| {
                serde_json::json!({
                    "reason": e.kind.cause(),
                    "message": e.body(),
                    "field": e.field,
                })
            })
            .collect(),
    )
}

/// A field path as `k8s.io/apimachinery`'s `field.Path` prints it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    /// A path starting at `root` (`spec`).
    pub fn new(root: &str) -> Path {
        Path(root.to_owned())
    }

    /// `parent.name`.
    pub fn child(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_owned())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    /// `parent[key]`.
    pub fn key(&self, key: &str) -> Path {
        Path(format!("{}[{key}]", self.0))
    }

    /// `parent[i]`.
    pub fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }

    /// The printed path.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_print_as_the_server_prints_them() {
        let e = FieldError::invalid("spec.weight", BadValue::Plain("101".into()), "must be less");
        assert_eq!(
            e.to_string(),
            "spec.weight: Invalid value: 101: must be less"
        );
        let e = FieldError::not_supported("spec.x", BadValue::Str("Foo".into()), &["In", "NotIn"]);
        assert_eq!(
            e.to_string(),
            "spec.x: Unsupported value: \"Foo\": supported values: \"In\", \"NotIn\""
        );
        assert_eq!(
            FieldError::required("spec.template", "").to_string(),
            "spec.template: Required value"
        );
        assert_eq!(
            FieldError::too_many("spec.r", 101, 100).to_string(),
            "spec.r: Too many: 101: must have at most 100 items"
        );
        let two = [
            FieldError::required("a", ""),
            FieldError::required("a", ""),
            FieldError::forbidden("b", "no"),
        ];
        assert_eq!(
            invalid_message("NodePool.karpenter.sh", "p", &two),
            "NodePool.karpenter.sh \"p\" is invalid: [a: Required value, b: Forbidden: no]"
        );
        assert_eq!(
            Path::new("spec")
                .child("validation")
                .key("spec")
                .child("items")
                .index(2)
                .as_str(),
            "spec.validation[spec].items[2]"
        );
    }
}
