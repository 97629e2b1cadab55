//! Label and field selectors in their URL form (`labelSelector=app=web,tier in (a,b)`).

use serde_json::Value;

use crate::ApiError;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed `labelSelector`: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelRequirement>);

/// Splits at commas outside parentheses.
fn terms(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(text[start..].trim());
    out.into_iter().filter(|t| !t.is_empty()).collect()
}

fn set_values(text: &str, selector: &str) -> Result<Vec<String>, ApiError> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: values of {selector:?} must be in parentheses"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses the URL form.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for term in terms(text) {
            let requirement = if let Some(key) = term.strip_prefix('!') {
                LabelRequirement::DoesNotExist(key.trim().to_owned())
            } else if let Some((key, values)) = term.split_once(" notin ") {
                LabelRequirement::NotIn(key.trim().to_owned(), set_values(values, term)?)
            } else if let Some((key, values)) = term.split_once(" in ") {
                LabelRequirement::In(key.trim().to_owned(), set_values(values, term)?)
            } else if let Some((key, value)) = term.split_once("!=") {
                LabelRequirement::NotEquals(key.trim().to_owned(), value.trim().to_owned())
            } else if let Some((key, value)) = term.split_once("==") {
                LabelRequirement::Equals(key.trim().to_owned(), value.trim().to_owned())
            } else if let Some((key, value)) = term.split_once('=') {
                LabelRequirement::Equals(key.trim().to_owned(), value.trim().to_owned())
            } else if term.contains(char::is_whitespace) {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement {term:?}: expected key, !key, key=value, \
                     key!=value, key in (…) or key notin (…)"
                )));
            } else {
                LabelRequirement::Exists(term.to_owned())
            };
            requirements.push(requirement);
        }
        Ok(LabelSelector(requirements))
    }

    /// Reads a `metav1.LabelSelector` object (`matchLabels` and `matchExpressions`, as a
    /// PodDisruptionBudget's `spec.selector` holds it); `None` when it cannot be read, as
    /// apimachinery's conversion fails for an unknown operator, `In`/`NotIn` without values or
    /// `Exists`/`DoesNotExist` with values. `{}` selects everything.
    pub fn from_object(selector: &Value) -> Option<Self> {
        let selector = selector.as_object()?;
        let mut requirements = Vec::new();
        if let Some(labels) = selector.get("matchLabels") {
            for (key, value) in labels.as_object()? {
                requirements.push(LabelRequirement::Equals(
                    key.clone(),
                    value.as_str()?.into(),
                ));
            }
        }
        for expression in selector
            .get("matchExpressions")
            .map(|e| e.as_array())
            .unwrap_or(Some(&Vec::new()))?
        {
            let key = expression.get("key")?.as_str()?.to_owned();
            let values: Vec<String> = match expression.get("values") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => v
                    .as_array()?
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect::<Option<_>>()?,
            };
            let requirement = match (expression.get("operator")?.as_str()?, values.is_empty()) {
                ("In", false) => LabelRequirement::In(key, values),
                ("NotIn", false) => LabelRequirement::NotIn(key, values),
                ("Exists", true) => LabelRequirement::Exists(key),
                ("DoesNotExist", true) => LabelRequirement::DoesNotExist(key),
                _ => return None,
            };
            requirements.push(requirement);
        }
        Some(LabelSelector(requirements))
    }

    /// Whether an object's `metadata.labels` satisfy it.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let get = |key: &str| labels.get(key).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelRequirement::Equals(k, v) => get(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelRequirement::Exists(k) => get(k).is_some(),
            LabelRequirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// A parsed `fieldSelector`: `path=value`, `path==value` or `path!=value` terms on dotted
/// JSON paths (`metadata.name`, `spec.nodeName`, `status.phase`, …); a missing field reads
/// as the empty string, as the real server's field sets do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, String, bool)>);

impl FieldSelector {
    /// Parses the URL form.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (path, value, equal) = if let Some((p, v)) = term.split_once("!=") {
                (p, v, false)
            } else if let Some((p, v)) = term.split_once("==") {
                (p, v, true)
            } else if let Some((p, v)) = term.split_once('=') {
                (p, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector {term:?}: expected field=value or field!=value"
                )));
            };
            terms.push((path.trim().to_owned(), value.trim().to_owned(), equal));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether the object satisfies every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(path, value, equal)| {
            let found = path
                .split('.')
                .try_fold(object, |v, key| v.get(key))
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                })
                .unwrap_or_default();
            (found == *value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    #[test]
    fn label_selectors_cover_equality_and_set_terms() {
        let web = labelled(json!({"app": "web", "tier": "front"}));
        let db = labelled(json!({"app": "db"}));
        let select = |text: &str| LabelSelector::parse(text).unwrap();
        assert!(select("app=web").matches(&web));
        assert!(!select("app==web").matches(&db));
        assert!(select("app!=web").matches(&db));
        assert!(select("tier in (front, back),app").matches(&web));
        assert!(!select("tier in (back)").matches(&web));
        assert!(select("tier notin (back)").matches(&db));
        assert!(select("!tier").matches(&db));
        assert!(!select("!tier").matches(&web));
        assert!(select("").matches(&db));
        assert!(LabelSelector::parse("tier in front").is_err());
    }

    #[test]
    fn label_selector_objects_read_as_apimachinery_reads_them() {
        let pod = labelled(json!({"app": "web", "tier": "front"}));
        let reads = |s: Value| LabelSelector::from_object(&s);
        assert!(reads(json!({})).unwrap().matches(&pod));
        assert!(
            reads(json!({"matchLabels": {"app": "web"}}))
                .unwrap()
                .matches(&pod)
        );
        assert!(
            !reads(json!({"matchLabels": {"app": "db"}}))
                .unwrap()
                .matches(&pod)
        );
        let expressions =
            |e: Value| reads(json!({"matchLabels": {"app": "web"}, "matchExpressions": e}));
        assert!(
            expressions(json!([{"key": "tier", "operator": "In", "values": ["front"]}]))
                .unwrap()
                .matches(&pod)
        );
        assert!(
            !expressions(json!([{"key": "tier", "operator": "NotIn", "values": ["front"]}]))
                .unwrap()
                .matches(&pod)
        );
        assert!(
            expressions(json!([{"key": "zone", "operator": "DoesNotExist"}]))
                .unwrap()
                .matches(&pod)
        );
        assert!(
            !expressions(json!([{"key": "zone", "operator": "Exists"}]))
                .unwrap()
                .matches(&pod)
        );
        // What apimachinery refuses to convert selects nothing.
        assert!(expressions(json!([{"key": "tier", "operator": "In", "values": []}])).is_none());
        assert!(
            expressions(json!([{"key": "tier", "operator": "Exists", "values": ["x"]}])).is_none()
        );
        assert!(expressions(json!([{"key": "tier", "operator": "Gt", "values": ["1"]}])).is_none());
    }

    #[test]
    fn field_selectors_read_dotted_paths() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}});
        let select = |text: &str| FieldSelector::parse(text).unwrap();
        assert!(select("spec.nodeName=n1,metadata.name=p").matches(&pod));
        assert!(select("spec.nodeName!=n2").matches(&pod));
        assert!(select("status.phase=").matches(&pod));
        assert!(FieldSelector::parse("spec.nodeName").is_err());
    }
}
