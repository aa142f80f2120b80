//! A simulated vLLM-like inference server, and a dcgm-exporter page for its
//! simulated GPUs, so llmwatch can be developed, tested and demonstrated
//! without a GPU.
//!
//! The engine is a small queueing model run by one tokio task (see
//! `src/engine.rs` and this crate's `README.md`, which also lists what the
//! parameters predict):
//! a KV cache of `num_gpu_blocks` blocks of `block_size` tokens, at most
//! `max_num_seqs` running sequences, a per-step token budget, prefill cost
//! proportional to prompt tokens, decode step cost = fixed + per sequence,
//! preemption by recompute, and a prefix cache. Its parameters
//! ([`Profile`]) make saturation predictable ([`SimConfig::predict`]).
//!
//! **Time.** Step costs in a [`Profile`] are *engine seconds*; the engine
//! sleeps `cost / time_scale` of wall-clock time per step. Everything a
//! client sees — stream timings, and every latency histogram on `/metrics` —
//! is measured in *wall-clock* seconds. So `time_scale = 10` makes the
//! server look exactly 10× faster (TTFT, ITL ÷ 10; tokens/s × 10); token
//! counts, KV usage, preemptions and saturation concurrency do not change.
//!
//! It must never be part of what the daemon measures in production: only
//! `llmwatch sim`, `llmwatch demo`, tests and benches start it, and no
//! library crate depends on it outside its tests and benches.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use llmwatch_sim::{serve, Profile, Sim, SimConfig};
//! let sim = Sim::start(SimConfig::new(Profile::named("kv-starved")?))?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8000").await?;
//! serve(listener, sim.router()).await?;
//! # Ok(()) }
//! ```

mod api;
mod blocks;
mod disagg;
mod engine;
mod expo;
mod fit;
mod gpu;
mod graded;
mod profile;
mod stats;
pub mod tokenizer;
mod vllm_args;
mod wire;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio::time::Instant;

pub use disagg::PdSpec;
pub use fit::{
    fit_cost_model, fit_report, predict_step, CostParams, Fit, FitError, FitReport, FitStep,
    ProfileFile, RelErrors, StepFit, StepPrediction,
};
pub use profile::{Profile, Shape};
#[cfg(feature = "hf-tokenizer")]
pub use tokenizer::HfTokenizer;
pub use tokenizer::{TextTokenizer, ToyTokenizer};
pub use vllm_args::{
    apply_vllm_args, parse_vllm_args, split_args, vllm_router, AppliedArgs, Interconnect,
    KvCacheDtype, VllmArgsError, VllmSettings, DEFAULT_GPU_MEMORY_UTILIZATION,
};

/// Errors of the simulator's public API.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("unknown profile `{name}` (known: {known})")]
    UnknownProfile { name: String, known: String },
    #[error("unknown flavor `{0}` (expected `vllm`, `nim` or `llamacpp`)")]
    UnknownFlavor(String),
    #[error("invalid profile field `{field}`: {why}")]
    InvalidProfile { field: &'static str, why: String },
    #[error("invalid config field `{field}`: {why}")]
    InvalidConfig { field: &'static str, why: String },
    #[error("Sim::start must be called inside a tokio runtime")]
    NoRuntime,
}

/// Which server the simulator imitates on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flavor {
    /// vLLM 0.32: `vllm:`-prefixed metrics at `/metrics`.
    #[default]
    Vllm,
    /// NVIDIA NIM for LLMs: unprefixed metrics at `/v1/metrics` (and
    /// `/metrics`).
    Nim,
    /// llama.cpp's `llama-server` as a real one behaves (see
    /// `fixtures/llamacpp-live/`): `llamacpp:*` counters and gauges without
    /// labels and without histograms; `/tokenize` counts `{"content"}` raw
    /// text and answers `{"tokens":[]}` to any other body; the chat template
    /// comes from `/apply-template`; the context per slot from `/props`
    /// (`/v1/models` does not state it); a stream event may carry several
    /// tokens; and, served by [`Sim::serve`], every streamed response ends
    /// with the connection closed although its headers said `Keep-Alive`.
    Llamacpp,
}

impl FromStr for Flavor {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Flavor, SimError> {
        match s {
            "vllm" => Ok(Flavor::Vllm),
            "nim" => Ok(Flavor::Nim),
            "llamacpp" | "llama.cpp" => Ok(Flavor::Llamacpp),
            other => Err(SimError::UnknownFlavor(other.to_string())),
        }
    }
}

/// Everything a simulated server needs. Build with [`SimConfig::new`] and
/// override fields.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub profile: Profile,
    pub flavor: Flavor,
    /// The served model name (`model` in requests, `model_name` label).
    pub model: String,
    /// Wall-clock speed-up: each step sleeps `cost / time_scale`.
    pub time_scale: f64,
    /// Simulated GPUs (tensor-parallel ranks): weights and KV cache are
    /// split evenly across them on the GPU page.
    pub gpus: usize,
    /// Seeds ids, generated text and pseudo-EOS positions.
    pub seed: u64,
    /// Send `usage.prompt_tokens_details.cached_tokens` (real vLLM only does
    /// with `--enable-prompt-tokens-details`; on by default here because
    /// llmwatch's cache-hygiene checks read it).
    pub prompt_tokens_details: bool,
    /// Report every prompt token as cached, whatever the prefix cache did —
    /// in usage (with `prompt_tokens_details`) and in the page's
    /// `prefix_cache_hits_total`: a server whose cache hits contradict any
    /// random workload (for llmwatch's cache-hygiene checks). Off by default.
    pub report_all_cached: bool,
    /// Reasoning mode: the first this-many generated tokens of every chat
    /// response are reasoning, streamed as `delta.reasoning` before the
    /// `delta.content` of the answer and counted in
    /// `usage.completion_tokens_details.reasoning_tokens`, as vLLM 0.32
    /// does with a reasoning parser. 0 (the default) turns it off.
    pub reasoning_tokens: usize,
    /// vLLM's `--enable-per-request-metrics`: the final usage chunk of a
    /// stream carries `metrics` (queue, time to first token from scheduled,
    /// generation time, mean ITL, tokens/s) from the engine's own clock.
    /// Off by default, as in vLLM.
    pub per_request_metrics: bool,
    /// Share of graded arithmetic prompts answered wrong (see `graded`),
    /// 0..=1; 0 by default.
    pub quality_error_rate: f64,
    /// `Hostname` label of the GPU page.
    pub hostname: String,
    /// What counts prompt tokens (`/tokenize`, `usage.prompt_tokens`, the
    /// prefix cache): the toy tokenizer unless a real one is plugged in.
    pub tokenizer: Arc<dyn TextTokenizer>,
    /// P/D disaggregation and speculative decoding on the vLLM page (issue
    /// 38); off by default.
    pub pd_spec: PdSpec,
}

impl SimConfig {
    /// Defaults: vLLM flavor, model `sim-llama`, real time, one GPU, seed 0.
    pub fn new(profile: Profile) -> SimConfig {
        SimConfig {
            profile,
            flavor: Flavor::Vllm,
            model: "sim-llama".to_string(),
            time_scale: 1.0,
            gpus: 1,
            seed: 0,
            prompt_tokens_details: true,
            report_all_cached: false,
            reasoning_tokens: 0,
            per_request_metrics: false,
            quality_error_rate: 0.0,
            hostname: "llmwatch-sim".to_string(),
            tokenizer: Arc::new(ToyTokenizer),
            pd_spec: PdSpec::default(),
        }
    }

    fn validate(&self) -> Result<(), SimError> {
        self.profile.validate()?;
        self.pd_spec.validate()?;
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return Err(SimError::InvalidConfig {
                field: "time_scale",
                why: format!("must be a finite number > 0, found {}", self.time_scale),
            });
        }
        if self.gpus == 0 {
            return Err(SimError::InvalidConfig {
                field: "gpus",
                why: "must be at least 1".into(),
            });
        }
        if self.model.is_empty() {
            return Err(SimError::InvalidConfig {
                field: "model",
                why: "must not be empty".into(),
            });
        }
        Ok(())
    }

    /// What the parameters predict for closed-loop clients of this shape,
    /// in wall-clock units (see the crate docs on time).
    pub fn predict(&self, shape: Shape) -> Prediction {
        let p = &self.profile;
        let ts = self.time_scale;
        Prediction {
            blocks_per_sequence: p.blocks_per_sequence(shape),
            kv_saturation_concurrency: p.kv_saturation_concurrency(shape),
            max_running: p.max_running(shape),
            ttft_c1_s: p.ttft_c1_s(shape.input_tokens) / ts,
            itl_c1_s: p.decode_step_s(1) / ts,
            decode_throughput_ceiling_tps: p.decode_throughput_ceiling(shape) * ts,
        }
    }

    /// Predicted generation tokens per wall-clock second at `concurrency`
    /// closed-loop clients ([`Profile::generation_throughput`] × time_scale).
    pub fn predicted_throughput(&self, shape: Shape, concurrency: usize) -> f64 {
        self.profile.generation_throughput(shape, concurrency) * self.time_scale
    }
}

/// Predictions for one shape, wall-clock units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// `ceil((in + out - 1) / block_size)`.
    pub blocks_per_sequence: usize,
    /// `num_gpu_blocks / blocks_per_sequence`: above this concurrency the
    /// KV cache fills, requests wait and get preempted.
    pub kv_saturation_concurrency: usize,
    /// `min(max_num_seqs, kv_saturation_concurrency)`: where throughput
    /// stops growing.
    pub max_running: usize,
    /// Time to first token for a lone request (no prefix hit), excluding
    /// HTTP overhead.
    pub ttft_c1_s: f64,
    /// Inter-token latency of a lone request.
    pub itl_c1_s: f64,
    /// `max_running / decode_step(max_running)`, tokens/s, prefill ignored.
    pub decode_throughput_ceiling_tps: f64,
}

/// A point-in-time view of the engine, for tests and the demo.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimSnapshot {
    pub running: usize,
    pub waiting: usize,
    pub kv_cache_usage: f64,
    pub kv_blocks_used: usize,
    pub preemptions: u64,
    pub prefix_cache_queries: u64,
    pub prefix_cache_hits: u64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub finished_aborted: u64,
}

/// GPU activity, as exponentially weighted averages over ~1 s of wall time.
#[derive(Debug)]
struct Activity {
    last: Instant,
    busy: f64,
    prefill: f64,
}

const ACTIVITY_TAU_S: f64 = 1.0;

/// Activity below this reads as none: the GPU page of an idle engine is
/// then constant (DCGM's integer utilisation reads 0 there too), so two
/// scrapers sampling it at different instants see the same values.
const IDLE_ACTIVITY: f64 = 0.005;

/// (busy, prefill) decayed over `idle_s` seconds without a step; zero once
/// busy has decayed under [`IDLE_ACTIVITY`].
fn decayed_activity(busy: f64, prefill: f64, idle_s: f64) -> (f64, f64) {
    let k = (-idle_s / ACTIVITY_TAU_S).exp();
    if busy * k < IDLE_ACTIVITY {
        (0.0, 0.0)
    } else {
        (busy * k, prefill * k)
    }
}

/// State shared between the engine task and the HTTP handlers.
pub(crate) struct Shared {
    stats: Mutex<stats::Stats>,
    slowdown_bits: AtomicU64,
    failing: AtomicBool,
    /// `POST /reset_prefix_cache` asked; the engine resets before its next
    /// request.
    reset_prefix_cache: AtomicBool,
    activity: Mutex<Activity>,
}

impl Shared {
    pub(crate) fn new(bounds: HashMap<String, Vec<f64>>) -> Shared {
        Shared {
            stats: Mutex::new(stats::Stats::new(bounds)),
            slowdown_bits: AtomicU64::new(1.0f64.to_bits()),
            failing: AtomicBool::new(false),
            reset_prefix_cache: AtomicBool::new(false),
            activity: Mutex::new(Activity {
                last: Instant::now(),
                busy: 0.0,
                prefill: 0.0,
            }),
        }
    }

    /// Locks the stats; a panic elsewhere must not take `/metrics` down, so
    /// a poisoned lock is used as is.
    pub(crate) fn lock_stats(&self) -> MutexGuard<'_, stats::Stats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Folds one step into the activity averages: `busy_s` of the elapsed
    /// wall time since the last record was spent computing, `prefill_share`
    /// of it on prefill.
    pub(crate) fn record_activity(&self, _wall_s: f64, busy_s: f64, prefill_share: f64) {
        let mut a = self.activity.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let dt = (now - a.last).as_secs_f64().max(1e-6);
        let alpha = 1.0 - (-dt / ACTIVITY_TAU_S).exp();
        let frac = (busy_s / dt).clamp(0.0, 1.0);
        a.busy = a.busy * (1.0 - alpha) + frac * alpha;
        a.prefill = a.prefill * (1.0 - alpha) + frac * prefill_share * alpha;
        a.last = now;
    }

    /// Current (busy, prefill) fractions, decayed over the idle time since
    /// the last step.
    pub(crate) fn activity(&self) -> (f64, f64) {
        let a = self.activity.lock().unwrap_or_else(|e| e.into_inner());
        let idle = (Instant::now() - a.last).as_secs_f64();
        decayed_activity(a.busy, a.prefill, idle)
    }
}

pub(crate) struct SimInner {
    pub(crate) config: SimConfig,
    pub(crate) shared: Arc<Shared>,
    pub(crate) tx: mpsc::UnboundedSender<engine::NewSeq>,
    pub(crate) template: expo::Template,
    pub(crate) page: expo::PageConfig,
    pub(crate) start_unix: f64,
    pub(crate) request_counter: AtomicU64,
    pub(crate) gpu: gpu::GpuState,
    /// The serial frontend stage ([`Profile::frontend_per_request_s`]):
    /// one request holds it at a time.
    pub(crate) frontend: tokio::sync::Mutex<()>,
    /// The NIXL transfers of [`SimConfig::pd_spec`].
    pub(crate) disagg: disagg::DisaggState,
}

/// A running simulated server. Cheap to clone; the engine task lives while
/// any `Sim` or router made from it is alive.
#[derive(Clone)]
pub struct Sim {
    inner: Arc<SimInner>,
}

// The simulator is a server of its own: its pages carry its clock.
#[allow(clippy::disallowed_methods)]
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Sim {
    /// Validates `config` and spawns the engine task on the current tokio
    /// runtime.
    pub fn start(config: SimConfig) -> Result<Sim, SimError> {
        config.validate()?;
        let handle = tokio::runtime::Handle::try_current().map_err(|_| SimError::NoRuntime)?;
        let template = match config.flavor {
            Flavor::Vllm => expo::Template::vllm(),
            Flavor::Nim => expo::Template::nim(),
            Flavor::Llamacpp => expo::Template::llamacpp(),
        };
        let shared = Arc::new(Shared::new(template.histogram_bounds()));
        let (tx, rx) = mpsc::unbounded_channel();
        let core = engine::EngineCore::new(config.profile.clone(), config.seed, shared.clone());
        handle.spawn(engine::run(core, rx, config.time_scale));
        let start_unix = unix_now();
        let p = &config.profile;
        let page = expo::PageConfig {
            model: config.model.clone(),
            block_size: p.block_size,
            num_gpu_blocks: p.num_gpu_blocks,
            enable_prefix_caching: p.enable_prefix_caching,
            max_model_len: p.max_model_len,
            max_num_seqs: p.max_num_seqs,
            kv_bytes_total: p.kv_bytes_per_block * p.num_gpu_blocks as u64,
            start_unix,
            report_all_cached: config.report_all_cached,
        };
        let gpu = gpu::GpuState::new(&config);
        Ok(Sim {
            inner: Arc::new(SimInner {
                config,
                shared,
                tx,
                template,
                page,
                start_unix,
                request_counter: AtomicU64::new(0),
                gpu,
                frontend: tokio::sync::Mutex::new(()),
                disagg: disagg::DisaggState::new(),
            }),
        })
    }

    pub fn config(&self) -> &SimConfig {
        &self.inner.config
    }

    /// The OpenAI-compatible API plus `/metrics` (and `/v1/metrics` for NIM),
    /// `/v1/models`, `/tokenize`, `/version`, `/health`.
    pub fn router(&self) -> axum::Router {
        api::router(self.inner.clone())
    }

    /// A dcgm-exporter page for the simulated GPUs at `/metrics`.
    pub fn gpu_router(&self) -> axum::Router {
        api::gpu_router(self.inner.clone())
    }

    /// Multiplies every step's cost by `factor` from the next step on (1.0 =
    /// normal), e.g. to make an alert fire. Non-finite or negative factors
    /// are ignored.
    pub fn set_slowdown(&self, factor: f64) {
        if factor.is_finite() && factor >= 0.0 {
            self.inner
                .shared
                .slowdown_bits
                .store(factor.to_bits(), Ordering::Relaxed);
        }
    }

    /// While `true`, new generation requests are answered with HTTP 500
    /// (running ones finish normally).
    pub fn set_failing(&self, failing: bool) {
        self.inner.shared.failing.store(failing, Ordering::Relaxed);
    }

    /// The engine-side counters and gauges right now.
    pub fn snapshot(&self) -> SimSnapshot {
        let st = self.inner.shared.lock_stats();
        SimSnapshot {
            running: st.running,
            waiting: st.waiting,
            kv_cache_usage: st.kv_usage,
            kv_blocks_used: st.kv_blocks_used,
            preemptions: st.preemptions,
            prefix_cache_queries: st.prefix_queries,
            prefix_cache_hits: st.prefix_hits,
            prompt_tokens: st.prompt_tokens,
            generation_tokens: st.generation_tokens,
            finished_aborted: st.finished_abort,
        }
    }

    /// The engine metrics page, as `/metrics` serves it.
    pub fn metrics_text(&self) -> String {
        api::render_metrics(&self.inner)
    }

    /// The GPU page, as `gpu_router()`'s `/metrics` serves it.
    pub fn gpu_metrics_text(&self) -> String {
        gpu::render(&self.inner)
    }
}

impl Sim {
    /// Serves this simulator's [`Sim::router`] on `listener` as its flavor's
    /// server does on the wire: [`serve`] for vLLM and NIM; for llama.cpp,
    /// every connection is closed once a streamed (chunked) response has
    /// been written, while that response still advertised `Keep-Alive` —
    /// the race a client's connection pool must survive.
    pub async fn serve(&self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        match self.inner.config.flavor {
            Flavor::Vllm | Flavor::Nim => serve(listener, self.router()).await,
            Flavor::Llamacpp => {
                axum::serve(wire::ClosingListener::new(listener), self.router()).await
            }
        }
    }
}

/// Serves `router` on `listener` with `TCP_NODELAY` set on every accepted
/// connection: without it, Nagle's algorithm holds the first small SSE
/// event back until the client's delayed ACK (~40 ms measured here), which
/// would show up as fake TTFT.
pub async fn serve(listener: tokio::net::TcpListener, router: axum::Router) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, router).await
}

/// [`serve`] until `shutdown` completes (e.g. Ctrl-C), then stops accepting
/// and lets open requests finish.
pub async fn serve_with_shutdown(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activity_decays_then_reads_idle_exactly() {
        let (busy, prefill) = decayed_activity(0.8, 0.2, 1.0);
        assert!((busy - 0.8 * (-1.0f64).exp()).abs() < 1e-12);
        assert!((prefill - 0.2 * (-1.0f64).exp()).abs() < 1e-12);
        // ln(0.8 / 0.005) ≈ 5.1 time constants later the page stops moving.
        assert_eq!(decayed_activity(0.8, 0.2, 5.2), (0.0, 0.0));
        assert_eq!(decayed_activity(0.8, 0.2, 60.0), (0.0, 0.0));
        assert_eq!(decayed_activity(0.0, 0.0, 0.0), (0.0, 0.0));
    }

    #[test]
    fn flavor_parses() {
        assert_eq!("vllm".parse::<Flavor>().ok(), Some(Flavor::Vllm));
        assert_eq!("nim".parse::<Flavor>().ok(), Some(Flavor::Nim));
        assert_eq!("llamacpp".parse::<Flavor>().ok(), Some(Flavor::Llamacpp));
        assert!(matches!(
            "tgi".parse::<Flavor>(),
            Err(SimError::UnknownFlavor(_))
        ));
    }

    #[test]
    fn start_refuses_bad_configs_and_needs_a_runtime() {
        let ok = SimConfig::new(Profile::zero_cost());
        assert!(matches!(Sim::start(ok.clone()), Err(SimError::NoRuntime)));
        let mut bad = ok.clone();
        bad.time_scale = 0.0;
        assert!(matches!(
            bad.validate(),
            Err(SimError::InvalidConfig {
                field: "time_scale",
                ..
            })
        ));
        let mut bad = ok;
        bad.profile.max_model_len = bad.profile.num_gpu_blocks * bad.profile.block_size + 1;
        assert!(matches!(
            bad.validate(),
            Err(SimError::InvalidProfile {
                field: "max_model_len",
                ..
            })
        ));
    }

    #[test]
    fn predictions_scale_with_time_scale() {
        let mut cfg =
            SimConfig::new(Profile::named("decode-slow").unwrap_or_else(|e| panic!("{e}")));
        let shape = Shape::new(512, 128);
        let at1 = cfg.predict(shape);
        cfg.time_scale = 10.0;
        let at10 = cfg.predict(shape);
        assert!((at1.itl_c1_s - 0.042).abs() < 1e-12);
        assert!((at10.itl_c1_s - 0.0042).abs() < 1e-12);
        assert!(
            (at10.decode_throughput_ceiling_tps / at1.decode_throughput_ceiling_tps - 10.0).abs()
                < 1e-9
        );
        assert_eq!(
            at1.kv_saturation_concurrency,
            at10.kv_saturation_concurrency
        );
    }
}
