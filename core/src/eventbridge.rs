//! EventBridge messages from the interruption queue, parsed into notices. Pure: no I/O, no SDK
//! types, so every message kind (and every malformed body) is tested here directly.
//!
//! The queue receives what the EventBridge rules in `deploy/aws/` route to it:
//!
//! | source / detail-type | notice |
//! |---|---|
//! | `aws.ec2` "EC2 Spot Instance Interruption Warning" | [`InterruptionKind::SpotInterrupted`] |
//! | `aws.ec2` "EC2 Instance Rebalance Recommendation" | [`InterruptionKind::RebalanceRecommendation`] |
//! | `aws.health` "AWS Health Event", service EC2, category `scheduledChange` | [`InterruptionKind::ScheduledChange`] |
//! | `aws.ec2` "EC2 Instance State-change Notification", stopping / stopped | [`InterruptionKind::InstanceStopped`] |
//! | same, shutting-down / terminated | [`InterruptionKind::InstanceTerminated`] |
//!
//! Other states of a state-change notification (pending, running) and Health events of other
//! services or categories are [`Parsed::Ignored`]; anything else is a [`MessageError`].

use crate::ports::InterruptionKind;
use serde::Deserialize;

/// What a queue message turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A notice about one or more instances.
    Notice {
        /// Kind.
        kind: InterruptionKind,
        /// Instance ids (Health events may name several).
        instance_ids: Vec<String>,
        /// When the event happened (EventBridge `time`), ms since the Unix epoch, if readable.
        time_ms: Option<u64>,
    },
    /// A well-formed message that asks for nothing (e.g. an instance entered `running`).
    Ignored {
        /// Why, for the journal.
        reason: String,
    },
}

/// Why a message body could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// Not JSON, or not an EventBridge envelope.
    #[error("not an EventBridge event: {0}")]
    NotAnEvent(String),
    /// An EventBridge event of a source/detail-type this queue should not receive.
    #[error("unsupported event source {event_source:?} detail-type {detail_type:?}")]
    Unsupported {
        /// `source`.
        event_source: String,
        /// `detail-type`.
        detail_type: String,
    },
    /// A supported event missing a field it must have.
    #[error("{detail_type}: missing or invalid {field}")]
    MissingField {
        /// `detail-type`.
        detail_type: String,
        /// The field, as a JSON path.
        field: &'static str,
    },
}

#[derive(Deserialize)]
struct Envelope {
    source: String,
    #[serde(rename = "detail-type")]
    detail_type: String,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    detail: serde_json::Value,
}

const SPOT_WARNING: &str = "EC2 Spot Instance Interruption Warning";
const REBALANCE: &str = "EC2 Instance Rebalance Recommendation";
const STATE_CHANGE: &str = "EC2 Instance State-change Notification";
const HEALTH: &str = "AWS Health Event";

/// At most this many characters of a value taken from a message go into an error or a
/// reason (they are journaled; a body may be 256 KiB).
const QUOTED_CHARS: usize = 120;

/// `text` cut to [`QUOTED_CHARS`] characters, with `…` where it was cut.
fn clip(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// EC2's instance ids: `i-` and 8 or 17 hexadecimal digits today; any `i-` and up to 32
/// ASCII letters or digits is taken, anything else is not an instance id.
fn is_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|rest| {
        (1..=32).contains(&rest.len()) && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

/// Parses one message body.
pub fn parse(body: &str) -> Result<Parsed, MessageError> {
    let mut envelope: Envelope =
        serde_json::from_str(body).map_err(|e| MessageError::NotAnEvent(clip(&e.to_string())))?;
    envelope.source = clip(&envelope.source);
    envelope.detail_type = clip(&envelope.detail_type);
    let time_ms = envelope.time.as_deref().and_then(parse_rfc3339_ms);
    let missing = |field| MessageError::MissingField {
        detail_type: envelope.detail_type.clone(),
        field,
    };
    let instance_id = |detail: &serde_json::Value| {
        detail
            .get("instance-id")
            .and_then(|v| v.as_str())
            .filter(|id| is_instance_id(id))
            .map(str::to_owned)
    };
    let notice = |kind, instance_ids| Parsed::Notice {
        kind,
        instance_ids,
        time_ms,
    };
    match (envelope.source.as_str(), envelope.detail_type.as_str()) {
        ("aws.ec2", SPOT_WARNING) => {
            let id = instance_id(&envelope.detail).ok_or_else(|| missing("detail.instance-id"))?;
            Ok(notice(InterruptionKind::SpotInterrupted, vec![id]))
        }
        ("aws.ec2", REBALANCE) => {
            let id = instance_id(&envelope.detail).ok_or_else(|| missing("detail.instance-id"))?;
            Ok(notice(InterruptionKind::RebalanceRecommendation, vec![id]))
        }
        ("aws.ec2", STATE_CHANGE) => {
            let id = instance_id(&envelope.detail).ok_or_else(|| missing("detail.instance-id"))?;
            let state = envelope
                .detail
                .get("state")
                .and_then(|v| v.as_str())
                .ok_or_else(|| missing("detail.state"))?;
            match state {
                "stopping" | "stopped" => Ok(notice(InterruptionKind::InstanceStopped, vec![id])),
                "shutting-down" | "terminated" => {
                    Ok(notice(InterruptionKind::InstanceTerminated, vec![id]))
                }
                other => Ok(Parsed::Ignored {
                    reason: format!("instance {id} entered state {:?}", clip(other)),
                }),
            }
        }
        ("aws.health", HEALTH) => {
            let service = envelope.detail.get("service").and_then(|v| v.as_str());
            let category = envelope
                .detail
                .get("eventTypeCategory")
                .and_then(|v| v.as_str());
            if service != Some("EC2") || category != Some("scheduledChange") {
                return Ok(Parsed::Ignored {
                    reason: format!(
                        "health event for service {:?} category {:?} asks for nothing",
                        service.map(clip),
                        category.map(clip)
                    ),
                });
            }
            let ids: Vec<String> = envelope
                .detail
                .get("affectedEntities")
                .and_then(|v| v.as_array())
                .ok_or_else(|| missing("detail.affectedEntities"))?
                .iter()
                .filter_map(|entity| entity.get("entityValue").and_then(|v| v.as_str()))
                .filter(|id| is_instance_id(id))
                .map(str::to_owned)
                .collect();
            if ids.is_empty() {
                return Err(missing("detail.affectedEntities[].entityValue"));
            }
            Ok(notice(InterruptionKind::ScheduledChange, ids))
        }
        (source, detail_type) => Err(MessageError::Unsupported {
            event_source: source.to_owned(),
            detail_type: detail_type.to_owned(),
        }),
    }
}

/// `2021-02-18T09:14:56Z` (fractional seconds and offsets allowed) → ms since the Unix epoch.
pub fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    crate::model::time::parse_rfc3339_ms(text).and_then(|ms| u64::try_from(ms).ok())
}

#[cfg(test)]
mod tests;

/// The body EventBridge delivers for an interruption of `kind` (what a simulation or a test
/// sends to exercise the queue end to end); `None` for a kind no per-instance message says
/// (a Capacity Block's expiry is read from the reservation, not from the queue).
pub fn event_body(
    kind: InterruptionKind,
    instance_id: &str,
    region: &str,
    time: &str,
) -> Option<String> {
    let (source, detail_type, detail) = match kind {
        InterruptionKind::CapacityBlockExpiring => return None,
        InterruptionKind::SpotInterrupted => (
            "aws.ec2",
            SPOT_WARNING,
            serde_json::json!({"instance-id": instance_id, "instance-action": "terminate"}),
        ),
        InterruptionKind::RebalanceRecommendation => (
            "aws.ec2",
            REBALANCE,
            serde_json::json!({"instance-id": instance_id}),
        ),
        InterruptionKind::InstanceStopped => (
            "aws.ec2",
            STATE_CHANGE,
            serde_json::json!({"instance-id": instance_id, "state": "stopping"}),
        ),
        InterruptionKind::InstanceTerminated => (
            "aws.ec2",
            STATE_CHANGE,
            serde_json::json!({"instance-id": instance_id, "state": "shutting-down"}),
        ),
        InterruptionKind::ScheduledChange => (
            "aws.health",
            HEALTH,
            serde_json::json!({
                "service": "EC2",
                "eventTypeCategory": "scheduledChange",
                "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                "affectedEntities": [{"entityValue": instance_id}]
            }),
        ),
    };
    serde_json::json!({
        "version": "0",
        "id": format!("{}-{instance_id}", kind.as_str()),
        "detail-type": detail_type,
        "source": source,
        "account": "000000000000",
        "time": time,
        "region": region,
        "resources": [format!("arn:aws:ec2:{region}::instance/{instance_id}")],
        "detail": detail,
    })
    .to_string()
    .into()
}
