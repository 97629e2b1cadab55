//! Which Events are written, and how, decided as client-go's `EventCorrelator` decides it
//! (`tools/record/events_cache.go`), so a cluster sees from us what it sees from upstream
//! Karpenter and every other controller:
//!
//! - **aggregation**: Events about one object with one type and reason but different notes
//!   are counted by note; from the tenth distinct note within ten minutes of the last one,
//!   they become one Event noted `(combined from similar events): …`;
//! - **counting**: an Event identical to one already written (same object, type, reason and
//!   note, or the same aggregate) is not written again: the written one's `series.count`
//!   goes up (`events.k8s.io` keeps the note of an Event immutable, so an aggregate keeps its
//!   first note);
//! - **spam filter**: each object has a token bucket of 25 Events refilled at one per five
//!   minutes; what finds it empty is dropped, counted, and reported in one summary line per
//!   interval by the publisher ([`super::events`]), never a line per Event.
//!
//! Each of the three remembers at most 4,096 keys, least recently used first out. Pure: the
//! clock is an argument.

use std::collections::HashSet;
use std::num::NonZeroUsize;

use lru::LruCache;

/// The correlator's bounds, client-go's defaults in [`Default`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Keys each cache remembers (4,096).
    pub cache_entries: usize,
    /// Distinct notes within the interval from which Events are aggregated (10).
    pub aggregate_max: usize,
    /// How long after the last similar Event its notes are still counted (600 s).
    pub aggregate_interval_ms: i64,
    /// Events an object may have at once (25).
    pub burst: f64,
    /// Events an object's bucket gains per second (one per 300 s).
    pub refill_per_second: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cache_entries: 4096,
            aggregate_max: 10,
            aggregate_interval_ms: 600_000,
            burst: 25.0,
            refill_per_second: 1.0 / 300.0,
        }
    }
}

/// An Event someone wants recorded.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// What the Event is about, one string per object (kind, namespace, name, uid).
    pub object: &'a str,
    /// Its name, the stem of a new Event's name.
    pub name: &'a str,
    /// `Normal` or `Warning`.
    pub type_: &'a str,
    /// Its reason.
    pub reason: &'a str,
    /// Its note.
    pub note: &'a str,
}

/// What to write for a [`Candidate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// A new Event, named `name`, noted `note`.
    Create {
        /// The new Event's name (`{object name}.{hex}`, as client-go names them).
        name: String,
        /// Its note (the candidate's, or the aggregate's).
        note: String,
    },
    /// The Event `name` written before happened again: its series count becomes `count`.
    Repeat {
        /// The Event to patch.
        name: String,
        /// Its note, if it has to be created again (it was lost).
        note: String,
        /// How often it has happened (≥ 2).
        count: u32,
    },
}

/// What the correlator decided for a [`Candidate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Write this.
    Write(Write),
    /// The object's bucket is empty: nothing is written.
    Dropped,
}

/// An Event written before: its name and how often it happened.
#[derive(Debug, Clone)]
struct Logged {
    name: String,
    note: String,
    count: u32,
}

/// The distinct notes of similar Events, and when the last came.
#[derive(Debug, Clone, Default)]
struct Similar {
    notes: HashSet<String>,
    last_ms: i64,
}

/// An object's token bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at_ms: i64,
}

/// The correlator: what it has seen recently, bounded.
pub struct Correlator {
    options: Options,
    similar: LruCache<String, Similar>,
    logged: LruCache<String, Logged>,
    buckets: LruCache<String, Bucket>,
    /// Makes names unique when two Events about one object come in the same nanosecond.
    sequence: u64,
}

impl Correlator {
    /// An empty correlator with `options`.
    pub fn new(options: Options) -> Self {
        let entries = NonZeroUsize::new(options.cache_entries).unwrap_or(NonZeroUsize::MIN);
        Correlator {
            options,
            similar: LruCache::new(entries),
            logged: LruCache::new(entries),
            buckets: LruCache::new(entries),
            sequence: 0,
        }
    }

    /// Decides what to write for `event` at `now_ms` (Unix milliseconds).
    pub fn correlate(&mut self, event: Candidate<'_>, now_ms: i64) -> Decision {
        let (key, note) = self.aggregate(event, now_ms);
        let write = match self.logged.get_mut(&key) {
            Some(logged) => {
                logged.count += 1;
                Write::Repeat {
                    name: logged.name.clone(),
                    note: logged.note.clone(),
                    count: logged.count,
                }
            }
            None => {
                self.sequence = self.sequence.wrapping_add(1);
                let stamp = (now_ms as u64)
                    .wrapping_mul(1_000_000)
                    .wrapping_add(self.sequence % 1_000_000);
                let name = format!("{}.{stamp:x}", event.name);
                let logged = Logged {
                    name: name.clone(),
                    note: note.clone(),
                    count: 1,
                };
                self.logged.put(key, logged);
                Write::Create { name, note }
            }
        };
        // As client-go's, the count goes up even when the filter then drops the write, so
        // the next one written says how often it happened.
        if self.take_token(event.object, now_ms) {
            Decision::Write(write)
        } else {
            Decision::Dropped
        }
    }

    /// Forgets the Event `name` (its write failed for good), so the next like it is created.
    pub fn forget(&mut self, name: &str) {
        let key = self
            .logged
            .iter()
            .find(|(_, logged)| logged.name == name)
            .map(|(key, _)| key.clone());
        if let Some(key) = key {
            self.logged.pop(&key);
        }
    }

    /// The key the Event is counted under and its note: its own, or its aggregate's.
    fn aggregate(&mut self, event: Candidate<'_>, now_ms: i64) -> (String, String) {
        let similar_key = format!(
            "{}\u{1f}{}\u{1f}{}",
            event.object, event.type_, event.reason
        );
        let interval = self.options.aggregate_interval_ms;
        let similar = self
            .similar
            .get_or_insert_mut(similar_key.clone(), Similar::default);
        if now_ms - similar.last_ms > interval {
            similar.notes.clear();
        }
        similar.notes.insert(event.note.to_owned());
        similar.last_ms = now_ms;
        if similar.notes.len() < self.options.aggregate_max {
            return (
                format!("{similar_key}\u{1f}{}", event.note),
                event.note.to_owned(),
            );
        }
        // Kept one short of the bound, so each new note after it is aggregated too.
        if let Some(any) = similar.notes.iter().next().cloned() {
            similar.notes.remove(&any);
        }
        (
            similar_key,
            format!("(combined from similar events): {}", event.note),
        )
    }

    /// Whether `object`'s bucket has an Event left at `now_ms` (taking it).
    fn take_token(&mut self, object: &str, now_ms: i64) -> bool {
        let Options {
            burst,
            refill_per_second,
            ..
        } = self.options;
        let bucket = self
            .buckets
            .get_or_insert_mut(object.to_owned(), || Bucket {
                tokens: burst,
                at_ms: now_ms,
            });
        let elapsed = (now_ms - bucket.at_ms).max(0) as f64 / 1000.0;
        bucket.tokens = (bucket.tokens + elapsed * refill_per_second).min(burst);
        bucket.at_ms = bucket.at_ms.max(now_ms);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event<'a>(object: &'a str, reason: &'a str, note: &'a str) -> Candidate<'a> {
        Candidate {
            object,
            name: object,
            type_: "Normal",
            reason,
            note,
        }
    }

    fn written(decisions: &[Decision]) -> Vec<&Write> {
        decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Write(w) => Some(w),
                Decision::Dropped => None,
            })
            .collect()
    }

    #[test]
    fn an_event_seen_again_counts_up_on_the_one_written() {
        let mut c = Correlator::new(Options::default());
        let first = c.correlate(event("pod-a", "Nominated", "on n1"), 0);
        let Decision::Write(Write::Create { name, note }) = first else {
            panic!("the first is created: {first:?}");
        };
        assert!(name.starts_with("pod-a."), "{name}");
        assert_eq!(note, "on n1");
        for n in 2..=4 {
            assert_eq!(
                c.correlate(event("pod-a", "Nominated", "on n1"), n * 1000),
                Decision::Write(Write::Repeat {
                    name: name.clone(),
                    note: "on n1".into(),
                    count: n as u32
                })
            );
        }
        // Another reason, note or object is another Event.
        for other in [
            event("pod-a", "Nominated", "on n2"),
            event("pod-a", "FailedScheduling", "on n1"),
            event("pod-b", "Nominated", "on n1"),
        ] {
            assert!(matches!(
                c.correlate(other, 5000),
                Decision::Write(Write::Create { .. })
            ));
        }
    }

    #[test]
    fn the_tenth_distinct_note_within_ten_minutes_is_combined() {
        let mut c = Correlator::new(Options::default());
        let notes: Vec<String> = (0..12).map(|i| format!("no fit ({i})")).collect();
        let decisions: Vec<Decision> = notes
            .iter()
            .enumerate()
            .map(|(i, n)| c.correlate(event("pod-a", "FailedScheduling", n), i as i64 * 1000))
            .collect();
        let writes = written(&decisions);
        for write in &writes[..9] {
            assert!(matches!(write, Write::Create { note, .. } if !note.starts_with('(')));
        }
        let Write::Create { name, note } = writes[9] else {
            panic!("the tenth starts the aggregate: {:?}", writes[9]);
        };
        assert_eq!(note, "(combined from similar events): no fit (9)");
        for (write, count) in writes[10..].iter().zip(2..) {
            assert_eq!(
                *write,
                &Write::Repeat {
                    name: name.clone(),
                    note: note.clone(),
                    count
                }
            );
        }
        // Ten minutes after the last, notes are counted afresh.
        let later = c.correlate(
            event("pod-a", "FailedScheduling", "no fit (0)"),
            11_000 + 600_001,
        );
        assert!(
            matches!(&later, Decision::Write(Write::Repeat { note, .. }) if note == "no fit (0)"),
            "{later:?}"
        );
    }

    #[test]
    fn an_object_gets_25_events_then_one_each_five_minutes() {
        let mut c = Correlator::new(Options::default());
        let decisions: Vec<Decision> = (0..40)
            .map(|i| c.correlate(event("node-a", "DisruptionBlocked", "pdb"), i))
            .collect();
        assert_eq!(written(&decisions).len(), 25);
        assert!(decisions[25..].iter().all(|d| *d == Decision::Dropped));
        // Another object has its own bucket.
        assert!(matches!(
            c.correlate(event("node-b", "DisruptionBlocked", "pdb"), 40),
            Decision::Write(_)
        ));
        // 299 s on, still empty; at 300 s one more, counting every one seen.
        assert_eq!(
            c.correlate(event("node-a", "DisruptionBlocked", "pdb"), 299_000),
            Decision::Dropped
        );
        assert!(matches!(
            c.correlate(event("node-a", "DisruptionBlocked", "pdb"), 300_100),
            Decision::Write(Write::Repeat { count: 42, .. })
        ));
    }

    #[test]
    fn the_caches_are_bounded_and_a_forgotten_event_is_created_again() {
        let options = Options {
            cache_entries: 8,
            ..Options::default()
        };
        let mut c = Correlator::new(options);
        let objects: Vec<String> = (0..100).map(|i| format!("pod-{i}")).collect();
        for o in &objects {
            c.correlate(event(o, "Nominated", "n1"), 0);
        }
        assert!(c.logged.len() <= 8 && c.similar.len() <= 8 && c.buckets.len() <= 8);
        let Decision::Write(Write::Create { name, .. }) =
            c.correlate(event("pod-x", "Nominated", "n1"), 1)
        else {
            panic!("created");
        };
        assert!(matches!(
            c.correlate(event("pod-x", "Nominated", "n1"), 2),
            Decision::Write(Write::Repeat { .. })
        ));
        c.forget(&name);
        assert!(matches!(
            c.correlate(event("pod-x", "Nominated", "n1"), 3),
            Decision::Write(Write::Create { .. })
        ));
    }
}
