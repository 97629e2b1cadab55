//! Field paths and the problems `validate()` reports.

use std::fmt;

/// A path to a field, printed the way Kubernetes prints them:
/// `spec.disruption.budgets[1].schedule`, `spec.template.metadata.labels[team]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath(String);

impl FieldPath {
    /// The path of the object's root.
    pub fn root() -> Self {
        FieldPath(String::new())
    }

    /// A path starting at a top-level field.
    pub fn new(field: &str) -> Self {
        FieldPath(field.to_owned())
    }

    /// The path of a child field.
    pub fn field(&self, name: &str) -> Self {
        if self.0.is_empty() {
            FieldPath(name.to_owned())
        } else {
            FieldPath(format!("{}.{name}", self.0))
        }
    }

    /// The path of a list item.
    pub fn index(&self, i: usize) -> Self {
        FieldPath(format!("{}[{i}]", self.0))
    }

    /// The path of a map entry.
    pub fn key(&self, key: &str) -> Self {
        FieldPath(format!("{}[{key}]", self.0))
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("<root>")
        } else {
            f.write_str(&self.0)
        }
    }
}

/// One thing wrong with a manifest.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Problem {
    /// Where it is.
    pub path: FieldPath,
    /// What is wrong and, where it helps, how to fix it.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Collects every problem instead of stopping at the first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems(Vec<Problem>);

impl Problems {
    /// Records a problem at `path`.
    pub fn push(&mut self, path: &FieldPath, message: impl Into<String>) {
        self.0.push(Problem {
            path: path.clone(),
            message: message.into(),
        });
    }

    /// Records a problem when `problem` is `Some`.
    pub fn push_opt(&mut self, path: &FieldPath, problem: Option<impl Into<String>>) {
        if let Some(message) = problem {
            self.push(path, message);
        }
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems found, in the order they were found.
    pub fn into_vec(self) -> Vec<Problem> {
        self.0
    }

    /// The problems found.
    pub fn iter(&self) -> impl Iterator<Item = &Problem> {
        self.0.iter()
    }

    /// Adds all of `other`'s problems.
    pub fn extend(&mut self, other: Problems) {
        self.0.extend(other.0);
    }
}

/// Checks an object against the rules upstream Karpenter enforces with CEL and at runtime.
pub trait Validate {
    /// Every problem, each with its field path. Empty means valid.
    fn validate(&self) -> Problems;
}
