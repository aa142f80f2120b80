//! A sweep's settings: the ladder of loads, the hard stop limits, the
//! cancel handle and everything else [`run_sweep`](super::run_sweep) takes,
//! with DESIGN.md's defaults, validation and the JSON stored with a sweep.
//! Pure data: nothing here sends a request or touches the store.

use std::sync::Arc;
use std::time::Duration;

use llmwatch_core::analysis::{AnalysisConfig, Load, Objectives, Price};
use llmwatch_probe::conversation::MultiTurn;
use llmwatch_probe::{Api, PromptKind, Secret, SelfCheckLimits, Shape, Spin};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::SweepError;
use llmwatch_config::join_url;

/// The concurrency ladder of DESIGN.md's method.
pub const DEFAULT_CONCURRENCY_LADDER: &[u32] = &[1, 2, 4, 8, 16, 32, 64];
/// The highest load a sweep may apply unless raised on purpose: a sweep is
/// meant to find a knee, not to knock a production server over.
pub const DEFAULT_MAX_CONCURRENCY: u32 = 64;
/// Measured requests per step, at least: enough for a p95 that means
/// something (19 of 20 below it).
pub const DEFAULT_REQUESTS_PER_STEP: u64 = 100;
/// Measured requests per concurrency slot, at least (see
/// [`SweepSettings::requests_per_slot`]).
pub const DEFAULT_REQUESTS_PER_SLOT: u64 = 4;
/// Each step lasts at least this long, so several scrapes land inside it.
pub const DEFAULT_MIN_STEP_DURATION: Duration = Duration::from_secs(10);
/// Scrape interval during a step: vLLM updates its gauges every engine step,
/// so one second resolves a 10 s step into ten readings.
pub const DEFAULT_SCRAPE_INTERVAL: Duration = Duration::from_secs(1);
/// Hard stop: a step with more failed requests than this fraction ends the
/// sweep (the server is failing, more load only hurts it).
pub const DEFAULT_STOP_ERROR_RATE: f64 = 0.05;
/// Hard stop: a step whose p95 TTFT passes this ends the sweep (far past any
/// chat objective; higher steps would only queue longer).
pub const DEFAULT_STOP_TTFT_P95: Duration = Duration::from_secs(30);

/// The loads of a sweep, lowest first; one kind per sweep, so steps can be
/// compared with each other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ladder {
    /// Closed loop: this many requests in flight per step.
    Concurrency(Vec<u32>),
    /// Open loop: requests per second per step (Poisson arrivals by
    /// default), in-flight requests capped by the sweep's concurrency cap.
    Rate(Vec<f64>),
}

impl Ladder {
    /// The loads in step order.
    pub fn loads(&self) -> Vec<Load> {
        match self {
            Ladder::Concurrency(c) => c.iter().map(|c| Load::Concurrency(*c)).collect(),
            Ladder::Rate(r) => r.iter().map(|r| Load::RequestRate(*r)).collect(),
        }
    }

    /// Parses `1,2,4,8` (concurrency) or rates like `0.5,1,2`.
    pub fn parse_concurrency(text: &str) -> Result<Ladder, SweepError> {
        let values = split(text)
            .map(|v| {
                v.parse::<u32>()
                    .map_err(|_| SweepError::Ladder(format!("{v:?} is not a whole concurrency")))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        Ok(Ladder::Concurrency(values))
    }

    /// Parses a request-rate ramp, e.g. `1,2,4,8` requests per second.
    pub fn parse_rate(text: &str) -> Result<Ladder, SweepError> {
        let values = split(text)
            .map(|v| {
                v.parse::<f64>()
                    .map_err(|_| SweepError::Ladder(format!("{v:?} is not a request rate")))
            })
            .collect::<Result<Vec<f64>, _>>()?;
        Ok(Ladder::Rate(values))
    }
}

fn split(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|v| !v.is_empty())
}

/// When a sweep gives up early.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StopLimits {
    /// A step whose error rate passes this ends the sweep.
    pub max_error_rate: f64,
    /// A step whose client p95 TTFT passes this ends the sweep.
    pub ttft_p95: Option<Duration>,
}

impl Default for StopLimits {
    fn default() -> Self {
        StopLimits {
            max_error_rate: DEFAULT_STOP_ERROR_RATE,
            ttft_p95: Some(DEFAULT_STOP_TTFT_P95),
        }
    }
}

/// Everything a sweep needs. [`SweepSettings::new`] gives DESIGN.md's
/// defaults for a URL.
#[derive(Debug, Clone)]
pub struct SweepSettings {
    /// The target's base URL (`http://host:8000`, a trailing `/v1` is fine).
    pub url: String,
    /// The daemon's name for the target, if it has one: the step probes are
    /// stored under it (without a name they are not stored, so a one-off
    /// sweep does not invent a target on the status page).
    pub target_name: Option<String>,
    /// `/metrics` URL; default `<url>/metrics`.
    pub metrics_url: Option<String>,
    /// A dcgm-exporter page for the target's GPUs.
    pub gpu_url: Option<String>,
    pub api_key: Option<Secret>,
    /// `None`: the first model of `/v1/models`.
    pub model: Option<String>,
    pub api: Api,
    pub shape: Shape,
    pub prompt: PromptKind,
    /// Conversations instead of one-shot requests
    /// (`--workload multi-turn:TURNS[,think=DUR]`): each level of a
    /// concurrency ladder is that many concurrent conversations, each
    /// session on one connection; `shape` is each new turn's input and
    /// each answer's output.
    pub conversation: Option<MultiTurn>,
    /// The lengths a target served (`--workload observed:TARGET[:RANGE]`),
    /// drawn from its histograms before the sweep: every step sends them in
    /// turn, through `/v1/completions`, in place of `shape`.
    pub observed: Option<ObservedMix>,
    pub temperature: f32,
    pub ladder: Ladder,
    /// The highest concurrency (and, for a rate ladder, the most requests in
    /// flight) the sweep may use; a ladder above it is refused.
    pub max_concurrency: u32,
    pub requests_per_step: u64,
    /// Measured requests per concurrency slot, at least: a step also sends
    /// `requests_per_slot × concurrency` requests, because in a closed loop
    /// each client must finish several requests before the step is in steady
    /// state — with fewer, the warm-up ramp and the drain at the end (when
    /// slots empty one by one) would be most of what it measured. Closed
    /// loop only: a rate step's length comes from `min_step_duration`.
    pub requests_per_slot: u64,
    pub min_step_duration: Duration,
    /// Warm-up requests per step, left out of its statistics; `None`: one
    /// per concurrency slot (one second of arrivals for a rate).
    pub warmup_requests: Option<u64>,
    /// Gamma shape of the open-loop arrivals (1 = Poisson).
    pub burstiness: f64,
    pub objectives: Objectives,
    pub stop: StopLimits,
    pub self_check: SelfCheckLimits,
    pub scrape_interval: Duration,
    pub analysis: AnalysisConfig,
    /// `key=value` fields for the experiment card (card field names set the
    /// field, anything else is a user field).
    pub card: Vec<(String, String)>,
    /// Seeds arrivals and prompt bodies; nonces stay unique per sweep.
    pub seed: u64,
    /// Send the same prompts as earlier sweeps with this seed (deliberate
    /// prefix-cache experiments).
    pub reuse_prompts: bool,
    /// Deadline for one request (connect to end of stream).
    pub request_timeout: Duration,
    /// Whether the measuring thread busy-polls during steps (see
    /// [`llmwatch_probe::measure`]).
    pub spin: Spin,
    /// The longest the whole sweep may run; past it, the step in flight is
    /// aborted and the sweep ends `stopped` with what it measured.
    pub max_duration: Option<Duration>,
    /// Lets another task cancel the sweep (the API, the page, shutdown).
    pub cancel: SweepCancel,
    /// What the GPUs cost: each step's cost per million output tokens
    /// comes from it (see `llmwatch_core::analysis::step_economics`).
    pub price: Price,
}

/// A handle that cancels a running sweep: the step in flight is dropped,
/// which aborts its requests, and the sweep ends `cancelled` with the steps
/// it measured. Clones share one state.
#[derive(Debug, Clone)]
pub struct SweepCancel {
    state: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for SweepCancel {
    fn default() -> Self {
        SweepCancel {
            state: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }
}

impl SweepCancel {
    pub fn cancel(&self) {
        self.state.send_replace(true);
    }

    pub fn is_cancelled(&self) -> bool {
        *self.state.borrow()
    }

    /// Resolves once the sweep is cancelled.
    pub async fn cancelled(&self) {
        let mut receiver = self.state.subscribe();
        // Err: the sender is gone, which cannot happen while `self` holds it.
        let _ = receiver.wait_for(|cancelled| *cancelled).await;
    }
}

impl SweepSettings {
    /// DESIGN.md's defaults: chat API, 512×128 random prompts, concurrency
    /// 1…64, 100 requests and 10 s per step, p95 TTFT ≤ 1 s and p95 ITL ≤
    /// 50 ms objectives.
    pub fn new(url: impl Into<String>) -> SweepSettings {
        SweepSettings {
            url: url.into(),
            target_name: None,
            metrics_url: None,
            gpu_url: None,
            api_key: None,
            model: None,
            api: Api::Chat,
            shape: Shape {
                input_tokens: 512,
                output_tokens: 128,
            },
            prompt: PromptKind::Random,
            conversation: None,
            observed: None,
            temperature: 0.0,
            ladder: Ladder::Concurrency(DEFAULT_CONCURRENCY_LADDER.to_vec()),
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            requests_per_step: DEFAULT_REQUESTS_PER_STEP,
            requests_per_slot: DEFAULT_REQUESTS_PER_SLOT,
            min_step_duration: DEFAULT_MIN_STEP_DURATION,
            warmup_requests: None,
            burstiness: 1.0,
            objectives: Objectives {
                ttft_p95: Some(1.0),
                itl_p95: Some(0.050),
                ..Objectives::default()
            },
            stop: StopLimits::default(),
            self_check: SelfCheckLimits::default(),
            scrape_interval: DEFAULT_SCRAPE_INTERVAL,
            analysis: AnalysisConfig::default(),
            card: Vec::new(),
            seed: 0,
            reuse_prompts: false,
            request_timeout: Duration::from_secs(600),
            spin: Spin::Auto,
            max_duration: None,
            cancel: SweepCancel::default(),
            price: Price::default(),
        }
    }

    /// The `/metrics` URL to scrape: the configured one or the default.
    pub(super) fn metrics_url(&self) -> String {
        self.metrics_url
            .clone()
            .unwrap_or_else(|| default_metrics_url(&self.url))
    }

    /// Checks the ladder against the cap and every number for sense, so a
    /// sweep is refused before it sends anything.
    pub fn validate(&self) -> Result<(), SweepError> {
        let loads = self.ladder.loads();
        if loads.is_empty() {
            return Err(SweepError::Ladder("the ladder has no steps".into()));
        }
        if self.max_concurrency == 0 {
            return Err(SweepError::Ladder(
                "--max-concurrency must be at least 1".into(),
            ));
        }
        for load in &loads {
            match *load {
                Load::Concurrency(0) => {
                    return Err(SweepError::Ladder(
                        "a concurrency of 0 sends nothing".into(),
                    ))
                }
                Load::Concurrency(c) if c > self.max_concurrency => {
                    return Err(SweepError::AboveCap {
                        load: c,
                        cap: self.max_concurrency,
                    })
                }
                Load::RequestRate(r) if !(r.is_finite() && r > 0.0) => {
                    return Err(SweepError::Ladder(format!(
                        "request rate {r} is not a positive number"
                    )))
                }
                _ => {}
            }
        }
        if self.conversation.is_some() && matches!(self.ladder, Ladder::Rate(_)) {
            return Err(SweepError::Settings(
                "workload multi-turn needs a concurrency ladder (each level is that many concurrent conversations), not --rate".into(),
            ));
        }
        if let Some(mix) = &self.observed {
            if self.conversation.is_some() {
                return Err(SweepError::Settings(
                    "workload: observed and multi-turn are two workloads; choose one".into(),
                ));
            }
            if mix.shapes.is_empty() || mix.shapes.iter().any(|(i, o)| *i == 0 || *o == 0) {
                return Err(SweepError::Settings(format!(
                    "workload {}: no lengths drawn, or a length of 0",
                    mix.source
                )));
            }
        }
        if self.requests_per_step == 0 {
            return Err(SweepError::Settings(
                "requests per step must be at least 1".into(),
            ));
        }
        if !(self.burstiness.is_finite() && self.burstiness > 0.0) {
            return Err(SweepError::Settings(format!(
                "burstiness must be a positive number, got {}",
                self.burstiness
            )));
        }
        if !(self.stop.max_error_rate.is_finite()
            && (0.0..=1.0).contains(&self.stop.max_error_rate))
        {
            return Err(SweepError::Settings(format!(
                "the stop error rate must be within 0..1, got {}",
                self.stop.max_error_rate
            )));
        }
        if self.scrape_interval.is_zero() {
            return Err(SweepError::Settings(
                "the scrape interval must be positive".into(),
            ));
        }
        Ok(())
    }

    /// The settings as stored with the sweep (no secrets).
    pub fn to_json(&self) -> Value {
        json!({
            "url": self.url,
            "target_name": self.target_name,
            "metrics_url": self.metrics_url(),
            "gpu_url": self.gpu_url,
            "model": self.model,
            "api": self.api,
            "shape": self.shape.to_string(),
            "prompt": self.prompt.label(),
            "workload": match &self.observed {
                Some(mix) => Some(mix.source.clone()),
                None => self.conversation.map(|c| c.to_string()),
            },
            "temperature": self.temperature,
            "ladder": self.ladder,
            "max_concurrency": self.max_concurrency,
            "requests_per_step": self.requests_per_step,
            "requests_per_slot": self.requests_per_slot,
            "min_step_duration_s": self.min_step_duration.as_secs_f64(),
            "warmup_requests": self.warmup_requests,
            "burstiness": self.burstiness,
            "objectives": {
                "ttft_p95_s": self.objectives.ttft_p95,
                "itl_p95_s": self.objectives.itl_p95,
                "e2e_p95_s": self.objectives.e2e_p95,
                "max_error_rate": self.objectives.max_error_rate,
            },
            "stop": {
                "max_error_rate": self.stop.max_error_rate,
                "ttft_p95_s": self.stop.ttft_p95.map(|d| d.as_secs_f64()),
            },
            "self_check": self.self_check,
            "price": self.price,
            // The thresholds it was judged with, so a page judges it again
            // exactly as the runner did.
            "analysis": self.analysis,
            "scrape_interval_s": self.scrape_interval.as_secs_f64(),
            "seed": self.seed,
            "reuse_prompts": self.reuse_prompts,
            "spin": self.spin,
        })
    }
}

/// A server's metrics page when none is configured: `/metrics` at its root
/// (the base URL may end in `/v1`).
pub fn default_metrics_url(base_url: &str) -> String {
    join_url(
        base_url.trim_end_matches('/').trim_end_matches("/v1"),
        "/metrics",
    )
}

/// Request lengths drawn from what a target served (see
/// `llmwatch_core::observed`), named by the workload that drew them.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedMix {
    /// `observed:TARGET:RANGE`, as the card and the stored settings say.
    pub source: String,
    /// (input, output) tokens, sent in turn.
    pub shapes: Vec<(u32, u32)>,
}

impl ObservedMix {
    /// Lengths drawn for a sweep's steps to send in turn.
    pub const SHAPES: usize = 4096;

    /// [`ObservedMix::SHAPES`] lengths drawn from `observed` (the ladder
    /// sets the load: its rate is not used), named `source`.
    pub fn drawn(source: String, observed: &llmwatch_core::observed::ObservedWorkload) -> Self {
        let shapes = observed
            .draw(Self::SHAPES, 0.0, 0, None)
            .into_iter()
            .map(|d| (d.input_tokens, d.output_tokens))
            .collect();
        ObservedMix { source, shapes }
    }

    /// The medians of the two lengths: the shape a step reports.
    pub fn median_shape(&self) -> Shape {
        let median = |mut v: Vec<u32>| {
            v.sort_unstable();
            v.get(v.len() / 2).copied().unwrap_or(1)
        };
        Shape {
            input_tokens: median(self.shapes.iter().map(|s| s.0).collect()),
            output_tokens: median(self.shapes.iter().map(|s| s.1).collect()),
        }
    }

    /// The mix with no request longer than `context` tokens in all
    /// (output shortened first, leaving at least one of each).
    pub fn capped(&self, context: Option<u64>) -> ObservedMix {
        let limit = context.map_or(u32::MAX, |c| u32::try_from(c).unwrap_or(u32::MAX));
        let mut mix = self.clone();
        if limit >= 2 {
            for (input, output) in &mut mix.shapes {
                *input = (*input).min(limit - 1);
                *output = (*output).min(limit - *input);
            }
        }
        mix
    }

    /// The longest request (input + output): what the context must hold.
    pub fn longest(&self) -> Shape {
        let (input_tokens, output_tokens) = self
            .shapes
            .iter()
            .copied()
            .max_by_key(|(i, o)| u64::from(*i) + u64::from(*o))
            .unwrap_or((1, 1));
        Shape {
            input_tokens,
            output_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_above_the_cap_is_refused_with_the_way_out() {
        let mut s = SweepSettings::new("http://127.0.0.1:1");
        s.ladder = Ladder::parse_concurrency("1, 2,4,128").expect("parses");
        let err = s.validate().expect_err("128 > 64");
        let text = err.to_string();
        assert!(
            text.contains("128") && text.contains("--max-concurrency"),
            "{text}"
        );
        s.max_concurrency = 128;
        s.validate().expect("cap raised on purpose");
        assert!(Ladder::parse_concurrency("1,x").is_err());
        assert!(Ladder::parse_rate("0.5,1").is_ok());
        s.ladder = Ladder::Rate(vec![0.0]);
        assert!(s.validate().is_err());
        s.ladder = Ladder::Concurrency(vec![]);
        assert!(s.validate().is_err());
    }

    #[test]
    fn conversations_need_a_concurrency_ladder() {
        let mut s = SweepSettings::new("http://127.0.0.1:1");
        s.conversation = Some(MultiTurn::parse("multi-turn:3").expect("parses"));
        s.validate().expect("concurrency ladder");
        assert_eq!(s.to_json()["workload"], "multi-turn:3");
        s.ladder = Ladder::parse_rate("1,2").expect("parses");
        let err = s.validate().expect_err("rate ladder").to_string();
        assert!(
            err.contains("multi-turn") && err.contains("--rate"),
            "{err}"
        );
    }
}
