use super::*;
use proptest::prelude::*;

// Bodies as EventBridge delivers them (shapes from the AWS documentation of each event).
const SPOT: &str = r#"{"version":"0","id":"1e5527d7-bb36-4607-3370-4164db56a40e","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2021-02-18T09:14:56Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1b:instance/i-0b662ef9931388ba0"],"detail":{"instance-id":"i-0b662ef9931388ba0","instance-action":"terminate"}}"#;
const REBALANCE_BODY: &str = r#"{"version":"0","id":"12345678-1234-1234-1234-123456789012","detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2","account":"123456789012","time":"2021-02-18T09:14:56.250Z","region":"us-east-2","resources":["arn:aws:ec2:us-east-2:123456789012:instance/i-1234567890abcdef0"],"detail":{"instance-id":"i-1234567890abcdef0"}}"#;
const HEALTH_BODY: &str = r#"{"version":"0","id":"7fb65329-1628-4cf3-a740-95fg457h1402","detail-type":"AWS Health Event","source":"aws.health","account":"123456789012","time":"2016-06-05T06:27:57Z","region":"us-west-2","resources":["i-abcd1111"],"detail":{"eventArn":"arn:aws:health:us-west-2::event/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_90353408594353980","service":"EC2","eventTypeCode":"AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED","eventTypeCategory":"scheduledChange","startTime":"Sat, 05 Jun 2016 15:10:09 GMT","eventDescription":[{"language":"en_US","latestDescription":"retirement"}],"affectedEntities":[{"entityValue":"i-abcd1111","tags":{"stage":"prod"}},{"entityValue":"i-abcd2222"}]}}"#;

fn state_change(state: &str) -> String {
    format!(
        r#"{{"version":"0","id":"7bf73129-1428-4cd3-a780-95db273d1602","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","account":"123456789012","time":"2015-11-11T21:29:54Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"],"detail":{{"instance-id":"i-abcd1111","state":"{state}"}}}}"#
    )
}

fn notice(kind: InterruptionKind, ids: &[&str], time_ms: u64) -> Parsed {
    Parsed::Notice {
        kind,
        instance_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
        time_ms: Some(time_ms),
    }
}

#[test]
fn every_supported_kind_parses() {
    assert_eq!(
        parse(SPOT),
        Ok(notice(
            InterruptionKind::SpotInterrupted,
            &["i-0b662ef9931388ba0"],
            1_613_639_696_000
        ))
    );
    assert_eq!(
        parse(REBALANCE_BODY),
        Ok(notice(
            InterruptionKind::RebalanceRecommendation,
            &["i-1234567890abcdef0"],
            1_613_639_696_250
        ))
    );
    assert_eq!(
        parse(HEALTH_BODY),
        Ok(notice(
            InterruptionKind::ScheduledChange,
            &["i-abcd1111", "i-abcd2222"],
            1_465_108_077_000
        ))
    );
    for (state, kind) in [
        ("stopping", InterruptionKind::InstanceStopped),
        ("stopped", InterruptionKind::InstanceStopped),
        ("shutting-down", InterruptionKind::InstanceTerminated),
        ("terminated", InterruptionKind::InstanceTerminated),
    ] {
        assert_eq!(
            parse(&state_change(state)),
            Ok(notice(kind, &["i-abcd1111"], 1_447_277_394_000)),
            "{state}"
        );
    }
}

#[test]
fn harmless_events_are_ignored_not_errors() {
    for state in ["pending", "running"] {
        assert!(matches!(
            parse(&state_change(state)),
            Ok(Parsed::Ignored { .. })
        ));
    }
    let other_category = HEALTH_BODY.replace("scheduledChange", "issue");
    assert!(matches!(parse(&other_category), Ok(Parsed::Ignored { .. })));
}

#[test]
fn malformed_and_foreign_messages_are_errors_naming_what_is_wrong() {
    assert!(matches!(
        parse("not json"),
        Err(MessageError::NotAnEvent(_))
    ));
    assert!(matches!(
        parse(r#"{"Event":"s3:TestEvent"}"#),
        Err(MessageError::NotAnEvent(_))
    ));
    assert_eq!(
        parse(r#"{"source":"aws.s3","detail-type":"Object Created","detail":{}}"#),
        Err(MessageError::Unsupported {
            event_source: "aws.s3".into(),
            detail_type: "Object Created".into()
        })
    );
    let no_id = SPOT.replace(r#""instance-id":"i-0b662ef9931388ba0","#, "");
    assert_eq!(
        parse(&no_id),
        Err(MessageError::MissingField {
            detail_type: "EC2 Spot Instance Interruption Warning".into(),
            field: "detail.instance-id"
        })
    );
    let no_state = state_change("x").replace(r#","state":"x""#, "");
    assert!(matches!(
        parse(&no_state),
        Err(MessageError::MissingField {
            field: "detail.state",
            ..
        })
    ));
    let no_entities = HEALTH_BODY.replace("affectedEntities", "somethingElse");
    assert!(matches!(
        parse(&no_entities),
        Err(MessageError::MissingField { .. })
    ));
}

/// Values from a message are journaled with it: what is not an instance id is refused, and
/// what is quoted is cut short, however large the body.
#[test]
fn huge_or_false_values_are_refused_or_quoted_short() {
    for id in [
        "i-",
        "i-0b66/../x",
        "vol-0b662ef9931388ba0",
        "i-0b662ef9931388ba0 ",
    ] {
        let body = SPOT.replace("i-0b662ef9931388ba0", id);
        assert!(
            matches!(parse(&body), Err(MessageError::MissingField { .. })),
            "{id:?}"
        );
    }
    let huge = format!("i-{}", "f".repeat(200_000));
    let body = SPOT.replace("i-0b662ef9931388ba0", &huge);
    assert!(matches!(
        parse(&body),
        Err(MessageError::MissingField { .. })
    ));
    let long = "x".repeat(200_000);
    let foreign = format!(r#"{{"source":"{long}","detail-type":"{long}","detail":{{}}}}"#);
    let error = parse(&foreign).unwrap_err().to_string();
    assert!(error.len() < 400, "{} bytes", error.len());
    assert!(error.contains("xxx…"), "{error}");
    let wrong_type = format!(r#"{{"source":"aws.ec2","detail-type":"{long}","time":["{long}"]}}"#);
    assert!(parse(&wrong_type).unwrap_err().to_string().len() < 400);
    let state = state_change(&long);
    match parse(&state) {
        Ok(Parsed::Ignored { reason }) => assert!(reason.len() < 400, "{reason}"),
        other => panic!("{other:?}"),
    }
}

proptest! {
    /// Whatever arrives on the queue, parsing returns; it never panics.
    #[test]
    fn arbitrary_bodies_never_panic(body in ".{0,300}") {
        let _ = parse(&body);
    }

    /// Mutating a real message byte by byte never panics either, and whatever still parses as
    /// a notice names instance ids only.
    #[test]
    fn mutated_messages_never_panic(index in 0usize..600, byte in any::<u8>(), which in 0usize..3) {
        let base = [SPOT, REBALANCE_BODY, HEALTH_BODY][which];
        let mut bytes = base.as_bytes().to_vec();
        let at = index % bytes.len();
        bytes[at] = byte;
        if let Ok(text) = String::from_utf8(bytes)
            && let Ok(Parsed::Notice { instance_ids, .. }) = parse(&text)
        {
            prop_assert!(instance_ids.iter().all(|id| id.starts_with("i-")));
        }
    }
}

#[test]
fn generated_bodies_parse_back_to_their_kind() {
    for kind in [
        InterruptionKind::SpotInterrupted,
        InterruptionKind::RebalanceRecommendation,
        InterruptionKind::InstanceStopped,
        InterruptionKind::InstanceTerminated,
        InterruptionKind::ScheduledChange,
    ] {
        let body = event_body(kind, "i-0abc", "us-west-2", "2026-11-22T10:00:00Z").unwrap();
        assert_eq!(
            parse(&body),
            Ok(Parsed::Notice {
                kind,
                instance_ids: vec!["i-0abc".into()],
                time_ms: parse_rfc3339_ms("2026-11-22T10:00:00Z"),
            })
        );
    }
    let expiring = InterruptionKind::CapacityBlockExpiring;
    assert_eq!(
        event_body(expiring, "i-0abc", "us-west-2", "2026-11-22T10:00:00Z"),
        None
    );
}
