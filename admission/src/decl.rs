//! The CEL type kube-apiserver declares for a schema node, with the size bounds its cost
//! estimator reads: the longest string, the most list items or map entries a node can hold,
//! taken from `maxLength`, `maxItems` and `maxProperties`, or, where a bound is missing, from
//! how many of the node's smallest values fit in one request (3 MiB).
//!
//! The rules follow kube-apiserver's `SchemaDeclType`: strings with `maxLength` count four bytes
//! a character, enum strings their longest value, `date-time` strings 32 bytes; scalars have
//! no size; an object's smallest serialisation is `{}` plus its required properties without
//! defaults.

use std::collections::BTreeMap;

use super::{additional_properties, items};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;

/// The largest request kube-apiserver accepts (and sizes unbounded data by).
pub const MAX_REQUEST_SIZE_BYTES: u64 = 3 * 1024 * 1024;
/// The longest RFC 3339 date-time, with its quotes.
const MAX_DATETIME_SIZE_JSON: u64 = 32;
/// The longest duration string, with its quotes.
const MAX_DURATION_SIZE_JSON: u64 = 32;
/// A date, with its quotes.
const JSON_DATE_SIZE: u64 = 12;
const MIN_DATETIME_SIZE_JSON: u64 = 21;
const MIN_DURATION_SIZE_JSON: u64 = 3;
const MIN_STRING_SIZE: u64 = 2;
const MIN_BOOL_SIZE: u64 = 4;
const MIN_NUMBER_SIZE: u64 = 1;

/// The kind of value a schema node holds, as CEL sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum DeclKind {
    /// `boolean`.
    Bool,
    /// `integer`.
    Int,
    /// `number`.
    Double,
    /// `string`.
    String,
    /// `string` with `format: byte`.
    Bytes,
    /// `string` with `format: duration`.
    Duration,
    /// `string` with `format: date` or `date-time`.
    Timestamp,
    /// `x-kubernetes-int-or-string`: typed at run time.
    Dyn,
    /// `array` with `items`.
    List(Box<Decl>),
    /// `object` with `additionalProperties`: string keys, values of this declaration.
    Map(Box<Decl>, Box<Decl>),
    /// `object` with `properties`, by CEL-escaped name.
    Object(BTreeMap<String, Decl>),
}

/// A schema node's CEL declaration with its size bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Decl {
    /// What it holds.
    pub kind: DeclKind,
    /// The most bytes (strings), items (lists) or entries (maps) it can hold; 0 for scalars and
    /// objects, which the estimator never sizes.
    pub max_elements: u64,
    /// The fewest bytes it serialises to in JSON.
    pub min_serialized_size: u64,
}

impl Decl {
    fn scalar(kind: DeclKind, min_serialized_size: u64) -> Decl {
        Decl {
            kind,
            max_elements: 0,
            min_serialized_size,
        }
    }

    /// The declaration of map keys: a string kube-apiserver gives no size.
    pub fn map_key() -> Decl {
        Decl::scalar(DeclKind::String, MIN_STRING_SIZE)
    }
}

fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// How many list items of this minimum size fit in one request.
fn max_items_from_min_size(min_size: u64) -> u64 {
    (MAX_REQUEST_SIZE_BYTES - 2) / (min_size + 1)
}

/// How many map entries with values of this minimum size fit in one request.
fn max_properties_from_min_size(min_size: u64) -> u64 {
    (MAX_REQUEST_SIZE_BYTES - 2) / (min_size + 6)
}

/// The declaration of `schema`, or `None` where kube-apiserver exposes nothing to CEL (no
/// type, or lists and maps of such). `is_root` adds what every resource root has (`apiVersion`,
/// `kind`, `metadata.name`, `metadata.generateName`).
pub fn schema_decl(schema: &JSONSchemaProps, is_root: bool) -> Option<Decl> {
    if schema.x_kubernetes_int_or_string == Some(true) {
        let max_elements = match schema.max_length {
            Some(max) => non_negative(max) * 4,
            None => MAX_REQUEST_SIZE_BYTES - 2,
        };
        return Some(Decl {
            kind: DeclKind::Dyn,
            max_elements,
            min_serialized_size: 1,
        });
    }
    match schema.type_.as_deref()? {
        "array" => {
            let item = schema_decl(items(schema)?, false)?;
            let max_items = match schema.max_items {
                Some(max) => non_negative(max),
                None => max_items_from_min_size(item.min_serialized_size),
            };
            Some(Decl {
                kind: DeclKind::List(Box::new(item)),
                max_elements: max_items,
                min_serialized_size: 2,
            })
        }
        "object" => {
            if let Some(values) = additional_properties(schema) {
                let value = schema_decl(values, false)?;
                let max_properties = match schema.max_properties {
                    Some(max) => non_negative(max),
                    None => max_properties_from_min_size(value.min_serialized_size),
                };
                return Some(Decl {
                    kind: DeclKind::Map(Box::new(Decl::map_key()), Box::new(value)),
                    max_elements: max_properties,
                    min_serialized_size: 2,
                });
            }
            Some(object_decl(schema, is_root))
        }
        "string" => Some(string_decl(schema)),
        "boolean" => Some(Decl::scalar(DeclKind::Bool, MIN_BOOL_SIZE)),
        "number" => Some(Decl::scalar(DeclKind::Double, MIN_NUMBER_SIZE)),
        "integer" => Some(Decl::scalar(DeclKind::Int, MIN_NUMBER_SIZE)),
        _ => None,
    }
}

fn object_decl(schema: &JSONSchemaProps, is_root: bool) -> Decl {
    let required: Vec<&str> = schema
        .required
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    let mut fields = BTreeMap::new();
    // An object serialises at least as `{}` plus its required properties without defaults
    // (defaults are filled in by the server).
    let mut min_size: u64 = 2;
    for (name, property) in schema.properties.iter().flatten() {
        let is_meta = is_root && matches!(name.as_str(), "apiVersion" | "kind" | "metadata");
        if is_meta {
            continue;
        }
        if let Some(decl) = schema_decl(
            property,
            property.x_kubernetes_embedded_resource == Some(true),
        ) {
            if required.contains(&name.as_str()) && property.default.is_none() {
                min_size += name.len() as u64 + decl.min_serialized_size + 4;
            }
            if let Some(escaped) = escape(name) {
                fields.insert(escaped, decl);
            }
        }
    }
    if is_root {
        let string = || string_decl(&JSONSchemaProps::default());
        fields.insert("apiVersion".into(), string());
        fields.insert("kind".into(), string());
        let metadata =
            BTreeMap::from([("name".into(), string()), ("generateName".into(), string())]);
        fields.insert(
            "metadata".into(),
            Decl {
                kind: DeclKind::Object(metadata),
                max_elements: 0,
                min_serialized_size: 2,
            },
        );
    }
    Decl {
        kind: DeclKind::Object(fields),
        max_elements: 0,
        min_serialized_size: min_size,
    }
}

fn string_decl(schema: &JSONSchemaProps) -> Decl {
    let unbounded = MAX_REQUEST_SIZE_BYTES - 2;
    match schema.format.as_deref() {
        Some("byte") => Decl {
            kind: DeclKind::Bytes,
            max_elements: schema.max_length.map_or(unbounded, non_negative),
            min_serialized_size: MIN_STRING_SIZE,
        },
        Some("duration") => Decl {
            kind: DeclKind::Duration,
            max_elements: MAX_DURATION_SIZE_JSON,
            min_serialized_size: MIN_DURATION_SIZE_JSON,
        },
        Some("date") => Decl {
            kind: DeclKind::Timestamp,
            max_elements: JSON_DATE_SIZE,
            min_serialized_size: JSON_DATE_SIZE,
        },
        Some("date-time") => Decl {
            kind: DeclKind::Timestamp,
            max_elements: MAX_DATETIME_SIZE_JSON,
            min_serialized_size: MIN_DATETIME_SIZE_JSON,
        },
        _ => {
            let max_elements = match (schema.max_length, &schema.enum_) {
                (Some(max), _) => non_negative(max) * 4,
                (None, Some(values)) if !values.is_empty() => values
                    .iter()
                    .filter_map(|v| v.0.as_str())
                    .map(|s| s.len() as u64)
                    .max()
                    .unwrap_or(0),
                _ => unbounded,
            };
            Decl {
                kind: DeclKind::String,
                max_elements,
                min_serialized_size: MIN_STRING_SIZE,
            }
        }
    }
}

/// CEL identifiers kube-apiserver escapes as `__name__`.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A property name as CEL rules must write it (`x-y` → `x__dash__y`), or `None` where it cannot
/// be written at all (the property is then invisible to rules).
pub fn escape(name: &str) -> Option<String> {
    if name.is_empty() || name.as_bytes()[0].is_ascii_digit() {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/');
    if !name.chars().all(allowed) {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                out.push_str("__underscores__");
            }
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decl(schema: serde_json::Value) -> Decl {
        let schema: JSONSchemaProps = serde_json::from_value(schema).expect("a schema");
        schema_decl(&schema, false).expect("a declaration")
    }

    #[test]
    fn unbounded_lists_are_sized_by_what_fits_in_a_request() {
        // Items need "key" and "operator": {} + "key":"" + "operator":"" = 2 + 9 + 14.
        let list = decl(json!({
            "type": "array",
            "items": {"type": "object", "required": ["key", "operator"], "properties": {
                "key": {"type": "string"},
                "operator": {"type": "string", "enum": ["In", "DoesNotExist"]},
            }},
        }));
        let DeclKind::List(item) = &list.kind else {
            panic!("a list")
        };
        assert_eq!(item.min_serialized_size, 25);
        assert_eq!(list.max_elements, (MAX_REQUEST_SIZE_BYTES - 2) / 26);
        let DeclKind::Object(fields) = &item.kind else {
            panic!("an object")
        };
        assert_eq!(fields["key"].max_elements, MAX_REQUEST_SIZE_BYTES - 2);
        assert_eq!(fields["operator"].max_elements, "DoesNotExist".len() as u64);
    }

    #[test]
    fn bounds_and_formats() {
        assert_eq!(
            decl(json!({"type": "string", "maxLength": 63})).max_elements,
            252
        );
        assert_eq!(
            decl(json!({"type": "string", "format": "date-time", "maxLength": 5})).max_elements,
            32
        );
        let map = decl(json!({"type": "object", "additionalProperties": {"type": "string"}}));
        assert_eq!(map.max_elements, (MAX_REQUEST_SIZE_BYTES - 2) / 8);
        let bounded = decl(
            json!({"type": "object", "maxProperties": 100, "additionalProperties": {"type": "string"}}),
        );
        assert_eq!(bounded.max_elements, 100);
    }

    #[test]
    fn escaping() {
        assert_eq!(escape("nodeClassRef").as_deref(), Some("nodeClassRef"));
        assert_eq!(escape("x-y").as_deref(), Some("x__dash__y"));
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("a__b").as_deref(), Some("a__underscores__b"));
        assert_eq!(escape("1x"), None);
        assert_eq!(escape("a b"), None);
    }
}
