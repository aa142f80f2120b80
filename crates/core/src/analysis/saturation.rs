//! Saturation point and max sustainable load.

use super::{
    fin, fmt, AnalysisConfig, Load, Objectives, StepResult, TopStep, DEFAULT_MAX_ERROR_RATE,
};

/// Two loads closer than this relative difference are the same load: log2 of
/// their ratio is too small to normalise a gain by.
const SAME_LOAD_EPS: f64 = 1e-9;

/// A step left out of the latency and throughput verdicts, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ExcludedStep {
    /// Index into the input slice.
    pub step: usize,
    pub load: Load,
    pub reason: String,
}

/// Which throughput the curve is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThroughputMetric {
    /// Output tokens per second: what an LLM server produces, and the
    /// default.
    OutputTokens,
    /// Requests per second: used only when no step reports output tokens.
    Requests,
}

impl ThroughputMetric {
    /// The throughput of `step` in this metric.
    pub fn of(self, step: &StepResult) -> f64 {
        match self {
            ThroughputMetric::OutputTokens => step.output_token_throughput,
            ThroughputMetric::Requests => step.request_throughput,
        }
    }

    /// The unit, for text.
    pub fn unit(self) -> &'static str {
        match self {
            ThroughputMetric::OutputTokens => "output tok/s",
            ThroughputMetric::Requests => "req/s",
        }
    }
}

/// The saturation point of a sweep: the step after which throughput stops
/// growing while latency keeps rising.
#[derive(Debug, Clone, PartialEq)]
pub struct Saturation {
    /// Index of the saturation step in the input slice.
    pub step: usize,
    pub load: Load,
    /// The metric [`Self::throughput`] is in.
    pub metric: ThroughputMetric,
    /// Throughput at the saturation step, in `metric`.
    pub throughput: f64,
    pub request_throughput: f64,
    pub output_token_throughput: f64,
    /// The next (higher-load) usable step, which showed the flat gain.
    pub next_step: usize,
    pub next_load: Load,
    /// Throughput gain per doubling of load from the saturation step to the
    /// next step (e.g. 0.045 = 4.5 %).
    pub gain_per_doubling: f64,
    /// The threshold the gain was compared with.
    pub threshold: f64,
    /// Which latency rose, in words (e.g. "p95 TTFT 0.80 s → 2.1 s").
    pub latency_rise: String,
    /// The highest throughput of any usable step (may sit a little past the
    /// saturation step: the curve is flat, not necessarily falling).
    pub peak_step: usize,
    pub peak_throughput: f64,
    /// Steps that were not used (client-bound, invalid, other load kind).
    pub excluded_steps: Vec<ExcludedStep>,
}

impl Saturation {
    /// One line in words.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "Saturation at {}: {} {} ({} req/s); {} adds only {} per doubling of load (threshold {}) while {}.",
            self.load,
            fmt::num(self.throughput),
            self.metric.unit(),
            fmt::num(self.request_throughput),
            self.next_load,
            fmt::pct(self.gain_per_doubling),
            fmt::pct(self.threshold),
            self.latency_rise
        );
        if self.peak_step != self.step {
            s.push_str(&format!(
                " Peak throughput {} {} (step {}).",
                fmt::num(self.peak_throughput),
                self.metric.unit(),
                self.peak_step
            ));
        }
        let cb = self
            .excluded_steps
            .iter()
            .filter(|e| e.reason.starts_with("client-bound"))
            .count();
        if cb > 0 {
            s.push_str(&format!(
                " {cb} client-bound step(s) were ignored for this verdict."
            ));
        }
        s
    }
}

/// The highest load whose step, and every usable step below it, met the
/// objectives.
#[derive(Debug, Clone, PartialEq)]
pub struct Sustainable {
    /// Index into the input slice.
    pub step: usize,
    pub load: Load,
    pub request_throughput: f64,
    pub output_token_throughput: f64,
    pub ttft_p95: Option<f64>,
    pub itl_p95: Option<f64>,
    pub error_rate: f64,
}

/// One objective a step missed.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectiveMiss {
    /// p95 TTFT above the objective, or not measured (`value: None`).
    TtftP95 {
        value: Option<f64>,
        objective: f64,
    },
    /// p95 ITL above the objective, or not measured (`value: None`).
    ItlP95 {
        value: Option<f64>,
        objective: f64,
    },
    /// p95 end-to-end latency above the objective, or not measured.
    E2eP95 {
        value: Option<f64>,
        objective: f64,
    },
    ErrorRate {
        value: f64,
        objective: f64,
    },
    /// Every request of the step failed: no latency to judge.
    NoSuccessfulRequests,
}

impl ObjectiveMiss {
    /// In words, e.g. "p95 TTFT 1.4 s > 1.0 s".
    pub fn describe(&self) -> String {
        match self {
            ObjectiveMiss::TtftP95 {
                value: Some(v),
                objective,
            } => format!("p95 TTFT {} > {}", fmt::secs(*v), fmt::secs(*objective)),
            ObjectiveMiss::TtftP95 {
                value: None,
                objective,
            } => format!(
                "p95 TTFT not measured (objective {})",
                fmt::secs(*objective)
            ),
            ObjectiveMiss::ItlP95 {
                value: Some(v),
                objective,
            } => format!("p95 ITL {} > {}", fmt::secs(*v), fmt::secs(*objective)),
            ObjectiveMiss::ItlP95 {
                value: None,
                objective,
            } => format!("p95 ITL not measured (objective {})", fmt::secs(*objective)),
            ObjectiveMiss::E2eP95 {
                value: Some(v),
                objective,
            } => format!("p95 e2e {} > {}", fmt::secs(*v), fmt::secs(*objective)),
            ObjectiveMiss::E2eP95 {
                value: None,
                objective,
            } => format!("p95 e2e not measured (objective {})", fmt::secs(*objective)),
            ObjectiveMiss::ErrorRate { value, objective } => {
                format!("error rate {} > {}", fmt::pct(*value), fmt::pct(*objective))
            }
            ObjectiveMiss::NoSuccessfulRequests => "no request succeeded".to_string(),
        }
    }
}

/// The objectives one step missed.
#[derive(Debug, Clone, PartialEq)]
pub struct StepMisses {
    /// Index into the input slice.
    pub step: usize,
    pub load: Load,
    pub misses: Vec<ObjectiveMiss>,
}

impl StepMisses {
    /// The misses joined in words.
    pub fn describe(&self) -> String {
        self.misses
            .iter()
            .map(ObjectiveMiss::describe)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The objectives `step` misses; empty when it meets them all. A missing
/// measurement counts as a miss when an objective asks for it: a step cannot
/// be called sustainable on a latency nobody measured.
pub fn check_objectives(step: &StepResult, objectives: &Objectives) -> Vec<ObjectiveMiss> {
    let mut misses = Vec::new();
    let all_failed = step.requests_ok == 0 && step.requests_failed > 0;
    if all_failed {
        misses.push(ObjectiveMiss::NoSuccessfulRequests);
    }
    if let Some(obj) = fin(objectives.ttft_p95) {
        let v = fin(step.ttft.p95);
        if !all_failed && v.is_none_or(|v| v > obj) {
            misses.push(ObjectiveMiss::TtftP95 {
                value: v,
                objective: obj,
            });
        }
    }
    if let Some(obj) = fin(objectives.itl_p95) {
        let v = fin(step.itl.p95);
        if !all_failed && v.is_none_or(|v| v > obj) {
            misses.push(ObjectiveMiss::ItlP95 {
                value: v,
                objective: obj,
            });
        }
    }
    if let Some(obj) = fin(objectives.e2e_p95) {
        let v = fin(step.e2e.p95);
        if !all_failed && v.is_none_or(|v| v > obj) {
            misses.push(ObjectiveMiss::E2eP95 {
                value: v,
                objective: obj,
            });
        }
    }
    let max_err = if objectives.max_error_rate.is_finite() {
        objectives.max_error_rate
    } else {
        DEFAULT_MAX_ERROR_RATE
    };
    let err = step.effective_error_rate();
    if err > max_err {
        misses.push(ObjectiveMiss::ErrorRate {
            value: err,
            objective: max_err,
        });
    }
    misses
}

/// The steps a verdict may use, sorted by load (stable, so equal loads keep
/// their input order), and the ones left out.
pub(crate) struct Selection<'a> {
    pub usable: Vec<(usize, &'a StepResult)>,
    pub excluded: Vec<ExcludedStep>,
    pub metric: ThroughputMetric,
}

/// Splits the steps into usable and excluded. Left out: client-bound steps
/// (they measured the client), invalid loads, throughputs that are not
/// finite and non-negative, steps where no request ran at all, and steps of
/// another load kind than the first valid step (concurrency and request rate
/// do not share an axis).
pub(crate) fn select(steps: &[StepResult]) -> Selection<'_> {
    let mut usable = Vec::new();
    let mut excluded = Vec::new();
    let mut kind: Option<Load> = None;
    for (i, s) in steps.iter().enumerate() {
        let reason = if let Some(why) = &s.client_bound {
            Some(format!("client-bound ({why})"))
        } else if let Some(why) = &s.cache_contaminated {
            Some(format!("cache-contaminated ({why})"))
        } else if !s.load.is_valid() {
            Some("load is not a positive finite number".to_string())
        } else if !valid_throughput(s.output_token_throughput)
            || !valid_throughput(s.request_throughput)
        {
            Some("throughput is not a finite non-negative number".to_string())
        } else if s.requests_ok == 0 && s.requests_failed == 0 {
            Some("no request ran".to_string())
        } else if kind.is_some_and(|k| !k.same_kind(&s.load)) {
            Some("load kind differs from the sweep's first step".to_string())
        } else {
            None
        };
        match reason {
            Some(reason) => excluded.push(ExcludedStep {
                step: i,
                load: s.load,
                reason,
            }),
            None => {
                kind.get_or_insert(s.load);
                usable.push((i, s));
            }
        }
    }
    usable.sort_by(|a, b| a.1.load.value().total_cmp(&b.1.load.value()));
    let metric = if usable.iter().any(|(_, s)| s.output_token_throughput > 0.0) {
        ThroughputMetric::OutputTokens
    } else {
        ThroughputMetric::Requests
    };
    Selection {
        usable,
        excluded,
        metric,
    }
}

fn valid_throughput(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

/// Whether `hi` is a strictly higher load than `lo`.
pub(crate) fn higher(lo: &Load, hi: &Load) -> bool {
    hi.value() > lo.value() * (1.0 + SAME_LOAD_EPS)
}

/// Throughput gain per doubling of load, compounded: a step from load `l0`
/// to `l1` multiplies throughput by `t1 / t0` over `log2(l1 / l0)` doublings,
/// so the gain per doubling is `(t1 / t0)^(1 / log2(l1 / l0)) − 1`. This
/// makes 1→4 comparable with 1→2 (non-doubling ladders), and equals the plain
/// relative gain on a doubling ladder. `None` when it cannot be computed
/// (`t0` not positive, loads not rising, result not finite).
pub(crate) fn gain_per_doubling(t0: f64, t1: f64, l0: &Load, l1: &Load) -> Option<f64> {
    if !(t0 > 0.0 && t1 >= 0.0 && t0.is_finite() && t1.is_finite() && higher(l0, l1)) {
        return None;
    }
    let doublings = (l1.value() / l0.value()).log2();
    let g = (t1 / t0).powf(1.0 / doublings) - 1.0;
    g.is_finite().then_some(g)
}

/// The first latency (p95 TTFT, p95 e2e, p95 ITL) that rose by at least
/// `rise` from `a` to `b`, in words.
fn latency_rise(a: &StepResult, b: &StepResult, rise: f64) -> Option<String> {
    let pairs = [
        ("p95 TTFT", a.ttft.p95, b.ttft.p95),
        ("p95 e2e", a.e2e.p95, b.e2e.p95),
        ("p95 ITL", a.itl.p95, b.itl.p95),
    ];
    pairs
        .iter()
        .find_map(|(name, x, y)| match (fin(*x), fin(*y)) {
            (Some(x), Some(y)) if x > 0.0 && y >= x * (1.0 + rise) => {
                Some(format!("{name} rises {} → {}", fmt::secs(x), fmt::secs(y)))
            }
            _ => None,
        })
}

/// The saturation point: the lowest usable step from which throughput gains
/// less than `config.saturation_gain_threshold` per doubling of load to the
/// next step **and to every later step** (so one noisy flat pair on a still
/// rising curve is not a knee), while some latency (p95 TTFT, p95 e2e or
/// p95 ITL) rises by at least `config.latency_rise` into the next step.
/// Flat throughput with flat latency is not saturation: the extra load did
/// not reach the server.
///
/// Client-bound steps are ignored (listed in
/// [`Saturation::excluded_steps`]). `None` when there are fewer than two
/// usable steps, the curve still grows at the top, or latency never rises
/// where it flattens.
pub fn saturation_point(steps: &[StepResult], config: &AnalysisConfig) -> Option<Saturation> {
    let sel = select(steps);
    let config = config.sanitized();
    let threshold = config.saturation_gain_threshold;
    let rise = config.latency_rise.max(0.0);
    let u = &sel.usable;
    let m = sel.metric;
    for (k, (ki, ks)) in u.iter().enumerate() {
        let tk = m.of(ks);
        if tk <= 0.0 {
            continue;
        }
        let later: Vec<&(usize, &StepResult)> = u[k + 1..]
            .iter()
            .filter(|(_, s)| higher(&ks.load, &s.load))
            .collect();
        let Some((ni, ns)) = later.first().copied() else {
            break;
        };
        let flat_to_all = later.iter().all(|(_, s)| {
            gain_per_doubling(tk, m.of(s), &ks.load, &s.load).is_some_and(|g| g < threshold)
        });
        if !flat_to_all {
            continue;
        }
        let Some(latency) = latency_rise(ks, ns, rise) else {
            continue;
        };
        let Some(gain) = gain_per_doubling(tk, m.of(ns), &ks.load, &ns.load) else {
            continue;
        };
        let (peak_step, peak_throughput) =
            u.iter()
                .map(|(i, s)| (*i, m.of(s)))
                .fold(
                    (*ki, tk),
                    |best, cur| if cur.1 > best.1 { cur } else { best },
                );
        return Some(Saturation {
            step: *ki,
            load: ks.load,
            metric: m,
            throughput: tk,
            request_throughput: ks.request_throughput,
            output_token_throughput: ks.output_token_throughput,
            next_step: *ni,
            next_load: ns.load,
            gain_per_doubling: gain,
            threshold,
            latency_rise: latency,
            peak_step,
            peak_throughput,
            excluded_steps: sel.excluded.clone(),
        });
    }
    None
}

/// The highest usable step, its throughput and the gain per doubling into it
/// from the closest lower step.
pub(crate) fn highest_step(sel: &Selection<'_>, config: &AnalysisConfig) -> Option<TopStep> {
    let (hi, hs) = sel.usable.last()?;
    let m = sel.metric;
    let prev = sel
        .usable
        .iter()
        .rev()
        .find(|(_, s)| higher(&s.load, &hs.load));
    let gain = prev.and_then(|(_, p)| gain_per_doubling(m.of(p), m.of(hs), &p.load, &hs.load));
    Some(TopStep {
        step: *hi,
        load: hs.load,
        throughput: m.of(hs),
        metric: m,
        gain_per_doubling: gain,
        flat: gain.is_some_and(|g| g < config.saturation_gain_threshold),
    })
}

/// The max sustainable load: the highest usable step that meets every
/// objective **and every usable step below it does too**. A step that passes
/// above one that failed is luck or noise (latency rises with load), and
/// reporting it would overstate capacity; so the answer is the top of the
/// unbroken run of passing steps from the floor. Client-bound steps are
/// skipped (they say nothing about the server either way). `None` when the
/// lowest usable step already misses, or no step is usable.
pub fn max_sustainable(steps: &[StepResult], objectives: &Objectives) -> Option<Sustainable> {
    let sel = select(steps);
    let mut best = None;
    for (i, s) in &sel.usable {
        if !check_objectives(s, objectives).is_empty() {
            break;
        }
        best = Some(Sustainable {
            step: *i,
            load: s.load,
            request_throughput: s.request_throughput,
            output_token_throughput: s.output_token_throughput,
            ttft_p95: fin(s.ttft.p95),
            itl_p95: fin(s.itl.p95),
            error_rate: s.effective_error_rate(),
        });
    }
    best
}
