//! Numbers as go-yaml writes them.

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)`, as go-yaml writes floats.
pub fn format_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-tripping digits, like Go's shortest mode.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if f < 0.0 { "-" } else { "" };
    // Shortest 'g' switches to %e when the exponent is below -4 or at least 6.
    if !(-4..6).contains(&exp) {
        return format!("{sign}{}", fmt_e(&digits, exp));
    }
    let nd = digits.len() as i32;
    let dp = exp + 1;
    let body = if dp <= 0 {
        format!("0.{}{}", "0".repeat((-dp) as usize), digits)
    } else if dp >= nd {
        format!("{}{}", digits, "0".repeat((dp - nd) as usize))
    } else {
        format!("{}.{}", &digits[..dp as usize], &digits[dp as usize..])
    };
    format!("{sign}{body}")
}

fn fmt_e(digits: &str, exp: i32) -> String {
    let mut s = digits[..1].to_string();
    if digits.len() > 1 {
        s.push('.');
        s.push_str(&digits[1..]);
    }
    let (esign, e) = if exp < 0 { ('-', -exp) } else { ('+', exp) };
    format!("{s}e{esign}{e:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_go_s_shortest_g_form() {
        assert_eq!(format_float(1.0), "1");
        assert_eq!(format_float(123456.0), "123456");
        assert_eq!(format_float(1234567.0), "1.234567e+06");
        assert_eq!(format_float(0.5), "0.5");
        assert_eq!(format_float(-2.25), "-2.25");
        assert_eq!(format_float(0.00001), "1e-05");
        assert_eq!(format_float(f64::NAN), ".nan");
    }
}
