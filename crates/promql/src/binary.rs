//! Binary operators: arithmetic, comparison (with and without `bool`) and
//! set operators, with Prometheus' vector matching (`on`, `ignoring`,
//! `group_left`, `group_right`) and its errors.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use promql_parser::label::Labels as LabelList;
use promql_parser::parser::token::{self, TokenId};
use promql_parser::parser::{BinaryExpr, LabelModifier, VectorMatchCardinality};

use crate::context::{check_unique_labels, is_arithmetic, Sample, Value};
use crate::error::{exec, unsupported, QueryError};
use crate::source::{Labels, METRIC_NAME};

/// Applies an arithmetic or comparison operator to two numbers. Comparison
/// returns `lhs` and whether the comparison holds, as Prometheus does.
pub(crate) fn scalar_op(op: TokenId, l: f64, r: f64) -> Result<(f64, bool), QueryError> {
    Ok(match op {
        token::T_ADD => (l + r, true),
        token::T_SUB => (l - r, true),
        token::T_MUL => (l * r, true),
        token::T_DIV => (l / r, true),
        token::T_MOD => (l % r, true),
        token::T_POW => (l.powf(r), true),
        token::T_EQLC => (l, l == r),
        token::T_NEQ => (l, l != r),
        token::T_GTR => (l, l > r),
        token::T_LSS => (l, l < r),
        token::T_GTE => (l, l >= r),
        token::T_LTE => (l, l <= r),
        other if other == token::T_ATAN2 => (l.atan2(r), true),
        other => {
            return Err(unsupported(format!(
                "binary operator `{}`",
                token::TokenType::new(other)
            )))
        }
    })
}

fn is_comparison(op: TokenId) -> bool {
    token::TokenType::new(op).is_comparison_operator()
}

pub(crate) fn eval_binary<'e>(
    b: &BinaryExpr,
    lhs: Value<'e>,
    rhs: Value<'e>,
) -> Result<Value<'e>, QueryError> {
    let op = b.op.id();
    let return_bool = b.return_bool();
    match (lhs, rhs) {
        (Value::Scalar(l), Value::Scalar(r)) => {
            let (v, keep) = scalar_op(op, l, r)?;
            if is_comparison(op) {
                // The parser only allows scalar comparisons with `bool`.
                return Ok(Value::Scalar(if keep { 1.0 } else { 0.0 }));
            }
            Ok(Value::Scalar(v))
        }
        (Value::Vector(l), Value::Scalar(r)) => {
            Ok(Value::Vector(vector_scalar(op, l, r, false, return_bool)?))
        }
        (Value::Scalar(l), Value::Vector(r)) => {
            Ok(Value::Vector(vector_scalar(op, r, l, true, return_bool)?))
        }
        (Value::Vector(l), Value::Vector(r)) => {
            let out = if token::TokenType::new(op).is_set_operator() {
                set_op(op, l, r, b)?
            } else {
                vector_vector(op, l, r, b, return_bool)?
            };
            check_unique_labels(&out)?;
            Ok(Value::Vector(out))
        }
        (l, r) => Err(exec(format!(
            "binary operator `{}` between {} and {} is not allowed",
            b.op,
            l.type_name(),
            r.type_name()
        ))),
    }
}

fn vector_scalar(
    op: TokenId,
    vec: Vec<Sample>,
    scalar: f64,
    scalar_is_lhs: bool,
    return_bool: bool,
) -> Result<Vec<Sample>, QueryError> {
    let drop_name = is_arithmetic(op) || return_bool;
    let mut out = Vec::with_capacity(vec.len());
    for s in vec {
        let (l, r) = if scalar_is_lhs {
            (scalar, s.v)
        } else {
            (s.v, scalar)
        };
        let (mut v, mut keep) = scalar_op(op, l, r)?;
        if is_comparison(op) {
            // The output keeps the vector's value even when it is the rhs.
            v = s.v;
        }
        if return_bool {
            v = if keep { 1.0 } else { 0.0 };
            keep = true;
        }
        if keep {
            let labels = if drop_name {
                Arc::new(s.labels.without_name())
            } else {
                s.labels
            };
            out.push(Sample { labels, v });
        }
    }
    Ok(out)
}

/// How samples are matched: `on(...)` (true) or `ignoring(...)` and the names.
struct Matching<'a> {
    on: bool,
    names: Vec<&'a str>,
}

fn matching(b: &BinaryExpr) -> Matching<'_> {
    match b.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
        Some(LabelModifier::Include(ls)) => Matching {
            on: true,
            names: names(ls),
        },
        Some(LabelModifier::Exclude(ls)) => Matching {
            on: false,
            names: names(ls),
        },
        None => Matching {
            on: false,
            names: Vec::new(),
        },
    }
}

fn names(ls: &LabelList) -> Vec<&str> {
    ls.labels.iter().map(String::as_str).collect()
}

impl Matching<'_> {
    /// The label set two samples must share to match.
    fn signature(&self, labels: &Labels) -> Labels {
        if self.on {
            labels.keep(&self.names)
        } else {
            let mut drop = self.names.clone();
            drop.push(METRIC_NAME);
            labels.without(&drop)
        }
    }
}

fn set_op(
    op: TokenId,
    lhs: Vec<Sample>,
    rhs: Vec<Sample>,
    b: &BinaryExpr,
) -> Result<Vec<Sample>, QueryError> {
    let m = matching(b);
    match op {
        token::T_LAND => {
            let rsigs: HashSet<Labels> = rhs.iter().map(|s| m.signature(&s.labels)).collect();
            Ok(lhs
                .into_iter()
                .filter(|s| rsigs.contains(&m.signature(&s.labels)))
                .collect())
        }
        token::T_LOR => {
            let lsigs: HashSet<Labels> = lhs.iter().map(|s| m.signature(&s.labels)).collect();
            let mut out = lhs;
            out.extend(
                rhs.into_iter()
                    .filter(|s| !lsigs.contains(&m.signature(&s.labels))),
            );
            Ok(out)
        }
        token::T_LUNLESS => {
            let rsigs: HashSet<Labels> = rhs.iter().map(|s| m.signature(&s.labels)).collect();
            Ok(lhs
                .into_iter()
                .filter(|s| !rsigs.contains(&m.signature(&s.labels)))
                .collect())
        }
        other => Err(unsupported(format!(
            "set operator `{}`",
            token::TokenType::new(other)
        ))),
    }
}

fn vector_vector(
    op: TokenId,
    lhs: Vec<Sample>,
    rhs: Vec<Sample>,
    b: &BinaryExpr,
    return_bool: bool,
) -> Result<Vec<Sample>, QueryError> {
    let m = matching(b);
    let card = b
        .modifier
        .as_ref()
        .map(|m| m.card.clone())
        .unwrap_or(VectorMatchCardinality::OneToOne);
    let (include, swapped) = match &card {
        VectorMatchCardinality::ManyToOne(ls) => (names(ls), false),
        VectorMatchCardinality::OneToMany(ls) => (names(ls), true),
        _ => (Vec::new(), false),
    };
    let one_to_one = matches!(card, VectorMatchCardinality::OneToOne);
    // The "one" side is the rhs after swapping for group_right.
    let (many, one) = if swapped { (rhs, lhs) } else { (lhs, rhs) };
    let mut one_by_sig: HashMap<Labels, &Sample> = HashMap::with_capacity(one.len());
    for s in &one {
        let sig = m.signature(&s.labels);
        if let Some(prev) = one_by_sig.get(&sig) {
            let side = if swapped { "left" } else { "right" };
            return Err(exec(format!(
                "found duplicate series for the match group {sig} on the {side} hand-side of the operation: [{}, {}];many-to-many matching not allowed: matching labels must be unique on one side",
                s.labels, prev.labels
            )));
        }
        one_by_sig.insert(sig, s);
    }
    let mut matched: HashMap<Labels, HashSet<Labels>> = HashMap::new();
    let mut out = Vec::new();
    for ms in &many {
        let sig = m.signature(&ms.labels);
        let Some(os) = one_by_sig.get(&sig) else {
            continue;
        };
        let (l, r) = if swapped { (os.v, ms.v) } else { (ms.v, os.v) };
        let (mut v, keep) = scalar_op(op, l, r)?;
        if return_bool {
            v = if keep { 1.0 } else { 0.0 };
        } else if !keep {
            continue;
        }
        let mut labels = result_labels(&ms.labels, &os.labels, op, &m, one_to_one, &include);
        if return_bool {
            labels = labels.without_name();
        }
        let seen = matched.entry(sig).or_default();
        if one_to_one && !seen.is_empty() {
            return Err(exec("multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)"));
        }
        if !seen.insert(labels.clone()) {
            return Err(exec(
                "multiple matches for labels: grouping labels must ensure unique matches",
            ));
        }
        out.push(Sample {
            labels: Arc::new(labels),
            v,
        });
    }
    Ok(out)
}

fn result_labels(
    many: &Labels,
    one: &Labels,
    op: TokenId,
    m: &Matching<'_>,
    one_to_one: bool,
    include: &[&str],
) -> Labels {
    let mut out = if is_arithmetic(op) {
        many.without_name()
    } else {
        many.clone()
    };
    if one_to_one {
        out = if m.on {
            out.keep(&m.names)
        } else {
            out.without(&m.names)
        };
    }
    for name in include {
        out = out.with(name, one.get(name).unwrap_or(""));
    }
    out
}
