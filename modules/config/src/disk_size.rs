//! Disk sizes as Talos reads them: go-humanize's `ParseBytes` and the install disk selector's size
//! condition (`InstallDiskSizeMatcher.UnmarshalYAML` in
//! `pkg/machinery/config/types/v1alpha1/v1alpha1_types.go`, v1.13.9): an optional operator, then
//! a size.

use crate::error::{Error, ErrorKind, Result};

/// The comparison of a size condition; none written means `==`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeOp {
    AtLeast,
    AtMost,
    Above,
    Below,
    Equal,
}

impl SizeOp {
    pub fn as_str(self) -> &'static str {
        match self {
            SizeOp::AtLeast => ">=",
            SizeOp::AtMost => "<=",
            SizeOp::Above => ">",
            SizeOp::Below => "<",
            SizeOp::Equal => "==",
        }
    }

    /// Whether a disk of `size` bytes satisfies `size <op> bound`.
    pub fn holds(self, size: u64, bound: u64) -> bool {
        match self {
            SizeOp::AtLeast => size >= bound,
            SizeOp::AtMost => size <= bound,
            SizeOp::Above => size > bound,
            SizeOp::Below => size < bound,
            SizeOp::Equal => size == bound,
        }
    }
}

/// `>= 100GB`, `<2TB`, `4GiB`: a selector's `size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeCondition {
    pub op: SizeOp,
    pub bytes: u64,
}

impl SizeCondition {
    pub fn parse(condition: &str) -> Result<SizeCondition> {
        let condition = condition.trim();
        // Upstream's regexp tries the operators in this order.
        let ops = [
            (">=", SizeOp::AtLeast),
            ("<=", SizeOp::AtMost),
            (">", SizeOp::Above),
            ("<", SizeOp::Below),
            ("==", SizeOp::Equal),
        ];
        let (op, rest) = ops
            .iter()
            .find_map(|(text, op)| condition.strip_prefix(text).map(|rest| (*op, rest)))
            .unwrap_or((SizeOp::Equal, condition));
        let bytes = parse_human_bytes(rest).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidDiskSize,
                format!(
                    "cannot read the disk size condition {condition:?}: expected \
                     [>=|<=|>|<|==]<size>[units], such as >= 100GB"
                ),
            )
        })?;
        Ok(SizeCondition { op, bytes })
    }

    pub fn matches(&self, size: u64) -> bool {
        self.op.holds(size, self.bytes)
    }
}

/// go-humanize's `ParseBytes`: a decimal number (commas ignored), then an optional unit, SI (`kB`,
/// `MB`, `G`, ...) or IEC (`KiB`, `Mi`, ...), case-insensitive.
pub fn parse_human_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(s.len());
    let number: f64 = s[..digits].replace(',', "").parse().ok()?;
    let unit = s[digits..].trim().to_ascii_lowercase();
    let unit = unit.strip_suffix('b').unwrap_or(&unit);
    let multiplier: f64 = match unit {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        "p" => 1e15,
        "e" => 1e18,
        "ki" => 1024f64,
        "mi" => 1024f64.powi(2),
        "gi" => 1024f64.powi(3),
        "ti" => 1024f64.powi(4),
        "pi" => 1024f64.powi(5),
        "ei" => 1024f64.powi(6),
        _ => return None,
    };
    let bytes = number * multiplier;
    (bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_go_humanize_reads_them() {
        assert_eq!(parse_human_bytes("50GiB"), Some(53_687_091_200));
        assert_eq!(parse_human_bytes("10 GB"), Some(10_000_000_000));
        assert_eq!(parse_human_bytes("1,000"), Some(1000));
        assert_eq!(parse_human_bytes("2tb"), Some(2_000_000_000_000));
        assert_eq!(parse_human_bytes("big"), None);
        assert_eq!(parse_human_bytes("5 parsecs"), None);
    }

    #[test]
    fn conditions_take_an_optional_operator() {
        let c = SizeCondition::parse(">= 1TB").unwrap();
        assert_eq!((c.op, c.bytes), (SizeOp::AtLeast, 1_000_000_000_000));
        let c = SizeCondition::parse("4GiB").unwrap();
        assert_eq!((c.op, c.bytes), (SizeOp::Equal, 4_294_967_296));
        let c = SizeCondition::parse("<500 gb").unwrap();
        assert_eq!((c.op, c.bytes), (SizeOp::Below, 500_000_000_000));
        assert!(c.matches(499_999_999_999) && !c.matches(500_000_000_000));
        let err = SizeCondition::parse("big").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidDiskSize);
        assert!(err.to_string().contains(">= 100GB"), "{err}");
    }
}
