//! The evaluator: fetches every selector's series once for the whole query
//! window, then evaluates the AST at each step as Prometheus 2.x does.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use promql_parser::parser::token;
use promql_parser::parser::{AtModifier, Expr, SubqueryExpr, VectorSelector};

use crate::context::{
    duration_ms, offset_ms, selector_matchers, Context, QueryOptions, Sample, Value, Window,
};
use crate::error::{exec, unsupported, QueryError};
use crate::source::{is_stale_marker, LabelMatcher, Labels, SeriesSource};

/// A selection the query needs: matchers and the sample window in ms.
/// [`crate::selections`] lists them so a caller with an async store can
/// fetch them first.
#[derive(Clone, Debug)]
pub struct Selection {
    pub matchers: Vec<LabelMatcher>,
    pub start_ms: i64,
    pub end_ms: i64,
}

struct Fetched {
    labels: Arc<Labels>,
    labels_without_name: Arc<Labels>,
    samples: Vec<(i64, f64)>,
}

type SelectorKey = *const VectorSelector;

/// Most instants one subquery evaluation may visit.
const MAX_SUBQUERY_STEPS: i64 = 1_000_000;

pub(crate) struct Evaluator<'o> {
    fetched: HashMap<SelectorKey, Vec<Fetched>>,
    pub(crate) opts: &'o QueryOptions,
    /// The query's own start and end, for `@ start()` and `@ end()`.
    query_start: i64,
    query_end: i64,
}

/// Ranges of evaluation instants that a node is evaluated at.
#[derive(Clone, Copy)]
struct Span {
    start: i64,
    end: i64,
}

/// Walks the AST and records, per selector, the sample window it needs.
pub(crate) fn plan(
    expr: &Expr,
    start: i64,
    end: i64,
    opts: &QueryOptions,
) -> Result<Vec<(SelectorKey, Selection)>, QueryError> {
    let mut out = Vec::new();
    plan_node(expr, Span { start, end }, (start, end), opts, &mut out)?;
    Ok(out)
}

fn at_ms(at: &Option<AtModifier>, query: (i64, i64)) -> Option<i64> {
    match at {
        None => None,
        Some(AtModifier::Start) => Some(query.0),
        Some(AtModifier::End) => Some(query.1),
        Some(AtModifier::At(t)) => Some(match t.duration_since(UNIX_EPOCH) {
            Ok(d) => duration_ms(&d),
            Err(e) => duration_ms(&e.duration()).saturating_neg(),
        }),
    }
}

fn shifted(span: Span, at: Option<i64>, offset: i64) -> Span {
    match at {
        Some(t) => Span {
            start: t.saturating_sub(offset),
            end: t.saturating_sub(offset),
        },
        None => Span {
            start: span.start.saturating_sub(offset),
            end: span.end.saturating_sub(offset),
        },
    }
}

fn plan_node(
    expr: &Expr,
    span: Span,
    query: (i64, i64),
    opts: &QueryOptions,
    out: &mut Vec<(SelectorKey, Selection)>,
) -> Result<(), QueryError> {
    match expr {
        Expr::VectorSelector(vs) => {
            let s = shifted(span, at_ms(&vs.at, query), offset_ms(&vs.offset));
            push_selection(
                vs,
                s.start.saturating_sub(opts.lookback_delta_ms),
                s.end,
                out,
            )?;
        }
        Expr::MatrixSelector(ms) => {
            let vs = &ms.vs;
            let s = shifted(span, at_ms(&vs.at, query), offset_ms(&vs.offset));
            push_selection(
                vs,
                s.start.saturating_sub(duration_ms(&ms.range)),
                s.end,
                out,
            )?;
        }
        Expr::Subquery(sq) => {
            let s = shifted(span, at_ms(&sq.at, query), offset_ms(&sq.offset));
            let inner = Span {
                start: s.start.saturating_sub(duration_ms(&sq.range)),
                end: s.end,
            };
            plan_node(&sq.expr, inner, query, opts, out)?;
        }
        Expr::Aggregate(a) => {
            if matches!(a.op.id(), token::T_LIMITK | token::T_LIMIT_RATIO) {
                return Err(unsupported(format!("aggregation `{}`", a.op)));
            }
            if let Some(p) = &a.param {
                plan_node(p, span, query, opts, out)?;
            }
            plan_node(&a.expr, span, query, opts, out)?;
        }
        Expr::Unary(u) => plan_node(&u.expr, span, query, opts, out)?,
        Expr::Binary(b) => {
            plan_node(&b.lhs, span, query, opts, out)?;
            plan_node(&b.rhs, span, query, opts, out)?;
        }
        Expr::Paren(p) => plan_node(&p.expr, span, query, opts, out)?,
        Expr::Call(c) => {
            crate::functions::check_supported(c.func.name)?;
            for a in &c.args.args {
                plan_node(a, span, query, opts, out)?;
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => {}
        Expr::Extension(_) => return Err(unsupported("extension expressions")),
    }
    Ok(())
}

fn push_selection(
    vs: &VectorSelector,
    start_ms: i64,
    end_ms: i64,
    out: &mut Vec<(SelectorKey, Selection)>,
) -> Result<(), QueryError> {
    out.push((
        vs as *const VectorSelector,
        Selection {
            matchers: selector_matchers(vs)?,
            start_ms,
            end_ms,
        },
    ));
    Ok(())
}

impl<'o> Evaluator<'o> {
    /// Fetches every selection of `expr` from `source`.
    pub(crate) fn new<S: SeriesSource>(
        source: &S,
        expr: &Expr,
        start: i64,
        end: i64,
        opts: &'o QueryOptions,
    ) -> Result<Self, QueryError> {
        let mut fetched = HashMap::new();
        let mut total = 0usize;
        for (key, sel) in plan(expr, start, end, opts)? {
            let series = source
                .select(&sel.matchers, sel.start_ms, sel.end_ms)
                .map_err(|e| QueryError::Source(Box::new(e)))?;
            total += series.iter().map(|s| s.samples.len()).sum::<usize>();
            if total > opts.max_samples {
                return Err(QueryError::TooManySamples(total, opts.max_samples));
            }
            let list = series
                .into_iter()
                .map(|s| Fetched {
                    labels_without_name: Arc::new(s.labels.without_name()),
                    labels: Arc::new(s.labels),
                    samples: s.samples,
                })
                .collect();
            fetched.insert(key, list);
        }
        Ok(Evaluator {
            fetched,
            opts,
            query_start: start,
            query_end: end,
        })
    }

    fn series_of(&self, vs: &VectorSelector) -> &[Fetched] {
        self.fetched
            .get(&(vs as *const VectorSelector))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    fn instant_selector(&self, vs: &VectorSelector, t: i64) -> Vec<Sample> {
        let ts = self
            .at(&vs.at)
            .unwrap_or(t)
            .saturating_sub(offset_ms(&vs.offset));
        let oldest = ts.saturating_sub(self.opts.lookback_delta_ms);
        let mut out = Vec::new();
        for s in self.series_of(vs) {
            let idx = s.samples.partition_point(|&(st, _)| st <= ts);
            if idx == 0 {
                continue;
            }
            let (st, v) = s.samples[idx - 1];
            // Lookback is closed at its old end in Prometheus 2.x; a
            // staleness marker ends the series.
            if st < oldest || is_stale_marker(v) {
                continue;
            }
            out.push(Sample {
                labels: s.labels.clone(),
                v,
            });
        }
        out
    }

    /// Samples in `[mint, maxt]` (closed, as in Prometheus 2.x), staleness
    /// markers skipped.
    fn range_selector(&self, vs: &VectorSelector, mint: i64, maxt: i64) -> Vec<Window<'_>> {
        let mut out = Vec::new();
        for s in self.series_of(vs) {
            let lo = s.samples.partition_point(|&(st, _)| st < mint);
            let hi = s.samples.partition_point(|&(st, _)| st <= maxt);
            if lo >= hi {
                continue;
            }
            let slice = &s.samples[lo..hi];
            let points = if slice.iter().any(|&(_, v)| is_stale_marker(v)) {
                Cow::Owned(
                    slice
                        .iter()
                        .copied()
                        .filter(|&(_, v)| !is_stale_marker(v))
                        .collect::<Vec<_>>(),
                )
            } else {
                Cow::Borrowed(slice)
            };
            if !points.is_empty() {
                out.push(Window {
                    labels: s.labels.clone(),
                    labels_without_name: s.labels_without_name.clone(),
                    points,
                });
            }
        }
        out
    }

    fn subquery<'e>(&'e self, sq: &'e SubqueryExpr, t: i64) -> Result<Value<'e>, QueryError> {
        let step = sq
            .step
            .as_ref()
            .map(duration_ms)
            .unwrap_or(self.opts.default_subquery_step_ms)
            .max(1);
        let ts = self
            .at(&sq.at)
            .unwrap_or(t)
            .saturating_sub(offset_ms(&sq.offset));
        let mint = ts.saturating_sub(duration_ms(&sq.range));
        if ts.saturating_sub(mint) / step > MAX_SUBQUERY_STEPS {
            return Err(QueryError::BadParam(format!(
                "subquery would evaluate more than {MAX_SUBQUERY_STEPS} steps; use a larger step"
            )));
        }
        // The first instant aligned to the step at or after `mint`.
        let mut at = mint.div_euclid(step) * step;
        if at < mint {
            at = at.saturating_add(step);
        }
        let mut by_labels: HashMap<Arc<Labels>, Vec<(i64, f64)>> = HashMap::new();
        let mut order: Vec<Arc<Labels>> = Vec::new();
        while at <= ts {
            let samples = match self.eval(&sq.expr, at)? {
                Value::Vector(v) => v,
                Value::Scalar(v) => vec![Sample {
                    labels: Arc::new(Labels::default()),
                    v,
                }],
                other => {
                    return Err(exec(format!(
                        "subquery needs an instant vector or scalar, got {}",
                        other.type_name()
                    )))
                }
            };
            for s in samples {
                let entry = by_labels.entry(s.labels.clone()).or_insert_with(|| {
                    order.push(s.labels.clone());
                    Vec::new()
                });
                entry.push((at, s.v));
            }
            at = match at.checked_add(step) {
                Some(next) => next,
                None => break,
            };
        }
        let windows = order
            .into_iter()
            .filter_map(|labels| {
                let points = by_labels.remove(&labels)?;
                Some(Window {
                    labels_without_name: Arc::new(labels.without_name()),
                    labels,
                    points: Cow::Owned(points),
                })
            })
            .collect();
        Ok(Value::Matrix(windows))
    }
}

impl Context for Evaluator<'_> {
    /// Evaluates `expr` at instant `t` (ms).
    fn eval<'e>(&'e self, expr: &'e Expr, t: i64) -> Result<Value<'e>, QueryError> {
        match expr {
            Expr::NumberLiteral(n) => Ok(Value::Scalar(n.val)),
            Expr::StringLiteral(s) => Ok(Value::Str(s.val.clone())),
            Expr::Paren(p) => self.eval(&p.expr, t),
            Expr::VectorSelector(vs) => Ok(Value::Vector(self.instant_selector(vs, t))),
            Expr::MatrixSelector(ms) => {
                let vs = &ms.vs;
                let ts = self
                    .at(&vs.at)
                    .unwrap_or(t)
                    .saturating_sub(offset_ms(&vs.offset));
                Ok(Value::Matrix(self.range_selector(
                    vs,
                    ts.saturating_sub(duration_ms(&ms.range)),
                    ts,
                )))
            }
            Expr::Unary(u) => match self.eval(&u.expr, t)? {
                Value::Scalar(v) => Ok(Value::Scalar(-v)),
                Value::Vector(vec) => Ok(Value::Vector(
                    vec.into_iter()
                        .map(|s| Sample {
                            labels: Arc::new(s.labels.without_name()),
                            v: -s.v,
                        })
                        .collect(),
                )),
                other => Err(exec(format!(
                    "unary minus on {} is not allowed",
                    other.type_name()
                ))),
            },
            Expr::Binary(b) => {
                let lhs = self.eval(&b.lhs, t)?;
                let rhs = self.eval(&b.rhs, t)?;
                crate::binary::eval_binary(b, lhs, rhs)
            }
            Expr::Aggregate(a) => crate::aggregate::eval_aggregate(self, a, t),
            Expr::Call(c) => crate::functions::eval_call(self, c, t),
            Expr::Subquery(sq) => self.subquery(sq, t),
            Expr::Extension(_) => Err(unsupported("extension expressions")),
        }
    }

    fn at(&self, at: &Option<AtModifier>) -> Option<i64> {
        at_ms(at, (self.query_start, self.query_end))
    }

    /// The timestamp of the sample an instant selector picks at `t` for the
    /// series with `labels` (for `timestamp()`).
    fn sample_time(&self, vs: &VectorSelector, t: i64, labels: &Labels) -> Option<i64> {
        let ts = self
            .at(&vs.at)
            .unwrap_or(t)
            .saturating_sub(offset_ms(&vs.offset));
        let s = self.series_of(vs).iter().find(|s| *s.labels == *labels)?;
        let idx = s.samples.partition_point(|&(st, _)| st <= ts);
        (idx > 0).then(|| s.samples[idx - 1].0)
    }
}
