//! RFC 3339 timestamps to and from milliseconds since the Unix epoch, for event times
//! (EventBridge `time`, AMI deprecation times) and journal post-mortems. Pure; civil-date
//! arithmetic after Howard Hinnant's algorithms.

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2021-02-18T09:14:56Z`, with optional fractional seconds and a `Z` or `±hh:mm` offset,
/// as milliseconds since the Unix epoch.
pub fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[10] != b'T' {
        return None;
    }
    if bytes[13] != b':' || bytes[16] != b':' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
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
        _ if rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && rest.as_bytes()[3] == b':' =>
        {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            let h: i64 = rest.get(1..3)?.parse().ok()?;
            let m: i64 = rest.get(4..6)?.parse().ok()?;
            sign * (h * 60 + m)
        }
        _ => return None,
    };
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
        - offset_minutes * 60;
    Some(seconds * 1000 + millis)
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DDThh:mm:ssZ` (UTC, whole seconds).
pub fn format_rfc3339(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_instants() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2000-03-01T00:00:00Z"),
            Some(951_868_800_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-02-29T12:00:00.5+01:00"),
            Some(1_709_204_400_500)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-01-01T00:20:00.250Z"),
            Some(1_767_226_800_250)
        );
        assert_eq!(format_rfc3339(1_767_226_800_250), "2026-01-01T00:20:00Z");
        assert_eq!(format_rfc3339(-1000), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn malformed_text_is_none() {
        for text in [
            "2024-13-01T00:00:00Z",
            "yyyy-mm-ddThh:mm:ssZ",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
            "2024-01-01 00:00:00Z",
            "2024-01-01T00:00:00+0100",
            "+024-01-01T00:00:00Z",
        ] {
            assert_eq!(parse_rfc3339_ms(text), None, "{text}");
        }
    }

    proptest! {
        #[test]
        fn format_then_parse_is_the_identity_on_whole_seconds(secs in -62_135_596_800i64..253_402_300_799) {
            prop_assert_eq!(parse_rfc3339_ms(&format_rfc3339(secs * 1000)), Some(secs * 1000));
        }

        #[test]
        fn never_panics(text in ".{0,40}") {
            let _ = parse_rfc3339_ms(&text);
        }
    }
}
