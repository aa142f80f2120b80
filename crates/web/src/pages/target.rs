//! A target's page: its signals over a range, client (probe) and server side
//! on one time axis, with the GPU source linked to it.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use llmwatch_core::analysis::LatencyBreakdown;
use llmwatch_core::signals::Signal;
use llmwatch_store::{
    is_probe_signal, Point, Range, Store, StoreError, SweepSpan, SweepStatus, TargetKind,
    PROBE_WINDOW_MIN_MS,
};
use serde::Deserialize;

use super::charts::{ttft_breakdown_series, Band, Chart, Dash, Marker, Rule, Series, Style, XAxis};
use super::format;
use super::observed::{observed_section, ObservedSection};
use super::overview::{target_card, TargetCard};
use super::passive::{passive_section, PassiveSection};
use super::{
    chart_file_response, error_response, path_segment, split_file, store_error, ChartView,
    PagesConfig, TargetObjectives,
};
use crate::latency_breakdown::{breakdown_points, breakdown_series, BREAKDOWN_SIGNALS};
use crate::AppState;
use llmwatch_engine::sources::scrape::now_ms;

/// The range picker's choices: (label, span, step).
pub const RANGES: &[(&str, i64, i64)] = &[
    ("15m", 15 * 60_000, 5_000),
    ("1h", 3_600_000, 15_000),
    ("6h", 6 * 3_600_000, 60_000),
    ("24h", 24 * 3_600_000, 300_000),
    ("7d", 7 * 24 * 3_600_000, 1_800_000),
];

pub const DEFAULT_RANGE: &str = "1h";

#[derive(Debug, Deserialize, Default)]
pub struct RangeQuery {
    pub range: Option<String>,
}

/// The span and step of a range label; unknown labels are refused.
pub fn range_of(label: &str, now_ms: i64) -> Option<Range> {
    let (_, span, step) = RANGES.iter().find(|(l, _, _)| *l == label)?;
    // The last instant is now: the newest scrape is always on the chart.
    Range::checked(now_ms - span, now_ms, *step).ok()
}

const OBJECTIVE: Style = Style::new(5, Dash::Dashed, Marker::None);

/// The signals a target page reads from the target itself.
pub const TARGET_SIGNALS: &[Signal] = &[
    Signal::ProbeTtftP50,
    Signal::ProbeTtftP95,
    Signal::ServerTtftP50,
    Signal::ServerTtftP95,
    Signal::ProbeItlP50,
    Signal::ProbeItlP95,
    Signal::ServerItlP50,
    Signal::ServerItlP95,
    Signal::KvCacheUsage,
    Signal::RequestsWaiting,
    Signal::RequestsRunning,
    Signal::PreemptionsRate,
    Signal::PrefixCacheHitRate,
    Signal::PromptTokensRate,
    Signal::GenerationTokensRate,
    // The 2026 families (issue 38): charted only where the engine has them.
    Signal::SpecDecodeAcceptanceRate,
    Signal::SpecDecodeFirstAcceptance,
    Signal::KvTransferTimeMean,
    Signal::KvTransferTimeP95,
    Signal::KvOffloadLoadBytesRate,
    Signal::KvOffloadStoreBytesRate,
    Signal::KvTransferBytesRate,
    Signal::PromptCachedTokensRate,
    Signal::PromptComputedTokensRate,
    Signal::PromptTransferredTokensRate,
    Signal::AchievedTflops,
    Signal::AchievedMemBandwidth,
    Signal::EngineSleeping,
];

/// The signals read from the target's GPU source.
pub const GPU_SIGNALS: &[Signal] = &[Signal::GpuUtil, Signal::GpuMemUsedRatio];

/// A sweep shaded on the charts, as the page lists it under them.
pub struct SweepLink {
    pub label: String,
    pub href: String,
    pub from: String,
    pub to: String,
}

pub struct RangeLink {
    pub label: &'static str,
    pub href: String,
    pub current: bool,
}

#[derive(askama::Template, askama_web::WebTemplate)]
#[template(path = "target.html")]
pub struct TargetPage {
    pub name: String,
    pub url: String,
    pub engine: String,
    pub gpus: Option<String>,
    pub range: String,
    pub ranges: Vec<RangeLink>,
    pub from: String,
    pub to: String,
    pub charts: Vec<ChartView>,
    /// The sweeps shaded on the charts, in time order.
    pub sweeps: Vec<SweepLink>,
    /// The target's live KPIs now (as on the overview).
    pub card: TargetCard,
    pub objectives: String,
    /// Auto-refresh interval for JS-off readers, seconds.
    pub refresh_s: u32,
    /// The passive saturation curve of the last 7 days.
    pub passive: PassiveSection,
    /// The request lengths served over the range.
    pub observed: ObservedSection,
}

/// Every chart of a target page, as data.
pub async fn target_charts(
    store: &Store,
    config: &PagesConfig,
    target_id: i64,
    target_name: &str,
    range: Range,
) -> Result<Vec<Chart>, StoreError> {
    // At a step of at least the shortest probe window, the TTFT breakdown's
    // signals are read with the charts' (one pass over the range, not two).
    let breakdown_alongside = range.step_ms >= PROBE_WINDOW_MIN_MS;
    let extra: &[Signal] = if breakdown_alongside {
        BREAKDOWN_SIGNALS
    } else {
        &[]
    };
    let scrape_signals = page_signals(extra, |s| !is_probe_signal(s));
    let gpu = match config.gpus_of(target_name) {
        Some(gpu) => store.target_by_name(gpu).await?,
        None => None,
    };
    // Independent reads: run them at once (SQLite in WAL mode serves
    // concurrent readers from the pool).
    let gpu_series = async {
        match &gpu {
            Some(gpu) => store.signals_series(gpu.id, GPU_SIGNALS, range).await,
            None => Ok(Vec::new()),
        }
    };
    let breakdown = async {
        if breakdown_alongside {
            Ok(None)
        } else {
            breakdown_series(store, target_id, range).await.map(Some)
        }
    };
    let (mut series, probes, gpu_series, breakdown, sweeps) = tokio::try_join!(
        store.signals_series(target_id, &scrape_signals, range),
        probe_series(store, target_id, range, extra),
        gpu_series,
        breakdown,
        store.sweep_spans(
            Some(target_name),
            range.from_ms,
            range.to_ms,
            MAX_SWEEP_BANDS
        ),
    )?;
    series.extend(probes);
    let breakdown = breakdown.unwrap_or_else(|| breakdown_points(&series));
    series.extend(gpu_series);
    Ok(build_charts(
        &series,
        &breakdown,
        &sweeps,
        config.objectives_for(target_name),
        range,
    ))
}

/// The most sweeps a page range shades (a week of hourly sweeps is 168).
const MAX_SWEEP_BANDS: u32 = 500;

/// Each sweep as a band over the time it loaded the target (a running one
/// reaches the end of the range), linked to its page.
fn sweep_bands(sweeps: &[SweepSpan], range: Range) -> Vec<Band> {
    sweeps
        .iter()
        .map(|sweep| Band {
            label: match sweep.status {
                SweepStatus::Running => format!("sweep {} running", sweep.id),
                _ => format!("sweep {}", sweep.id),
            },
            from: sweep.started_ms as f64,
            to: sweep.ended_ms.unwrap_or(range.to_ms) as f64,
            href: format!("/sweeps/{}", sweep.id),
        })
        .collect()
}

/// The page's signals that `kind` takes, then those of `extra` not among
/// them, once each.
fn page_signals(extra: &[Signal], kind: impl Fn(Signal) -> bool) -> Vec<Signal> {
    let mut signals: Vec<Signal> = Vec::new();
    for signal in TARGET_SIGNALS.iter().chain(extra).copied() {
        if kind(signal) && !signals.contains(&signal) {
            signals.push(signal);
        }
    }
    signals
}

/// Every probe signal of the target page (and the probe signals of
/// `extra`) over `range`, each instant rolled over the same window as
/// [`Store::signals_series`] (the step, at least [`PROBE_WINDOW_MIN_MS`]),
/// from one read of the probes: the store's per-signal series reads them
/// once per signal, which on a 24 h page was 170 of its 195 ms
/// (BENCHMARKS.md).
pub async fn probe_series(
    store: &Store,
    target_id: i64,
    range: Range,
    extra: &[Signal],
) -> Result<Vec<(Signal, Vec<Point>)>, StoreError> {
    let window = range.step_ms.max(PROBE_WINDOW_MIN_MS);
    let wanted = page_signals(extra, is_probe_signal);
    store
        .probe_signals_series(target_id, &wanted, range, window)
        .await
}

/// One line of a target chart: a stored signal, scaled to the chart's unit.
struct LineSpec {
    signal: Signal,
    name: &'static str,
    unit: &'static str,
    scale: f64,
    style: Style,
}

/// One target chart; `objective` draws the target's p95 objective on it.
struct ChartSpec {
    id: &'static str,
    title: &'static str,
    y_label: &'static str,
    lines: &'static [LineSpec],
    objective: Option<ObjectiveLine>,
}

/// Which objective a chart shows, and the scale from seconds to its unit.
#[derive(Clone, Copy)]
enum ObjectiveLine {
    Ttft,
    Itl,
}

const fn line(
    signal: Signal,
    name: &'static str,
    unit: &'static str,
    scale: f64,
    style: Style,
) -> LineSpec {
    LineSpec {
        signal,
        name,
        unit,
        scale,
        style,
    }
}

const PROBE95: Style = Style::new(4, Dash::Solid, Marker::Circle);
const PROBE50: Style = Style::new(2, Dash::Dashed, Marker::Triangle);
const SERVER95: Style = Style::new(1, Dash::Solid, Marker::Square);
const SERVER50: Style = Style::new(6, Dash::Dotted, Marker::Cross);

/// The target page's charts, in page order.
const TARGET_CHARTS: &[ChartSpec] = &[
    ChartSpec {
        id: "ttft",
        title: "Time to first token: probe (exact) vs server histogram (interpolated)",
        y_label: "TTFT (s)",
        lines: &[
            line(Signal::ProbeTtftP95, "probe p95", "s", 1.0, PROBE95),
            line(Signal::ProbeTtftP50, "probe p50", "s", 1.0, PROBE50),
            line(Signal::ServerTtftP95, "server p95", "s", 1.0, SERVER95),
            line(Signal::ServerTtftP50, "server p50", "s", 1.0, SERVER50),
        ],
        objective: Some(ObjectiveLine::Ttft),
    },
    ChartSpec {
        id: "itl",
        title: "Inter-token latency: probe (exact) vs server histogram (interpolated)",
        y_label: "ITL (ms)",
        lines: &[
            line(Signal::ProbeItlP95, "probe p95", "ms", 1000.0, PROBE95),
            line(Signal::ProbeItlP50, "probe p50", "ms", 1000.0, PROBE50),
            line(Signal::ServerItlP95, "server p95", "ms", 1000.0, SERVER95),
            line(Signal::ServerItlP50, "server p50", "ms", 1000.0, SERVER50),
        ],
        objective: Some(ObjectiveLine::Itl),
    },
    ChartSpec {
        id: "kv_cache",
        title: "KV-cache usage",
        y_label: "KV-cache usage (%)",
        lines: &[line(
            Signal::KvCacheUsage,
            "KV-cache usage",
            "%",
            100.0,
            Style::new(4, Dash::Solid, Marker::None),
        )],
        objective: None,
    },
    ChartSpec {
        id: "requests",
        title: "Requests waiting and running",
        y_label: "requests",
        lines: &[
            line(
                Signal::RequestsWaiting,
                "waiting",
                "requests",
                1.0,
                Style::new(5, Dash::Solid, Marker::Triangle),
            ),
            line(
                Signal::RequestsRunning,
                "running",
                "requests",
                1.0,
                Style::new(4, Dash::Dashed, Marker::Circle),
            ),
        ],
        objective: None,
    },
    ChartSpec {
        id: "preemptions",
        title: "Preemptions",
        y_label: "preemptions per second",
        lines: &[line(
            Signal::PreemptionsRate,
            "preemptions",
            "1/s",
            1.0,
            Style::new(5, Dash::Solid, Marker::Cross),
        )],
        objective: None,
    },
    ChartSpec {
        id: "prefix_cache",
        title: "Prefix-cache hit rate",
        y_label: "hit rate (%)",
        lines: &[line(
            Signal::PrefixCacheHitRate,
            "prefix-cache hits / queries",
            "%",
            100.0,
            Style::new(3, Dash::Solid, Marker::None),
        )],
        objective: None,
    },
    ChartSpec {
        id: "throughput",
        title: "Token throughput",
        y_label: "tokens per second",
        lines: &[
            line(
                Signal::GenerationTokensRate,
                "output (generation) tokens/s",
                "tokens/s",
                1.0,
                Style::new(4, Dash::Solid, Marker::Circle),
            ),
            line(
                Signal::PromptTokensRate,
                "prompt tokens/s",
                "tokens/s",
                1.0,
                Style::new(1, Dash::Dashed, Marker::Triangle),
            ),
        ],
        objective: None,
    },
    ChartSpec {
        id: "gpu",
        title: "GPU utilisation and memory",
        y_label: "%",
        lines: &[
            line(
                Signal::GpuUtil,
                "GPU utilisation",
                "%",
                100.0,
                Style::new(3, Dash::Solid, Marker::Circle),
            ),
            line(
                Signal::GpuMemUsedRatio,
                "GPU memory used",
                "%",
                100.0,
                Style::new(6, Dash::Dashed, Marker::Square),
            ),
        ],
        objective: None,
    },
];

/// Charts of signals only some engines report (issue 38: speculative
/// decoding, P/D transfer, KV offloading, prompt-token sources, the MFU
/// counters, sleep mode): drawn when any of their lines has a non-zero point
/// in the range, so a page shows what its engine uses and no empty frames.
const CHARTS_WHEN_PRESENT: &[ChartSpec] = &[
    ChartSpec {
        id: "spec_decode",
        title: "Speculative decoding acceptance",
        y_label: "accepted (%)",
        lines: &[
            line(
                Signal::SpecDecodeAcceptanceRate,
                "accepted / proposed draft tokens",
                "%",
                100.0,
                Style::new(3, Dash::Solid, Marker::Circle),
            ),
            line(
                Signal::SpecDecodeFirstAcceptance,
                "drafts whose first token was accepted",
                "%",
                100.0,
                Style::new(1, Dash::Dashed, Marker::Triangle),
            ),
        ],
        objective: None,
    },
    ChartSpec {
        id: "kv_transfer",
        title: "Prefill→decode KV transfer time",
        y_label: "ms",
        lines: &[
            line(
                Signal::KvTransferTimeMean,
                "mean transfer",
                "ms",
                1000.0,
                Style::new(4, Dash::Solid, Marker::Circle),
            ),
            line(
                Signal::KvTransferTimeP95,
                "p95 transfer (server histogram)",
                "ms",
                1000.0,
                Style::new(2, Dash::Dashed, Marker::Square),
            ),
        ],
        objective: None,
    },
    ChartSpec {
        id: "kv_traffic",
        title: "KV-cache traffic (offload and P/D transfer)",
        y_label: "MB/s",
        lines: &[
            line(
                Signal::KvOffloadLoadBytesRate,
                "offload → GPU",
                "MB/s",
                1e-6,
                Style::new(3, Dash::Solid, Marker::Circle),
            ),
            line(
                Signal::KvOffloadStoreBytesRate,
                "GPU → offload",
                "MB/s",
                1e-6,
                Style::new(6, Dash::Dashed, Marker::Square),
            ),
            line(
                Signal::KvTransferBytesRate,
                "prefill → decode transfer",
                "MB/s",
                1e-6,
                Style::new(1, Dash::Solid, Marker::Triangle),
            ),
        ],
        objective: None,
    },
    ChartSpec {
        id: "prompt_sources",
        title: "Prompt tokens by source",
        y_label: "tokens per second",
        lines: &[
            line(
                Signal::PromptComputedTokensRate,
                "computed here",
                "tokens/s",
                1.0,
                Style::new(4, Dash::Solid, Marker::Circle),
            ),
            line(
                Signal::PromptCachedTokensRate,
                "from a cache",
                "tokens/s",
                1.0,
                Style::new(3, Dash::Dashed, Marker::Square),
            ),
            line(
                Signal::PromptTransferredTokensRate,
                "KV received from a prefill instance",
                "tokens/s",
                1.0,
                Style::new(1, Dash::Solid, Marker::Triangle),
            ),
        ],
        objective: None,
    },
    ChartSpec {
        id: "achieved_tflops",
        title: "Achieved compute per GPU (engine estimate)",
        y_label: "TFLOP/s",
        lines: &[line(
            Signal::AchievedTflops,
            "achieved TFLOP/s",
            "TFLOP/s",
            1.0,
            Style::new(5, Dash::Solid, Marker::Circle),
        )],
        objective: None,
    },
    ChartSpec {
        id: "achieved_bandwidth",
        title: "Achieved GPU-memory bandwidth per GPU (engine estimate)",
        y_label: "GB/s",
        lines: &[line(
            Signal::AchievedMemBandwidth,
            "achieved GB/s (read + write)",
            "GB/s",
            1.0,
            Style::new(6, Dash::Solid, Marker::Square),
        )],
        objective: None,
    },
    ChartSpec {
        id: "engine_sleep",
        title: "Engines asleep",
        y_label: "%",
        lines: &[line(
            Signal::EngineSleeping,
            "share of engines asleep",
            "%",
            100.0,
            Style::new(2, Dash::Solid, Marker::None),
        )],
        objective: None,
    },
];

/// The canaries' mean TTFT over time split by the engine's phase times
/// (stacked bars).
fn breakdown_chart(points: &[(i64, LatencyBreakdown)], x: XAxis) -> Chart {
    Chart {
        id: "ttft_breakdown".to_string(),
        title: "Canary mean TTFT by phase".to_string(),
        x,
        x_label: "time (UTC)".to_string(),
        y_label: "mean TTFT (s)".to_string(),
        y2_label: None,
        series: ttft_breakdown_series(
            &points
                .iter()
                .map(|(ts, b)| (*ts as f64, &b.ttft))
                .collect::<Vec<_>>(),
        ),
        hlines: Vec::new(),
        vlines: Vec::new(),
        bands: Vec::new(),
        stacked: true,
    }
}

/// Pure: the charts from the signals' points.
pub fn build_charts(
    series: &[(Signal, Vec<Point>)],
    breakdown: &[(i64, LatencyBreakdown)],
    sweeps: &[SweepSpan],
    objectives: TargetObjectives,
    range: Range,
) -> Vec<Chart> {
    let x = XAxis::Time {
        from_ms: range.from_ms,
        to_ms: range.to_ms,
    };
    // Present = some line has a non-zero point: vLLM 0.32 exposes its MFU
    // counters and sleep state at 0 whether or not they are in use.
    let when_present = CHARTS_WHEN_PRESENT.iter().filter(|spec| {
        spec.lines.iter().any(|l| {
            chart_series(series, l)
                .points
                .iter()
                .any(|[_, value]| *value != 0.0)
        })
    });
    let mut charts: Vec<Chart> = TARGET_CHARTS
        .iter()
        .chain(when_present)
        .map(|spec| {
            let mut chart = Chart {
                id: spec.id.to_string(),
                title: spec.title.to_string(),
                x,
                x_label: "time (UTC)".to_string(),
                y_label: spec.y_label.to_string(),
                y2_label: None,
                series: spec.lines.iter().map(|l| chart_series(series, l)).collect(),
                hlines: Vec::new(),
                vlines: Vec::new(),
                bands: Vec::new(),
                stacked: false,
            };
            let objective = match spec.objective {
                Some(ObjectiveLine::Ttft) => objectives.ttft_p95.map(|slo| (slo, 1.0)),
                Some(ObjectiveLine::Itl) => objectives.itl_p95.map(|slo| (slo, 1000.0)),
                None => None,
            };
            if let Some((slo, scale)) = objective {
                chart.hlines.push(Rule {
                    label: format!("objective p95 ≤ {}", format::seconds(slo)),
                    value: slo * scale,
                    style: OBJECTIVE,
                });
            }
            chart
        })
        .collect();
    charts.push(breakdown_chart(breakdown, x));
    let bands = sweep_bands(sweeps, range);
    for chart in &mut charts {
        chart.bands = bands.clone();
    }
    charts
}

/// One chart line from a signal's stored points (gaps and NaN left out).
fn chart_series(series: &[(Signal, Vec<Point>)], spec: &LineSpec) -> Series {
    let points = series
        .iter()
        .find(|(s, _)| *s == spec.signal)
        .map(|(_, p)| p.as_slice())
        .unwrap_or(&[]);
    Series {
        name: spec.name.to_string(),
        unit: spec.unit.to_string(),
        style: spec.style,
        secondary: false,
        points: points
            .iter()
            .filter(|p| p.value.is_finite())
            .map(|p| [p.ts_ms as f64, p.value * spec.scale])
            .collect(),
    }
}

/// The whole target page as of `now_ms`; `None` when there is no such
/// engine target.
pub async fn target_page(
    store: &Store,
    config: &PagesConfig,
    name: &str,
    range_label: &str,
    now_ms: i64,
) -> Result<Option<TargetPage>, StoreError> {
    let Some(target) = store.target_by_name(name).await? else {
        return Ok(None);
    };
    if target.kind != TargetKind::Engine {
        return Ok(None);
    }
    let label = if range_of(range_label, now_ms).is_some() {
        range_label
    } else {
        DEFAULT_RANGE
    };
    let Some(range) = range_of(label, now_ms) else {
        return Ok(None);
    };
    let charts = target_charts(store, config, target.id, name, range).await?;
    let gpu_now = match config.gpus_of(name) {
        Some(gpu) => match store.target_by_name(gpu).await? {
            Some(gpu) => Some(store.latest_signals(gpu.id).await?),
            None => None,
        },
        None => None,
    };
    let card = target_card(store, config, &target, gpu_now.as_deref(), now_ms).await?;
    let passive = passive_section(store, config, target.id, name, now_ms).await?;
    let observed = observed_section(store, name, label, range).await?;
    let base = format!("/targets/{}", path_segment(name));
    let query = format!("?range={label}");
    Ok(Some(TargetPage {
        name: target.name.clone(),
        url: target.url.clone(),
        engine: target.engine.clone().unwrap_or_else(|| "unknown".into()),
        gpus: config.gpus_of(name).map(str::to_string),
        range: label.to_string(),
        ranges: RANGES
            .iter()
            .map(|(l, _, _)| RangeLink {
                label: l,
                href: format!("{base}?range={l}"),
                current: *l == label,
            })
            .collect(),
        from: format::datetime(range.from_ms),
        to: format::datetime(range.to_ms),
        charts: charts
            .iter()
            .map(|c| ChartView::new(c, format!("{base}/charts/{}", c.id), query.clone()))
            .collect(),
        sweeps: charts
            .first()
            .map(|c| c.bands.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|b| SweepLink {
                label: b.label.clone(),
                href: b.href.clone(),
                from: format::datetime(b.from as i64),
                to: format::datetime(b.to as i64),
            })
            .collect(),
        card,
        objectives: {
            let o = config.objectives_for(name);
            let show = |v: Option<f64>| v.map(format::seconds).unwrap_or_else(|| "–".into());
            format!(
                "p95 TTFT ≤ {}, p95 ITL ≤ {}",
                show(o.ttft_p95),
                show(o.itl_p95)
            )
        },
        refresh_s: if label == "15m" || label == "1h" {
            30
        } else {
            300
        },
        passive,
        observed,
    }))
}

pub async fn handler(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<RangeQuery>,
) -> Response {
    let label = query.range.as_deref().unwrap_or(DEFAULT_RANGE);
    if range_of(label, 0).is_none() {
        return error_response(
            StatusCode::BAD_REQUEST,
            "Bad range",
            format!("range must be one of 15m, 1h, 6h, 24h, 7d; got {label:?}"),
        );
    }
    match target_page(&state.store, &state.pages, &name, label, now_ms()).await {
        Ok(Some(page)) => page.into_response(),
        Ok(None) => error_response(
            StatusCode::NOT_FOUND,
            "No such target",
            format!("no target is named {name:?}"),
        ),
        Err(err) => store_error(err),
    }
}

/// `/targets/{name}/charts/{chart}.{svg,csv,json}?range=…`
pub async fn chart_download(
    State(state): State<AppState>,
    Path((name, file)): Path<(String, String)>,
    Query(query): Query<RangeQuery>,
) -> Response {
    let label = query.range.as_deref().unwrap_or(DEFAULT_RANGE);
    let Some(range) = range_of(label, now_ms()) else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "Bad range",
            format!("range must be one of 15m, 1h, 6h, 24h, 7d; got {label:?}"),
        );
    };
    let Some((id, ext)) = split_file(&file) else {
        return error_response(StatusCode::NOT_FOUND, "Not found", "no such chart");
    };
    let target = match state.store.target_by_name(&name).await {
        Ok(Some(t)) if t.kind == TargetKind::Engine => t,
        Ok(_) => {
            return error_response(
                StatusCode::NOT_FOUND,
                "No such target",
                format!("no target is named {name:?}"),
            )
        }
        Err(err) => return store_error(err),
    };
    match target_charts(&state.store, &state.pages, target.id, &name, range).await {
        Ok(charts) => match charts.iter().find(|c| c.id == id) {
            Some(chart) => chart_file_response(chart, ext),
            None => error_response(StatusCode::NOT_FOUND, "Not found", "no such chart"),
        },
        Err(err) => store_error(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_draw_the_targets_objectives() {
        let range = range_of("1h", 3_600_000 * 10).unwrap();
        let objectives = TargetObjectives {
            ttft_p95: Some(3.0),
            itl_p95: None,
        };
        let charts = build_charts(&[], &[], &[], objectives, range);
        let rules = |id: &str| -> Vec<(String, f64)> {
            let chart = charts.iter().find(|c| c.id == id).unwrap();
            chart
                .hlines
                .iter()
                .map(|r| (r.label.clone(), r.value))
                .collect()
        };
        assert_eq!(
            rules("ttft"),
            vec![("objective p95 ≤ 3.00 s".to_string(), 3.0)]
        );
        assert!(rules("itl").is_empty(), "no ITL objective, no line");
    }

    /// Issue 38: a chart of the 2026 families appears where its signal has
    /// points, and not on an engine without it.
    #[test]
    fn charts_of_newer_families_appear_only_with_data() {
        let range = range_of("1h", 3_600_000 * 10).unwrap();
        let none = build_charts(&[], &[], &[], TargetObjectives::default(), range);
        assert!(!none.iter().any(|c| c.id == "spec_decode"));
        let zero = vec![(
            Signal::AchievedTflops,
            vec![Point {
                ts_ms: range.to_ms,
                value: 0.0,
            }],
        )];
        let idle = build_charts(&zero, &[], &[], TargetObjectives::default(), range);
        assert!(!idle.iter().any(|c| c.id == "achieved_tflops"), "all zero");
        let point = |v: f64| Point {
            ts_ms: range.to_ms - 60_000,
            value: v,
        };
        let series = vec![
            (Signal::SpecDecodeAcceptanceRate, vec![point(0.25)]),
            (Signal::KvTransferTimeMean, vec![point(0.12)]),
        ];
        let charts = build_charts(&series, &[], &[], TargetObjectives::default(), range);
        let ids: Vec<&str> = charts.iter().map(|c| c.id.as_str()).collect();
        assert!(
            ids.contains(&"spec_decode") && ids.contains(&"kv_transfer"),
            "{ids:?}"
        );
        assert!(!ids.contains(&"kv_traffic"), "{ids:?}");
        let spec = charts.iter().find(|c| c.id == "spec_decode").unwrap();
        assert_eq!(spec.series[0].points, vec![[point(0.0).ts_ms as f64, 25.0]]);
        let transfer = charts.iter().find(|c| c.id == "kv_transfer").unwrap();
        assert_eq!(transfer.series[0].points[0][1], 120.0);
    }

    #[test]
    fn ranges_end_now_and_are_bounded() {
        let r = range_of("1h", 3_600_000 * 10 + 7_000).unwrap();
        assert_eq!(r.to_ms, 3_600_000 * 10 + 7_000);
        assert_eq!(r.to_ms - r.from_ms, 3_600_000);
        assert!(range_of("2h", 0).is_none());
        for (label, _, _) in RANGES {
            assert!(range_of(label, 1_700_000_000_000).is_some(), "{label}");
        }
    }
}
