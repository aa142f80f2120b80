//! Aggregation operators with `by` / `without`.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use promql_parser::parser::token;
use promql_parser::parser::{AggregateExpr, LabelModifier};

use crate::context::{Context, Sample, Value};
use crate::error::{exec, unsupported, QueryError};
use crate::source::{Labels, METRIC_NAME};
use crate::value::format_value;

/// The label set of the group a sample belongs to.
fn group_labels(labels: &Labels, modifier: &Option<LabelModifier>) -> Labels {
    match modifier {
        None => Labels::default(),
        Some(LabelModifier::Include(ls)) => {
            let names: Vec<&str> = ls.labels.iter().map(String::as_str).collect();
            labels.keep(&names)
        }
        Some(LabelModifier::Exclude(ls)) => {
            let mut names: Vec<&str> = ls.labels.iter().map(String::as_str).collect();
            names.push(METRIC_NAME);
            labels.without(&names)
        }
    }
}

/// Groups samples by their group label set, keeping first-seen order.
fn grouped(samples: Vec<Sample>, modifier: &Option<LabelModifier>) -> Vec<(Labels, Vec<Sample>)> {
    let mut index: HashMap<Labels, usize> = HashMap::new();
    let mut groups: Vec<(Labels, Vec<Sample>)> = Vec::new();
    for s in samples {
        let key = group_labels(&s.labels, modifier);
        match index.get(&key) {
            Some(&i) => groups[i].1.push(s),
            None => {
                index.insert(key.clone(), groups.len());
                groups.push((key, vec![s]));
            }
        }
    }
    groups
}

pub(crate) fn eval_aggregate<'e>(
    ev: &'e impl Context,
    a: &'e AggregateExpr,
    t: i64,
) -> Result<Value<'e>, QueryError> {
    let op = a.op.id();
    if matches!(op, token::T_LIMITK | token::T_LIMIT_RATIO) {
        return Err(unsupported(format!("aggregation `{}`", a.op)));
    }
    let samples = ev.eval_vector(&a.expr, t)?;
    let out = match op {
        token::T_TOPK | token::T_BOTTOMK => {
            let k = param_scalar(ev, a, t)?;
            // Prometheus converts k with `int64(k)` after this check, so
            // NaN and values past ±2^63 fail the query, at every step.
            if !(k >= i64::MIN as f64 && k <= i64::MAX as f64) {
                return Err(exec(format!(
                    "Scalar value {} overflows int64",
                    format_value(k)
                )));
            }
            select_k(samples, &a.modifier, k, op == token::T_TOPK)
        }
        token::T_COUNT_VALUES => {
            let label = match &a.param {
                Some(p) => match ev.eval(p, t)? {
                    Value::Str(s) => s,
                    _ => return Err(exec("count_values needs a string parameter")),
                },
                None => return Err(exec("count_values needs a string parameter")),
            };
            count_values(samples, &a.modifier, &label)?
        }
        token::T_QUANTILE => {
            let q = param_scalar(ev, a, t)?;
            grouped(samples, &a.modifier)
                .into_iter()
                .map(|(labels, g)| {
                    let mut vals: Vec<f64> = g.iter().map(|s| s.v).collect();
                    Sample {
                        labels: Arc::new(labels),
                        v: quantile(q, &mut vals),
                    }
                })
                .collect()
        }
        _ => grouped(samples, &a.modifier)
            .into_iter()
            .map(|(labels, g)| {
                Ok(Sample {
                    labels: Arc::new(labels),
                    v: simple_aggregate(op, &g)?,
                })
            })
            .collect::<Result<Vec<_>, QueryError>>()?,
    };
    Ok(Value::Vector(out))
}

fn param_scalar(ev: &impl Context, a: &AggregateExpr, t: i64) -> Result<f64, QueryError> {
    match &a.param {
        Some(p) => ev.eval_scalar(p, t),
        None => Err(exec(format!("{} needs a parameter", a.op))),
    }
}

/// sum, avg, min, max, count, group, stddev, stdvar over one group, with
/// Prometheus 2.x's NaN handling for min/max and its incremental mean.
fn simple_aggregate(op: token::TokenId, g: &[Sample]) -> Result<f64, QueryError> {
    let first = g.first().map(|s| s.v).unwrap_or(f64::NAN);
    Ok(match op {
        token::T_SUM => g.iter().map(|s| s.v).sum(),
        token::T_COUNT => g.len() as f64,
        token::T_GROUP => 1.0,
        token::T_MAX => {
            g.iter().skip(1).fold(
                first,
                |acc, s| {
                    if acc < s.v || acc.is_nan() {
                        s.v
                    } else {
                        acc
                    }
                },
            )
        }
        token::T_MIN => {
            g.iter().skip(1).fold(
                first,
                |acc, s| {
                    if acc > s.v || acc.is_nan() {
                        s.v
                    } else {
                        acc
                    }
                },
            )
        }
        token::T_AVG => {
            let mut mean = 0.0;
            for (i, s) in g.iter().enumerate() {
                let n = (i + 1) as f64;
                mean += s.v / n - mean / n;
            }
            mean
        }
        token::T_STDDEV | token::T_STDVAR => {
            let (mut mean, mut m2) = (0.0, 0.0);
            for (i, s) in g.iter().enumerate() {
                let n = (i + 1) as f64;
                let delta = s.v - mean;
                mean += delta / n;
                m2 += delta * (s.v - mean);
            }
            let var = m2 / g.len() as f64;
            if op == token::T_STDDEV {
                var.sqrt()
            } else {
                var
            }
        }
        other => {
            return Err(unsupported(format!(
                "aggregation `{}`",
                token::TokenType::new(other)
            )))
        }
    })
}

/// Orders for topk: larger first, NaN last (Prometheus treats NaN as the
/// smallest value for topk and the largest for bottomk).
fn cmp_for_k(a: f64, b: f64, top: bool) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ if top => b.partial_cmp(&a).unwrap_or(Ordering::Equal),
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

fn select_k(
    samples: Vec<Sample>,
    modifier: &Option<LabelModifier>,
    k: f64,
    top: bool,
) -> Vec<Sample> {
    // k is within i64 here (checked by the caller); Go truncates it.
    if k < 1.0 {
        return Vec::new();
    }
    let k = k as usize;
    let mut out = Vec::new();
    for (_, mut g) in grouped(samples, modifier) {
        g.sort_by(|a, b| cmp_for_k(a.v, b.v, top));
        g.truncate(k);
        out.extend(g);
    }
    out
}

fn count_values(
    samples: Vec<Sample>,
    modifier: &Option<LabelModifier>,
    label: &str,
) -> Result<Vec<Sample>, QueryError> {
    let mut out: Vec<Sample> = Vec::new();
    let mut index: HashMap<Labels, usize> = HashMap::new();
    for s in samples {
        let key = group_labels(&s.labels, modifier).with(label, &format_value(s.v));
        match index.get(&key) {
            Some(&i) => out[i].v += 1.0,
            None => {
                index.insert(key.clone(), out.len());
                out.push(Sample {
                    labels: Arc::new(key),
                    v: 1.0,
                });
            }
        }
    }
    Ok(out)
}

/// Prometheus' `quantile`: linear interpolation between the closest ranks.
pub(crate) fn quantile(q: f64, values: &mut [f64]) -> f64 {
    if values.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight
}
