//! Structural checking of a manifest against a CRD's OpenAPI schema, reporting every problem
//! with its path: unknown fields, missing required fields, wrong types, enums, patterns,
//! lengths, ranges and sizes. This is what the API server does before CEL runs, except that
//! unknown fields are errors here instead of being silently pruned.

use std::collections::HashMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::Value;

use super::validation::{FieldPath, Problems};

/// Checks `value` against `schema`, appending problems.
pub fn check(value: &Value, schema: &JSONSchemaProps, problems: &mut Problems) {
    let mut checker = Checker {
        regexes: HashMap::new(),
        problems,
    };
    checker.check(value, schema, &FieldPath::root());
}

struct Checker<'p> {
    regexes: HashMap<String, Option<regex::Regex>>,
    problems: &'p mut Problems,
}

fn type_name(value: &Value) -> &'static str {
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

/// The known name closest to `unknown`, if it is close enough to be a likely typo.
fn closest<'a>(unknown: &str, known: impl Iterator<Item = &'a String>) -> Option<&'a str> {
    let lower = unknown.to_ascii_lowercase();
    known
        .map(|k| (edit_distance(&lower, &k.to_ascii_lowercase()), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.as_str())
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

impl Checker<'_> {
    fn check(&mut self, value: &Value, schema: &JSONSchemaProps, path: &FieldPath) {
        if value.is_null() {
            if schema.nullable != Some(true) {
                self.problems.push(path, "must not be null");
            }
            return;
        }
        if schema.x_kubernetes_int_or_string == Some(true) {
            match value {
                Value::String(s) => {
                    if let Some(problem) = quantity_problem(s) {
                        self.problems.push(path, problem);
                    }
                }
                Value::Number(n) if n.is_i64() || n.is_u64() => {}
                other => self.problems.push(
                    path,
                    format!("must be an integer or a string, got {}", type_name(other)),
                ),
            }
            return;
        }
        if let Some(expected) = schema.type_.as_deref() {
            let actual = type_name(value);
            let matches = actual == expected || (expected == "number" && actual == "integer");
            if !matches {
                self.problems
                    .push(path, format!("must be of type {expected}, got {actual}"));
                return;
            }
        }
        if let Some(allowed) = &schema.enum_
            && !allowed.iter().any(|a| &a.0 == value)
        {
            let list: Vec<String> = allowed.iter().map(|a| a.0.to_string()).collect();
            self.problems.push(
                path,
                format!(
                    "unsupported value {value}: must be one of {}",
                    list.join(", ")
                ),
            );
        }
        match value {
            Value::String(s) => self.check_string(s, schema, path),
            Value::Number(n) => {
                if let Some(v) = n.as_f64() {
                    if let Some(min) = schema.minimum
                        && v < min
                    {
                        self.problems
                            .push(path, format!("must be greater than or equal to {min}"));
                    }
                    if let Some(max) = schema.maximum
                        && v > max
                    {
                        self.problems
                            .push(path, format!("must be less than or equal to {max}"));
                    }
                }
            }
            Value::Array(items) => self.check_array(items, schema, path),
            Value::Object(map) => self.check_object(map, schema, path),
            _ => {}
        }
    }

    fn check_string(&mut self, s: &str, schema: &JSONSchemaProps, path: &FieldPath) {
        let len = s.chars().count() as i64;
        if let Some(min) = schema.min_length
            && len < min
        {
            self.problems
                .push(path, format!("must be at least {min} characters long"));
        }
        if let Some(max) = schema.max_length
            && len > max
        {
            self.problems.push(
                path,
                format!("must be at most {max} characters long, got {len}"),
            );
        }
        if let Some(pattern) = &schema.pattern {
            let compiled = self
                .regexes
                .entry(pattern.clone())
                .or_insert_with(|| regex::Regex::new(pattern).ok());
            if let Some(re) = compiled
                && !re.is_match(s)
            {
                self.problems.push(
                    path,
                    format!("invalid value {s:?}: must match the pattern {pattern}"),
                );
            }
        }
    }

    fn check_array(&mut self, items: &[Value], schema: &JSONSchemaProps, path: &FieldPath) {
        if let Some(min) = schema.min_items
            && (items.len() as i64) < min
        {
            self.problems
                .push(path, format!("must have at least {min} item(s)"));
        }
        if let Some(max) = schema.max_items
            && (items.len() as i64) > max
        {
            self.problems.push(
                path,
                format!("must have at most {max} items, got {}", items.len()),
            );
        }
        if let Some(JSONSchemaPropsOrArray::Schema(item_schema)) = &schema.items {
            for (i, item) in items.iter().enumerate() {
                self.check(item, item_schema, &path.index(i));
            }
        }
    }

    fn check_object(
        &mut self,
        map: &serde_json::Map<String, Value>,
        schema: &JSONSchemaProps,
        path: &FieldPath,
    ) {
        if let Some(max) = schema.max_properties
            && (map.len() as i64) > max
        {
            self.problems.push(
                path,
                format!("must have at most {max} entries, got {}", map.len()),
            );
        }
        for required in schema.required.iter().flatten() {
            if !map.contains_key(required) {
                self.problems
                    .push(&path.field(required), "required field is missing");
            }
        }
        let preserve_unknown = schema.x_kubernetes_preserve_unknown_fields == Some(true);
        match (&schema.properties, &schema.additional_properties) {
            (Some(properties), _) => {
                for (key, value) in map {
                    // The API server knows these on every object; CRD schemas do not list them.
                    let implicit = path.as_str().is_empty()
                        && matches!(key.as_str(), "apiVersion" | "kind" | "metadata");
                    match properties.get(key) {
                        None if implicit => {}
                        Some(child) => self.check(value, child, &path.field(key)),
                        None if preserve_unknown => {}
                        None => {
                            let hint = closest(key, properties.keys())
                                .map(|k| format!(" (did you mean {k:?}?)"))
                                .unwrap_or_default();
                            let known: Vec<&str> = properties.keys().map(String::as_str).collect();
                            self.problems.push(
                                &path.field(key),
                                format!(
                                    "unknown field{hint}; known fields here: {}",
                                    known.join(", ")
                                ),
                            );
                        }
                    }
                }
            }
            (None, Some(JSONSchemaPropsOrBool::Schema(value_schema))) => {
                for (key, value) in map {
                    self.check(value, value_schema, &path.key(key));
                }
            }
            _ => {}
        }
    }
}

/// Checks a Kubernetes resource quantity (`100`, `500m`, `4Gi`, `1e3`, `1.5`).
pub fn quantity_problem(text: &str) -> Option<String> {
    let body = text.strip_prefix(['+', '-']).unwrap_or(text);
    let number_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(number_end);
    let number_ok = !number.is_empty()
        && number != "."
        && number.matches('.').count() <= 1
        && number.bytes().any(|b| b.is_ascii_digit());
    let suffix_ok = matches!(
        suffix,
        "" | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
            | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|exp| exp.strip_prefix(['+', '-']).unwrap_or(exp))
        .is_some_and(|exp| !exp.is_empty() && exp.bytes().all(|b| b.is_ascii_digit()));
    (!(number_ok && suffix_ok)).then(|| {
        format!("invalid quantity {text:?}: write a number with an optional suffix, e.g. \"100\", \"500m\", \"4Gi\"")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        for ok in ["1", "100m", "4Gi", "1.5", "1e3", "2E-2", "+3k", "0.5Mi"] {
            assert_eq!(quantity_problem(ok), None, "{ok}");
        }
        for bad in ["", "Gi", "1.2.3", "4GB", "1e", "abc", "."] {
            assert!(quantity_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn typo_hints() {
        let known = ["consolidationPolicy".to_owned(), "budgets".to_owned()];
        assert_eq!(
            closest("consolidationPolicyy", known.iter()),
            Some("consolidationPolicy")
        );
        assert_eq!(closest("zzz", known.iter()), None);
    }
}
