//! Diagnosis: DESIGN.md's rule table, each verdict naming its evidence in
//! numbers.
//!
//! "High" latency is defined once, here:
//! * with an objective, a p95 above the objective;
//! * without one, a p95 at least [`AnalysisConfig::high_vs_floor`] times the
//!   floor's (the lowest-load step); the floor itself is never "high"
//!   against itself, except ITL, which at the floor is compared with
//!   [`AnalysisConfig::fallback_itl_p95_s`] so a decode-bound system is
//!   recognised without an objective.
//!
//! Latency and throughput rules read only usable (not client-bound) steps;
//! the memory-split and prefix-cache rules are facts of the server's
//! configuration, not of the load, so they read every step.

use super::saturation::{gain_per_doubling, higher, select, Selection};
use super::{fin, fmt, AnalysisConfig, DominantPart, Load, Objectives, StepResult, WorkloadHints};

/// What a finding says is the bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// TTFT high while ITL is fine: prompt processing (compute) limits.
    PrefillBound,
    /// ITL high already at the lowest load: token generation (memory
    /// bandwidth) limits.
    DecodeBound,
    /// TTFT jumps with load while requests wait and the KV cache is full:
    /// KV-cache capacity or the scheduler limits admission.
    KvCacheCapacity,
    /// TTFT rises with load while requests wait, the KV cache has room and
    /// the number of running requests stopped growing: the scheduler's cap
    /// on running sequences (max-num-seqs), not memory, admits no more.
    SchedulerLimit,
    /// Throughput flat while the GPU is idle and has memory: the limit is
    /// outside the GPU (CPU, tokenizer, network, API server, load balancer,
    /// or the client).
    OutsideGpu,
    /// One GPU's memory full while the others have room.
    UnbalancedSplit,
    /// Low prefix-cache hit rate on a shared-prefix workload.
    PrefixCachingIneffective,
    /// Steps were client-bound: the load generator, not the server, was
    /// measured there, so they are left out of the verdicts.
    ClientBound,
}

impl Verdict {
    /// The verdict's name in words, as in DESIGN.md.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::PrefillBound => "prefill-bound",
            Verdict::DecodeBound => "decode-bound (memory bandwidth)",
            Verdict::KvCacheCapacity => "KV-cache capacity / scheduler",
            Verdict::SchedulerLimit => "scheduler limit (max-num-seqs)",
            Verdict::OutsideGpu => "outside the GPU",
            Verdict::UnbalancedSplit => "unbalanced split",
            Verdict::PrefixCachingIneffective => "prefix caching off or evicted",
            Verdict::ClientBound => "client-bound steps",
        }
    }

    /// What to try, from DESIGN.md's table.
    pub fn what_to_try(self) -> &'static str {
        match self {
            Verdict::PrefillBound => {
                "shorter inputs, chunked prefill, prefix caching, fewer RAG documents"
            }
            Verdict::DecodeBound => {
                "faster-memory GPU, better quantization kernels, FP8/FP4, speculative decoding, shorter context"
            }
            Verdict::KvCacheCapacity => {
                "lower max-model-len, tune max-num-seqs and max-num-batched-tokens, FP8 KV cache, prefix caching; then more GPUs"
            }
            Verdict::SchedulerLimit => {
                "raise max-num-seqs (the KV cache has room for more sequences), then max-num-batched-tokens; more GPUs only once the cache fills"
            }
            Verdict::OutsideGpu => {
                "check the client self-check, then CPU, tokenizer, network, API server and load balancer; do not buy GPUs"
            }
            Verdict::UnbalancedSplit => "rebalance the split (TP/PP or tensor-split ratio)",
            Verdict::PrefixCachingIneffective => {
                "enable prefix caching, or give it more room (KV-cache size) so shared prefixes are not evicted"
            }
            Verdict::ClientBound => {
                "give the load generator more CPU or split it across machines, then rerun those steps"
            }
        }
    }
}

/// How strongly the evidence supports a finding: `High` when every number
/// the rule needs was measured and points the same way, lower when a part
/// was missing or the rule fired away from where it is most telling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Confidence {
    Low,
    Medium,
    High,
}

impl Confidence {
    /// The confidence in one word.
    pub fn word(self) -> &'static str {
        match self {
            Confidence::Low => "low",
            Confidence::Medium => "medium",
            Confidence::High => "high",
        }
    }
}

/// One diagnosis, with its evidence in numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub verdict: Verdict,
    pub confidence: Confidence,
    /// The evidence in numbers, e.g. "p95 TTFT 4.1 s at concurrency 32 …
    /// while waiting = 27 and KV-cache usage 0.97".
    pub evidence: String,
    pub what_to_try: &'static str,
    /// The step (index into the input slice) the evidence is from, if one.
    pub step: Option<usize>,
}

impl Finding {
    fn new(
        verdict: Verdict,
        confidence: Confidence,
        evidence: String,
        step: Option<usize>,
    ) -> Self {
        Finding {
            verdict,
            confidence,
            evidence,
            what_to_try: verdict.what_to_try(),
            step,
        }
    }

    /// One line in words.
    pub fn describe(&self) -> String {
        format!(
            "{} ({} confidence): {}. Try: {}.",
            self.verdict.name(),
            self.confidence.word(),
            self.evidence,
            self.what_to_try
        )
    }
}

struct Ctx<'a> {
    sel: Selection<'a>,
    floor: Option<(usize, &'a StepResult)>,
    obj: &'a Objectives,
    cfg: &'a AnalysisConfig,
}

impl<'a> Ctx<'a> {
    fn floor_phrase(&self) -> String {
        match self.floor {
            Some((_, f)) if f.load == Load::Concurrency(1) => "the concurrency-1 floor".to_string(),
            Some((_, f)) => format!("the floor at {}", f.load),
            None => "the floor".to_string(),
        }
    }

    fn is_floor(&self, i: usize) -> bool {
        self.floor.is_some_and(|(fi, _)| fi == i)
    }

    /// Why the p95 TTFT of step `i` is high, or `None` if it is not (or not
    /// measured).
    fn ttft_high(&self, i: usize, s: &StepResult) -> Option<String> {
        let v = fin(s.ttft.p95)?;
        if let Some(o) = fin(self.obj.ttft_p95) {
            return (v > o).then(|| format!("objective {}", fmt::secs(o)));
        }
        if self.is_floor(i) {
            return None;
        }
        let f = fin(self.floor?.1.ttft.p95).filter(|f| *f > 0.0)?;
        (v >= self.cfg.high_vs_floor * f).then(|| {
            format!(
                "{} {} of {}",
                fmt::times(v / f),
                self.floor_phrase(),
                fmt::secs(f)
            )
        })
    }

    /// Whether the p95 ITL of step `i` is high, and against what; `None`
    /// when ITL was not measured (or there is nothing to compare with).
    fn itl_state(&self, i: usize, s: &StepResult) -> Option<(bool, String)> {
        let v = fin(s.itl.p95)?;
        if let Some(o) = fin(self.obj.itl_p95) {
            return Some((v > o, format!("objective {}", fmt::secs(o))));
        }
        if self.is_floor(i) {
            let fb = self.cfg.fallback_itl_p95_s;
            return Some((
                v > fb,
                format!("reference {} without an objective", fmt::secs(fb)),
            ));
        }
        let f = fin(self.floor?.1.itl.p95).filter(|f| *f > 0.0)?;
        Some((
            v >= self.cfg.high_vs_floor * f,
            format!(
                "{} {} of {}",
                fmt::times(v / f),
                self.floor_phrase(),
                fmt::secs(f)
            ),
        ))
    }

    /// The usable step just below `s` in load.
    fn previous(&self, s: &StepResult) -> Option<&'a StepResult> {
        self.sel
            .usable
            .iter()
            .rev()
            .find(|(_, p)| higher(&p.load, &s.load))
            .map(|(_, p)| *p)
    }

    /// Why a step's p95 TTFT counts as rising: over the objective or far
    /// above the floor ([`Ctx::ttft_high`]), or up by the jump ratio from
    /// the step below.
    fn ttft_rising(&self, i: usize, s: &StepResult) -> Option<String> {
        let ttft = fin(s.ttft.p95)?;
        self.ttft_high(i, s).or_else(|| {
            let p = fin(self.previous(s)?.ttft.p95).filter(|p| *p > 0.0)?;
            (ttft >= self.cfg.ttft_jump_ratio * p).then(|| {
                format!(
                    "up {} from {} at the step below",
                    fmt::times(ttft / p),
                    fmt::secs(p)
                )
            })
        })
    }

    /// Requests wait with KV-cache room while the running count stayed put
    /// from the step below (within 10 % or one request) and, under a
    /// concurrency load, below what was offered: (running now, running at
    /// the step below, waiting, KV usage).
    fn running_capped(&self, s: &StepResult) -> Option<(f64, f64, f64, f64)> {
        let kv = kv_usage(s).filter(|kv| *kv <= self.cfg.kv_usage_high)?;
        let waiting = fin(s.server.requests_waiting_mean)
            .or(fin(s.server.requests_waiting_max))
            .filter(|w| *w > 0.0)?;
        let running = fin(s.server.requests_running_max)?;
        let before = fin(self.previous(s)?.server.requests_running_max)?;
        if running > before * 1.1 + 1.0 {
            return None;
        }
        if let Load::Concurrency(c) = s.load {
            if running >= f64::from(c) {
                return None;
            }
        }
        Some((running, before, waiting, kv))
    }

    fn kv_full_and_waiting(&self, s: &StepResult) -> Option<(f64, f64)> {
        let kv = kv_usage(s)?;
        let waiting = fin(s.server.requests_waiting_mean).or(fin(s.server.requests_waiting_max))?;
        (kv > self.cfg.kv_usage_high && waiting > 0.0).then_some((kv, waiting))
    }
}

fn kv_usage(s: &StepResult) -> Option<f64> {
    fin(s.server.kv_cache_usage_mean).or(fin(s.server.kv_cache_usage_max))
}

/// Names the bottlenecks the sweep's evidence supports (DESIGN.md,
/// "Diagnosis rules"). Findings come sorted by confidence, highest first. An
/// empty sweep gives no findings; a sweep whose steps are all client-bound
/// gives one [`Verdict::ClientBound`] finding explaining why no verdict is
/// given.
pub fn diagnose(
    steps: &[StepResult],
    objectives: &Objectives,
    workload: &WorkloadHints,
    config: &AnalysisConfig,
) -> Vec<Finding> {
    let config = &config.sanitized();
    let sel = select(steps);
    let floor = sel.usable.first().copied();
    let ctx = Ctx {
        sel,
        floor,
        obj: objectives,
        cfg: config,
    };
    let mut findings = Vec::new();
    findings.extend(client_bound(steps));
    findings.extend(kv_capacity(&ctx));
    findings.extend(scheduler_limit(&ctx));
    findings.extend(prefill_bound(&ctx, workload));
    findings.extend(decode_bound(&ctx, workload));
    findings.extend(outside_gpu(&ctx, steps));
    findings.extend(unbalanced_split(steps, config));
    findings.extend(prefix_caching(steps, workload, config));
    for finding in &mut findings {
        weigh_latency_breakdown(finding, steps);
    }
    findings.sort_by_key(|f| std::cmp::Reverse(f.confidence));
    findings
}

/// Adds the TTFT breakdown of the finding's step (else of the highest-load
/// usable step that has one) to a latency verdict's evidence. When the
/// engine's own phase times point where the verdict does, its confidence
/// goes up one level; when they point elsewhere, that is cited but does not
/// lower it: the breakdown is of means and the verdicts read p95s, and at the
/// onset of queueing a tail of waiting requests lifts the p95 while the mean
/// is still mostly prefill (seen on the simulator's kv-starved profile:
/// waiting 0.6, queue 1.6 ms of a 30 ms mean). Which verdict fires is never
/// changed here.
fn weigh_latency_breakdown(finding: &mut Finding, steps: &[StepResult]) {
    let agrees = |dominant: DominantPart| match finding.verdict {
        Verdict::PrefillBound => Some(dominant == DominantPart::Prefill),
        Verdict::KvCacheCapacity | Verdict::SchedulerLimit => Some(dominant == DominantPart::Queue),
        Verdict::OutsideGpu => Some(dominant == DominantPart::OutsideEngine),
        _ => None,
    };
    let of_step = |i: usize| {
        steps
            .get(i)
            .and_then(|s| s.server.latency_breakdown.as_ref())
            .map(|b| (i, b))
    };
    let breakdown = finding.step.and_then(of_step).or_else(|| {
        steps
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, s)| s.client_bound.is_none() && s.cache_contaminated.is_none())
            .find_map(|(i, _)| of_step(i))
    });
    let Some((i, breakdown)) = breakdown else {
        return;
    };
    let Some(agrees) = agrees(breakdown.dominant) else {
        return;
    };
    let load = steps.get(i).map(|s| s.load.to_string()).unwrap_or_default();
    let (word, confidence) = if agrees {
        let up = match finding.confidence {
            Confidence::Low => Confidence::Medium,
            _ => Confidence::High,
        };
        ("support it", up)
    } else {
        ("point elsewhere", finding.confidence)
    };
    finding.evidence = format!(
        "{}; the engine's phase times at {load} {word}: {}",
        finding.evidence, breakdown.reason
    );
    finding.confidence = confidence;
}

fn client_bound(steps: &[StepResult]) -> Option<Finding> {
    let bound: Vec<(usize, &StepResult, &str)> = steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.client_bound.as_deref().map(|why| (i, s, why)))
        .collect();
    let (first_i, first_s, first_why) = *bound.first()?;
    let loads = bound
        .iter()
        .map(|(_, s, _)| s.load.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if bound.len() == steps.len() {
        Some(Finding::new(
            Verdict::ClientBound,
            Confidence::High,
            format!(
                "all {} steps were client-bound (first at {}: {first_why}), so they measured the \
                 load generator, not the server: no saturation verdict and no diagnosis",
                steps.len(),
                first_s.load
            ),
            Some(first_i),
        ))
    } else {
        Some(Finding::new(
            Verdict::ClientBound,
            Confidence::Medium,
            format!(
                "{} of {} steps were client-bound ({loads}; first: {first_why}) and are left out \
                 of the verdicts",
                bound.len(),
                steps.len()
            ),
            Some(first_i),
        ))
    }
}

/// TTFT jumps as load rises (high, or up by the jump ratio from the step
/// below) while requests wait and the KV cache is over the threshold. The
/// first such step is reported.
fn kv_capacity(ctx: &Ctx<'_>) -> Option<Finding> {
    ctx.sel.usable.iter().find_map(|&(i, s)| {
        let (kv, waiting) = ctx.kv_full_and_waiting(s)?;
        let ttft = fin(s.ttft.p95)?;
        let why = ctx.ttft_rising(i, s)?;
        let mut ev = format!(
            "p95 TTFT {} at {} ({why}) while waiting = {} and KV-cache usage {}",
            fmt::secs(ttft),
            s.load,
            fmt::num(waiting),
            fmt::ratio(kv)
        );
        if let Some(p) = s.server.preemptions.filter(|p| *p > 0) {
            ev.push_str(&format!(", with {p} preemptions"));
        }
        if let Some(st) = fin(s.server.server_ttft_p95) {
            ev.push_str(&format!(
                " (server p95 TTFT ≈ {}, a bucket estimate)",
                fmt::secs(st)
            ));
        }
        let confidence = queue_confidence(s);
        Some(Finding::new(
            Verdict::KvCacheCapacity,
            confidence,
            ev,
            Some(i),
        ))
    })
}

/// A queueing verdict is as sure as its evidence: high when KV usage and
/// waiting were measured as means over the step, medium from maxima only.
fn queue_confidence(s: &StepResult) -> Confidence {
    let measured_means = fin(s.server.kv_cache_usage_mean).is_some()
        && fin(s.server.requests_waiting_mean).is_some();
    if measured_means {
        Confidence::High
    } else {
        Confidence::Medium
    }
}

/// TTFT rising while requests wait, the KV cache has room and the running
/// count stopped growing with the load (see [`Ctx::running_capped`]). The
/// first such step is reported.
fn scheduler_limit(ctx: &Ctx<'_>) -> Option<Finding> {
    ctx.sel.usable.iter().find_map(|&(i, s)| {
        let (running, before, waiting, kv) = ctx.running_capped(s)?;
        let ttft = fin(s.ttft.p95)?;
        let why = ctx.ttft_rising(i, s)?;
        let below = ctx.previous(s)?;
        let ev = format!(
            "running requests stay at {} ({} at {}) while {} is offered and waiting = {}, with \
             KV-cache usage only {}; p95 TTFT {} ({why})",
            fmt::num(running),
            fmt::num(before),
            below.load,
            s.load,
            fmt::num(waiting),
            fmt::ratio(kv),
            fmt::secs(ttft)
        );
        let confidence = queue_confidence(s);
        Some(Finding::new(
            Verdict::SchedulerLimit,
            confidence,
            ev,
            Some(i),
        ))
    })
}

/// TTFT high while ITL is fine, at a step the KV-cache and scheduler rules
/// do not explain. At the floor (only possible against an objective) this is plain
/// prefill cost; above it, prefill work queueing up.
fn prefill_bound(ctx: &Ctx<'_>, workload: &WorkloadHints) -> Option<Finding> {
    ctx.sel.usable.iter().find_map(|&(i, s)| {
        if ctx.kv_full_and_waiting(s).is_some() || ctx.running_capped(s).is_some() {
            return None;
        }
        let why = ctx.ttft_high(i, s)?;
        let (itl_high, itl_why) = ctx.itl_state(i, s)?;
        if itl_high {
            return None;
        }
        let ttft = fin(s.ttft.p95)?;
        let itl = fin(s.itl.p95)?;
        let mut ev = format!(
            "p95 TTFT {} at {} ({why}) while p95 ITL {} is fine ({itl_why})",
            fmt::secs(ttft),
            s.load,
            fmt::secs(itl)
        );
        if let Some(n) = workload.input_tokens {
            ev.push_str(&format!(", input {n} tokens"));
        }
        let kv = kv_usage(s);
        match kv {
            Some(kv) => ev.push_str(&format!(", KV-cache usage {}", fmt::ratio(kv))),
            None if !ctx.is_floor(i) => {
                ev.push_str(", KV-cache usage not reported (cache pressure cannot be ruled out)")
            }
            None => {}
        }
        if let Some(w) = fin(s.server.requests_waiting_mean).filter(|w| *w > 0.0) {
            ev.push_str(&format!(
                ", waiting = {} with cache room: requests queue for prefill compute or the \
                 scheduler's max-num-batched-tokens",
                fmt::num(w)
            ));
        }
        // At the floor nothing queues, so TTFT is prefill itself; above it,
        // rising TTFT is queueing, which the cache could also cause unless
        // its usage was measured.
        let confidence = if ctx.is_floor(i) {
            Confidence::High
        } else if kv.is_some() {
            Confidence::Medium
        } else {
            Confidence::Low
        };
        Some(Finding::new(Verdict::PrefillBound, confidence, ev, Some(i)))
    })
}

/// ITL high already at the floor: one sequence alone decodes slowly, which
/// no batching or scheduling fixes.
fn decode_bound(ctx: &Ctx<'_>, workload: &WorkloadHints) -> Option<Finding> {
    let (i, s) = ctx.floor?;
    let (high, why) = ctx.itl_state(i, s)?;
    if !high {
        return None;
    }
    let itl = fin(s.itl.p95)?;
    let mut ev = format!("p95 ITL {} already at {} ({why})", fmt::secs(itl), s.load);
    if let Some(t) = fin(s.tpot.p95) {
        ev.push_str(&format!(", p95 TPOT {}", fmt::secs(t)));
    }
    if let Some(n) = workload.output_tokens {
        ev.push_str(&format!(", output {n} tokens"));
    }
    let mut confidence = if s.load == Load::Concurrency(1) {
        Confidence::High
    } else {
        Confidence::Medium
    };
    if let Some(bw) = fin(s.server.gpu_mem_bw_util_mean) {
        ev.push_str(&format!(
            ", memory-bandwidth utilisation {}",
            fmt::ratio(bw)
        ));
        if bw < ctx.cfg.gpu_util_low {
            ev.push_str(" (low: the GPU's memory may not be the limit)");
            confidence = match confidence {
                Confidence::High => Confidence::Medium,
                _ => Confidence::Low,
            };
        }
    }
    Some(Finding::new(Verdict::DecodeBound, confidence, ev, Some(i)))
}

/// Throughput flat from one step to the next while, at the higher step, the
/// GPU is idle and its memory (KV cache, else GPU memory) has room.
fn outside_gpu(ctx: &Ctx<'_>, steps: &[StepResult]) -> Option<Finding> {
    let m = ctx.sel.metric;
    let u = &ctx.sel.usable;
    let client_bound = steps.iter().filter(|s| s.client_bound.is_some()).count();
    u.iter().enumerate().find_map(|(k, &(_, a))| {
        let &(bi, b) = u[k + 1..].iter().find(|(_, b)| higher(&a.load, &b.load))?;
        // Throughput that fell because requests failed is an outage, not a
        // plateau: it says nothing about where the bottleneck is.
        if b.effective_error_rate() > ctx.obj.max_error_rate {
            return None;
        }
        let gain = gain_per_doubling(m.of(a), m.of(b), &a.load, &b.load)?;
        if gain >= ctx.cfg.saturation_gain_threshold {
            return None;
        }
        let util = fin(b.server.gpu_util_mean)?;
        if util >= ctx.cfg.gpu_util_low {
            return None;
        }
        let (mem_name, mem) = match kv_usage(b) {
            Some(kv) => ("KV-cache usage", Some(kv)),
            None => (
                "GPU memory used",
                fin(b.server.gpu_mem_used_ratio_mean).or(fin(b.server.gpu_mem_used_ratio_max)),
            ),
        };
        if mem.is_some_and(|v| v >= ctx.cfg.memory_room_below) {
            return None;
        }
        let mut ev = format!(
            "throughput {} → {} {} from {} to {} ({} per doubling) while GPU utilisation is {}",
            fmt::num(m.of(a)),
            fmt::num(m.of(b)),
            m.unit(),
            a.load,
            b.load,
            fmt::pct(gain),
            fmt::ratio(util)
        );
        match mem {
            Some(v) => ev.push_str(&format!(" and {mem_name} {}", fmt::ratio(v))),
            None => ev.push_str(" (memory use not reported)"),
        }
        if client_bound > 0 {
            ev.push_str(&format!(
                "; {client_bound} step(s) failed the client self-check, so the client itself may be the limit"
            ));
        }
        let confidence = if mem.is_some() && client_bound == 0 {
            Confidence::High
        } else {
            Confidence::Medium
        };
        Some(Finding::new(Verdict::OutsideGpu, confidence, ev, Some(bi)))
    })
}

/// One GPU's peak memory at the "full" mark while another GPU's peak is at
/// least the split gap below it. Reports the step with the widest gap.
fn unbalanced_split(steps: &[StepResult], cfg: &AnalysisConfig) -> Option<Finding> {
    let mut best: Option<(usize, &StepResult, f64, f64)> = None;
    for (i, s) in steps.iter().enumerate() {
        if s.server.gpu_count.is_some_and(|n| n < 2) {
            continue;
        }
        let (Some(hi), Some(lo)) = (
            fin(s.server.per_gpu_peak_mem_ratio_max),
            fin(s.server.per_gpu_peak_mem_ratio_min),
        ) else {
            continue;
        };
        if hi >= cfg.gpu_mem_full
            && hi - lo >= cfg.gpu_mem_split_gap
            && best.is_none_or(|(_, _, bh, bl)| hi - lo > bh - bl)
        {
            best = Some((i, s, hi, lo));
        }
    }
    let (i, s, hi, lo) = best?;
    let count = match s.server.gpu_count {
        Some(n) => format!(" across {n} GPUs"),
        None => String::new(),
    };
    let confidence = if s.server.gpu_count.is_some() {
        Confidence::High
    } else {
        Confidence::Medium
    };
    Some(Finding::new(
        Verdict::UnbalancedSplit,
        confidence,
        format!(
            "at {} one GPU's memory peaks at {} used while another peaks at {}{count}",
            s.load,
            fmt::ratio(hi),
            fmt::ratio(lo)
        ),
        Some(i),
    ))
}

/// On a shared-prefix workload, a hit rate below the threshold (a fraction
/// of the expected rate when known) means caching is off (low everywhere) or
/// evicted (fine at low load, low at higher load).
fn prefix_caching(
    steps: &[StepResult],
    workload: &WorkloadHints,
    cfg: &AnalysisConfig,
) -> Option<Finding> {
    if !workload.shared_prefix {
        return None;
    }
    let mut rates: Vec<(usize, &StepResult, f64)> = steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| fin(s.server.prefix_cache_hit_rate).map(|r| (i, s, r)))
        .collect();
    if rates.is_empty() {
        return Some(Finding::new(
            Verdict::PrefixCachingIneffective,
            Confidence::Low,
            "shared-prefix workload, but the server reports no prefix-cache hit rate: caching \
             cannot be confirmed"
                .to_string(),
            None,
        ));
    }
    rates.sort_by(|a, b| a.1.load.value().total_cmp(&b.1.load.value()));
    let expected = fin(workload.expected_prefix_hit_rate).filter(|e| *e > 0.0 && *e <= 1.0);
    let (limit, expected_txt) = match expected {
        Some(e) => (
            e * cfg.prefix_hit_fraction_of_expected,
            format!(" (expected ≈ {})", fmt::ratio(e)),
        ),
        None => (cfg.prefix_hit_low, String::new()),
    };
    let low: Vec<&(usize, &StepResult, f64)> = rates.iter().filter(|r| r.2 < limit).collect();
    let &&(li, ls, lr) = low.first()?;
    if low.len() == rates.len() {
        let mean = rates.iter().map(|r| r.2).sum::<f64>() / rates.len() as f64;
        let (ms, mr) = rates
            .iter()
            .fold((ls, lr), |m, r| if r.2 < m.1 { (r.1, r.2) } else { m });
        return Some(Finding::new(
            Verdict::PrefixCachingIneffective,
            Confidence::High,
            format!(
                "prefix-cache hit rate {} (mean over {} steps; lowest {} at {}) on a \
                 shared-prefix workload{expected_txt}: caching looks off",
                fmt::ratio(mean),
                rates.len(),
                fmt::ratio(mr),
                ms.load
            ),
            Some(li),
        ));
    }
    let &(_, fs, fr) = rates.first()?;
    let mut ev = if fr >= limit {
        format!(
            "prefix-cache hit rate falls from {} at {} to {} at {} on a shared-prefix \
             workload{expected_txt}: cached prefixes are evicted under load",
            fmt::ratio(fr),
            fs.load,
            fmt::ratio(lr),
            ls.load
        )
    } else {
        format!(
            "prefix-cache hit rate {} at {} on a shared-prefix workload{expected_txt}, \
             below {} at {} of {} steps",
            fmt::ratio(lr),
            ls.load,
            fmt::ratio(limit),
            low.len(),
            rates.len()
        )
    };
    if let Some(kv) = kv_usage(ls) {
        ev.push_str(&format!(" (KV-cache usage {})", fmt::ratio(kv)));
    }
    Some(Finding::new(
        Verdict::PrefixCachingIneffective,
        Confidence::Medium,
        ev,
        Some(li),
    ))
}
