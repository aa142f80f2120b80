//! Query parameters of the REST API, parsed into valid values once: times
//! (RFC 3339 or Unix seconds), durations, limits and cursors. Every error
//! names the parameter and says what was expected.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use llmwatch_engine::sources::scrape::now_ms;

use super::ApiError;

/// A handler's query string, or why it did not parse.
pub type RawQuery = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// The query's parameters, each of them one of `allowed`.
pub fn params(query: RawQuery, allowed: &[&str]) -> Result<Params, ApiError> {
    let Query(pairs) = query?;
    Params::new(pairs, allowed)
}

/// `[from, to]` from the query: defaults to the last hour; `from` ≤ `to`.
pub fn time_range(p: &Params) -> Result<(i64, i64), ApiError> {
    let to = p.time("to")?.unwrap_or_else(now_ms);
    let from = p.time("from")?.unwrap_or(to - 3600 * 1000);
    // A range that ends before it starts holds nothing: answered empty.
    Ok((from.min(to), to))
}

/// The query string as name → value; a repeated or unknown name is an error.
pub struct Params {
    values: HashMap<String, String>,
}

impl Params {
    /// Checks every name against `allowed`.
    pub fn new(pairs: Vec<(String, String)>, allowed: &[&str]) -> Result<Params, ApiError> {
        let mut values = HashMap::new();
        for (name, value) in pairs {
            if !allowed.contains(&name.as_str()) {
                return Err(ApiError::bad_request(format!(
                    "unknown parameter {name:?}; this endpoint takes: {}",
                    if allowed.is_empty() {
                        "none".to_string()
                    } else {
                        allowed.join(", ")
                    }
                )));
            }
            if values.insert(name.clone(), value).is_some() {
                return Err(ApiError::bad_request(format!(
                    "parameter {name:?} given more than once"
                )));
            }
        }
        Ok(Params { values })
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// A required text parameter.
    pub fn required(&self, name: &str) -> Result<&str, ApiError> {
        self.get(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| ApiError::bad_request(format!("missing parameter {name:?}")))
    }

    /// A time parameter (RFC 3339 or Unix seconds), in Unix ms.
    pub fn time(&self, name: &str) -> Result<Option<i64>, ApiError> {
        self.get(name)
            .map(|text| {
                parse_time(text).map_err(|why| ApiError::bad_request(format!("{name}: {why}")))
            })
            .transpose()
    }

    /// A duration parameter (`"15s"`, `"1m"` or plain seconds), in ms.
    pub fn duration_ms(&self, name: &str) -> Result<Option<i64>, ApiError> {
        self.get(name)
            .map(|text| {
                parse_step(text).map_err(|why| ApiError::bad_request(format!("{name}: {why}")))
            })
            .transpose()
    }

    /// `limit`: 1..=`max`, `default` when absent.
    pub fn limit(&self, default: u32, max: u32) -> Result<u32, ApiError> {
        match self.get("limit") {
            None => Ok(default),
            Some(text) => match text.parse::<u32>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(ApiError::bad_request(format!(
                    "limit: expected a whole number from 1 to {max}, found {text:?}"
                ))),
            },
        }
    }

    /// `cursor`: an opaque number handed out as `next_cursor`.
    pub fn cursor(&self) -> Result<Option<i64>, ApiError> {
        self.get("cursor")
            .map(|text| {
                text.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "cursor: {text:?} is not a cursor this API handed out (use next_cursor)"
                    ))
                })
            })
            .transpose()
    }
}

/// A row id (`noun`: a sweep, a sweep step): a positive whole number; the
/// error names the parameter `what`.
pub fn parse_id(text: &str, what: &str, noun: &str) -> Result<i64, ApiError> {
    text.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{what}: expected a {noun} id (a positive whole number), found {text:?}"
            ))
        })
}

/// A time: Unix seconds (`1700000000`, `1700000000.5`) or RFC 3339
/// (`2026-01-02T03:04:05Z`, `…05.250+02:00`). Returns Unix ms.
pub fn parse_time(text: &str) -> Result<i64, String> {
    let text = text.trim();
    // Unix seconds as documented (digits, a fraction); not the exponents,
    // signs and `inf` that f64's parser also takes.
    let plain = text.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if let Some(seconds) = plain.then(|| text.parse::<f64>().ok()).flatten() {
        if seconds.is_finite() && (0.0..=1e11).contains(&seconds) {
            return Ok((seconds * 1000.0).round() as i64);
        }
        return Err(format!("{text:?} is out of range for Unix seconds"));
    }
    parse_rfc3339(text).ok_or_else(|| {
        format!(
            "{text:?} is not a time: use RFC 3339 (2026-01-02T03:04:05Z) or Unix seconds (1767323045)"
        )
    })
}

fn digits(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// RFC 3339 date-time to Unix ms.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 || !text.is_ascii() {
        return None;
    }
    if bytes[4] != b'-' || bytes[7] != b'-' || !matches!(bytes[10], b'T' | b't' | b' ') {
        return None;
    }
    if bytes[13] != b':' || bytes[16] != b':' {
        return None;
    }
    let year = digits(&text[0..4])?;
    let month = digits(&text[5..7])?;
    let day = digits(&text[8..10])?;
    let hour = digits(&text[11..13])?;
    let minute = digits(&text[14..16])?;
    let second = digits(&text[17..19])?;
    let mut rest = &text[19..];
    let mut millis = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let end = frac
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(frac.len());
        if end == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &frac[..end.min(3)]);
        millis = digits(&padded)?;
        rest = &frac[end..];
    }
    let offset_min = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            let h = digits(&rest[1..3])?;
            let m = digits(&rest[4..6])?;
            if h > 23 || m > 59 {
                return None;
            }
            sign * (h * 60 + m)
        }
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let max_day = *month_days.get(usize::try_from(month - 1).ok()?)?;
    if day < 1 || day > max_day {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second.min(59) - offset_min * 60;
    Some(seconds * 1000 + millis)
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A step: a duration (`"15s"`) or plain seconds (`"15"`, `"0.5"`), in ms.
pub fn parse_step(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let ms = if let Ok(seconds) = text.parse::<f64>() {
        if !seconds.is_finite() {
            return Err(format!("{text:?} is not a duration"));
        }
        (seconds * 1000.0).round() as i64
    } else {
        humantime::parse_duration(text)
            .map(|d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .map_err(|_| format!("{text:?} is not a duration: use \"15s\", \"1m\" or seconds"))?
    };
    if ms <= 0 {
        return Err(format!("must be positive, found {text:?}"));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_both_forms() {
        assert_eq!(parse_time("1700000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_time("1700000000.25"), Ok(1_700_000_000_250));
        assert_eq!(parse_time("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(parse_time("2023-11-14T22:13:20.5Z"), Ok(1_700_000_000_500));
        assert_eq!(
            parse_time("2023-11-15T00:13:20+02:00"),
            Ok(1_700_000_000_000)
        );
        assert_eq!(
            parse_time("2023-11-14T21:13:20.123-01:00"),
            Ok(1_700_000_000_123)
        );
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_time("2024-02-29T00:00:00Z"), Ok(1_709_164_800_000));
        for bad in [
            "yesterday",
            "2023-02-29T00:00:00Z",
            "2023-11-14 22:13",
            "2023-13-01T00:00:00Z",
            "-5",
            "NaN",
            "1.6606814152627053e-176",
            "+1700000000",
            "2023-11-14T22:13:20+2:00",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn steps() {
        assert_eq!(parse_step("15s"), Ok(15_000));
        assert_eq!(parse_step("0.5"), Ok(500));
        assert_eq!(parse_step("1m"), Ok(60_000));
        assert!(parse_step("0").is_err());
        assert!(parse_step("fast").is_err());
    }
}
