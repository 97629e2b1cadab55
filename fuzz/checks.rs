//! What each fuzz target checks of one input. Shared by the targets (`fuzz_targets/`) and by
//! the regression test that replays every input a fuzzer ever crashed on
//! (`tests/fuzz_regressions.rs`, inputs under `fuzz/regressions/<target>/`).

use std::sync::OnceLock;

// The admin endpoint's query-string reader, compiled alone (the binary's crate is too heavy
// for an instrumented build); the path is relative to this file.
#[path = "../src/admin/query.rs"]
mod admin_query;

use karpenter_core::api::convert::convert;
use karpenter_core::api::manifest::ManifestChecker;
use karpenter_core::eventbridge::{Parsed, parse};
use karpenter_core::events::DomainEvent;
use karpenter_journal::JournalEvent;
use karpenter_journal::format::{
    decode_event, decode_event_header, decode_snapshot, encode_event, encode_snapshot,
};

fn checker() -> &'static ManifestChecker {
    static CHECKER: OnceLock<ManifestChecker> = OnceLock::new();
    CHECKER.get_or_init(|| ManifestChecker::new().expect("the built-in CRDs load"))
}

/// `karpenter validate` and `karpenter convert` on any text: reports or a conversion error,
/// never a panic; what convert writes, validate reads back.
pub fn manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for report in checker().check_str(text) {
        assert!(report.index >= 1);
        for problem in &report.problems {
            let _ = problem.to_string();
        }
    }
    match convert(text) {
        Ok(conversion) => {
            if let Ok(yaml) = conversion.yaml() {
                let _ = checker().check_str(&yaml);
            }
        }
        Err(error) => {
            let _ = error.to_string();
        }
    }
}

/// An interruption-queue message body: a notice naming only instance ids, ignored with a
/// reason, or an error; never a panic.
pub fn sqs_message(data: &[u8]) {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    match parse(body) {
        Ok(Parsed::Notice { instance_ids, .. }) => {
            assert!(
                !instance_ids.is_empty(),
                "a notice without an instance: {body}"
            );
            for id in &instance_ids {
                assert!(
                    id.starts_with("i-"),
                    "not an instance id {id:?} from {body}"
                );
            }
        }
        Ok(Parsed::Ignored { reason }) => assert!(!reason.is_empty()),
        Err(error) => {
            let _ = error.to_string();
        }
    }
}

const SEQ: u64 = 7;

fn event(event_type: &str, version: u16, payload: &[u8]) {
    if let Ok(Some(decoded)) = DomainEvent::from_payload(event_type, version, payload) {
        let stored = decoded.to_payload().expect("a decoded event serializes");
        let again =
            DomainEvent::from_payload(decoded.event_type(), DomainEvent::SCHEMA_VERSION, &stored)
                .expect("a stored event reads back")
                .expect("a stored event is not retired");
        assert_eq!(again, decoded, "stored and read back differently");
    }
}

/// Stored journal bytes. The first byte picks what is read: 0, an event frame and its payload
/// as a domain event; 1, a snapshot frame; otherwise a payload alone, laid out as
/// `<version: u16 le><event type>\0<payload>`. A value or an error, never a panic; a frame
/// that decodes encodes to one that decodes the same (compression means the bytes may
/// differ), its header reads alone, and an event that decodes stores and reads back the same.
pub fn journal_frame(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode {
        0 => {
            if let Ok(record) = decode_event(SEQ, rest) {
                // Compression makes more than one frame mean the same record.
                assert_eq!(
                    decode_event(SEQ, &encode_event(&record)).as_ref(),
                    Ok(&record),
                    "a frame re-encodes to a different record"
                );
                let header = decode_event_header(SEQ, rest).expect("a decoded frame's header");
                assert_eq!(
                    (
                        header.seq,
                        header.recorded_at_ms,
                        &header.kind,
                        &header.name
                    ),
                    (
                        record.seq,
                        record.recorded_at_ms,
                        &record.kind,
                        &record.name
                    )
                );
                event(&record.event_type, record.schema_version, &record.payload);
            }
        }
        1 => {
            if let Ok(snapshot) = decode_snapshot(SEQ, rest) {
                assert_eq!(
                    decode_snapshot(SEQ, &encode_snapshot(&snapshot)).as_ref(),
                    Ok(&snapshot),
                    "a snapshot re-encodes to a different snapshot"
                );
            }
        }
        _ => {
            let Some((version, rest)) = rest.split_first_chunk::<2>() else {
                return;
            };
            let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            let Ok(event_type) = std::str::from_utf8(&rest[..split]) else {
                return;
            };
            event(
                event_type,
                u16::from_le_bytes(*version),
                rest.get(split + 1..).unwrap_or_default(),
            );
        }
    }
}

/// An admin endpoint query string (`/journal?...`): read, or refused with a message naming
/// the parameter; never a panic; what is read writes back to a string that reads the same.
pub fn admin_query(data: &[u8]) {
    use admin_query::{JournalQuery, MAX_LIMIT};
    match JournalQuery::parse(data) {
        Ok(query) => {
            assert!(query.limit.is_none_or(|l| l <= MAX_LIMIT));
            assert!(query.last.is_none_or(|l| l <= MAX_LIMIT));
            assert!(query.last.is_none() || query.since.is_none());
            let again = JournalQuery::parse(query.to_query_string().as_bytes());
            assert_eq!(again, Ok(query));
        }
        Err(error) => assert!(!error.0.is_empty()),
    }
}
