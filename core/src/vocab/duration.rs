//! Durations as Karpenter v1 writes them: `720h`, `1m30s`, and `Never` where allowed.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason}")]
pub struct DurationError {
    input: String,
    reason: &'static str,
}

/// Parses `([0-9]+(h|m|s))+`, the only form upstream's CRD patterns accept.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError {
        input: input.to_owned(),
        reason,
    };
    if input.is_empty() {
        return Err(err("empty; write e.g. \"720h\", \"1m30s\" or \"30s\""));
    }
    let mut total: u64 = 0;
    let mut number: Option<u64> = None;
    for c in input.chars() {
        match c {
            '0'..='9' => {
                let digit = u64::from(c as u8 - b'0');
                let n = number
                    .unwrap_or(0)
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(digit));
                number = Some(n.ok_or_else(|| err("too large"))?);
            }
            'h' | 'm' | 's' => {
                let n = number
                    .take()
                    .ok_or_else(|| err("each unit needs a number before it, e.g. \"1h30m\""))?;
                let unit = match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                total = n
                    .checked_mul(unit)
                    .and_then(|secs| total.checked_add(secs))
                    .ok_or_else(|| err("too large"))?;
            }
            _ => {
                return Err(err(
                    "only whole numbers with units h, m and s are allowed, e.g. \"1h30m\"",
                ));
            }
        }
    }
    if number.is_some() {
        return Err(err("a number is missing its unit (h, m or s)"));
    }
    Ok(Duration::from_secs(total))
}

/// Formats a duration in the shortest `XhYmZs` form (`0s` for zero).
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return "0s".into();
    }
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// A duration that may be `Never` (`expireAfter`, `consolidateAfter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NillableDuration(pub Option<Duration>);

impl NillableDuration {
    /// `Never`.
    pub const NEVER: NillableDuration = NillableDuration(None);

    /// A finite duration of `secs` seconds.
    pub const fn from_secs(secs: u64) -> Self {
        NillableDuration(Some(Duration::from_secs(secs)))
    }

    /// Parses `720h`, `1m30s` or `Never`.
    pub fn parse(input: &str) -> Result<Self, DurationError> {
        if input == "Never" {
            Ok(NillableDuration::NEVER)
        } else {
            parse_duration(input).map(|d| NillableDuration(Some(d)))
        }
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("Never"),
            Some(d) => f.write_str(&format_duration(d)),
        }
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        NillableDuration::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for NillableDuration {
    fn schema_name() -> Cow<'static, str> {
        "NillableDuration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": "^(([0-9]+(s|m|h))+|Never)$"
        })
    }
}

/// A finite duration (`terminationGracePeriod`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KDuration(pub Duration);

impl fmt::Display for KDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl Serialize for KDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for KDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        parse_duration(&text)
            .map(KDuration)
            .map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for KDuration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": "^([0-9]+(s|m|h))+$"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_upstream_forms() {
        for (text, secs) in [
            ("720h", 2_592_000),
            ("1m30s", 90),
            ("0s", 0),
            ("1h0m0s", 3600),
            ("90s", 90),
        ] {
            assert_eq!(
                parse_duration(text).map(|d| d.as_secs()),
                Ok(secs),
                "{text}"
            );
        }
        assert_eq!(
            NillableDuration::parse("Never"),
            Ok(NillableDuration::NEVER)
        );
    }

    #[test]
    fn rejects_what_upstream_patterns_reject() {
        for text in ["", "10", "h", "1.5h", "1d", "-1s", "1ms", "never", "1h 2m"] {
            assert!(parse_duration(text).is_err(), "{text} should be rejected");
        }
    }

    #[test]
    fn formats_canonically() {
        assert_eq!(NillableDuration::parse("90s").unwrap().to_string(), "1m30s");
        assert_eq!(NillableDuration::parse("720h").unwrap().to_string(), "720h");
        assert_eq!(NillableDuration::NEVER.to_string(), "Never");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }
}
