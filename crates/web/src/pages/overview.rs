//! The overview: a card per target with its live KPIs coloured against the
//! objectives, GPU sources, firing alerts on top, recent sweeps.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use llmwatch_core::alerts::AlertState;
use llmwatch_core::probe_signals::{probe_signals, ProbeTimings};
use llmwatch_core::signals::Signal;
use llmwatch_store::{Store, StoreError, TargetKind, TargetRow};
use serde::Serialize;

use super::format::{self, Kpi, Level};
use super::{path_segment, store_error, PagesConfig};
use crate::{AppState, PROBE_WINDOW_MS};
use llmwatch_engine::sources::scrape::now_ms;

/// KV-cache usage above this is amber; above [`KV_BAD`] red (DESIGN.md's
/// KV-capacity diagnosis starts at 90 %).
const KV_WARN: f64 = 0.8;
const KV_BAD: f64 = 0.9;

/// One KPI of one target, as the page and the live updates carry it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveValue {
    /// `TARGET|KEY`, matched against `data-kpi` in the page.
    pub id: String,
    pub text: String,
    pub class: &'static str,
}

/// A target's card.
#[derive(Debug, Clone)]
pub struct TargetCard {
    pub name: String,
    pub href: String,
    pub engine: String,
    pub model: String,
    /// `up`, `down` or `pending`.
    pub state: &'static str,
    pub error: Option<String>,
    pub ttft_p95: Kpi,
    pub itl_p95: Kpi,
    pub probe_errors: Kpi,
    pub kv: Kpi,
    pub waiting: Kpi,
    pub running: Kpi,
    pub prefix: Kpi,
    pub gpu_mem: Kpi,
    pub gpu_util: Kpi,
    pub gpus: Option<String>,
    /// The live diagnosis: what limits the target now.
    pub live: Option<super::live_card::LiveCard>,
}

impl TargetCard {
    /// The live values of this card (everything `live.js` updates).
    pub fn live_values(&self) -> Vec<LiveValue> {
        let kpi = |key: &str, k: &Kpi| LiveValue {
            id: format!("{}|{key}", self.name),
            text: k.text.clone(),
            class: k.class(),
        };
        vec![
            LiveValue {
                id: format!("{}|state", self.name),
                text: self.state.to_string(),
                class: self.state,
            },
            kpi("ttft_p95", &self.ttft_p95),
            kpi("itl_p95", &self.itl_p95),
            kpi("probe_errors", &self.probe_errors),
            kpi("kv", &self.kv),
            kpi("waiting", &self.waiting),
            kpi("running", &self.running),
            kpi("prefix", &self.prefix),
            kpi("gpu_mem", &self.gpu_mem),
            kpi("gpu_util", &self.gpu_util),
        ]
    }
}

/// A GPU source's line.
#[derive(Debug, Clone)]
pub struct GpuCard {
    pub name: String,
    pub state: &'static str,
    pub count: String,
    pub mem: Kpi,
    pub util: Kpi,
    pub power: String,
}

#[derive(Debug, Clone)]
pub struct FiringAlert {
    pub rule: String,
    pub target: String,
    pub value: String,
    pub since: String,
}

#[derive(Debug, Clone)]
pub struct SweepLink {
    pub id: i64,
    pub target: String,
    pub started: String,
    pub status: String,
}

#[derive(askama::Template, askama_web::WebTemplate)]
#[template(path = "overview.html")]
pub struct OverviewPage {
    pub targets: Vec<TargetCard>,
    pub gpus: Vec<GpuCard>,
    pub firing: Vec<FiringAlert>,
    pub pending: usize,
    pub sweeps: Vec<SweepLink>,
    pub slo_ttft: String,
    pub slo_itl: String,
    pub generated: String,
}

impl OverviewPage {
    /// Everything `/events` sends for this page.
    pub fn live_values(&self) -> Vec<LiveValue> {
        let mut out: Vec<LiveValue> = self.targets.iter().flat_map(|t| t.live_values()).collect();
        out.push(LiveValue {
            id: "_firing".into(),
            text: self.firing.len().to_string(),
            class: if self.firing.is_empty() { "ok" } else { "bad" },
        });
        out.push(LiveValue {
            id: "_generated".into(),
            text: self.generated.clone(),
            class: "na",
        });
        out
    }
}

fn value(signals: &[(Signal, f64)], signal: Signal) -> Option<f64> {
    signals
        .iter()
        .find(|(s, _)| *s == signal)
        .map(|(_, v)| *v)
        .filter(|v| v.is_finite())
}

/// Reads everything the overview shows, as of `now_ms`.
pub async fn overview_page(
    store: &Store,
    config: &PagesConfig,
    now_ms: i64,
) -> Result<OverviewPage, StoreError> {
    let all = store.targets().await?;
    let mut gpu_signals = std::collections::HashMap::new();
    let mut gpus = Vec::new();
    for gpu in all.iter().filter(|t| t.kind == TargetKind::Gpu) {
        let health = store.scrape_health(gpu.id, 1).await?;
        let signals = store.latest_signals(gpu.id).await?;
        let mem = value(&signals, Signal::GpuMemUsedRatio);
        let util = value(&signals, Signal::GpuUtil);
        gpus.push(GpuCard {
            name: gpu.name.clone(),
            state: state_of(health.first().map(|h| h.up)),
            count: value(&signals, Signal::GpuCount)
                .map(format::number)
                .unwrap_or_else(|| "–".into()),
            mem: Kpi::new(mem, format::percent, Level::None),
            util: Kpi::new(util, format::percent, Level::None),
            power: value(&signals, Signal::GpuPowerW)
                .map(|w| format!("{w:.0} W"))
                .unwrap_or_else(|| "–".into()),
        });
        gpu_signals.insert(gpu.name.clone(), signals);
    }

    let mut targets = Vec::new();
    for target in all.iter().filter(|t| t.kind == TargetKind::Engine) {
        let gpu = config
            .gpus_of(&target.name)
            .and_then(|g| gpu_signals.get(g))
            .map(Vec::as_slice);
        targets.push(target_card(store, config, target, gpu, now_ms).await?);
    }

    let states = store.alert_states().await?;
    let firing = states
        .iter()
        .filter(|a| a.alert.state == AlertState::Firing)
        .map(|a| FiringAlert {
            rule: a.rule.clone(),
            target: a.target.clone(),
            value: a
                .alert
                .value
                .map(format::number)
                .unwrap_or_else(|| "–".into()),
            since: a
                .alert
                .fired_at_ms
                .map(format::datetime)
                .unwrap_or_else(|| "–".into()),
        })
        .collect();
    let pending = states
        .iter()
        .filter(|a| a.alert.state == AlertState::Pending)
        .count();
    let sweeps = store
        .sweeps(5)
        .await?
        .into_iter()
        .map(|s| SweepLink {
            id: s.id,
            target: s.target_name.unwrap_or(s.target_url),
            started: format::datetime(s.started_ms),
            status: s.status.as_str().to_string(),
        })
        .collect();
    Ok(OverviewPage {
        targets,
        gpus,
        firing,
        pending,
        sweeps,
        slo_ttft: config
            .slo_ttft_p95
            .map(format::seconds)
            .unwrap_or_else(|| "none".into()),
        slo_itl: config
            .slo_itl_p95
            .map(format::seconds)
            .unwrap_or_else(|| "none".into()),
        generated: format::datetime(now_ms),
    })
}

/// One target's card; `gpu` holds the latest signals of its GPU source.
pub async fn target_card(
    store: &Store,
    config: &PagesConfig,
    target: &TargetRow,
    gpu: Option<&[(Signal, f64)]>,
    now_ms: i64,
) -> Result<TargetCard, StoreError> {
    let health = store.scrape_health(target.id, 1).await?;
    let signals = store.latest_signals(target.id).await?;
    let probes = store
        .probes(target.id, now_ms - PROBE_WINDOW_MS + 1, now_ms, 10_000)
        .await?;
    let model = probes
        .last()
        .map(|p| p.model.clone())
        .unwrap_or_else(|| "–".into());
    let timings: Vec<ProbeTimings> = probes
        .iter()
        .map(|p| ProbeTimings {
            ok: p.ok,
            ttft_s: p.ttft_s,
            tpot_s: p.tpot_s,
            e2e_s: p.e2e_s,
            itl_s: p.itl_s.clone(),
        })
        .collect();
    let probe = probe_signals(&timings);
    let ttft = value(&probe, Signal::ProbeTtftP95);
    let itl = value(&probe, Signal::ProbeItlP95);
    let errors = value(&probe, Signal::ProbeErrorRate);
    let kv = value(&signals, Signal::KvCacheUsage);
    let gpu_mem = gpu.and_then(|s| value(s, Signal::GpuMemUsedRatio));
    let gpu_util = gpu.and_then(|s| value(s, Signal::GpuUtil));
    let objectives = config.objectives_for(&target.name);
    Ok(TargetCard {
        href: format!("/targets/{}", path_segment(&target.name)),
        name: target.name.clone(),
        engine: target.engine.clone().unwrap_or_else(|| "unknown".into()),
        model,
        state: state_of(health.first().map(|h| h.up)),
        error: health.first().and_then(|h| h.error.clone()),
        ttft_p95: Kpi::new(ttft, format::seconds, Level::of(ttft, objectives.ttft_p95)),
        itl_p95: Kpi::new(itl, format::seconds, Level::of(itl, objectives.itl_p95)),
        probe_errors: Kpi::new(errors, format::percent, Level::of(errors, Some(0.01))),
        kv: Kpi::new(kv, format::percent, kv_level(kv)),
        waiting: Kpi::new(
            value(&signals, Signal::RequestsWaiting),
            format::number,
            Level::None,
        ),
        running: Kpi::new(
            value(&signals, Signal::RequestsRunning),
            format::number,
            Level::None,
        ),
        prefix: Kpi::new(
            value(&signals, Signal::PrefixCacheHitRate),
            format::percent,
            Level::None,
        ),
        gpu_mem: Kpi::new(gpu_mem, format::percent, Level::None),
        gpu_util: Kpi::new(gpu_util, format::percent, Level::None),
        gpus: config.gpus_of(&target.name).map(str::to_string),
        live: super::live_card::live_card(store, target.id).await?,
    })
}

fn kv_level(kv: Option<f64>) -> Level {
    match kv {
        Some(v) if v > KV_BAD => Level::Bad,
        Some(v) if v > KV_WARN => Level::Warn,
        Some(_) => Level::Ok,
        None => Level::None,
    }
}

fn state_of(up: Option<bool>) -> &'static str {
    match up {
        Some(true) => "up",
        Some(false) => "down",
        None => "pending",
    }
}

pub async fn handler(State(state): State<AppState>) -> Response {
    match overview_page(&state.store, &state.pages, now_ms()).await {
        Ok(page) => page.into_response(),
        Err(err) => store_error(err),
    }
}
