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

use karpenter_actors::events::InterruptionKind;
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

/// Parses one message body.
pub fn parse(body: &str) -> Result<Parsed, MessageError> {
    let envelope: Envelope =
        serde_json::from_str(body).map_err(|e| MessageError::NotAnEvent(e.to_string()))?;
    let time_ms = envelope.time.as_deref().and_then(parse_rfc3339_ms);
    let missing = |field| MessageError::MissingField {
        detail_type: envelope.detail_type.clone(),
        field,
    };
    let instance_id = |detail: &serde_json::Value| {
        detail
            .get("instance-id")
            .and_then(|v| v.as_str())
            .filter(|id| id.starts_with("i-"))
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
                    reason: format!("instance {id} entered state {other:?}"),
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
                        "health event for service {service:?} category {category:?} asks for nothing"
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
                .filter(|id| id.starts_with("i-"))
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

/// `2021-02-18T09:14:56Z` or with fractional seconds / an offset → ms since the Unix epoch.
pub fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[10] != b'T' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> { text.get(range)?.parse().ok() };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0i64;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &fraction[..digits.min(3)]);
        millis = padded.parse().ok()?;
        rest = &fraction[digits..];
    }
    let offset_minutes = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            let h: i64 = rest.get(1..3)?.parse().ok()?;
            let m: i64 = rest.get(4..6)?.parse().ok()?;
            if rest.as_bytes()[3] != b':' {
                return None;
            }
            sign * (h * 60 + m)
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    u64::try_from(seconds * 1000 + millis).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests;

/// The body EventBridge delivers for an interruption of `kind` (what a simulation or a test
/// sends to exercise the queue end to end).
pub fn event_body(kind: InterruptionKind, instance_id: &str, region: &str, time: &str) -> String {
    let (source, detail_type, detail) = match kind {
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
}
