//! Kubernetes resource quantities (`500m`, `4Gi`, `1.5`, `2e3`) as exact integers.

/// Why a quantity string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid quantity {0:?}: write a number with an optional suffix, e.g. \"100\", \"500m\", \"4Gi\""
)]
pub struct QuantityError(pub String);

/// A quantity in nano-units (value × 10⁹), exact for every suffix Kubernetes accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(i128);

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Parses a Kubernetes quantity.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let err = || QuantityError(text.to_owned());
        let (negative, body) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let split = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (number, suffix) = body.split_at(split);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(err());
        }
        let digits = |s: &str| -> Result<i128, QuantityError> {
            if s.is_empty() {
                return Ok(0);
            }
            s.parse::<i128>().map_err(|_| err())
        };
        // value = (whole + fraction / 10^len) × multiplier, kept in nano-units.
        let fraction = &fraction[..fraction.len().min(9)];
        let mut nanos = digits(whole)?
            .checked_mul(NANO)
            .ok_or_else(err)?
            .checked_add(digits(fraction)? * 10i128.pow(9 - fraction.len() as u32))
            .ok_or_else(err)?;
        let scale = |nanos: i128, num: i128, den: i128| -> Result<i128, QuantityError> {
            nanos.checked_mul(num).map(|v| v / den).ok_or_else(err)
        };
        nanos = match suffix {
            "" => nanos,
            "n" => scale(nanos, 1, NANO)?,
            "u" => scale(nanos, 1, 1_000_000)?,
            "m" => scale(nanos, 1, 1_000)?,
            "k" => scale(nanos, 1_000, 1)?,
            "M" => scale(nanos, 1_000_000, 1)?,
            "G" => scale(nanos, 1_000_000_000, 1)?,
            "T" => scale(nanos, 1_000_000_000_000, 1)?,
            "P" => scale(nanos, 1_000_000_000_000_000, 1)?,
            "E" => scale(nanos, 1_000_000_000_000_000_000, 1)?,
            "Ki" => scale(nanos, 1 << 10, 1)?,
            "Mi" => scale(nanos, 1 << 20, 1)?,
            "Gi" => scale(nanos, 1 << 30, 1)?,
            "Ti" => scale(nanos, 1 << 40, 1)?,
            "Pi" => scale(nanos, 1 << 50, 1)?,
            "Ei" => scale(nanos, 1 << 60, 1)?,
            exp if exp.starts_with(['e', 'E']) => {
                let power: i32 = exp[1..].parse().map_err(|_| err())?;
                if !(-18..=18).contains(&power) {
                    return Err(err());
                }
                if power >= 0 {
                    scale(nanos, 10i128.pow(power as u32), 1)?
                } else {
                    scale(nanos, 1, 10i128.pow(power.unsigned_abs()))?
                }
            }
            _ => return Err(err()),
        };
        Ok(Quantity(if negative { -nanos } else { nanos }))
    }

    /// The value in thousandths, rounded up (CPU millicores).
    pub fn milli_ceil(self) -> i64 {
        div_ceil(self.0, 1_000_000) as i64
    }

    /// The value in whole units, rounded up (bytes, pods, GPUs).
    pub fn units_ceil(self) -> i64 {
        div_ceil(self.0, NANO) as i64
    }

    /// The value in thousandths, rounded down.
    pub fn milli_floor(self) -> i64 {
        self.0.div_euclid(1_000_000) as i64
    }

    /// The value in whole units, rounded down.
    pub fn units_floor(self) -> i64 {
        self.0.div_euclid(NANO) as i64
    }
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b > 0 { q + 1 } else { q }
}

/// Formats millicores the way Kubernetes prints CPU (`1500m`, `2`).
pub fn format_cpu(millis: i64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// Formats bytes with the largest binary suffix that divides them (`4Gi`, `1536Mi`).
pub fn format_bytes(bytes: i64) -> String {
    for (suffix, shift) in [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ] {
        if bytes != 0 && bytes % (1i64 << shift) == 0 {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_suffix_exactly() {
        let cases = [
            ("500m", 500, 1),
            ("1", 1000, 1),
            ("1.5", 1500, 2),
            ("0.1", 100, 1),
            ("4Gi", 0, 4 << 30),
            ("100Mi", 100 * 1000 * (1 << 20), 100 << 20),
            ("1k", 1_000_000, 1000),
            ("1e3", 1_000_000, 1000),
            ("2E-3", 2, 1),
            ("1n", 1, 1),
            ("+3", 3000, 3),
        ];
        for (text, milli, units) in cases {
            let q = Quantity::parse(text).unwrap();
            if text != "4Gi" && text != "100Mi" {
                assert_eq!(q.milli_ceil(), milli, "{text} milli");
            }
            assert_eq!(q.units_ceil(), units, "{text} units");
        }
        assert_eq!(Quantity::parse("-1").unwrap().units_ceil(), -1);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "Gi", "1.2.3", "4GB", "1e", "abc", ".", "1e99"] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format_cpu(1500), "1500m");
        assert_eq!(format_cpu(2000), "2");
        assert_eq!(format_bytes(4 << 30), "4Gi");
        assert_eq!(format_bytes(1536 << 20), "1536Mi");
        assert_eq!(format_bytes(1000), "1000");
    }
}
