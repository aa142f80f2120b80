//! Fitting the simulator's cost model to a real server's sweep, and the
//! profile file that carries the result.
//!
//! The cost model has four parameters ([`CostParams`], beside the
//! workload's lock-step share): `step_base_s`,
//! `prefill_per_token_s`, `decode_per_seq_s` (the engine, as
//! `src/engine.rs` charges them) and `frontend_per_request_s` (a serial
//! stage outside the engine). [`fit_cost_model`] finds the values whose
//! analytic predictions ([`predict_step`]) best match each measured step —
//! least squares on the relative errors of p50 TTFT, p50 ITL and output
//! throughput — with a Nelder–Mead search from several starts. The
//! structure (blocks, `max_num_seqs`, token budget, chunking) is the base
//! profile's and is not fitted: give it the server's own flags.
//!
//! **The analytic model** (engine seconds, closed-loop clients at
//! concurrency `C`, shape `in × out`, `R` sequences running, `k` prefill
//! chunks of the prompt, `f` the frontend's time). At `C = 1` it is
//! [`Profile::ttft_c1_s`] `+ f` and [`Profile::decode_step_s`]`(1)`; above,
//! it adds what the `C − 1` neighbours cost:
//!
//! * a decode step: `step(R) = step_base + decode_per_seq × R` — the p50
//!   ITL, with `R` the step's measured mean running requests where known (a
//!   step that carries a prefill is rarer than one in two while
//!   `1 − e^(−R·k/out) ≤ ½`; past that the mean prefill share is added);
//! * a request's engine time once admitted:
//!   `E(R) = wait + k·(step_base + decode_per_seq·(R−1)) + in·prefill_per_token +
//!   (out − 1)·(step(R) + prefill_per_token·in·(R − 1)/out)`, where `wait`
//!   is half a step (the request lands in a step already running);
//! * throughput `X = min(C / (f + E(R)), R_max / E(R_max), 1 / f)` requests
//!   per second (Little's law in the engine; the frontend serves one request
//!   at a time), output tokens/s `X × out`; `R = min(C, R_max)`, lowered to
//!   `X·E(R)` while the frontend holds clients;
//! * p50 TTFT `= f + wait + k·(…) + in·prefill_per_token + queue`, the queue
//!   (the engine's past `R_max`, the frontend's once it is the bottleneck)
//!   from Little's law, `max(0, C/X − f − E(R))`, and never below an M/D/1
//!   frontend's wait `(1 − 1/C)·ρf / 2(1 − ρ)` at `ρ = X·f`.
//!
//! Closed-loop clients with equal lengths tend to run in lock-step: they
//! finish in the same step and their next prompts are prefilled together,
//! the median one after the steps that hold the first half of them. The
//! model blends that case with the spread one above by a fitted share,
//! [`CostParams::arrival_sync`] (TTFT, engine time and ITL alike); both
//! agree at `C = 1`.
//!
//! With one shape in the sweep, `f` and `in × prefill_per_token` both add
//! to every TTFT and are told apart only by the throughput at high
//! concurrency: expect their split to be loose and their sum tight.

use serde::{Deserialize, Serialize};

use crate::vllm_args::VllmSettings;
use crate::{Profile, Shape, SimError};

/// One measured step of a sweep, as the fit reads it. Latencies in
/// seconds, throughput in output tokens per second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitStep {
    /// Closed-loop clients.
    pub concurrency: f64,
    /// Mean prompt tokens per request.
    pub input_tokens: f64,
    /// Mean output tokens per request.
    pub output_tokens: f64,
    pub ttft_p50_s: Option<f64>,
    pub itl_p50_s: Option<f64>,
    pub output_tps: Option<f64>,
    /// The server's mean running requests over the step, where known.
    pub running_mean: Option<f64>,
}

/// The fitted parameters (engine seconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CostParams {
    pub step_base_s: f64,
    pub prefill_per_token_s: f64,
    pub decode_per_seq_s: f64,
    pub frontend_per_request_s: f64,
    /// Share (0..1) of the model's arrivals that come in lock-step: closed-
    /// loop clients with equal lengths finish together and send their next
    /// prompts together, to be prefilled in the same steps, unless
    /// something spreads them. A property of the swept workload, fitted
    /// beside the costs and not part of the profile (the simulator behaves
    /// either way by itself).
    #[serde(default)]
    pub arrival_sync: f64,
}

impl CostParams {
    /// A profile's costs, arrivals spread.
    pub fn of(p: &Profile) -> CostParams {
        CostParams {
            step_base_s: p.step_base_s,
            prefill_per_token_s: p.prefill_per_token_s,
            decode_per_seq_s: p.decode_per_seq_s,
            frontend_per_request_s: p.frontend_per_request_s,
            arrival_sync: 0.0,
        }
    }

    /// `base` with these costs.
    pub fn apply(&self, base: &Profile) -> Profile {
        Profile {
            step_base_s: self.step_base_s,
            prefill_per_token_s: self.prefill_per_token_s,
            decode_per_seq_s: self.decode_per_seq_s,
            frontend_per_request_s: self.frontend_per_request_s,
            ..base.clone()
        }
    }

    fn to_array(self) -> [f64; 5] {
        [
            self.step_base_s,
            self.prefill_per_token_s,
            self.decode_per_seq_s,
            self.frontend_per_request_s,
            self.arrival_sync,
        ]
    }

    fn from_array(a: [f64; 5]) -> CostParams {
        CostParams {
            step_base_s: a[0],
            prefill_per_token_s: a[1],
            decode_per_seq_s: a[2],
            frontend_per_request_s: a[3],
            arrival_sync: a[4],
        }
    }
}

/// What the analytic model predicts for one step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepPrediction {
    pub ttft_p50_s: f64,
    pub itl_p50_s: f64,
    pub output_tps: f64,
    /// Sequences running on average.
    pub running: f64,
}

/// The analytic prediction for one step: `params`' costs on `structure`'s
/// blocks, `max_num_seqs` and token budget (see the module docs).
pub fn predict_step(params: &CostParams, structure: &Profile, step: &FitStep) -> StepPrediction {
    predict_with(params, structure, step)
}

fn predict_with(c: &CostParams, profile: &Profile, step: &FitStep) -> StepPrediction {
    let conc = step.concurrency.max(1.0);
    let input = step.input_tokens.max(0.0);
    let out = step.output_tokens.max(1.0);
    let shape = Shape::new(input.round() as usize, out.round() as usize);
    let r_max = profile.max_running(shape) as f64;
    let budget = profile.max_num_batched_tokens.max(1) as f64;
    let chunked = profile.enable_chunked_prefill;
    let chunks = if chunked {
        (input / budget).ceil().max(1.0)
    } else {
        1.0
    };
    // Steps that prefill `n` whole prompts arriving together, FIFO.
    let prefill_steps_for = |n: f64| {
        if chunked {
            (n * input / budget).ceil().max(1.0)
        } else {
            (n / (budget / input.max(1.0)).floor().max(1.0))
                .ceil()
                .max(1.0)
        }
    };
    let (sb, ppt, dps, f) = (
        c.step_base_s,
        c.prefill_per_token_s,
        c.decode_per_seq_s,
        c.frontend_per_request_s,
    );
    let sync = c.arrival_sync.clamp(0.0, 1.0);
    // Spread arrivals: each prompt lands in a running decode step.
    let ttft_spread = |r: f64| {
        let others = (r - 1.0).max(0.0);
        let wait = 0.5 * others.min(1.0) * (sb + dps * others);
        wait + chunks * (sb + dps * others) + input * ppt
    };
    let step_mean = |r: f64| sb + dps * r + ppt * input * (r - 1.0).max(0.0) / out;
    let engine_spread = |r: f64| ttft_spread(r) + (out - 1.0) * step_mean(r);
    // Lock-step arrivals: the `r` prompts are prefilled together, the
    // median one after the steps holding the first half of them.
    let ttft_sync = |r: f64| {
        let m = prefill_steps_for((r / 2.0).ceil().max(1.0));
        m * sb + ppt * (r * input).min(m * budget).max(input)
    };
    let engine_sync =
        |r: f64| prefill_steps_for(r) * sb + ppt * r * input + (out - 1.0) * (sb + dps * r);
    let ttft_engine = |r: f64| sync * ttft_sync(r) + (1.0 - sync) * ttft_spread(r);
    let engine_time = |r: f64| sync * engine_sync(r) + (1.0 - sync) * engine_spread(r);
    let throughput = |r: f64| {
        let mut x = conc / (f + engine_time(r)).max(1e-12);
        x = x.min(r_max / engine_time(r_max).max(1e-12));
        if f > 0.0 {
            x = x.min(1.0 / f);
        }
        x
    };
    // Sequences running: all clients up to R_max, fewer while the
    // frontend holds some (Little's law in the engine).
    let cap = conc.min(r_max);
    let mut running = cap;
    let mut x = throughput(running);
    for _ in 0..30 {
        running = cap.min(x * engine_time(running)).max(1.0_f64.min(cap));
        x = throughput(running);
    }
    // Waiting, from Little's law over the whole loop (the engine's queue
    // past R_max, the frontend's once it is the bottleneck), and never
    // less than an M/D/1 frontend's wait at this arrival rate.
    let rho = (x * f).min(0.99);
    // (A lone client never queues behind itself.)
    let frontend_wait = if f > 0.0 {
        (1.0 - 1.0 / conc) * rho * f / (2.0 * (1.0 - rho))
    } else {
        0.0
    };
    let queue = (conc / x.max(1e-12) - f - engine_time(running))
        .max(0.0)
        .max(frontend_wait);
    // The p50 ITL is a decode step of the sequences running, measured
    // where the server says.
    let decoding = step
        .running_mean
        .filter(|r| r.is_finite() && *r > 0.0)
        .unwrap_or(running);
    let steps_with_prefill = 1.0 - (-decoding * chunks / out).exp();
    let itl_spread = if steps_with_prefill > 0.5 {
        step_mean(decoding)
    } else {
        sb + dps * decoding
    };
    let itl = sync * (sb + dps * decoding) + (1.0 - sync) * itl_spread;
    StepPrediction {
        ttft_p50_s: f + ttft_engine(running) + queue,
        itl_p50_s: itl,
        output_tps: x * out,
        running,
    }
}

/// Signed relative errors `(predicted − observed) / observed` of one step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RelErrors {
    pub ttft_p50: Option<f64>,
    pub itl_p50: Option<f64>,
    pub output_tps: Option<f64>,
}

impl RelErrors {
    fn values(&self) -> impl Iterator<Item = f64> {
        [self.ttft_p50, self.itl_p50, self.output_tps]
            .into_iter()
            .flatten()
    }

    /// The largest of the three, in absolute value.
    pub fn max_abs(&self) -> Option<f64> {
        self.values().map(f64::abs).reduce(f64::max)
    }
}

/// One step of the sweep beside the fitted model's prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepFit {
    pub step: FitStep,
    pub predicted: StepPrediction,
    pub rel_err: RelErrors,
}

/// How well the fitted model reproduces the sweep it was fitted to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitReport {
    pub params: CostParams,
    pub steps: Vec<StepFit>,
    /// Root mean square of every relative error.
    pub rms_rel_err: f64,
    /// The largest relative error, in absolute value.
    pub max_abs_rel_err: f64,
    /// Mean absolute relative error per metric.
    pub mean_abs_rel_err: RelErrors,
    /// Where the steps came from (a file, a stored sweep id).
    #[serde(default)]
    pub source: Option<String>,
}

/// A fitted profile and its report.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    pub profile: Profile,
    pub report: FitReport,
}

/// Why a fit could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    #[error("no steps to fit")]
    NoSteps,
    #[error("step {index}: {why}")]
    InvalidStep { index: usize, why: String },
    #[error("the steps hold no p50 TTFT, p50 ITL or throughput to fit")]
    NothingObserved,
}

fn check_steps(steps: &[FitStep]) -> Result<(), FitError> {
    if steps.is_empty() {
        return Err(FitError::NoSteps);
    }
    for (index, s) in steps.iter().enumerate() {
        let bad = |why: String| Err(FitError::InvalidStep { index, why });
        if !(s.concurrency.is_finite() && s.concurrency >= 1.0) {
            return bad(format!(
                "concurrency must be at least 1, found {}",
                s.concurrency
            ));
        }
        if !(s.input_tokens.is_finite() && s.input_tokens >= 1.0) {
            return bad(format!(
                "input tokens must be at least 1, found {}",
                s.input_tokens
            ));
        }
        if !(s.output_tokens.is_finite() && s.output_tokens >= 1.0) {
            return bad(format!(
                "output tokens must be at least 1, found {}",
                s.output_tokens
            ));
        }
        for (name, v) in [
            ("p50 TTFT", s.ttft_p50_s),
            ("p50 ITL", s.itl_p50_s),
            ("output throughput", s.output_tps),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v > 0.0) {
                    return bad(format!("{name} must be a positive number, found {v}"));
                }
            }
        }
    }
    if steps
        .iter()
        .all(|s| s.ttft_p50_s.is_none() && s.itl_p50_s.is_none() && s.output_tps.is_none())
    {
        return Err(FitError::NothingObserved);
    }
    Ok(())
}

fn rel(pred: f64, obs: Option<f64>) -> Option<f64> {
    obs.map(|o| (pred - o) / o)
}

fn rel_errors(p: &StepPrediction, s: &FitStep) -> RelErrors {
    RelErrors {
        ttft_p50: rel(p.ttft_p50_s, s.ttft_p50_s),
        itl_p50: rel(p.itl_p50_s, s.itl_p50_s),
        output_tps: rel(p.output_tps, s.output_tps),
    }
}

/// The predictions of `params` on `structure` beside `steps`, and the
/// errors.
pub fn fit_report(params: &CostParams, structure: &Profile, steps: &[FitStep]) -> FitReport {
    let fitted: Vec<StepFit> = steps
        .iter()
        .map(|s| {
            let predicted = predict_with(params, structure, s);
            StepFit {
                step: s.clone(),
                rel_err: rel_errors(&predicted, s),
                predicted,
            }
        })
        .collect();
    let all: Vec<f64> = fitted.iter().flat_map(|f| f.rel_err.values()).collect();
    let rms = if all.is_empty() {
        0.0
    } else {
        (all.iter().map(|e| e * e).sum::<f64>() / all.len() as f64).sqrt()
    };
    let max_abs = all.iter().map(|e| e.abs()).fold(0.0, f64::max);
    let mean_abs = |pick: fn(&RelErrors) -> Option<f64>| {
        let v: Vec<f64> = fitted
            .iter()
            .filter_map(|f| pick(&f.rel_err))
            .map(f64::abs)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    FitReport {
        params: *params,
        mean_abs_rel_err: RelErrors {
            ttft_p50: mean_abs(|e| e.ttft_p50),
            itl_p50: mean_abs(|e| e.itl_p50),
            output_tps: mean_abs(|e| e.output_tps),
        },
        steps: fitted,
        rms_rel_err: rms,
        max_abs_rel_err: max_abs,
        source: None,
    }
}

/// Sum of squared relative errors of `c` over the steps.
fn cost(c: &CostParams, base: &Profile, steps: &[FitStep]) -> f64 {
    let mut sum = 0.0;
    for s in steps {
        let p = predict_with(c, base, s);
        for (pred, obs) in [
            (p.ttft_p50_s, s.ttft_p50_s),
            (p.itl_p50_s, s.itl_p50_s),
            (p.output_tps, s.output_tps),
        ] {
            if let Some(obs) = obs {
                let e = (pred - obs) / obs;
                sum += if e.is_finite() { e * e } else { 1e6 };
            }
        }
    }
    sum
}

/// A starting point from the data: ITL at the lowest load for the step
/// base, the ITL's rise with running sequences for the per-sequence cost,
/// the rest of the TTFT for prefill and frontend.
fn initial_guess(steps: &[FitStep]) -> CostParams {
    let mut by_load: Vec<&FitStep> = steps.iter().collect();
    by_load.sort_by(|a, b| a.concurrency.total_cmp(&b.concurrency));
    let itl_points: Vec<(f64, f64)> = by_load
        .iter()
        .filter_map(|s| {
            s.itl_p50_s
                .map(|itl| (s.running_mean.unwrap_or(s.concurrency), itl))
        })
        .collect();
    let (slope, intercept) = match itl_points.as_slice() {
        [] => (0.0, 0.01),
        [(_, y)] => (0.0, *y),
        points => {
            let n = points.len() as f64;
            let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
            let my = points.iter().map(|p| p.1).sum::<f64>() / n;
            let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
            let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
            let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
            (slope, my - slope * mx)
        }
    };
    let itl1 = itl_points.first().map_or(0.01, |p| p.1);
    let dps = slope.max(itl1 * 0.01);
    let sb = intercept.clamp(itl1 * 0.1, itl1);
    let first = by_load[0];
    let ttft1 = first.ttft_p50_s.unwrap_or(2.0 * sb);
    let rest = (ttft1 - sb).max(ttft1 * 0.1);
    CostParams {
        step_base_s: sb,
        prefill_per_token_s: 0.8 * rest / first.input_tokens.max(1.0),
        decode_per_seq_s: dps,
        frontend_per_request_s: 0.2 * rest,
        arrival_sync: 0.5,
    }
}

/// Nelder–Mead minimisation of `f` from `x0` with initial steps `step`.
fn nelder_mead<const N: usize>(
    f: &dyn Fn(&[f64; N]) -> f64,
    x0: [f64; N],
    step: f64,
    iterations: usize,
) -> ([f64; N], f64) {
    let mut simplex: Vec<([f64; N], f64)> = Vec::with_capacity(N + 1);
    simplex.push((x0, f(&x0)));
    for i in 0..N {
        let mut x = x0;
        x[i] += if x[i].abs() > 1e-9 { step * x[i] } else { step };
        simplex.push((x, f(&x)));
    }
    for _ in 0..iterations {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (best, worst) = (simplex[0].1, simplex[N].1);
        if (worst - best).abs() <= 1e-15 * (1.0 + best.abs()) {
            break;
        }
        let mut centroid = [0.0; N];
        for (x, _) in &simplex[..N] {
            for k in 0..N {
                centroid[k] += x[k] / N as f64;
            }
        }
        let towards = |t: f64| {
            let mut x = [0.0; N];
            for k in 0..N {
                x[k] = centroid[k] + t * (simplex[N].0[k] - centroid[k]);
            }
            x
        };
        let xr = towards(-1.0);
        let fr = f(&xr);
        if fr < simplex[0].1 {
            let xe = towards(-2.0);
            let fe = f(&xe);
            simplex[N] = if fe < fr { (xe, fe) } else { (xr, fr) };
        } else if fr < simplex[N - 1].1 {
            simplex[N] = (xr, fr);
        } else {
            let xc = if fr < simplex[N].1 {
                towards(-0.5)
            } else {
                towards(0.5)
            };
            let fc = f(&xc);
            if fc < simplex[N].1.min(fr) {
                simplex[N] = (xc, fc);
            } else {
                let x_best = simplex[0].0;
                for (x, fx) in simplex.iter_mut().skip(1) {
                    for k in 0..N {
                        x[k] = x_best[k] + 0.5 * (x[k] - x_best[k]);
                    }
                    *fx = f(x);
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    simplex[0]
}

/// Fits the four costs of `base` (and the arrivals' lock-step share) to
/// `steps` (see the module docs); the structure of `base` (blocks,
/// `max_num_seqs`, budget, chunking) is kept.
pub fn fit_cost_model(base: &Profile, steps: &[FitStep]) -> Result<Fit, FitError> {
    check_steps(steps)?;
    let guess = initial_guess(steps).to_array();
    // Search in x with cost_i = scale_i × x_i²: every cost stays ≥ 0 and
    // zero is reachable; scales put every coordinate near 1. The lock-step
    // share is x_4 itself, clamped to 0..1 by the model.
    let scale: [f64; 4] = std::array::from_fn(|i| guess[i].max(1e-7));
    let to_params = |x: &[f64; 5]| -> CostParams {
        CostParams::from_array(std::array::from_fn(|i| match i {
            4 => x[4].clamp(0.0, 1.0),
            _ => scale[i] * x[i] * x[i],
        }))
    };
    let objective = |x: &[f64; 5]| cost(&to_params(x), base, steps);
    let start = [1.0, 1.0, 1.0, 1.0, guess[4]];
    let mut best: ([f64; 5], f64) = (start, objective(&start));
    // Starts around the guess, each parameter a few times smaller or larger.
    for corner in 0..32u32 {
        let x0: [f64; 5] = std::array::from_fn(|i| {
            let high = (corner >> i) & 1 == 1;
            match (i, high) {
                (4, true) => 0.8,
                (4, false) => 0.2,
                (_, true) => 1.8,
                (_, false) => 0.6,
            }
        });
        let found = nelder_mead(&objective, x0, 0.3, 600);
        if found.1 < best.1 {
            best = found;
        }
    }
    // Restart from the best until it stops improving (Nelder–Mead can
    // stall on a ridge).
    for _ in 0..12 {
        let found = nelder_mead(&objective, best.0, 0.1, 2000);
        let improved = found.1 < best.1 * (1.0 - 1e-9);
        if found.1 < best.1 {
            best = found;
        }
        if !improved {
            break;
        }
    }
    let params = to_params(&best.0);
    let profile = params.apply(base);
    let report = fit_report(&params, base, steps);
    Ok(Fit { profile, report })
}

/// A profile as `llmwatch sim --profile-file` loads it: every [`Profile`]
/// field at the top level (so a plain profile JSON loads too), the vLLM
/// settings it runs with under `vllm`, and the fit it came from under `fit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileFile {
    #[serde(flatten)]
    pub profile: Profile,
    #[serde(default)]
    pub vllm: VllmSettings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<FitReport>,
}

impl ProfileFile {
    /// Parses and validates a profile file's text.
    pub fn from_json(text: &str) -> Result<ProfileFile, SimError> {
        let file: ProfileFile =
            serde_json::from_str(text).map_err(|e| SimError::InvalidProfile {
                field: "profile file",
                why: e.to_string(),
            })?;
        file.profile.validate()?;
        Ok(file)
    }

    pub fn to_json_pretty(&self) -> String {
        // A Profile, settings and report hold only numbers, strings and
        // options: serialising them cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truth() -> Profile {
        Profile {
            frontend_per_request_s: 0.003,
            ..Profile::named("balanced").unwrap_or_else(|e| panic!("{e}"))
        }
    }

    fn synthetic(p: &Profile, shape: (f64, f64), ladder: &[f64], running: bool) -> Vec<FitStep> {
        synthetic_with(&CostParams::of(p), p, shape, ladder, running)
    }

    fn synthetic_with(
        params: &CostParams,
        p: &Profile,
        shape: (f64, f64),
        ladder: &[f64],
        running: bool,
    ) -> Vec<FitStep> {
        ladder
            .iter()
            .map(|&c| {
                let mut step = FitStep {
                    concurrency: c,
                    input_tokens: shape.0,
                    output_tokens: shape.1,
                    ttft_p50_s: None,
                    itl_p50_s: None,
                    output_tps: None,
                    running_mean: None,
                };
                let pred = predict_step(params, p, &step);
                step.ttft_p50_s = Some(pred.ttft_p50_s);
                step.itl_p50_s = Some(pred.itl_p50_s);
                step.output_tps = Some(pred.output_tps);
                if running {
                    step.running_mean = Some(pred.running);
                }
                step
            })
            .collect()
    }

    fn within(got: f64, want: f64, tol: f64) -> bool {
        ((got - want) / want).abs() <= tol
    }

    #[test]
    fn at_concurrency_one_the_model_is_the_profiles_own() {
        let p = truth();
        let steps = synthetic(&p, (512.0, 128.0), &[1.0], false);
        let pred = predict_step(&CostParams::of(&p), &p, &steps[0]);
        assert!((pred.ttft_p50_s - (p.ttft_c1_s(512) + 0.003)).abs() < 1e-12);
        assert!((pred.itl_p50_s - p.decode_step_s(1)).abs() < 1e-12);
        assert!((pred.running - 1.0).abs() < 1e-12);
    }

    #[test]
    fn saturation_shows_in_throughput_and_queueing() {
        let p = Profile::named("kv-starved").unwrap_or_else(|e| panic!("{e}"));
        let steps = synthetic(&p, (512.0, 128.0), &[1.0, 4.0, 16.0, 64.0], false);
        let tps: Vec<f64> = steps.iter().filter_map(|s| s.output_tps).collect();
        assert!(tps[1] > tps[0] && tps[2] > tps[1]);
        assert!((tps[3] - tps[2]).abs() / tps[2] < 1e-9, "flat past R_max");
        let ttft: Vec<f64> = steps.iter().filter_map(|s| s.ttft_p50_s).collect();
        assert!(ttft[3] > 3.0 * ttft[2], "queueing past R_max: {ttft:?}");
    }

    #[test]
    fn fit_recovers_known_parameters() {
        let p = truth();
        let ladder = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];
        for running in [false, true] {
            let steps = synthetic(&p, (512.0, 128.0), &ladder, running);
            let fit =
                fit_cost_model(&Profile::named("balanced").expect("known"), &steps).expect("fits");
            let got = fit.report.params;
            assert!(within(got.step_base_s, p.step_base_s, 0.10), "{got:?}");
            assert!(
                within(got.decode_per_seq_s, p.decode_per_seq_s, 0.10),
                "{got:?}"
            );
            assert!(
                within(got.prefill_per_token_s, p.prefill_per_token_s, 0.10),
                "{got:?}"
            );
            assert!(
                within(got.frontend_per_request_s, p.frontend_per_request_s, 0.10),
                "{got:?}"
            );
            assert!(fit.report.max_abs_rel_err < 0.01, "{:?}", fit.report);
            assert_eq!(fit.report.steps.len(), ladder.len());
        }
    }

    #[test]
    fn fit_recovers_a_slow_frontend_and_a_prefill_heavy_engine() {
        for p in [
            Profile::named("slow-frontend").expect("known"),
            Profile {
                frontend_per_request_s: 0.001,
                ..Profile::named("prefill-heavy").expect("known")
            },
            Profile {
                frontend_per_request_s: 0.002,
                ..Profile::named("decode-slow").expect("known")
            },
        ] {
            let steps = synthetic(&p, (512.0, 128.0), &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0], false);
            let fit = fit_cost_model(&p, &steps).expect("fits");
            let got = fit.report.params;
            for (name, g, w) in [
                ("step_base", got.step_base_s, p.step_base_s),
                ("prefill", got.prefill_per_token_s, p.prefill_per_token_s),
                ("decode", got.decode_per_seq_s, p.decode_per_seq_s),
                (
                    "frontend",
                    got.frontend_per_request_s,
                    p.frontend_per_request_s,
                ),
            ] {
                assert!(within(g, w, 0.10), "{}: {name} {g} vs {w}", p.name);
            }
        }
    }

    #[test]
    fn fit_recovers_lock_step_arrivals() {
        let p = truth();
        for sync in [1.0, 0.5] {
            let c = CostParams {
                arrival_sync: sync,
                ..CostParams::of(&p)
            };
            let ladder = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];
            let steps = synthetic_with(&c, &p, (512.0, 128.0), &ladder, false);
            // Lock-step prompts share their prefill steps: the median TTFT
            // at 16 clients waits for 8 prompts' worth of prefill.
            if sync == 1.0 {
                let ttft16 = steps[4].ttft_p50_s.unwrap_or(0.0);
                assert!(ttft16 > p.ttft_c1_s(512) * 3.0, "{ttft16}");
            }
            let fit = fit_cost_model(&p, &steps).expect("fits");
            let got = fit.report.params;
            for (name, g, w) in [
                ("step_base", got.step_base_s, p.step_base_s),
                ("prefill", got.prefill_per_token_s, p.prefill_per_token_s),
                ("decode", got.decode_per_seq_s, p.decode_per_seq_s),
                (
                    "frontend",
                    got.frontend_per_request_s,
                    p.frontend_per_request_s,
                ),
                ("sync", got.arrival_sync, sync),
            ] {
                assert!(within(g, w, 0.10), "sync {sync}: {name} {g} vs {w}");
            }
        }
    }

    #[test]
    fn fit_on_noisy_steps_reports_its_error() {
        let p = truth();
        let mut steps = synthetic(&p, (512.0, 128.0), &[1.0, 2.0, 4.0, 8.0, 16.0], true);
        // ±5 % alternating noise on every observation.
        for (i, s) in steps.iter_mut().enumerate() {
            let k = if i % 2 == 0 { 1.05 } else { 0.95 };
            s.ttft_p50_s = s.ttft_p50_s.map(|v| v * k);
            s.itl_p50_s = s.itl_p50_s.map(|v| v / k);
            s.output_tps = s.output_tps.map(|v| v * k);
        }
        let fit = fit_cost_model(&p, &steps).expect("fits");
        assert!(fit.report.rms_rel_err > 0.01 && fit.report.rms_rel_err < 0.08);
        assert!(fit.report.max_abs_rel_err >= fit.report.rms_rel_err);
        assert!(within(fit.profile.step_base_s, p.step_base_s, 0.15));
    }

    #[test]
    fn bad_steps_are_refused_with_the_index() {
        let p = truth();
        assert_eq!(fit_cost_model(&p, &[]), Err(FitError::NoSteps));
        let mut steps = synthetic(&p, (512.0, 128.0), &[1.0, 2.0], false);
        steps[1].itl_p50_s = Some(f64::NAN);
        assert!(matches!(
            fit_cost_model(&p, &steps),
            Err(FitError::InvalidStep { index: 1, .. })
        ));
        let blank = FitStep {
            concurrency: 1.0,
            input_tokens: 10.0,
            output_tokens: 10.0,
            ttft_p50_s: None,
            itl_p50_s: None,
            output_tps: None,
            running_mean: None,
        };
        assert_eq!(fit_cost_model(&p, &[blank]), Err(FitError::NothingObserved));
    }

    #[test]
    fn profile_file_round_trips_and_loads_a_plain_profile() {
        let p = truth();
        let steps = synthetic(&p, (512.0, 128.0), &[1.0, 4.0], false);
        let file = ProfileFile {
            profile: p.clone(),
            vllm: VllmSettings::default(),
            fit: Some(fit_report(&CostParams::of(&p), &p, &steps)),
        };
        let text = file.to_json_pretty();
        let back = ProfileFile::from_json(&text).expect("loads");
        assert_eq!((&back.profile, &back.vllm), (&file.profile, &file.vllm));
        // serde_json's float parsing may differ in the last bit.
        let (a, b) = (
            back.fit.as_ref().map(|f| f.rms_rel_err),
            file.fit.as_ref().map(|f| f.rms_rel_err),
        );
        assert!(matches!((a, b), (Some(a), Some(b)) if (a - b).abs() <= 1e-12 * b.abs()));
        assert_eq!(back.fit.map(|f| f.steps.len()), Some(2));
        let plain = serde_json::to_string(&p).expect("serialises");
        let loaded = ProfileFile::from_json(&plain).expect("loads");
        assert_eq!(loaded.profile, p);
        assert!(loaded.fit.is_none());
        let mut bad = p;
        bad.block_size = 0;
        let text = serde_json::to_string(&bad).expect("serialises");
        assert!(matches!(
            ProfileFile::from_json(&text),
            Err(SimError::InvalidProfile {
                field: "block_size",
                ..
            })
        ));
        assert!(ProfileFile::from_json("{").is_err());
    }
}
