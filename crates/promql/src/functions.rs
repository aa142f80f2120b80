//! PromQL functions: range-vector functions (`rate`, `*_over_time`, ...),
//! instant-vector math, label manipulation, `histogram_quantile`, `absent`,
//! and the scalar/vector conversions.

use std::sync::Arc;

use promql_parser::parser::{Call, Expr};
use regex::Regex;

use crate::aggregate::quantile;
use crate::context::{
    check_unique_labels, duration_ms, offset_ms, selector_matchers, Context, Sample, Value, Window,
};
use crate::error::{exec, unsupported, QueryError};
use crate::histogram::histogram_quantile;
use crate::source::{Labels, MatchKind, METRIC_NAME};

/// Every function [`eval_call`] evaluates.
const SUPPORTED: &[&str] = &[
    "rate",
    "increase",
    "delta",
    "irate",
    "idelta",
    "deriv",
    "predict_linear",
    "changes",
    "resets",
    "avg_over_time",
    "min_over_time",
    "max_over_time",
    "sum_over_time",
    "count_over_time",
    "last_over_time",
    "stddev_over_time",
    "stdvar_over_time",
    "present_over_time",
    "absent_over_time",
    "quantile_over_time",
    "abs",
    "ceil",
    "floor",
    "exp",
    "sqrt",
    "ln",
    "log2",
    "log10",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "deg",
    "rad",
    "sgn",
    "time",
    "pi",
    "scalar",
    "vector",
    "round",
    "clamp",
    "clamp_min",
    "clamp_max",
    "histogram_quantile",
    "label_replace",
    "label_join",
    "absent",
    "timestamp",
    "sort",
    "sort_desc",
    "minute",
    "hour",
    "day_of_week",
    "day_of_month",
    "day_of_year",
    "days_in_month",
    "month",
    "year",
];

/// `Err` naming the function when this engine does not evaluate it, so a
/// query fails the same way whatever data it meets.
pub(crate) fn check_supported(name: &str) -> Result<(), QueryError> {
    if SUPPORTED.contains(&name) {
        Ok(())
    } else {
        Err(unsupported(format!("function `{name}`")))
    }
}

pub(crate) fn eval_call<'e>(
    ev: &'e impl Context,
    call: &'e Call,
    t: i64,
) -> Result<Value<'e>, QueryError> {
    let name = call.func.name;
    let args: Vec<&Expr> = call.args.args.iter().map(|b| b.as_ref()).collect();
    if let Some(out) = range_function(ev, name, &args, t)? {
        check_unique_labels(&out)?;
        return Ok(Value::Vector(out));
    }
    if let Some(f) = math_function(name) {
        let v = arg_vector(ev, &args, 0, t)?;
        return Ok(Value::Vector(map_dropping_name(v, f)));
    }
    let out = match name {
        "time" => return Ok(Value::Scalar(t as f64 / 1000.0)),
        "pi" => return Ok(Value::Scalar(std::f64::consts::PI)),
        "scalar" => {
            let v = arg_vector(ev, &args, 0, t)?;
            return Ok(Value::Scalar(if v.len() == 1 { v[0].v } else { f64::NAN }));
        }
        "vector" => vec![Sample {
            labels: Arc::new(Labels::default()),
            v: arg_scalar(ev, &args, 0, t)?,
        }],
        "round" => {
            let to = if args.len() > 1 {
                arg_scalar(ev, &args, 1, t)?
            } else {
                1.0
            };
            let inv = 1.0 / to;
            map_dropping_name(arg_vector(ev, &args, 0, t)?, |v| {
                (v * inv + 0.5).floor() / inv
            })
        }
        "clamp" | "clamp_min" | "clamp_max" => clamp(ev, name, &args, t)?,
        "histogram_quantile" => {
            let q = arg_scalar(ev, &args, 0, t)?;
            histogram_quantile(q, arg_vector(ev, &args, 1, t)?)
        }
        "label_replace" => label_replace(ev, &args, t)?,
        "label_join" => label_join(ev, &args, t)?,
        "absent" => {
            let v = arg_vector(ev, &args, 0, t)?;
            absent_result(v.is_empty(), arg(&args, 0)?)
        }
        "timestamp" => timestamps(ev, &args, t)?,
        "sort" | "sort_desc" => {
            let mut v = arg_vector(ev, &args, 0, t)?;
            let desc = name == "sort_desc";
            v.sort_by(|a, b| {
                let o = a.v.partial_cmp(&b.v).unwrap_or(std::cmp::Ordering::Equal);
                if desc {
                    o.reverse()
                } else {
                    o
                }
            });
            v
        }
        "minute" | "hour" | "day_of_week" | "day_of_month" | "day_of_year" | "days_in_month"
        | "month" | "year" => date_function(ev, name, &args, t)?,
        other => return Err(unsupported(format!("function `{other}`"))),
    };
    check_unique_labels(&out)?;
    Ok(Value::Vector(out))
}

fn arg<'a>(args: &[&'a Expr], i: usize) -> Result<&'a Expr, QueryError> {
    args.get(i)
        .copied()
        .ok_or_else(|| exec(format!("missing argument {}", i + 1)))
}

fn arg_vector(
    ev: &impl Context,
    args: &[&Expr],
    i: usize,
    t: i64,
) -> Result<Vec<Sample>, QueryError> {
    ev.eval_vector(arg(args, i)?, t)
}

fn arg_scalar(ev: &impl Context, args: &[&Expr], i: usize, t: i64) -> Result<f64, QueryError> {
    ev.eval_scalar(arg(args, i)?, t)
}

fn arg_string(ev: &impl Context, args: &[&Expr], i: usize, t: i64) -> Result<String, QueryError> {
    match ev.eval(arg(args, i)?, t)? {
        Value::Str(s) => Ok(s),
        _ => Err(exec(format!("argument {} must be a string", i + 1))),
    }
}

fn map_dropping_name(v: Vec<Sample>, f: impl Fn(f64) -> f64) -> Vec<Sample> {
    v.into_iter()
        .map(|s| Sample {
            labels: Arc::new(s.labels.without_name()),
            v: f(s.v),
        })
        .collect()
}

fn math_function(name: &str) -> Option<fn(f64) -> f64> {
    Some(match name {
        "abs" => f64::abs,
        "ceil" => f64::ceil,
        "floor" => f64::floor,
        "exp" => f64::exp,
        "sqrt" => f64::sqrt,
        "ln" => f64::ln,
        "log2" => f64::log2,
        "log10" => f64::log10,
        "sin" => f64::sin,
        "cos" => f64::cos,
        "tan" => f64::tan,
        "asin" => f64::asin,
        "acos" => f64::acos,
        "atan" => f64::atan,
        "sinh" => f64::sinh,
        "cosh" => f64::cosh,
        "tanh" => f64::tanh,
        "asinh" => f64::asinh,
        "acosh" => f64::acosh,
        "atanh" => f64::atanh,
        "deg" => f64::to_degrees,
        "rad" => f64::to_radians,
        "sgn" => |v: f64| {
            if v > 0.0 {
                1.0
            } else if v < 0.0 {
                -1.0
            } else {
                v
            }
        },
        _ => return None,
    })
}

/// The functions that take a range vector. `None` when `name` is not one.
fn range_function(
    ev: &impl Context,
    name: &str,
    args: &[&Expr],
    t: i64,
) -> Result<Option<Vec<Sample>>, QueryError> {
    // quantile_over_time takes its range vector second.
    let (matrix_arg, extra) = match name {
        "quantile_over_time" => (1, Some(0)),
        "predict_linear" => (0, Some(1)),
        "rate" | "increase" | "delta" | "irate" | "idelta" | "deriv" | "changes" | "resets"
        | "avg_over_time" | "min_over_time" | "max_over_time" | "sum_over_time"
        | "count_over_time" | "last_over_time" | "stddev_over_time" | "stdvar_over_time"
        | "present_over_time" | "absent_over_time" => (0, None),
        "holt_winters" | "double_exponential_smoothing" => {
            return Err(unsupported(format!("function `{name}`")))
        }
        _ => return Ok(None),
    };
    let param = match extra {
        Some(i) => arg_scalar(ev, args, i, t)?,
        None => 0.0,
    };
    let matrix_expr = arg(args, matrix_arg)?;
    let windows = match ev.eval(matrix_expr, t)? {
        Value::Matrix(m) => m,
        _ => return Err(exec(format!("{name} needs a range vector"))),
    };
    if name == "absent_over_time" {
        return Ok(Some(absent_result(windows.is_empty(), matrix_expr)));
    }
    let window = window_of(ev, matrix_expr, t);
    let mut out = Vec::with_capacity(windows.len());
    for w in &windows {
        if let Some(v) = over_window(name, w, window, param) {
            // Prometheus 2.x drops the metric name from every range
            // function but last_over_time.
            let labels = if name == "last_over_time" {
                w.labels.clone()
            } else {
                w.labels_without_name.clone()
            };
            out.push(Sample { labels, v });
        }
    }
    Ok(Some(out))
}

/// The window of a matrix argument at `t`: (start ms, end ms).
fn window_of(ev: &impl Context, e: &Expr, t: i64) -> (i64, i64) {
    let (range, at, offset) = match e {
        Expr::MatrixSelector(ms) => (&ms.range, &ms.vs.at, &ms.vs.offset),
        Expr::Subquery(sq) => (&sq.range, &sq.at, &sq.offset),
        Expr::Paren(p) => return window_of(ev, &p.expr, t),
        _ => return (t, t),
    };
    let end = ev.at(at).unwrap_or(t).saturating_sub(offset_ms(offset));
    (end.saturating_sub(duration_ms(range)), end)
}

fn over_window(name: &str, w: &Window<'_>, window: (i64, i64), param: f64) -> Option<f64> {
    let p = &w.points;
    let vals = || p.iter().map(|&(_, v)| v);
    Some(match name {
        "rate" => extrapolated_rate(p, window, true, true)?,
        "increase" => extrapolated_rate(p, window, true, false)?,
        "delta" => extrapolated_rate(p, window, false, false)?,
        "irate" => instant_value(p, true)?,
        "idelta" => instant_value(p, false)?,
        "deriv" => {
            if p.len() < 2 {
                return None;
            }
            linear_regression(p, p[0].0).0
        }
        "predict_linear" => {
            if p.len() < 2 {
                return None;
            }
            let (slope, intercept) = linear_regression(p, window.1);
            slope * param + intercept
        }
        "changes" => p
            .windows(2)
            .filter(|w| w[0].1 != w[1].1 && !(w[0].1.is_nan() && w[1].1.is_nan()))
            .count() as f64,
        "resets" => p.windows(2).filter(|w| w[1].1 < w[0].1).count() as f64,
        "avg_over_time" => {
            let mut mean = 0.0;
            for (i, v) in vals().enumerate() {
                let n = (i + 1) as f64;
                mean += v / n - mean / n;
            }
            mean
        }
        "sum_over_time" => vals().sum(),
        "count_over_time" => p.len() as f64,
        "last_over_time" => p.last()?.1,
        "present_over_time" => 1.0,
        "min_over_time" => vals().fold(
            f64::NAN,
            |acc, v| if acc > v || acc.is_nan() { v } else { acc },
        ),
        "max_over_time" => vals().fold(
            f64::NAN,
            |acc, v| if acc < v || acc.is_nan() { v } else { acc },
        ),
        "stddev_over_time" | "stdvar_over_time" => {
            let (mut mean, mut m2) = (0.0, 0.0);
            for (i, v) in vals().enumerate() {
                let n = (i + 1) as f64;
                let delta = v - mean;
                mean += delta / n;
                m2 += delta * (v - mean);
            }
            let var = m2 / p.len() as f64;
            if name == "stddev_over_time" {
                var.sqrt()
            } else {
                var
            }
        }
        "quantile_over_time" => quantile(param, &mut vals().collect::<Vec<_>>()),
        _ => return None,
    })
}

/// Prometheus' `extrapolatedRate` (2.x): the increase between the first and
/// last sample (counter resets added back), extrapolated towards the window
/// edges when the samples come close to them, never below a zero counter.
pub(crate) fn extrapolated_rate(
    p: &[(i64, f64)],
    (range_start, range_end): (i64, i64),
    is_counter: bool,
    is_rate: bool,
) -> Option<f64> {
    if p.len() < 2 {
        return None;
    }
    let (first, last) = (p[0], p[p.len() - 1]);
    let mut result = last.1 - first.1;
    if is_counter {
        let mut prev = 0.0;
        for &(_, v) in p {
            if v < prev {
                result += prev;
            }
            prev = v;
        }
    }
    // In f64: a saturated window edge must not overflow the subtraction.
    let mut to_start = (first.0 as f64 - range_start as f64) / 1000.0;
    let to_end = (range_end as f64 - last.0 as f64) / 1000.0;
    let sampled = (last.0 as f64 - first.0 as f64) / 1000.0;
    let avg_between = sampled / (p.len() - 1) as f64;
    if is_counter && result > 0.0 && first.1 >= 0.0 {
        let to_zero = sampled * (first.1 / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    let threshold = avg_between * 1.1;
    let mut interval = sampled;
    interval += if to_start < threshold {
        to_start
    } else {
        avg_between / 2.0
    };
    interval += if to_end < threshold {
        to_end
    } else {
        avg_between / 2.0
    };
    result *= interval / sampled;
    if is_rate {
        result /= (range_end as f64 - range_start as f64) / 1000.0;
    }
    Some(result)
}

/// `irate` / `idelta`: the last two samples only.
fn instant_value(p: &[(i64, f64)], is_rate: bool) -> Option<f64> {
    if p.len() < 2 {
        return None;
    }
    let (prev, last) = (p[p.len() - 2], p[p.len() - 1]);
    let mut v = if is_rate && last.1 < prev.1 {
        last.1
    } else {
        last.1 - prev.1
    };
    let dt = last.0 - prev.0;
    if dt == 0 {
        return None;
    }
    if is_rate {
        v /= dt as f64 / 1000.0;
    }
    Some(v)
}

/// Least-squares slope and intercept (at `intercept_ms`), as Prometheus'
/// `linearRegression`: a constant series has slope 0.
fn linear_regression(p: &[(i64, f64)], intercept_ms: i64) -> (f64, f64) {
    let init = p[0].1;
    if p.iter().all(|&(_, v)| v == init) {
        if init.is_infinite() {
            return (f64::NAN, f64::NAN);
        }
        return (0.0, init);
    }
    let (mut n, mut sx, mut sy, mut sxy, mut sx2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(ts, v) in p {
        let x = (ts - intercept_ms) as f64 / 1000.0;
        n += 1.0;
        sx += x;
        sy += v;
        sxy += x * v;
        sx2 += x * x;
    }
    let cov = sxy - sx * sy / n;
    let var = sx2 - sx * sx / n;
    let slope = cov / var;
    (slope, sy / n - slope * sx / n)
}

fn clamp(ev: &impl Context, name: &str, args: &[&Expr], t: i64) -> Result<Vec<Sample>, QueryError> {
    let v = arg_vector(ev, args, 0, t)?;
    let (lo, hi) = match name {
        "clamp" => (arg_scalar(ev, args, 1, t)?, arg_scalar(ev, args, 2, t)?),
        "clamp_min" => (arg_scalar(ev, args, 1, t)?, f64::INFINITY),
        _ => (f64::NEG_INFINITY, arg_scalar(ev, args, 1, t)?),
    };
    if name == "clamp" && hi < lo {
        return Ok(Vec::new());
    }
    // Go's math.Max/Min propagate NaN; Rust's f64::max/min do not.
    Ok(map_dropping_name(v, |x| {
        if x.is_nan() || lo.is_nan() || hi.is_nan() {
            f64::NAN
        } else {
            x.max(lo).min(hi)
        }
    }))
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn label_replace(ev: &impl Context, args: &[&Expr], t: i64) -> Result<Vec<Sample>, QueryError> {
    let v = arg_vector(ev, args, 0, t)?;
    let dst = arg_string(ev, args, 1, t)?;
    let repl = arg_string(ev, args, 2, t)?;
    let src = arg_string(ev, args, 3, t)?;
    let pattern = arg_string(ev, args, 4, t)?;
    let re = Regex::new(&format!("^(?:{pattern})$")).map_err(|_| {
        exec(format!(
            "invalid regular expression in label_replace(): {pattern}"
        ))
    })?;
    if !valid_label_name(&dst) {
        return Err(exec(format!(
            "invalid destination label name in label_replace(): {dst}"
        )));
    }
    Ok(v.into_iter()
        .map(|s| {
            let src_val = s.labels.get(&src).unwrap_or("");
            match re.captures(src_val) {
                Some(caps) => {
                    let mut res = String::new();
                    caps.expand(&repl, &mut res);
                    Sample {
                        labels: Arc::new(s.labels.with(&dst, &res)),
                        v: s.v,
                    }
                }
                None => s,
            }
        })
        .collect())
}

fn label_join(ev: &impl Context, args: &[&Expr], t: i64) -> Result<Vec<Sample>, QueryError> {
    let v = arg_vector(ev, args, 0, t)?;
    let dst = arg_string(ev, args, 1, t)?;
    let sep = arg_string(ev, args, 2, t)?;
    let mut srcs = Vec::new();
    for i in 3..args.len() {
        srcs.push(arg_string(ev, args, i, t)?);
    }
    if !valid_label_name(&dst) {
        return Err(exec(format!(
            "invalid destination label name in label_join(): {dst}"
        )));
    }
    Ok(v.into_iter()
        .map(|s| {
            let joined: Vec<&str> = srcs.iter().map(|n| s.labels.get(n).unwrap_or("")).collect();
            Sample {
                labels: Arc::new(s.labels.with(&dst, &joined.join(&sep))),
                v: s.v,
            }
        })
        .collect())
}

/// `absent` / `absent_over_time`: one sample of value 1 when the input is
/// empty, labelled by the selector's equality matchers (a label matched
/// twice or by another kind of matcher is left out).
fn absent_result(empty: bool, arg: &Expr) -> Vec<Sample> {
    if !empty {
        return Vec::new();
    }
    let vs = match arg {
        Expr::VectorSelector(vs) => Some(vs),
        Expr::MatrixSelector(ms) => Some(&ms.vs),
        _ => None,
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut dropped: Vec<String> = Vec::new();
    if let Some(ms) = vs.and_then(|vs| selector_matchers(vs).ok()) {
        for m in ms {
            if m.name == METRIC_NAME {
                continue;
            }
            match m.kind {
                MatchKind::Equal(v) if !pairs.iter().any(|(k, _)| *k == m.name) => {
                    pairs.push((m.name, v))
                }
                _ => dropped.push(m.name),
            }
        }
    }
    pairs.retain(|(k, _)| !dropped.contains(k));
    vec![Sample {
        labels: Arc::new(Labels::new(pairs)),
        v: 1.0,
    }]
}

fn timestamps(ev: &impl Context, args: &[&Expr], t: i64) -> Result<Vec<Sample>, QueryError> {
    let e = arg(args, 0)?;
    let v = ev.eval_vector(e, t)?;
    let selector = match e {
        Expr::VectorSelector(vs) => Some(vs),
        _ => None,
    };
    Ok(v.into_iter()
        .map(|s| {
            let ts = selector
                .and_then(|vs| ev.sample_time(vs, t, &s.labels))
                .unwrap_or(t);
            Sample {
                labels: Arc::new(s.labels.without_name()),
                v: ts as f64 / 1000.0,
            }
        })
        .collect())
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn date_part(name: &str, secs: f64) -> f64 {
    let secs = secs.floor() as i64;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let month_len = [
        31,
        if is_leap(y) { 29 } else { 28 },
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
    match name {
        "minute" => ((sod / 60) % 60) as f64,
        "hour" => (sod / 3600) as f64,
        "day_of_week" => (days + 4).rem_euclid(7) as f64,
        "day_of_month" => f64::from(d),
        "day_of_year" => (month_len[..(m - 1) as usize].iter().sum::<i64>() + i64::from(d)) as f64,
        "days_in_month" => month_len[(m - 1) as usize] as f64,
        "month" => f64::from(m),
        _ => y as f64,
    }
}

fn date_function(
    ev: &impl Context,
    name: &str,
    args: &[&Expr],
    t: i64,
) -> Result<Vec<Sample>, QueryError> {
    if args.is_empty() {
        return Ok(vec![Sample {
            labels: Arc::new(Labels::default()),
            v: date_part(name, t as f64 / 1000.0),
        }]);
    }
    let v = arg_vector(ev, args, 0, t)?;
    Ok(map_dropping_name(v, |x| {
        if x.is_finite() {
            date_part(name, x)
        } else {
            f64::NAN
        }
    }))
}
