//! PromQL for llmwatch's Prometheus-compatible query API.
//!
//! What it is for: parse a PromQL expression (with the maintained
//! `promql-parser` crate), evaluate it as an instant query or a range query
//! with Prometheus 2.x semantics (5 min lookback, staleness markers,
//! `offset`, `@`, extrapolated `rate`, classic `histogram_quantile`, vector
//! matching), and return the result in the shape of the `data` member of
//! Prometheus' `/api/v1/query` and `/api/v1/query_range` answers.
//!
//! What it must never do: I/O. Series come from a [`SeriesSource`] the
//! caller implements (the SQLite store, or [`MemorySource`]); there is no
//! HTTP, no file, no clock here (the caller passes every time). An async
//! store can fetch [`selections`] first, fill a [`MemorySource`], and then
//! evaluate. Evaluation never panics on any input; a feature it does not
//! evaluate answers [`QueryError::Unsupported`] naming the feature.
//!
//! Wiring it to an HTTP handler: the result is Prometheus' `data`, an error
//! carries Prometheus' `errorType` and status code.
//!
//! ```
//! use llmwatch_promql::{instant_query, parse_time, Labels, MemorySource, QueryOptions, METRIC_NAME};
//!
//! let mut source = MemorySource::new();
//! let up = Labels::new([(METRIC_NAME, "up"), ("job", "vllm")]);
//! source.push(&up, 1_000, 1.0);
//! let time_ms = parse_time("2").unwrap();
//! let body = match instant_query(&source, "sum by (job) (up)", time_ms, &QueryOptions::default()) {
//!     Ok(data) => serde_json::json!({"status": "success", "data": data}),
//!     Err(e) => serde_json::json!({
//!         "status": "error", "errorType": e.error_type(), "error": e.to_string()
//!     }),
//! };
//! assert_eq!(body["data"]["result"][0]["value"][1], "1");
//! ```

mod aggregate;
mod binary;
mod context;
mod error;
mod eval;
mod functions;
mod histogram;
mod params;
mod source;
mod value;

use std::collections::HashMap;
use std::sync::Arc;

use promql_parser::parser::Expr;

pub use error::QueryError;
pub use eval::Selection;
pub use histogram::bucket_quantile;
pub use params::{parse_selector, parse_step, parse_time};
pub use source::{
    is_stale_marker, matches_all, stale_marker, Infallible, LabelMatcher, Labels, MatchKind,
    MemorySource, Series, SeriesSource, METRIC_NAME, STALE_NAN_BITS,
};
pub use value::{format_value, InstantSample, Point, QueryData, RangeSeries};

pub use context::QueryOptions;
use context::{Context, Value};
use eval::Evaluator;

/// Parses a PromQL expression.
pub fn parse(query: &str) -> Result<Expr, QueryError> {
    promql_parser::parser::parse(query).map_err(QueryError::Parse)
}

/// The selections (matchers and sample windows) a query over
/// `[start_ms, end_ms]` reads; for an instant query `start_ms == end_ms`.
/// A caller whose store is async fetches these, puts the series into a
/// [`MemorySource`] and evaluates against it.
pub fn selections(
    query: &str,
    start_ms: i64,
    end_ms: i64,
    opts: &QueryOptions,
) -> Result<Vec<Selection>, QueryError> {
    let expr = parse(query)?;
    Ok(eval::plan(&expr, start_ms, end_ms, opts)?
        .into_iter()
        .map(|(_, s)| s)
        .collect())
}

/// Evaluates `query` at `time_ms`, as Prometheus' `/api/v1/query`.
pub fn instant_query<S: SeriesSource>(
    source: &S,
    query: &str,
    time_ms: i64,
    opts: &QueryOptions,
) -> Result<QueryData, QueryError> {
    let expr = parse(query)?;
    let ev = Evaluator::new(source, &expr, time_ms, time_ms, opts)?;
    Ok(match ev.eval(&expr, time_ms)? {
        Value::Scalar(v) => QueryData::Scalar(Point { t_ms: time_ms, v }),
        Value::Str(s) => QueryData::String {
            t_ms: time_ms,
            value: s,
        },
        Value::Vector(samples) => {
            let mut out: Vec<InstantSample> = samples
                .into_iter()
                .map(|s| InstantSample {
                    metric: Arc::unwrap_or_clone(s.labels),
                    value: Point {
                        t_ms: time_ms,
                        v: s.v,
                    },
                })
                .collect();
            if !is_sort_call(&expr) {
                out.sort_by(|a, b| a.metric.cmp(&b.metric));
            }
            QueryData::Vector(out)
        }
        Value::Matrix(windows) => {
            let mut out: Vec<RangeSeries> = windows
                .into_iter()
                .map(|w| RangeSeries {
                    metric: Arc::unwrap_or_clone(w.labels),
                    values: w
                        .points
                        .iter()
                        .map(|&(t_ms, v)| Point { t_ms, v })
                        .collect(),
                })
                .collect();
            out.sort_by(|a, b| a.metric.cmp(&b.metric));
            QueryData::Matrix(out)
        }
    })
}

fn is_sort_call(expr: &Expr) -> bool {
    match expr {
        Expr::Call(c) => matches!(c.func.name, "sort" | "sort_desc"),
        Expr::Paren(p) => is_sort_call(&p.expr),
        _ => false,
    }
}

/// Evaluates `query` at `start_ms, start_ms + step_ms, ... <= end_ms`, as
/// Prometheus' `/api/v1/query_range`. Series come sorted by label set.
pub fn range_query<S: SeriesSource>(
    source: &S,
    query: &str,
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
    opts: &QueryOptions,
) -> Result<QueryData, QueryError> {
    if step_ms <= 0 {
        return Err(QueryError::BadParam(
            "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
        ));
    }
    if end_ms < start_ms {
        return Err(QueryError::BadParam(
            "end timestamp must not be before start time".into(),
        ));
    }
    if end_ms.saturating_sub(start_ms) / step_ms >= opts.max_points_per_series {
        return Err(QueryError::BadParam(format!(
            "exceeded maximum resolution of {} points per timeseries. Try decreasing the query resolution (?step=XX)",
            opts.max_points_per_series
        )));
    }
    let expr = parse(query)?;
    let ev = Evaluator::new(source, &expr, start_ms, end_ms, opts)?;
    let mut series: HashMap<Arc<Labels>, Vec<Point>> = HashMap::new();
    let mut t = start_ms;
    while t <= end_ms {
        match ev.eval(&expr, t)? {
            Value::Scalar(v) => series
                .entry(Arc::new(Labels::default()))
                .or_default()
                .push(Point { t_ms: t, v }),
            Value::Vector(samples) => {
                for s in samples {
                    series
                        .entry(s.labels)
                        .or_default()
                        .push(Point { t_ms: t, v: s.v });
                }
            }
            other => {
                return Err(QueryError::BadParam(format!(
                "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
                match other {
                    Value::Matrix(_) => "range vector",
                    _ => "string",
                }
            )))
            }
        }
        t = match t.checked_add(step_ms) {
            Some(next) => next,
            None => break,
        };
    }
    let mut out: Vec<RangeSeries> = series
        .into_iter()
        .map(|(labels, values)| RangeSeries {
            metric: Arc::unwrap_or_clone(labels),
            values,
        })
        .collect();
    out.sort_by(|a, b| a.metric.cmp(&b.metric));
    Ok(QueryData::Matrix(out))
}
