//! Requirement algebra: sets of allowed label values, intersected across NodePools, instance
//! types and pods, as upstream Karpenter models them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::vocab::Operator;
use crate::vocab::labels::{self, normalize_label};

/// The values a label may take: a set (`In`), the complement of a set (`NotIn`, `Exists`), or
/// nothing (`DoesNotExist`), optionally bounded as an integer (`Gt`, `Lt`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    complement: bool,
    values: BTreeSet<String>,
    greater_than: Option<i64>,
    less_than: Option<i64>,
    /// Whether a node without the label satisfies it (`NotIn`, `DoesNotExist`).
    allows_absent: bool,
    /// Minimum number of distinct values the launch options must keep.
    pub min_values: Option<usize>,
}

impl Requirement {
    /// `In values`.
    pub fn is_in<I: IntoIterator<Item = S>, S: Into<String>>(values: I) -> Self {
        Requirement {
            complement: false,
            values: values.into_iter().map(Into::into).collect(),
            greater_than: None,
            less_than: None,
            allows_absent: false,
            min_values: None,
        }
    }

    /// `NotIn values`.
    pub fn not_in<I: IntoIterator<Item = S>, S: Into<String>>(values: I) -> Self {
        Requirement {
            complement: true,
            allows_absent: true,
            ..Requirement::is_in(values)
        }
    }

    /// `Exists`.
    pub fn exists() -> Self {
        Requirement {
            complement: true,
            ..Requirement::is_in(Vec::<String>::new())
        }
    }

    /// `DoesNotExist`.
    pub fn does_not_exist() -> Self {
        Requirement {
            allows_absent: true,
            ..Requirement::is_in(Vec::<String>::new())
        }
    }

    /// Builds from an operator and values. `Gt`/`Lt`/`Gte`/`Lte` values that are not integers give an
    /// unsatisfiable requirement (validation reports them before they get here).
    pub fn new(operator: Operator, values: &[String]) -> Self {
        match operator {
            Operator::In => Requirement::is_in(values.iter().cloned()),
            Operator::NotIn => Requirement::not_in(values.iter().cloned()),
            Operator::Exists => Requirement::exists(),
            Operator::DoesNotExist => Requirement::does_not_exist(),
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let bound = values.first().and_then(|v| v.parse::<i64>().ok());
                let Some(bound) = bound else {
                    return Requirement::is_in(Vec::<String>::new());
                };
                // On integers, `>= n` is `> n - 1` and `<= n` is `< n + 1`.
                let mut r = Requirement::exists();
                match operator {
                    Operator::Gt => r.greater_than = Some(bound),
                    Operator::Gte => r.greater_than = Some(bound.saturating_sub(1)),
                    Operator::Lt => r.less_than = Some(bound),
                    _ => r.less_than = Some(bound.saturating_add(1)),
                }
                r
            }
        }
    }

    fn within_bounds(&self, value: &str) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        let Ok(n) = value.parse::<i64>() else {
            return false;
        };
        self.greater_than.is_none_or(|g| n > g) && self.less_than.is_none_or(|l| n < l)
    }

    /// A value a node's label can take to satisfy this requirement, as upstream picks one for
    /// a launched NodeClaim: an `In` set's first value; for `NotIn`, `Exists`, `Gt` and `Lt`
    /// the smallest non-negative integer inside the bounds that is not excluded (upstream
    /// draws one at random; ours is the same on every run); `None` for `DoesNotExist` or
    /// when no integer is left.
    pub fn any(&self) -> Option<String> {
        if !self.complement {
            return self.values.iter().next().cloned();
        }
        let mut n = self.greater_than.map_or(0, |g| g.saturating_add(1)).max(0);
        let below = |n: i64| self.less_than.is_none_or(|l| n < l);
        // Each excluded value can push the candidate up by one at most.
        for _ in 0..=self.values.len() {
            if !below(n) {
                return None;
            }
            let candidate = n.to_string();
            if !self.values.contains(&candidate) {
                return Some(candidate);
            }
            n = n.checked_add(1)?;
        }
        None
    }

    fn bounds_empty(&self) -> bool {
        matches!((self.greater_than, self.less_than), (Some(g), Some(l)) if g.saturating_add(1) >= l)
    }

    /// Whether a node with label value `value` satisfies this requirement.
    pub fn has(&self, value: &str) -> bool {
        let listed = self.values.contains(value);
        (listed != self.complement) && self.within_bounds(value)
    }

    /// Whether some label value satisfies it.
    pub fn any_value(&self) -> bool {
        if self.complement {
            !self.bounds_empty()
        } else {
            !self.values.is_empty()
        }
    }

    /// Whether a node without this label satisfies it.
    pub fn allows_absent(&self) -> bool {
        self.allows_absent
    }

    /// The allowed values, when they form a finite set (`In`).
    pub fn values(&self) -> Option<&BTreeSet<String>> {
        (!self.complement).then_some(&self.values)
    }

    /// Whether every node satisfying `self` also satisfies `other`, decided cheaply: exact
    /// for finite sets and equal requirements, `false` (unknown) otherwise.
    pub fn implies(&self, other: &Requirement) -> bool {
        if self == other {
            return true;
        }
        !self.complement
            && (!self.allows_absent || other.allows_absent)
            && self
                .values
                .iter()
                .all(|v| self.within_bounds(v) && other.has(v))
            && other
                .min_values
                .is_none_or(|o| self.min_values.is_some_and(|m| m >= o))
    }

    /// Whether one node can satisfy both: [`Requirement::intersect`] allows some value or the
    /// label's absence, decided without building the intersection (instance types are
    /// checked against requirement sets by the hundred in every round).
    pub fn overlaps(&self, other: &Requirement) -> bool {
        if self.allows_absent && other.allows_absent {
            return true;
        }
        let greater_than = match (self.greater_than, other.greater_than) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let less_than = match (self.less_than, other.less_than) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let within = |v: &String| {
            (greater_than.is_none() && less_than.is_none())
                || v.parse::<i64>().is_ok_and(|n| {
                    greater_than.is_none_or(|g| n > g) && less_than.is_none_or(|l| n < l)
                })
        };
        match (self.complement, other.complement) {
            (true, true) => !matches!(
                (greater_than, less_than),
                (Some(g), Some(l)) if g.saturating_add(1) >= l
            ),
            (true, false) => other
                .values
                .iter()
                .any(|v| !self.values.contains(v) && within(v)),
            (false, true) => self
                .values
                .iter()
                .any(|v| !other.values.contains(v) && within(v)),
            (false, false) => {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (&self.values, &other.values)
                } else {
                    (&other.values, &self.values)
                };
                small.iter().any(|v| large.contains(v) && within(v))
            }
        }
    }

    /// Values that satisfy both.
    pub fn intersect(&self, other: &Requirement) -> Requirement {
        let greater_than = match (self.greater_than, other.greater_than) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let less_than = match (self.less_than, other.less_than) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let min_values = match (self.min_values, other.min_values) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let allows_absent = self.allows_absent && other.allows_absent;
        let (complement, values) = match (self.complement, other.complement) {
            (true, true) => (true, self.values.union(&other.values).cloned().collect()),
            (true, false) => (
                false,
                other
                    .values
                    .iter()
                    .filter(|v| !self.values.contains(*v))
                    .cloned()
                    .collect(),
            ),
            (false, true) => (
                false,
                self.values
                    .iter()
                    .filter(|v| !other.values.contains(*v))
                    .cloned()
                    .collect(),
            ),
            (false, false) => (
                false,
                self.values.intersection(&other.values).cloned().collect(),
            ),
        };
        let mut out = Requirement {
            complement,
            values,
            greater_than,
            less_than,
            allows_absent,
            min_values,
        };
        if !out.complement && (greater_than.is_some() || less_than.is_some()) {
            let (g, l) = (greater_than, less_than);
            out.values.retain(|v| {
                v.parse::<i64>()
                    .is_ok_and(|n| g.is_none_or(|g| n > g) && l.is_none_or(|l| n < l))
            });
        }
        out
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |values: &BTreeSet<String>| {
            values
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        match (self.complement, self.values.is_empty()) {
            (false, true) => parts.push("DoesNotExist".to_owned()),
            (false, false) => parts.push(format!("In [{}]", list(&self.values))),
            (true, true) if self.greater_than.is_none() && self.less_than.is_none() => {
                parts.push("Exists".to_owned())
            }
            (true, true) => {}
            (true, false) => parts.push(format!("NotIn [{}]", list(&self.values))),
        }
        if let Some(g) = self.greater_than {
            parts.push(format!("Gt {g}"));
        }
        if let Some(l) = self.less_than {
            parts.push(format!("Lt {l}"));
        }
        f.write_str(&parts.join(" and "))
    }
}

/// Why two requirement sets cannot both hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incompatible {
    /// The label key.
    pub key: String,
    /// What one side wants.
    pub wanted: String,
    /// What the other side allows.
    pub allowed: String,
}

impl fmt::Display for Incompatible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} conflicts with {}",
            self.key, self.wanted, self.allowed
        )
    }
}

/// Requirements by label key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements(BTreeMap<String, Requirement>);

/// A minValues requirement the instance types left do not keep.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("minValues {min} for {key} not met: only {found} value(s) remain")]
pub struct MinValuesNotMet {
    /// The requirement's key.
    pub key: String,
    /// The distinct values it asks for.
    pub min: usize,
    /// The distinct values left.
    pub found: usize,
}

impl Requirements {
    /// No constraints.
    pub fn new() -> Self {
        Requirements::default()
    }

    /// `key In [value]` for each label.
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut out = Requirements::new();
        for (key, value) in labels {
            out.add(normalize_label(key), Requirement::is_in([value.clone()]));
        }
        out
    }

    /// Adds a requirement, intersecting with any existing one on the same key.
    pub fn add(&mut self, key: &str, requirement: Requirement) {
        match self.0.get_mut(key) {
            Some(existing) => *existing = existing.intersect(&requirement),
            None => {
                self.0.insert(key.to_owned(), requirement);
            }
        }
    }

    /// The requirement on `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.0.get(key)
    }

    /// Drops what is required of `key`, returning it.
    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.0.remove(key)
    }

    /// Whether `key` is constrained.
    pub fn has_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// Every requirement.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Requirement)> {
        self.0.iter()
    }

    /// The labels a node launched under these requirements carries for them, as upstream
    /// gives a launched NodeClaim its requirements' labels: a key pinned to one value gets it;
    /// any other key the cloud does not settle itself (not a well-known, instance or
    /// restricted label) gets [`Requirement::any`], so a pod selecting a custom key a NodePool
    /// requires with `NotIn`, `Exists`, `Gt` or `Lt` can land on its nodes. Never the hostname.
    pub fn node_labels(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (key, requirement) in &self.0 {
            if key == labels::HOSTNAME {
                continue;
            }
            let pinned = requirement.values().filter(|v| v.len() == 1);
            let value = match pinned {
                Some(values) => values.iter().next().cloned(),
                None if is_instance_label(key)
                    || labels::label_restriction(key, labels::LabelUse::NodeClaim).is_some() =>
                {
                    None
                }
                None => requirement.any(),
            };
            if let Some(value) = value {
                out.insert(key.clone(), value);
            }
        }
        out
    }

    /// Whether instance types with these `labels` keep the distinct values each minValues
    /// requirement asks for; the first that falls short says so.
    pub fn min_values_met<'a>(
        &self,
        labels: impl Iterator<Item = &'a BTreeMap<String, String>> + Clone,
    ) -> Result<(), MinValuesNotMet> {
        for (key, requirement) in &self.0 {
            let Some(min) = requirement.min_values else {
                continue;
            };
            let mut distinct: Vec<&str> = labels
                .clone()
                .filter_map(|l| l.get(key).map(String::as_str))
                .collect();
            distinct.sort_unstable();
            distinct.dedup();
            if distinct.len() < min {
                return Err(MinValuesNotMet {
                    key: key.clone(),
                    min,
                    found: distinct.len(),
                });
            }
        }
        Ok(())
    }

    /// Whether `self` already implies every requirement of `other`, so intersecting would
    /// change nothing (see [`Requirement::implies`]; `false` when unsure).
    pub fn implies(&self, other: &Requirements) -> bool {
        other
            .0
            .iter()
            .all(|(key, theirs)| self.0.get(key).is_some_and(|mine| mine.implies(theirs)))
    }

    /// Intersects every requirement of `other` into `self`.
    pub fn intersect_with(&mut self, other: &Requirements) {
        for (key, r) in &other.0 {
            self.add(key, r.clone());
        }
    }

    /// Checks that `self` and `other` can both hold on one node. Keys only one side
    /// constrains are fine.
    pub fn compatible(&self, other: &Requirements) -> Result<(), Incompatible> {
        // The keys both constrain, in key order, found from the side with fewer keys.
        let conflict = if self.0.len() <= other.0.len() {
            self.0.iter().find_map(|(key, mine)| {
                let theirs = other.0.get(key)?;
                (!mine.overlaps(theirs)).then_some((key, mine, theirs))
            })
        } else {
            other.0.iter().find_map(|(key, theirs)| {
                let mine = self.0.get(key)?;
                (!mine.overlaps(theirs)).then_some((key, mine, theirs))
            })
        };
        match conflict {
            None => Ok(()),
            Some((key, mine, theirs)) => Err(Incompatible {
                key: key.clone(),
                wanted: mine.to_string(),
                allowed: theirs.to_string(),
            }),
        }
    }

    /// Checks that a pod's requirements (`self`) can be met by a node template whose labels
    /// are described by `node`. A custom label the template does not define can only satisfy
    /// requirements that allow its absence; well-known labels come from the instance type.
    pub fn compatible_with_template(&self, node: &Requirements) -> Result<(), Incompatible> {
        self.compatible(node)?;
        for (key, mine) in &self.0 {
            if !node.0.contains_key(key) && !is_instance_label(key) && !mine.allows_absent() {
                return Err(Incompatible {
                    key: key.clone(),
                    wanted: mine.to_string(),
                    allowed: "no such label on nodes of this NodePool".into(),
                });
            }
        }
        Ok(())
    }

    /// Whether concrete node labels satisfy every requirement ([`Requirements::matches_labels`]
    /// without saying why not).
    pub fn admits(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|(key, r)| match labels.get(key) {
            Some(value) => r.has(value),
            None => r.allows_absent(),
        })
    }

    /// Whether concrete node labels satisfy every requirement.
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> Result<(), Incompatible> {
        for (key, r) in &self.0 {
            let ok = match labels.get(key) {
                Some(value) => r.has(value),
                None => r.allows_absent(),
            };
            if !ok {
                return Err(Incompatible {
                    key: key.clone(),
                    wanted: r.to_string(),
                    allowed: labels.get(key).map_or_else(
                        || "label absent".to_owned(),
                        |v| format!("label value {v:?}"),
                    ),
                });
            }
        }
        Ok(())
    }
}

/// One requirement as stored (in the journal, in round inputs): the shape of the API's
/// `NodeSelectorRequirementWithMinValues`, kept here so the model does not depend on the API
/// types. Bounds are extra entries on the same key, intersected back when read.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredRequirement {
    key: String,
    operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    min_values: Option<i64>,
}

impl Requirements {
    /// Every requirement as (key, operator, values, minValues) entries: `In`, `NotIn`,
    /// `Exists`, `DoesNotExist`, `Gt`, `Lt`; what one entry cannot say becomes extra entries
    /// on the same key (bounds; `Exists` beside a `NotIn` that must not match nodes without
    /// the label), with minValues on the first, which [`Requirements::from_entries`]
    /// intersects back into the same requirement. A requirement nothing satisfies is `Exists`
    /// beside `DoesNotExist`, one everything satisfies a `NotIn` without values.
    pub fn entries(&self) -> Vec<(String, Operator, Vec<String>, Option<i64>)> {
        let mut out = Vec::new();
        for (key, r) in &self.0 {
            let values: Vec<String> = r.values.iter().cloned().collect();
            let bounded = r.greater_than.is_some() || r.less_than.is_some();
            let mut entries = Vec::new();
            match (r.complement, r.values.is_empty()) {
                (false, true) if r.allows_absent => {
                    entries.push((Operator::DoesNotExist, Vec::new()))
                }
                // Nothing satisfies it: the label must be there and must not be, which the
                // API accepts (it refuses an `In` without values).
                (false, true) => {
                    entries.push((Operator::Exists, Vec::new()));
                    entries.push((Operator::DoesNotExist, Vec::new()));
                }
                (false, false) => entries.push((Operator::In, values)),
                (true, false) => {
                    entries.push((Operator::NotIn, values));
                    if !r.allows_absent {
                        entries.push((Operator::Exists, Vec::new()));
                    }
                }
                (true, true) if r.allows_absent => entries.push((Operator::NotIn, Vec::new())),
                (true, true) if !bounded => entries.push((Operator::Exists, Vec::new())),
                (true, true) => {}
            }
            if let Some(g) = r.greater_than {
                entries.push((Operator::Gt, vec![g.to_string()]));
            }
            if let Some(l) = r.less_than {
                entries.push((Operator::Lt, vec![l.to_string()]));
            }
            for (i, (operator, values)) in entries.into_iter().enumerate() {
                let min_values = if i == 0 {
                    r.min_values.map(|m| m as i64)
                } else {
                    None
                };
                out.push((key.clone(), operator, values, min_values));
            }
        }
        out
    }

    /// From (key, operator, values, minValues) entries, normalising deprecated label aliases
    /// and intersecting entries on the same key.
    pub fn from_entries<'a>(
        entries: impl IntoIterator<Item = (&'a str, Operator, &'a [String], Option<i64>)>,
    ) -> Self {
        let mut out = Requirements::new();
        for (key, operator, values, min_values) in entries {
            let mut req = Requirement::new(operator, values);
            req.min_values = min_values.and_then(|m| usize::try_from(m).ok());
            out.add(normalize_label(key), req);
        }
        out
    }
}

impl serde::Serialize for Requirements {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let stored: Vec<StoredRequirement> = self
            .entries()
            .into_iter()
            .map(|(key, operator, values, min_values)| StoredRequirement {
                key,
                operator,
                values,
                min_values,
            })
            .collect();
        stored.serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for Requirements {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let list = Vec::<StoredRequirement>::deserialize(deserializer)?;
        Ok(Requirements::from_entries(list.iter().map(|r| {
            (
                r.key.as_str(),
                r.operator,
                r.values.as_slice(),
                r.min_values,
            )
        })))
    }
}

/// Labels an instance type provides, so a NodePool need not define them for a pod to ask.
pub fn is_instance_label(key: &str) -> bool {
    labels::WELL_KNOWN_LABELS.contains(&key)
        || labels::AWS_WELL_KNOWN_LABELS.contains(&key)
        || key == labels::NODEPOOL
        || key == labels::HOSTNAME
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn set_algebra() {
        let zone_ab = Requirement::is_in(["a", "b"]);
        let not_a = Requirement::not_in(["a"]);
        let both = zone_ab.intersect(&not_a);
        assert!(both.has("b") && !both.has("a"));
        assert_eq!(both.to_string(), "In [b]");
        let gt4 = Requirement::new(Operator::Gt, &s(&["4"]));
        assert!(gt4.has("5") && !gt4.has("4") && !gt4.has("x"));
        let lt8 = Requirement::new(Operator::Lt, &s(&["8"]));
        let range = gt4.intersect(&lt8);
        assert!(range.has("7") && !range.has("8"));
        assert_eq!(range.to_string(), "Gt 4 and Lt 8");
        assert!(
            !Requirement::new(Operator::Gt, &s(&["5"]))
                .intersect(&Requirement::new(Operator::Lt, &s(&["6"])))
                .any_value()
        );
        let values = Requirement::is_in(["2", "6", "x"]).intersect(&gt4);
        assert_eq!(values.values().map(|v| v.len()), Some(1));
    }

    #[test]
    fn absence() {
        let not_in = Requirement::not_in(["a"]);
        let dne = Requirement::does_not_exist();
        assert!(not_in.intersect(&dne).allows_absent());
        assert!(!Requirement::exists().intersect(&dne).any_value());
        assert!(!Requirement::exists().intersect(&dne).allows_absent());
    }

    #[test]
    fn compatibility_of_sets() {
        let mut pool = Requirements::new();
        pool.add(labels::CAPACITY_TYPE, Requirement::is_in(["spot"]));
        pool.add("team", Requirement::is_in(["a"]));
        let mut pod = Requirements::new();
        pod.add(labels::CAPACITY_TYPE, Requirement::is_in(["on-demand"]));
        let err = pod.compatible_with_template(&pool).unwrap_err();
        assert_eq!(
            err.to_string(),
            "karpenter.sh/capacity-type In [on-demand] conflicts with In [spot]"
        );
        let mut pod = Requirements::new();
        pod.add("other", Requirement::is_in(["x"]));
        assert!(
            pod.compatible_with_template(&pool).is_err(),
            "undefined custom label"
        );
        let mut pod = Requirements::new();
        pod.add("other", Requirement::not_in(["x"]));
        pod.add(labels::ZONE, Requirement::is_in(["z"]));
        assert!(pod.compatible_with_template(&pool).is_ok());
    }

    #[test]
    fn api_form_round_trips() {
        let mut r = Requirements::new();
        r.add("a", Requirement::is_in(["x", "y"]));
        r.add("b", Requirement::not_in(["z"]));
        r.add("c", Requirement::exists());
        r.add("d", Requirement::does_not_exist());
        let mut bounded = Requirement::new(Operator::Gt, &s(&["4"]))
            .intersect(&Requirement::new(Operator::Lt, &s(&["9"])));
        bounded.min_values = Some(2);
        r.add("e", bounded);
        let json = serde_json::to_string(&r).unwrap();
        let back: Requirements = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r, "{json}");
    }

    #[test]
    fn label_matching() {
        let labels: BTreeMap<String, String> = [("team".to_owned(), "a".to_owned())].into();
        let mut r = Requirements::new();
        r.add("team", Requirement::is_in(["a"]));
        r.add("gone", Requirement::does_not_exist());
        assert!(r.matches_labels(&labels).is_ok() && r.admits(&labels));
        r.add("zone", Requirement::exists());
        assert!(r.matches_labels(&labels).is_err() && !r.admits(&labels));
    }

    #[test]
    fn a_node_gets_a_label_satisfying_each_custom_requirement() {
        let r = |op: Operator, v: &[&str]| Requirement::new(op, &s(v));
        let mut reqs = Requirements::new();
        reqs.add("test-key-1", r(Operator::In, &["test-value-1"]));
        reqs.add("test-key-2", r(Operator::NotIn, &["test-value-2"]));
        reqs.add("test-key-3", r(Operator::Exists, &[]));
        reqs.add("test-key-4", r(Operator::DoesNotExist, &[]));
        reqs.add("test-key-5", r(Operator::Gt, &["5"]));
        reqs.add("test-key-6", r(Operator::Lt, &["3"]));
        reqs.add("test-key-7", r(Operator::In, &["b", "a"]));
        let mut squeezed = r(Operator::Gt, &["5"]).intersect(&r(Operator::Lt, &["9"]));
        squeezed = squeezed.intersect(&r(Operator::NotIn, &["6", "7"]));
        reqs.add("test-key-8", squeezed);
        let mut none_left = r(Operator::Gt, &["5"]).intersect(&r(Operator::Lt, &["8"]));
        none_left = none_left.intersect(&r(Operator::NotIn, &["6", "7"]));
        reqs.add("test-key-9", none_left);
        reqs.add(
            "topology.kubernetes.io/zone",
            r(Operator::In, &["z1", "z2"]),
        );
        reqs.add("topology.kubernetes.io/region", r(Operator::In, &["r1"]));
        reqs.add("karpenter.k8s.aws/instance-cpu", r(Operator::Gt, &["2"]));
        reqs.add("karpenter.sh/custom", r(Operator::Exists, &[]));
        reqs.add(labels::HOSTNAME, r(Operator::In, &["only"]));
        let got = reqs.node_labels();
        let want: BTreeMap<String, String> = [
            ("test-key-1", "test-value-1"),
            ("test-key-2", "0"),
            ("test-key-3", "0"),
            ("test-key-5", "6"),
            ("test-key-6", "0"),
            ("test-key-7", "a"),
            ("test-key-8", "8"),
            ("topology.kubernetes.io/region", "r1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(got, want);
        for (key, value) in &got {
            assert!(reqs.get(key).is_some_and(|r| r.has(value)), "{key}={value}");
        }
        let numeric_excluded = r(Operator::NotIn, &["0", "1"]);
        assert_eq!(numeric_excluded.any().as_deref(), Some("2"));
    }

    /// A requirement of any operator over a few small values (numbers and not), so bounds,
    /// complements and absence meet in every combination.
    fn requirement() -> impl proptest::strategy::Strategy<Value = Requirement> {
        use proptest::prelude::*;
        let operator = prop::sample::select(vec![
            Operator::In,
            Operator::NotIn,
            Operator::Exists,
            Operator::DoesNotExist,
            Operator::Gt,
            Operator::Lt,
            Operator::Gte,
            Operator::Lte,
        ]);
        let value = prop::sample::select(vec!["0", "1", "2", "3", "5", "a", "b"]);
        (operator, prop::collection::vec(value, 0..4)).prop_map(|(operator, values)| {
            let values: Vec<String> = values.into_iter().map(str::to_owned).collect();
            Requirement::new(operator, &values)
        })
    }

    proptest::proptest! {
        /// `overlaps` says what the intersection it does not build would say.
        #[test]
        fn overlaps_is_a_nonempty_intersection(
            a in requirement(),
            b in requirement(),
            c in requirement(),
        ) {
            let both = a.intersect(&b);
            proptest::prop_assert_eq!(a.overlaps(&b), both.any_value() || both.allows_absent());
            proptest::prop_assert_eq!(a.overlaps(&b), b.overlaps(&a));
            // Chained, as a round intersects a pool's, a pod's and a type's.
            let all = both.intersect(&c);
            proptest::prop_assert_eq!(both.overlaps(&c), all.any_value() || all.allows_absent());
        }
    }
}
