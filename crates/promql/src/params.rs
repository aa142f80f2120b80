//! Parsing the parameters of Prometheus' HTTP API as Prometheus does:
//! times (`time`, `start`, `end`), the `step`, and `match[]` selectors.
//! Strings in, values out; the HTTP layer stays thin.

use promql_parser::parser::Expr;

use crate::context::{duration_ms, selector_matchers};
use crate::error::QueryError;
use crate::source::LabelMatcher;

fn bad(msg: String) -> QueryError {
    QueryError::BadParam(msg)
}

/// A time as Prometheus' API takes it: Unix seconds (fractions allowed) or
/// RFC 3339 (`2026-01-01T00:00:00Z`, `...T00:00:00.5+02:00`). Milliseconds.
pub fn parse_time(s: &str) -> Result<i64, QueryError> {
    if let Ok(secs) = s.parse::<f64>() {
        if !secs.is_finite() || secs.abs() > 9.2e15 {
            return Err(bad(format!("cannot parse {s:?} to a valid timestamp")));
        }
        return Ok((secs * 1000.0).round() as i64);
    }
    parse_rfc3339(s).ok_or_else(|| bad(format!("cannot parse {s:?} to a valid timestamp")))
}

fn digits(s: &str) -> Option<i64> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Days from 1970-01-01 to a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn parse_rfc3339(s: &str) -> Option<i64> {
    let (date, rest) = s.split_once(['T', 't'])?;
    let mut dp = date.splitn(3, '-');
    let (y, mo, d) = (
        digits(dp.next()?)?,
        digits(dp.next()?)?,
        digits(dp.next()?)?,
    );
    let zone_at = rest.find(['Z', 'z', '+', '-'])?;
    let (clock, zone) = rest.split_at(zone_at);
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
    let mut cp = hms.splitn(3, ':');
    let (h, mi, sec) = (
        digits(cp.next()?)?,
        digits(cp.next()?)?,
        digits(cp.next()?)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let ms_frac = if frac.is_empty() {
        0
    } else {
        digits(frac)?;
        format!("{frac:0<3}")[..3].parse::<i64>().ok()?
    };
    let offset_min = match zone {
        "Z" | "z" => 0,
        _ => {
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            let (zh, zm) = zone[1..].split_once(':')?;
            sign * (digits(zh)? * 60 + digits(zm)?)
        }
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60;
    Some(secs * 1000 + ms_frac)
}

/// A step or duration as Prometheus' API takes it: seconds (`15`, `0.5`)
/// or a Prometheus duration (`15s`, `1m30s`). Milliseconds, > 0.
pub fn parse_step(s: &str) -> Result<i64, QueryError> {
    let ms = match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs.abs() < 9.2e15 => (secs * 1000.0).round() as i64,
        Ok(_) => return Err(bad(format!("cannot parse {s:?} to a valid duration"))),
        Err(_) => promql_parser::util::parse_duration(s)
            .map(|d| duration_ms(&d))
            .map_err(|_| bad(format!("cannot parse {s:?} to a valid duration")))?,
    };
    if ms <= 0 {
        return Err(bad(
            "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
        ));
    }
    Ok(ms)
}

/// A `match[]` series selector (`up`, `{job=~"v.*"}`) as store matchers.
pub fn parse_selector(s: &str) -> Result<Vec<LabelMatcher>, QueryError> {
    match crate::parse(s)? {
        Expr::VectorSelector(vs) => selector_matchers(&vs),
        _ => Err(bad(format!(
            "invalid parameter \"match[]\": {s:?} is not a series selector"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_seconds_and_rfc3339() {
        assert_eq!(parse_time("1767225600").unwrap(), 1_767_225_600_000);
        assert_eq!(parse_time("1767225600.123").unwrap(), 1_767_225_600_123);
        assert_eq!(
            parse_time("2026-01-01T00:00:00Z").unwrap(),
            1_767_225_600_000
        );
        assert_eq!(
            parse_time("2026-01-01T02:00:00.5+02:00").unwrap(),
            1_767_225_600_500
        );
        assert_eq!(parse_time("1970-01-01T00:00:00Z").unwrap(), 0);
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00",
            "NaN",
            "inf",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn steps_in_seconds_and_durations() {
        assert_eq!(parse_step("15").unwrap(), 15_000);
        assert_eq!(parse_step("0.5").unwrap(), 500);
        assert_eq!(parse_step("1m30s").unwrap(), 90_000);
        assert!(parse_step("0").is_err());
        assert!(parse_step("-5").is_err());
        assert!(parse_step("soon").is_err());
    }

    #[test]
    fn selectors_only() {
        let m = parse_selector(r#"up{job=~"v.*"}"#).unwrap();
        assert_eq!(m.len(), 2);
        assert!(parse_selector("rate(up[5m])").is_err());
        assert!(parse_selector("up{").is_err());
    }
}
