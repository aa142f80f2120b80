//! Number formatting for evidence text: short, unit-bearing, never "NaN".

/// A plain number: integers without decimals, large values rounded, small
/// ones with up to two decimals.
pub(crate) fn num(x: f64) -> String {
    if !x.is_finite() {
        return "unknown".to_string();
    }
    let a = x.abs();
    if a >= 100.0 || (x.fract() == 0.0 && a < 1e15) {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A multiple, e.g. "4.5×".
pub(crate) fn times(x: f64) -> String {
    if !x.is_finite() {
        return "unknown".to_string();
    }
    format!("{x:.1}×")
}

/// Seconds in ms below one second, in s above.
pub(crate) fn secs(x: f64) -> String {
    if !x.is_finite() {
        return "unknown".to_string();
    }
    if x.abs() < 1.0 {
        let ms = x * 1000.0;
        if ms.abs() < 10.0 {
            format!("{ms:.1} ms")
        } else {
            format!("{ms:.0} ms")
        }
    } else if x.abs() < 100.0 {
        format!("{x:.1} s")
    } else {
        format!("{x:.0} s")
    }
}

/// A 0..1 ratio shown with two decimals (KV usage 0.97).
pub(crate) fn ratio(x: f64) -> String {
    if !x.is_finite() {
        return "unknown".to_string();
    }
    format!("{x:.2}")
}

/// A fraction shown as a percentage.
pub(crate) fn pct(x: f64) -> String {
    if !x.is_finite() {
        return "unknown".to_string();
    }
    let p = x * 100.0;
    if p.abs() >= 10.0 || p.fract() == 0.0 {
        format!("{p:.0} %")
    } else {
        format!("{p:.1} %")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(num(1100.0), "1100");
        assert_eq!(num(4.0), "4");
        assert_eq!(num(0.5), "0.50");
        assert_eq!(num(f64::NAN), "unknown");
        assert_eq!(secs(4.1), "4.1 s");
        assert_eq!(secs(0.045), "45 ms");
        assert_eq!(secs(0.0042), "4.2 ms");
        assert_eq!(ratio(0.97), "0.97");
        assert_eq!(pct(0.045), "4.5 %");
        assert_eq!(pct(0.10), "10 %");
    }
}
