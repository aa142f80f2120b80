//! Prometheus' HTTP query API under `/prometheus/api/v1/`, so Grafana's
//! Prometheus data source pointed at `http://HOST:9477/prometheus` works:
//! `query`, `query_range`, `series`, `labels`, `label/{name}/values`,
//! `metadata`, `status/buildinfo` (plus empty `query_exemplars` and `rules`,
//! which Grafana asks for). GET and POST form bodies, answers and errors in
//! Prometheus' JSON shapes and status codes.
//!
//! Handlers are thin: parameters ([`form`]), the series a query needs read
//! from the store ([`fetch`]), then the pure `llmwatch-promql` evaluator on
//! a blocking thread, all under the query's timeout. Series names are the
//! store's ([`llmwatch_store::prom_source`]).
//!
//! Bounds per query: [`LIMITS`] (series and samples read), [`MAX_SAMPLES`]
//! (samples the evaluator may load), 11 000 points per series, and
//! [`MAX_TIMEOUT`] (a smaller `timeout` parameter lowers it).

pub mod fetch;
mod form;
mod metadata;
pub mod openapi;

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRef, Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, MethodRouter};
use axum::{Json, Router};
use llmwatch_promql::{LabelMatcher, QueryError, QueryOptions};
use llmwatch_store::{PromLimits, PromSourceError, Store};
use serde_json::{json, Value};

use form::Form;
pub use openapi::{PromParam, PromRoute};

/// Series and samples one query may read from the store.
pub const LIMITS: PromLimits = PromLimits {
    max_series: 20_000,
    max_samples: 20_000_000,
};

/// Samples the evaluator may load (Prometheus' default is 50 M; this
/// process shares its memory with the scraper).
pub const MAX_SAMPLES: usize = 20_000_000;

/// The longest a query may run (Prometheus' default `query.timeout`).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(120);

/// How far back `series`, `labels` and label values look without `start`.
const DEFAULT_LOOKBACK_MS: i64 = 24 * 3600 * 1000;

/// The Prometheus version whose API and semantics this answers as (the
/// differential test runs against it); Grafana reads it from `buildinfo`.
pub const PROMETHEUS_VERSION: &str = "2.42.0";

/// A Prometheus error answer: `{"status":"error","errorType":..,"error":..}`.
#[derive(Debug)]
pub struct PromError {
    pub status: StatusCode,
    pub error_type: &'static str,
    pub message: String,
}

impl PromError {
    pub fn bad_data(message: impl Into<String>) -> PromError {
        PromError {
            status: StatusCode::BAD_REQUEST,
            error_type: "bad_data",
            message: message.into(),
        }
    }

    pub fn limit(message: impl Into<String>) -> PromError {
        PromError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            error_type: "execution",
            message: message.into(),
        }
    }

    fn timeout(after: Duration) -> PromError {
        PromError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            error_type: "timeout",
            message: format!("query timed out in expression evaluation after {after:?}"),
        }
    }

    fn internal(message: impl Into<String>) -> PromError {
        PromError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            error_type: "internal",
            message: message.into(),
        }
    }
}

impl From<QueryError> for PromError {
    fn from(err: QueryError) -> PromError {
        PromError {
            status: StatusCode::from_u16(err.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            error_type: err.error_type(),
            message: err.to_string(),
        }
    }
}

impl From<PromSourceError> for PromError {
    fn from(err: PromSourceError) -> PromError {
        match err {
            PromSourceError::Limit(message) => PromError::limit(message),
            PromSourceError::Store(e) => {
                tracing::error!(error = %e, "Prometheus API: store error");
                PromError::internal(format!("cannot read the store: {e}"))
            }
        }
    }
}

impl IntoResponse for PromError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({"status": "error", "errorType": self.error_type, "error": self.message})),
        )
            .into_response()
    }
}

type PromResult = Result<Json<Value>, PromError>;

fn success(data: impl serde::Serialize) -> PromResult {
    Ok(Json(json!({"status": "success", "data": data})))
}

/// What every handler reads from a request.
struct Request {
    store: Store,
    form: Form,
}

fn request(
    store: &Store,
    method: &Method,
    headers: &HeaderMap,
    query: Option<String>,
    body: &Bytes,
) -> Result<Request, PromError> {
    Ok(Request {
        store: store.clone(),
        form: Form::parse(method, headers, query.as_deref(), body)?,
    })
}

/// Every route with its documentation ([`openapi`] renders them into the
/// daemon's OpenAPI document), so the two cannot drift apart. Handlers
/// read only the store: any state the store comes from will do.
pub fn routes<S>() -> Vec<(PromRoute, MethodRouter<S>)>
where
    S: Clone + Send + Sync + 'static,
    Store: FromRef<S>,
{
    use openapi::docs;
    vec![
        (docs::QUERY, get(query).post(query)),
        (docs::QUERY_RANGE, get(query_range).post(query_range)),
        (docs::SERIES, get(series).post(series)),
        (docs::LABELS, get(labels).post(labels)),
        (docs::LABEL_VALUES, get(label_values)),
        (docs::METADATA, get(metadata::metadata)),
        (docs::BUILDINFO, get(buildinfo)),
        (docs::QUERY_EXEMPLARS, get(empty_list).post(empty_list)),
        (docs::RULES, get(no_rules)),
    ]
}

/// The routes, to be mounted behind the API's authentication (the daemon)
/// or served on their own over a store (`benches/prom_store.rs`).
pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Store: FromRef<S>,
{
    let mut router = Router::new();
    for (route, handler) in routes() {
        router = router.route(route.path, handler);
    }
    router.route("/prometheus/api/v1/{*rest}", any(unsupported))
}

fn now_ms() -> i64 {
    llmwatch_engine::clock::now_ms()
}

fn query_options() -> QueryOptions {
    QueryOptions {
        max_samples: MAX_SAMPLES,
        ..QueryOptions::default()
    }
}

/// `timeout`, at most [`MAX_TIMEOUT`].
fn timeout_of(form: &Form) -> Result<Duration, PromError> {
    match form.get("timeout").filter(|v| !v.is_empty()) {
        None => Ok(MAX_TIMEOUT),
        Some(v) => {
            let ms = llmwatch_promql::parse_step(v).map_err(|_| {
                PromError::bad_data(format!(
                    "invalid parameter \"timeout\": cannot parse {v:?} to a valid duration"
                ))
            })?;
            Ok(Duration::from_millis(ms.unsigned_abs()).min(MAX_TIMEOUT))
        }
    }
}

/// Reads what `query` needs over `[start, end]` and evaluates it with
/// `eval` on a blocking thread, all within `timeout`.
async fn evaluate<F>(
    store: Store,
    query: String,
    start_ms: i64,
    end_ms: i64,
    timeout: Duration,
    eval: F,
) -> PromResult
where
    F: FnOnce(&llmwatch_promql::MemorySource, &str, &QueryOptions) -> Result<Value, QueryError>
        + Send
        + 'static,
{
    let work = async move {
        let opts = query_options();
        let source = fetch::source_for(&store, &query, start_ms, end_ms, &opts, LIMITS).await?;
        tokio::task::spawn_blocking(move || eval(&source, &query, &opts))
            .await
            .map_err(|e| PromError::internal(format!("evaluation stopped: {e}")))?
            .map_err(PromError::from)
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(data) => success(data?),
        Err(_) => Err(PromError::timeout(timeout)),
    }
}

fn to_json(data: llmwatch_promql::QueryData) -> Result<Value, QueryError> {
    serde_json::to_value(data).map_err(|e| QueryError::Source(Box::new(e)))
}

async fn query(
    State(store): State<Store>,
    method: Method,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> PromResult {
    let req = request(&store, &method, &headers, raw, &body)?;
    let text = req.form.required("query")?.to_string();
    let time_ms = req.form.time_or("time", now_ms())?;
    let timeout = timeout_of(&req.form)?;
    evaluate(
        req.store,
        text,
        time_ms,
        time_ms,
        timeout,
        move |source, q, opts| to_json(llmwatch_promql::instant_query(source, q, time_ms, opts)?),
    )
    .await
}

async fn query_range(
    State(store): State<Store>,
    method: Method,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> PromResult {
    let req = request(&store, &method, &headers, raw, &body)?;
    let text = req.form.required("query")?.to_string();
    let start_ms = req
        .form
        .time_or("start", i64::MIN)
        .and_then(|t| present(t, "start"))?;
    let end_ms = req
        .form
        .time_or("end", i64::MIN)
        .and_then(|t| present(t, "end"))?;
    let step = req.form.required("step")?;
    let step_ms = llmwatch_promql::parse_step(step)
        .map_err(|e| PromError::bad_data(format!("invalid parameter \"step\": {}", bare(&e))))?;
    check_range(start_ms, end_ms, step_ms)?;
    let timeout = timeout_of(&req.form)?;
    evaluate(
        req.store,
        text,
        start_ms,
        end_ms,
        timeout,
        move |source, q, opts| {
            to_json(llmwatch_promql::range_query(
                source, q, start_ms, end_ms, step_ms, opts,
            )?)
        },
    )
    .await
}

fn present(t: i64, name: &str) -> Result<i64, PromError> {
    if t == i64::MIN {
        Err(PromError::bad_data(format!(
            "invalid parameter \"{name}\": missing"
        )))
    } else {
        Ok(t)
    }
}

fn bare(err: &QueryError) -> String {
    let text = err.to_string();
    text.strip_prefix("invalid parameter: ")
        .map(str::to_string)
        .unwrap_or(text)
}

/// Prometheus' checks of a range query, before anything is read.
fn check_range(start_ms: i64, end_ms: i64, step_ms: i64) -> Result<(), PromError> {
    if end_ms < start_ms {
        return Err(PromError::bad_data(
            "end timestamp must not be before start time",
        ));
    }
    let points = end_ms.saturating_sub(start_ms) / step_ms;
    if points >= QueryOptions::default().max_points_per_series {
        return Err(PromError::bad_data(format!(
            "exceeded maximum resolution of {} points per timeseries. Try decreasing the query resolution (?step=XX)",
            QueryOptions::default().max_points_per_series
        )));
    }
    Ok(())
}

/// The `match[]` selectors of a request.
fn match_sets(form: &Form) -> Result<Vec<Vec<LabelMatcher>>, PromError> {
    form.all("match[]")
        .into_iter()
        .map(|s| llmwatch_promql::parse_selector(s).map_err(PromError::from))
        .collect()
}

/// `start`/`end` of a metadata query: `end` defaults to now, `start` to a
/// day before `end`.
fn window(form: &Form) -> Result<(i64, i64), PromError> {
    let end_ms = form.time_or("end", now_ms())?;
    let start_ms = form.time_or("start", end_ms.saturating_sub(DEFAULT_LOOKBACK_MS))?;
    if end_ms < start_ms {
        return Err(PromError::bad_data(
            "end timestamp must not be before start time",
        ));
    }
    Ok((start_ms, end_ms))
}

/// The label sets of series matching `sets` in the window, under the timeout.
async fn series_in(
    store: &Store,
    form: &Form,
    sets: &[Vec<LabelMatcher>],
) -> Result<Vec<llmwatch_store::PromLabels>, PromError> {
    let (start_ms, end_ms) = window(form)?;
    let timeout = timeout_of(form)?;
    let predicate = |labels: &llmwatch_store::PromLabels| fetch::matches_any(sets, labels);
    match tokio::time::timeout(
        timeout,
        store.prom_series(&predicate, start_ms, end_ms, LIMITS),
    )
    .await
    {
        Ok(found) => Ok(found?),
        Err(_) => Err(PromError::timeout(timeout)),
    }
}

/// `data` cut to `limit`, with Prometheus' warning when it was cut.
fn limited<T: serde::Serialize>(mut data: Vec<T>, limit: Option<usize>) -> PromResult {
    let cut = limit.is_some_and(|n| data.len() > n);
    if let Some(n) = limit {
        data.truncate(n);
    }
    let mut body = json!({"status": "success", "data": data});
    if cut {
        body["warnings"] = json!(["results truncated due to limit"]);
    }
    Ok(Json(body))
}

async fn series(
    State(store): State<Store>,
    method: Method,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> PromResult {
    let req = request(&store, &method, &headers, raw, &body)?;
    let sets = match_sets(&req.form)?;
    if sets.is_empty() {
        return Err(PromError::bad_data("no match[] parameter provided"));
    }
    let limit = req.form.limit()?;
    let found = series_in(&req.store, &req.form, &sets).await?;
    let objects: Vec<serde_json::Map<String, Value>> = found
        .into_iter()
        .map(|labels| {
            labels
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect()
        })
        .collect();
    limited(objects, limit)
}

async fn labels(
    State(store): State<Store>,
    method: Method,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> PromResult {
    let req = request(&store, &method, &headers, raw, &body)?;
    let sets = match_sets(&req.form)?;
    let limit = req.form.limit()?;
    let found = series_in(&req.store, &req.form, &sets).await?;
    let mut names: Vec<String> = found
        .into_iter()
        .flat_map(|labels| labels.into_iter().map(|(k, _)| k))
        .collect();
    names.sort();
    names.dedup();
    limited(names, limit)
}

async fn label_values(
    State(store): State<Store>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> PromResult {
    let req = request(&store, &Method::GET, &HeaderMap::new(), raw, &Bytes::new())?;
    if !is_label_name(&name) {
        return Err(PromError::bad_data(format!("invalid label name: {name:?}")));
    }
    let sets = match_sets(&req.form)?;
    let limit = req.form.limit()?;
    let found = series_in(&req.store, &req.form, &sets).await?;
    let mut values: Vec<String> = found
        .into_iter()
        .filter_map(|labels| labels.into_iter().find(|(k, _)| *k == name).map(|(_, v)| v))
        .collect();
    values.sort();
    values.dedup();
    limited(values, limit)
}

/// Prometheus' label name rule (`[a-zA-Z_][a-zA-Z0-9_]*`).
fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

async fn buildinfo() -> PromResult {
    success(json!({
        "version": PROMETHEUS_VERSION,
        "revision": format!("llmwatch {}", env!("CARGO_PKG_VERSION")),
        "branch": "",
        "buildUser": "",
        "buildDate": "",
        "goVersion": "",
    }))
}

async fn empty_list() -> PromResult {
    success(Vec::<Value>::new())
}

async fn no_rules() -> PromResult {
    success(json!({"groups": []}))
}

async fn unsupported(Path(rest): Path<String>) -> PromError {
    PromError {
        status: StatusCode::NOT_FOUND,
        error_type: "not_found",
        message: format!(
            "unsupported endpoint /api/v1/{rest}: llmwatch answers query, query_range, series, \
             labels, label/<name>/values, metadata, status/buildinfo, query_exemplars and rules"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_as_prometheus() {
        assert!(is_label_name("__name__"));
        assert!(is_label_name("job2"));
        assert!(!is_label_name("2job"));
        assert!(!is_label_name("a-b"));
        assert!(!is_label_name(""));
    }

    #[test]
    fn range_checks_before_reading() {
        assert!(check_range(10, 5, 1).is_err());
        assert!(check_range(0, 11_000_000, 1_000).is_err());
        assert!(check_range(0, 10_999_000, 1_000).is_ok());
    }
}
