//! Query strings of the admin endpoint's `/journal`: read here, apart from the HTTP server, so
//! every mistake is answered with the parameter and the fix, and so the reading is fuzzed
//! (`fuzz/fuzz_targets/admin_query.rs`, which compiles this file alone: it uses nothing of
//! the crate, only `form_urlencoded` and `thiserror`).

use std::fmt::Write as _;

/// The most events one `/journal` answer holds.
pub const MAX_LIMIT: usize = 5_000;

/// What `/journal` is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalQuery {
    /// First sequence number (1 when absent).
    pub since: Option<u64>,
    /// How many events at most (500 when absent, at most [`MAX_LIMIT`]).
    pub limit: Option<usize>,
    /// The most recent this many events instead of those from `since` (at most
    /// [`MAX_LIMIT`]).
    pub last: Option<usize>,
}

/// Why a query string was refused: the message names the parameter and what it takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QueryError(pub String);

impl JournalQuery {
    /// Reads `since`, `limit` and `last` from a raw (still percent-encoded) query string. Unknown,
    /// repeated or malformed parameters are refused.
    pub fn parse(raw: &[u8]) -> Result<JournalQuery, QueryError> {
        let mut query = JournalQuery::default();
        for (key, value) in form_urlencoded::parse(raw) {
            match &*key {
                "since" => {
                    let since = number(&key, &value, "a sequence number, e.g. since=1200")?;
                    set(&mut query.since, since, &key)?;
                }
                "limit" => set(&mut query.limit, count(&key, &value, 100)?, &key)?,
                "last" => set(&mut query.last, count(&key, &value, 50)?, &key)?,
                "" if value.is_empty() => {}
                other => {
                    return Err(QueryError(format!(
                        "unknown query parameter {other:?}; /journal takes since=, limit= and last="
                    )));
                }
            }
        }
        if query.last.is_some() && query.since.is_some() {
            return Err(QueryError(
                "since and last: give one, since= to page forward or last= for the most recent events"
                    .into(),
            ));
        }
        Ok(query)
    }

    /// The query string that [`JournalQuery::parse`] reads back as `self`.
    pub fn to_query_string(self) -> String {
        let mut out = String::new();
        if let Some(since) = self.since {
            let _ = write!(out, "since={since}");
        }
        if let Some(limit) = self.limit {
            if !out.is_empty() {
                out.push('&');
            }
            let _ = write!(out, "limit={limit}");
        }
        if let Some(last) = self.last {
            if !out.is_empty() {
                out.push('&');
            }
            let _ = write!(out, "last={last}");
        }
        out
    }
}

fn number(key: &str, value: &str, what: &str) -> Result<u64, QueryError> {
    value
        .parse()
        .map_err(|_| QueryError(format!("{key}: {value:?} is not {what}")))
}

/// A count of events, at most [`MAX_LIMIT`]; `example` goes in the message.
fn count(key: &str, value: &str, example: usize) -> Result<usize, QueryError> {
    let count = number(key, value, &format!("a count, e.g. {key}={example}"))?;
    if count > MAX_LIMIT as u64 {
        return Err(QueryError(format!(
            "{key}: {count} is more than {MAX_LIMIT}; page with since= instead"
        )));
    }
    Ok(count as usize)
}

fn set<T>(slot: &mut Option<T>, value: T, key: &str) -> Result<(), QueryError> {
    if slot.replace(value).is_some() {
        return Err(QueryError(format!("{key}: given twice; give it once")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_reads_and_writes_back() {
        let q = JournalQuery::parse(b"since=12&limit=3").unwrap();
        assert_eq!(
            q,
            JournalQuery {
                since: Some(12),
                limit: Some(3),
                last: None,
            }
        );
        let q = JournalQuery::parse(b"last=40&limit=10").unwrap();
        assert_eq!((q.last, q.limit), (Some(40), Some(10)));
        assert_eq!(JournalQuery::parse(q.to_query_string().as_bytes()), Ok(q));
        assert_eq!(JournalQuery::parse(q.to_query_string().as_bytes()), Ok(q));
        assert_eq!(JournalQuery::parse(b""), Ok(JournalQuery::default()));
        assert_eq!(
            JournalQuery::parse(b"since=%31%32"),
            Ok(JournalQuery {
                since: Some(12),
                ..JournalQuery::default()
            })
        );
    }

    #[test]
    fn mistakes_name_the_parameter_and_the_fix() {
        let error = |raw: &[u8]| JournalQuery::parse(raw).unwrap_err().0;
        assert!(error(b"since=abc").contains("since: \"abc\" is not a sequence number"));
        assert!(error(b"since=-1").starts_with("since:"));
        assert!(error(b"limit=99999").contains("more than 5000"));
        assert!(error(b"since=1&since=2").contains("given twice"));
        assert!(error(b"from=3").contains("unknown query parameter \"from\""));
        assert!(error(b"since=18446744073709551616").starts_with("since:"));
        assert!(error(b"last=5001").contains("more than 5000"));
        assert!(error(b"since=3&last=2").contains("give one"));
    }
}
