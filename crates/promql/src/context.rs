//! What evaluation shares with the operators it dispatches to: its options
//! ([`QueryOptions`]), the values of one instant ([`Value`], [`Sample`],
//! [`Window`]), the [`Context`] a function or aggregation evaluates its
//! arguments through, and the small helpers every operator uses. It imports no operator and not the
//! evaluator, so arrows point one way: `eval` → `functions` / `binary` /
//! `aggregate` → `context`.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use promql_parser::label::MatchOp;
use promql_parser::parser::token;
use promql_parser::parser::{AtModifier, Expr, Offset, VectorSelector};

use crate::error::{exec, unsupported, QueryError};
use crate::source::{LabelMatcher, Labels, MatchKind, METRIC_NAME};

/// Tunables of evaluation; `Default` is Prometheus' defaults.
#[derive(Clone, Debug)]
pub struct QueryOptions {
    /// How far back an instant selector looks for a sample (5 min).
    pub lookback_delta_ms: i64,
    /// Step of a subquery written without one (`x[5m:]`), Prometheus'
    /// global evaluation interval (1 min).
    pub default_subquery_step_ms: i64,
    /// Most samples a query may read from the source (50 M, as Prometheus).
    pub max_samples: usize,
    /// Most points per series a range query may answer (11,000, as Prometheus).
    pub max_points_per_series: i64,
}

impl Default for QueryOptions {
    fn default() -> Self {
        QueryOptions {
            lookback_delta_ms: 5 * 60 * 1000,
            default_subquery_step_ms: 60 * 1000,
            max_samples: 50_000_000,
            max_points_per_series: 11_000,
        }
    }
}

/// One element of an instant vector during evaluation.
#[derive(Clone, Debug)]
pub(crate) struct Sample {
    pub labels: Arc<Labels>,
    pub v: f64,
}

/// One series' points inside a range window.
#[derive(Clone, Debug)]
pub(crate) struct Window<'a> {
    pub labels: Arc<Labels>,
    /// `labels` without `__name__`, what range functions answer with;
    /// computed once per series and query, not once per step.
    pub labels_without_name: Arc<Labels>,
    pub points: Cow<'a, [(i64, f64)]>,
}

/// A value during evaluation at one instant.
#[derive(Debug)]
pub(crate) enum Value<'a> {
    Scalar(f64),
    Str(String),
    Vector(Vec<Sample>),
    Matrix(Vec<Window<'a>>),
}

impl Value<'_> {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Scalar(_) => "scalar",
            Value::Str(_) => "string",
            Value::Vector(_) => "instant vector",
            Value::Matrix(_) => "range vector",
        }
    }
}

/// What a function or an aggregation needs from the evaluator: evaluate
/// its arguments at an instant, resolve `@`, and find a sample's time.
/// `eval::Evaluator` is the one implementation.
pub(crate) trait Context {
    /// Evaluates `expr` at instant `t` (ms).
    fn eval<'e>(&'e self, expr: &'e Expr, t: i64) -> Result<Value<'e>, QueryError>;

    /// Evaluates and requires an instant vector.
    fn eval_vector(&self, expr: &Expr, t: i64) -> Result<Vec<Sample>, QueryError> {
        match self.eval(expr, t)? {
            Value::Vector(v) => Ok(v),
            other => Err(exec(format!(
                "expected instant vector, got {}",
                other.type_name()
            ))),
        }
    }

    /// Evaluates and requires a scalar.
    fn eval_scalar(&self, expr: &Expr, t: i64) -> Result<f64, QueryError> {
        match self.eval(expr, t)? {
            Value::Scalar(v) => Ok(v),
            other => Err(exec(format!("expected scalar, got {}", other.type_name()))),
        }
    }

    /// The instant an `@` modifier pins, if any.
    fn at(&self, at: &Option<AtModifier>) -> Option<i64>;

    /// The timestamp of the sample an instant selector picks at `t` for the
    /// series with `labels` (for `timestamp()`).
    fn sample_time(&self, vs: &VectorSelector, t: i64, labels: &Labels) -> Option<i64>;
}

pub(crate) fn duration_ms(d: &Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub(crate) fn offset_ms(o: &Option<Offset>) -> i64 {
    match o {
        None => 0,
        Some(Offset::Pos(d)) => duration_ms(d),
        Some(Offset::Neg(d)) => duration_ms(d).saturating_neg(),
    }
}

/// The matchers of a selector as the store sees them, `__name__` included.
pub(crate) fn selector_matchers(vs: &VectorSelector) -> Result<Vec<LabelMatcher>, QueryError> {
    if !vs.matchers.or_matchers.is_empty() {
        return Err(unsupported("`or` between label matchers inside braces"));
    }
    let mut out = Vec::with_capacity(vs.matchers.matchers.len() + 1);
    for m in &vs.matchers.matchers {
        let kind = match &m.op {
            MatchOp::Equal => MatchKind::Equal(m.value.clone()),
            MatchOp::NotEqual => MatchKind::NotEqual(m.value.clone()),
            MatchOp::Re(r) => MatchKind::Regex(r.clone()),
            MatchOp::NotRe(r) => MatchKind::NotRegex(r.clone()),
        };
        out.push(LabelMatcher {
            name: m.name.clone(),
            kind,
        });
    }
    if let Some(name) = &vs.name {
        if !out.iter().any(|m| m.name == METRIC_NAME) {
            out.push(LabelMatcher::equal(METRIC_NAME, name));
        }
    }
    Ok(out)
}

/// Fails as Prometheus does when a vector holds one label set twice.
pub(crate) fn check_unique_labels(samples: &[Sample]) -> Result<(), QueryError> {
    if samples.len() < 2 {
        return Ok(());
    }
    let mut seen: HashSet<&Labels> = HashSet::with_capacity(samples.len());
    for s in samples {
        if !seen.insert(&s.labels) {
            return Err(exec(format!(
                "vector cannot contain metrics with the same labelset: {}",
                s.labels
            )));
        }
    }
    Ok(())
}

/// Whether `op` is `+ - * / % ^ atan2`.
pub(crate) fn is_arithmetic(op: token::TokenId) -> bool {
    matches!(
        op,
        token::T_ADD | token::T_SUB | token::T_MUL | token::T_DIV | token::T_MOD | token::T_POW
    ) || op == token::T_ATAN2
}
