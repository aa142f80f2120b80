//! Numbers as pages show them, and their colour against an objective.

use serde::Serialize;

/// How a value stands against its objective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Meets the objective with room.
    Ok,
    /// Meets it, within 20 % of the limit.
    Warn,
    /// Breaches it.
    Bad,
    /// No objective, or no value.
    None,
}

impl Level {
    /// The CSS class (and the word shown beside colour, for readers who
    /// cannot tell the colours apart).
    pub fn class(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Bad => "bad",
            Level::None => "na",
        }
    }

    /// `value` against an upper `limit`: bad above it, warn above 80 % of it.
    pub fn of(value: Option<f64>, limit: Option<f64>) -> Level {
        match (value, limit) {
            (Some(v), Some(l)) if v > l => Level::Bad,
            (Some(v), Some(l)) if v > 0.8 * l => Level::Warn,
            (Some(_), Some(_)) => Level::Ok,
            _ => Level::None,
        }
    }
}

/// A value as shown, with its level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Kpi {
    pub text: String,
    pub level: Level,
    /// Raw value in the signal's unit, for the API-minded.
    pub value: Option<f64>,
}

impl Kpi {
    pub fn new(value: Option<f64>, text: impl Fn(f64) -> String, level: Level) -> Kpi {
        Kpi {
            text: value.map(text).unwrap_or_else(|| "–".to_string()),
            level,
            value,
        }
    }

    pub fn class(&self) -> &'static str {
        self.level.class()
    }
}

/// Seconds, as `412 ms` or `1.23 s`.
pub fn seconds(v: f64) -> String {
    if v < 1.0 {
        let ms = v * 1000.0;
        if ms < 10.0 {
            format!("{ms:.1} ms")
        } else {
            format!("{ms:.0} ms")
        }
    } else if v < 100.0 {
        format!("{v:.2} s")
    } else {
        format!("{v:.0} s")
    }
}

/// A 0..1 ratio as a percentage.
pub fn percent(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

/// A count or rate: whole numbers without decimals.
pub fn number(v: f64) -> String {
    if (v.fract() == 0.0 && v.abs() < 1e15) || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Unix ms as UTC `HH:MM` (or `MM-DD HH:MM` when `long`).
pub fn clock(ms: i64, long: bool) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (h, m) = (rem / 3600, (rem % 3600) / 60);
    if long {
        let (_, month, day) = civil_from_days(days);
        format!("{month:02}-{day:02} {h:02}:{m:02}")
    } else {
        format!("{h:02}:{m:02}")
    }
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn datetime(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian
/// calendar (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Escapes text for HTML element and attribute content.
pub fn escape_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_against_an_upper_limit() {
        assert_eq!(Level::of(Some(0.5), Some(1.0)), Level::Ok);
        assert_eq!(Level::of(Some(0.9), Some(1.0)), Level::Warn);
        assert_eq!(Level::of(Some(1.2), Some(1.0)), Level::Bad);
        assert_eq!(Level::of(None, Some(1.0)), Level::None);
        assert_eq!(Level::of(Some(3.0), None), Level::None);
    }

    #[test]
    fn formats() {
        assert_eq!(seconds(0.0123), "12 ms");
        assert_eq!(seconds(0.0042), "4.2 ms");
        assert_eq!(seconds(1.234), "1.23 s");
        assert_eq!(percent(0.873), "87.3 %");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(2.345), "2.35");
        assert_eq!(clock(0, false), "00:00");
        assert_eq!(clock(1_700_000_000_000, true), "11-14 22:13");
        assert_eq!(datetime(1_700_000_000_000), "2023-11-14 22:13:20 UTC");
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape_text("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
