//! A small event type and projection shared by the journal's tests and benches.
#![allow(dead_code, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use karpenter_journal::{Clock, EntityRef, Envelope, JournalEvent, Projection};
use serde::{Deserialize, Serialize};

/// Events about counters: enough shape to exercise versions, entities and retirement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum CounterEvent {
    Created { name: String },
    Added { name: String, amount: i64 },
    Deleted { name: String },
}

impl JournalEvent for CounterEvent {
    const SCHEMA_VERSION: u16 = 2;

    fn event_type(&self) -> &str {
        match self {
            CounterEvent::Created { .. } => "CounterCreated",
            CounterEvent::Added { .. } => "CounterAdded",
            CounterEvent::Deleted { .. } => "CounterDeleted",
        }
    }

    fn entity(&self) -> EntityRef {
        let (CounterEvent::Created { name }
        | CounterEvent::Added { name, .. }
        | CounterEvent::Deleted { name }) = self;
        EntityRef::new("Counter", name.clone())
    }

    fn to_payload(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    fn from_payload(
        event_type: &str,
        version: u16,
        payload: &[u8],
    ) -> Result<Option<Self>, String> {
        match (event_type, version) {
            // Version 1 of CounterAdded called the amount `by`.
            ("CounterAdded", 1) => {
                #[derive(Deserialize)]
                struct V1 {
                    name: String,
                    by: i64,
                }
                let v1: V1 = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
                Ok(Some(CounterEvent::Added {
                    name: v1.name,
                    amount: v1.by,
                }))
            }
            ("CounterReset", _) => Ok(None),
            (_, 1 | 2) => serde_json::from_slice(payload)
                .map(Some)
                .map_err(|e| e.to_string()),
            (t, v) => Err(format!("unknown event {t} v{v}")),
        }
    }
}

/// Counter values by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters(pub BTreeMap<String, i64>);

impl Projection<CounterEvent> for Counters {
    const SNAPSHOT_VERSION: u16 = 1;

    fn apply(&mut self, envelope: &Envelope<CounterEvent>) {
        match &envelope.event {
            CounterEvent::Created { name } => {
                self.0.insert(name.clone(), 0);
            }
            CounterEvent::Added { name, amount } => {
                *self.0.entry(name.clone()).or_default() += amount
            }
            CounterEvent::Deleted { name } => {
                self.0.remove(name);
            }
        }
    }
}

/// A clock the test moves by hand.
#[derive(Debug, Default)]
pub struct ManualClock(pub AtomicI64);

impl ManualClock {
    pub fn at(ms: i64) -> Arc<Self> {
        Arc::new(ManualClock(AtomicI64::new(ms)))
    }
    pub fn set(&self, ms: i64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

pub fn added(name: &str, amount: i64) -> CounterEvent {
    CounterEvent::Added {
        name: name.into(),
        amount,
    }
}
