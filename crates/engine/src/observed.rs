//! The workload a target served over a range, read from the store: its
//! request-length histograms' bucket increases (reset-aware) and the
//! requests they counted per second. The math is
//! `llmwatch_core::observed`; this is the read.

use llmwatch_core::catalog::{CatalogMetric, Part};
use llmwatch_core::observed::{counter_increase, LengthDistribution, ObservedWorkload};
use llmwatch_store::{parse_part_key, SeriesPoints, Store, StoreError};

/// The range read when `observed:TARGET` names none.
pub const DEFAULT_RANGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// An `observed:` workload that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum ObservedSpecError {
    #[error("{0:?}: expected observed:TARGET[:RANGE], e.g. observed:vllm-a:1h")]
    NoTarget(String),
    #[error("{0:?}: the range must be longer than 0s")]
    EmptyRange(String),
}

/// `observed:TARGET[:RANGE]`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedSpec {
    pub target: String,
    pub range: std::time::Duration,
}

impl ObservedSpec {
    /// Parses `observed:TARGET[:RANGE]`; `None` for text that does not
    /// start with `observed:`. A target name may hold a colon: only a last
    /// part that reads as a duration is the range.
    pub fn parse(text: &str) -> Option<Result<ObservedSpec, ObservedSpecError>> {
        let rest = text.trim().strip_prefix("observed:")?;
        let parse = llmwatch_config::parse_duration;
        let (target, range) = match rest.rsplit_once(':') {
            Some((target, range)) if parse(range).is_ok() => {
                (target, parse(range).unwrap_or(DEFAULT_RANGE))
            }
            _ => (rest, DEFAULT_RANGE),
        };
        if target.trim().is_empty() {
            return Some(Err(ObservedSpecError::NoTarget(text.to_string())));
        }
        if range.is_zero() {
            return Some(Err(ObservedSpecError::EmptyRange(text.to_string())));
        }
        Some(Ok(ObservedSpec {
            target: target.trim().to_string(),
            range,
        }))
    }

    /// The spec as written, range included (`observed:vllm-a:1h`).
    pub fn label(&self) -> String {
        format!(
            "observed:{}:{}",
            self.target,
            humantime::format_duration(self.range)
        )
    }

    /// What the target served over the range ending at `now_ms`.
    pub async fn read(
        &self,
        store: &Store,
        now_ms: i64,
    ) -> Result<ObservedWorkload, ObservedError> {
        let span = i64::try_from(self.range.as_millis()).unwrap_or(i64::MAX / 2);
        observed_workload(store, &self.target, now_ms - span, now_ms).await
    }
}

/// Why no observed workload could be read.
#[derive(Debug, thiserror::Error)]
pub enum ObservedError {
    #[error("unknown target {name:?}: the database knows {known}")]
    UnknownTarget { name: String, known: String },
    #[error(
        "target {target:?} has no {metric} histogram stored between {from} and {to} \
         (engine {engine}; vLLM, NIM, SGLang, TGI and Dynamo expose one)"
    )]
    NoHistogram {
        target: String,
        metric: &'static str,
        engine: String,
        from: String,
        to: String,
    },
    #[error(
        "target {target:?} finished no request between {from} and {to} \
         (its {metric} histogram did not grow); choose a range with traffic"
    )]
    NoRequests {
        target: String,
        metric: &'static str,
        from: String,
        to: String,
    },
    #[error("reading the store: {0}")]
    Store(#[from] StoreError),
}

/// Reads what `target` served in `[from_ms, to_ms]`.
pub async fn observed_workload(
    store: &Store,
    target: &str,
    from_ms: i64,
    to_ms: i64,
) -> Result<ObservedWorkload, ObservedError> {
    let Some(row) = store.target_by_name(target).await? else {
        let names: Vec<String> = store.targets().await?.into_iter().map(|t| t.name).collect();
        let known = if names.is_empty() {
            "no target".to_string()
        } else {
            names.join(", ")
        };
        return Err(ObservedError::UnknownTarget {
            name: target.to_string(),
            known,
        });
    };
    let engine = row.engine.clone().unwrap_or_else(|| "unknown".into());
    let range = Window {
        target,
        engine: &engine,
        from_ms,
        to_ms,
    };
    let (prompt, seconds) =
        read_lengths(store, row.id, CatalogMetric::RequestPromptTokens, &range).await?;
    let (generation, _) = read_lengths(
        store,
        row.id,
        CatalogMetric::RequestGenerationTokens,
        &range,
    )
    .await?;
    Ok(ObservedWorkload {
        requests: prompt.total(),
        prompt,
        generation,
        seconds,
    })
}

/// The question, for the errors that name it.
struct Window<'a> {
    target: &'a str,
    engine: &'a str,
    from_ms: i64,
    to_ms: i64,
}

/// One length histogram over the window, and the seconds its samples span.
async fn read_lengths(
    store: &Store,
    target_id: i64,
    metric: CatalogMetric,
    w: &Window<'_>,
) -> Result<(LengthDistribution, f64), ObservedError> {
    let series = store
        .metric_series(target_id, metric, w.from_ms, w.to_ms)
        .await?;
    let Some(histogram) = Histogram::of(&series) else {
        return Err(ObservedError::NoHistogram {
            target: w.target.to_string(),
            metric: metric.name(),
            engine: w.engine.to_string(),
            from: iso(w.from_ms),
            to: iso(w.to_ms),
        });
    };
    match LengthDistribution::from_cumulative(&histogram.buckets) {
        Some(lengths) => Ok((lengths, histogram.seconds)),
        None => Err(ObservedError::NoRequests {
            target: w.target.to_string(),
            metric: metric.name(),
            from: iso(w.from_ms),
            to: iso(w.to_ms),
        }),
    }
}

/// One histogram's bucket increases over the range, every label set
/// summed, and the seconds its samples span.
struct Histogram {
    buckets: Vec<(f64, f64)>,
    seconds: f64,
}

impl Histogram {
    fn of(series: &[SeriesPoints]) -> Option<Histogram> {
        let mut buckets: Vec<(f64, f64)> = Vec::new();
        let (mut first, mut last) = (i64::MAX, i64::MIN);
        for s in series {
            let Some(Part::Bucket(le)) = parse_part_key(&s.part) else {
                continue;
            };
            let values: Vec<f64> = s.points.iter().map(|p| p.value).collect();
            let increase = counter_increase(&values);
            match buckets.iter_mut().find(|(bound, _)| *bound == le) {
                Some((_, sum)) => *sum += increase,
                None => buckets.push((le, increase)),
            }
            if let (Some(a), Some(b)) = (s.points.first(), s.points.last()) {
                first = first.min(a.ts_ms);
                last = last.max(b.ts_ms);
            }
        }
        (!buckets.is_empty()).then(|| Histogram {
            buckets,
            seconds: (last - first).max(0) as f64 / 1000.0,
        })
    }
}

/// A Unix-ms time as RFC 3339 (seconds), for messages.
fn iso(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}
