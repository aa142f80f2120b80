//! Diagnosis: DESIGN.md's rule table, each verdict naming its evidence in
//! numbers. The rules read one load level at a time (a sweep step or a live
//! band; `level.rs` splits its TTFT), so a steady load is judged as well as
//! a ramp; change across levels adds evidence. Which capacity binds where
//! requests wait — the KV cache, a running cap, prompt work — is settled by
//! arithmetic in `capacity.rs`. An objective missed that no rule explains
//! is said as such ([`Verdict::ObjectiveBreached`]).
//!
//! "High" latency is defined once, here:
//! * with an objective, a p95 above the objective;
//! * without one, a p95 at least [`AnalysisConfig::high_vs_floor`] times the
//!   floor's (the lowest-load step); the floor itself is never "high"
//!   against itself, except ITL, which at the floor is compared with
//!   [`AnalysisConfig::fallback_itl_p95_s`] so a decode-bound system is
//!   recognised without an objective.
//!
//! Where the engine reports them (issue 38), a P/D KV transfer that takes
//! most of TTFT is named as the part outside the GPU, and speculative
//! decoding's acceptance is cited wherever ITL is high: a low acceptance
//! means the drafts cost steps they do not pay back
//! ([`SPEC_ACCEPTANCE_LOW`]).
//!
//! Latency and throughput rules read only usable (not client-bound) steps;
//! the memory-split and prefix-cache rules are facts of the server's
//! configuration, not of the load, so they read every step.

mod advice;
mod capacity;
mod level;

pub use self::advice::what_to_try_on;

use self::capacity::{classify_admission, prompt_heavy_steps, Admission};
use self::level::{held_back, queues, waiting_of, TtftSplit};
use super::saturation::{check_objectives, gain_per_doubling, higher, select, Selection};
use super::{fin, fmt, AnalysisConfig, DominantPart, Load, Objectives, StepResult, WorkloadHints};

/// Below this share of draft tokens accepted, speculative decoding is
/// called low in the evidence: with k drafted tokens a step costs the draft
/// and a verification of k + 1 positions, and under half accepted that
/// rarely pays back (vLLM's and SGLang's guides read acceptance the same
/// way).
pub const SPEC_ACCEPTANCE_LOW: f64 = 0.5;

/// What to try when the prefill→decode KV transfer is most of TTFT.
const TRY_KV_TRANSFER: &str = "speed up the prefill→decode KV transfer: a faster interconnect between the prefill and decode instances (RDMA, NVLink), the NIXL/UCX transport over TCP, prefill and decode on the same node; for short prompts, serve without disaggregation (the transfer costs more than the prefill it moves)";

/// What a finding says is the bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// TTFT high while ITL is fine (or over only in its tail), or steps full
    /// of prompt work: prompt processing (compute, or the per-step token
    /// budget) limits.
    PrefillBound,
    /// ITL high already at the lowest load: token generation (memory
    /// bandwidth) limits.
    DecodeBound,
    /// TTFT high while requests wait and the running sequences fill the KV
    /// cache (by arithmetic: blocks × block size over tokens per sequence,
    /// else by usage and preemptions): memory admits no more.
    KvCacheCapacity,
    /// TTFT high while requests wait, the running count sits at a cap below
    /// what the KV cache holds: the scheduler's cap on running sequences
    /// (max-num-seqs), not memory, admits no more.
    SchedulerLimit,
    /// Throughput flat while the GPU is idle and has memory: the limit is
    /// outside the GPU (CPU, tokenizer, network, API server, load balancer,
    /// or the client).
    OutsideGpu,
    /// One GPU's memory full while the others have room.
    UnbalancedSplit,
    /// Low prefix-cache hit rate on a shared-prefix workload.
    PrefixCachingIneffective,
    /// An objective is missed and no rule names a cause: said with the
    /// numbers, never passed over as healthy.
    ObjectiveBreached,
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
            Verdict::KvCacheCapacity => "KV-cache capacity",
            Verdict::SchedulerLimit => "scheduler limit (cap on running sequences)",
            Verdict::OutsideGpu => "outside the GPU",
            Verdict::UnbalancedSplit => "unbalanced split",
            Verdict::PrefixCachingIneffective => "prefix caching off or evicted",
            Verdict::ObjectiveBreached => "objective breached, cause not identified",
            Verdict::ClientBound => "client-bound steps",
        }
    }

    /// What to try, from DESIGN.md's table.
    pub fn what_to_try(self) -> &'static str {
        match self {
            Verdict::PrefillBound => {
                "shorter inputs, prefix caching for shared prefixes, fewer RAG documents; a larger max-num-batched-tokens where the per-step token budget (not compute) binds; chunked prefill; more GPUs (tensor parallel) for prompt compute"
            }
            Verdict::DecodeBound => {
                "faster-memory GPU, better quantization kernels, FP8/FP4, speculative decoding, shorter context"
            }
            Verdict::KvCacheCapacity => {
                "give the KV cache more room: raise gpu-memory-utilization (or the KV blocks), FP8 KV cache (--kv-cache-dtype fp8), shorter inputs or max-model-len, prefix caching for shared prefixes; then more GPUs (tensor parallel) or a smaller or quantized model. Raising max-num-seqs will not help: the cache, not the cap, is full"
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
            Verdict::ObjectiveBreached => {
                "run a sweep against this target (it reads each load level with the engine's phase times), and check the engine exposes its queue and phase histograms and the KV-cache size"
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

    /// The ITL a step's p95 is judged against (see [`Ctx::itl_state`]).
    fn itl_reference(&self, i: usize) -> Option<f64> {
        if let Some(o) = fin(self.obj.itl_p95) {
            return Some(o);
        }
        if self.is_floor(i) {
            return Some(self.cfg.fallback_itl_p95_s);
        }
        fin(self.floor?.1.itl.p95).map(|f| f * self.cfg.high_vs_floor)
    }

    /// The p95 ITL is high but the typical gap (p50) is not: under half of
    /// what it is judged against, or under it with the p95 three times the
    /// p50. The tail, not every token, is slow, as when other requests'
    /// prefill chunks share the decode steps.
    fn itl_tail_only(&self, i: usize, s: &StepResult) -> bool {
        match (fin(s.itl.p50), fin(s.itl.p95), self.itl_reference(i)) {
            // Under half the reference at p50, or under it with a p95 three
            // times the p50: spikes, not every step.
            (Some(p50), p95, Some(reference)) => {
                p50 < 0.5 * reference || (p50 < reference && p95.is_some_and(|p| p >= 3.0 * p50))
            }
            _ => false,
        }
    }

    /// The TTFT split of step `i`, else of the nearest usable step that has
    /// one (a live window's canaries land in only some of its bands).
    fn split_near(&self, i: usize) -> Option<(TtftSplit, bool)> {
        let own = self
            .sel
            .usable
            .iter()
            .find(|(j, _)| *j == i)
            .map(|(_, s)| *s);
        if let Some(split) = own.and_then(TtftSplit::of) {
            return Some((split, true));
        }
        self.sel
            .usable
            .iter()
            .filter_map(|(j, s)| TtftSplit::of(s).map(|sp| (j.abs_diff(i), sp)))
            .min_by_key(|(d, _)| *d)
            .map(|(_, sp)| (sp, false))
    }

    /// Whether the engine queued at any usable level.
    fn engine_ever_queues(&self) -> bool {
        self.sel.usable.iter().any(|(_, s)| queues(s))
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
    findings.extend(admission_limit(&ctx, workload));
    if !findings.iter().any(|f| f.verdict == Verdict::PrefillBound) {
        findings.extend(prefill_bound(&ctx, workload));
    }
    findings.extend(decode_bound(&ctx, workload));
    match outside_engine(&ctx) {
        Some(f) => findings.push(f),
        None => findings.extend(outside_gpu(&ctx, steps)),
    }
    for finding in &mut findings {
        weigh_latency_breakdown(finding, steps);
        cite_speculation(&ctx, finding);
        // The table's advice in the judged engine's own knobs.
        if finding.what_to_try == finding.verdict.what_to_try() {
            finding.what_to_try = what_to_try_on(finding.verdict, workload.capacity.engine);
        }
    }
    let breached = unexplained_breach(&ctx, &findings);
    findings.extend(breached);
    findings.extend(unbalanced_split(steps, config));
    findings.extend(prefix_caching(steps, workload, config));
    // Most sure first; among equals, the limit that binds first in load
    // (the one story the verdict tells), then the rule table's order.
    findings.sort_by_key(|f| {
        (
            std::cmp::Reverse(f.confidence),
            f.step
                .map(|i| steps.get(i).map_or(0.0, |s| s.load.value()))
                .map(ordered),
            rank(f.verdict),
        )
    });
    findings
}

/// A load as a sortable key (loads are finite and positive where used).
fn ordered(v: f64) -> u64 {
    if v.is_finite() && v >= 0.0 {
        v.to_bits()
    } else {
        u64::MAX
    }
}

/// The rule table's order: capacity limits first, configuration facts last.
fn rank(v: Verdict) -> u8 {
    match v {
        Verdict::KvCacheCapacity => 0,
        Verdict::SchedulerLimit => 1,
        Verdict::PrefillBound => 2,
        Verdict::DecodeBound => 3,
        Verdict::OutsideGpu => 4,
        Verdict::ObjectiveBreached => 5,
        Verdict::UnbalancedSplit => 6,
        Verdict::PrefixCachingIneffective => 7,
        Verdict::ClientBound => 8,
    }
}

/// Adds the TTFT breakdown of the finding's step (else of the highest-load
/// usable step that has one) to a latency verdict's evidence. When the
/// engine's own phase times point where the verdict does, its confidence
/// goes up one level (not for KV cache vs running cap: a queue says
/// capacity, not which); when they point elsewhere, that is cited but does
/// not lower it: the breakdown is of means and the verdicts read p95s. The
/// rules themselves read the split (`level.rs`); which verdict fires is
/// never changed here.
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
        // A queue says capacity, not which: the cache or the cap is
        // settled by the arithmetic alone, whose confidence stands.
        let up = match (finding.verdict, finding.confidence) {
            (Verdict::KvCacheCapacity | Verdict::SchedulerLimit, c) => c,
            (_, Confidence::Low) => Confidence::Medium,
            // Prompt work the largest of near-equal parts, under half of
            // TTFT: it agrees, but the rest weighs more.
            (Verdict::PrefillBound, c) if breakdown.dominant_share < 0.5 => c,
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

/// A capacity limit at one level (the origin method's first reading): TTFT
/// high (or jumping from the level below) while requests wait and the
/// waiting is most of TTFT. KV cache or scheduler cap is then settled by
/// [`classify_admission`]. The lowest such level is reported; levels above
/// it add their running counts to the plateau.
fn admission_limit(ctx: &Ctx<'_>, workload: &WorkloadHints) -> Option<Finding> {
    ctx.sel.usable.iter().find_map(|&(i, s)| {
        let split = TtftSplit::of(s);
        let waits = match split {
            Some(sp) => {
                sp.queue_clearly_dominated()
                    || (sp.queue_dominated()
                        && held_back(s)
                        && (queues(s) || waiting_of(s).is_none()))
            }
            None => queues(s) && held_back(s),
        };
        if !waits {
            return None;
        }
        let waiting = waiting_of(s)
            .map(|w| format!("waiting = {}", fmt::num(w)))
            .unwrap_or_else(|| "the waiting count not reported".to_string());
        // Nothing timed TTFT (live, on a page without a TTFT histogram and
        // with no canaries: llama-server's): requests held back in the
        // engine's queue are the evidence, said less surely.
        let unmeasured = fin(s.ttft.p95).is_none() && queues(s) && held_back(s);
        let mut head = if unmeasured {
            format!(
                "at {} requests waited ({waiting}) while p95 TTFT was not measured (no TTFT \
                 histogram on the page and no canaries)",
                s.load
            )
        } else {
            let why = ctx.ttft_rising(i, s)?;
            format!(
                "p95 TTFT {} at {} ({why}) while {waiting}",
                fmt::secs(fin(s.ttft.p95)?),
                s.load
            )
        };
        if let Some(st) = fin(s.server.server_ttft_p95) {
            head.push_str(&format!(
                " (server p95 TTFT ≈ {}, a bucket estimate)",
                fmt::secs(st)
            ));
        }
        if let Some(sp) = split {
            head.push_str(&format!("; TTFT parts: {}", sp.words()));
        }
        let (verdict, why, confidence) = match classify_admission(ctx, i, s, workload)? {
            Admission::Kv { why, confidence } => (Verdict::KvCacheCapacity, why, confidence),
            Admission::Scheduler { why, confidence } => (Verdict::SchedulerLimit, why, confidence),
            Admission::Compute { why } => (Verdict::PrefillBound, why, Confidence::Medium),
        };
        let confidence = if unmeasured {
            confidence.min(Confidence::Medium)
        } else {
            confidence
        };
        Some(Finding::new(
            verdict,
            confidence,
            format!("{head}; {why}"),
            Some(i),
        ))
    })
}

/// TTFT high while ITL is fine and the waiting does not dominate TTFT: the
/// prompt's compute. At the floor (only possible against an objective)
/// nothing queues, so TTFT is prefill itself.
fn prefill_bound(ctx: &Ctx<'_>, workload: &WorkloadHints) -> Option<Finding> {
    ctx.sel.usable.iter().find_map(|&(i, s)| {
        let near = ctx.split_near(i);
        let own = near.filter(|(_, own)| *own).map(|(sp, _)| sp);
        // Queue time with no one counted waiting is a step or two spent for
        // the token budget: prompt work, this rule's. Queueing counted in
        // the gauge is [`admission_limit`]'s.
        let waits = own.is_some_and(|sp| sp.queue_clearly_dominated())
            || (held_back(s)
                && match waiting_of(s) {
                    Some(_) => queues(s) && own.is_none_or(|sp| sp.queue_dominated()),
                    None => own.is_some_and(|sp| sp.queue_dominated()),
                });
        if waits
            || near.is_some_and(|(sp, _)| sp.outside_dominated() || sp.transfer_dominated())
            || capacity::cache_full_here(s, workload)
        {
            return None;
        }
        let split = own;
        let ttft_why = ctx.ttft_high(i, s);
        let (itl_high, itl_why) = ctx.itl_state(i, s)?;
        let tail = itl_high && ctx.itl_tail_only(i, s);
        // TTFT high with ITL fine (or over only in its tail), or TTFT fine
        // and ITL over only in its tail: prompts' chunks stretch some steps.
        // With TTFT high and every step full of prompt work, a high ITL is
        // that same work, not decode.
        let heavy = itl_high && !tail && ttft_why.is_some();
        let heavy = heavy.then(|| prompt_heavy_steps(s, workload)).flatten();
        if !tail && heavy.is_none() && (itl_high || ttft_why.is_none()) {
            return None;
        }
        let ttft = fin(s.ttft.p95)?;
        let itl = fin(s.itl.p95)?;
        let itl_words = if let Some(heavy) = heavy {
            format!("p95 ITL {} is over ({itl_why}) as {heavy}", fmt::secs(itl))
        } else if tail {
            format!(
                "p95 ITL {} is over ({itl_why}) only in its tail (p50 {}): prompts' chunks share the decode steps",
                fmt::secs(itl),
                fmt::secs(fin(s.itl.p50).unwrap_or(0.0))
            )
        } else {
            format!("p95 ITL {} is fine ({itl_why})", fmt::secs(itl))
        };
        let mut ev = match ttft_why {
            Some(why) => format!(
                "p95 TTFT {} at {} ({why}) while {itl_words}",
                fmt::secs(ttft),
                s.load
            ),
            None => format!(
                "at {} {itl_words}, while p95 TTFT {} is within bounds; lower max-num-batched-tokens \
                 for smaller chunks",
                s.load,
                fmt::secs(ttft)
            ),
        };
        if let Some(n) = workload.input_tokens {
            ev.push_str(&format!(", input {n} tokens"));
        }
        if let Some(sp) = split {
            ev.push_str(&format!("; TTFT parts: {}", sp.words()));
        }
        if let Some(kv) = kv_usage(s) {
            ev.push_str(&format!(", KV-cache usage {}", fmt::ratio(kv)));
        }
        // At the floor nothing queues, so TTFT is prefill itself; above it,
        // the engine's phase times say so (prompt work at least half of
        // TTFT), or the cache's usage at least rules out waiting for memory.
        // Phase times led by another part (a queue no gauge counted, the
        // frontend), or prompt work only the largest of several near-equal
        // parts (a marginal breach beside a nearly full cache), are cited
        // and leave the rule's word unconfirmed.
        let confidence = if split.is_some_and(|sp| sp.prefill_dominated() && sp.prefill_majority())
        {
            Confidence::High
        } else if split.is_some() || ctx.is_floor(i) || kv_usage(s).is_some() {
            Confidence::Medium
        } else {
            ev.push_str(", KV-cache usage not reported (cache pressure cannot be ruled out)");
            Confidence::Low
        };
        Some(Finding::new(Verdict::PrefillBound, confidence, ev, Some(i)))
    })
}

/// At one level: TTFT high while most of it is spent outside the engine
/// (API server, tokenizer, proxy, network) and nothing waits in the engine.
fn outside_engine(ctx: &Ctx<'_>) -> Option<Finding> {
    // Where the engine itself queues at some level, it is the limit there.
    if ctx.engine_ever_queues() {
        return None;
    }
    ctx.sel.usable.iter().find_map(|&(i, s)| {
        let (split, _) = ctx.split_near(i)?;
        let transfer = split.transfer_dominated();
        if !split.outside_dominated() && !transfer {
            return None;
        }
        let why = ctx.ttft_high(i, s)?;
        let ttft = fin(s.ttft.p95)?;
        let mut ev = format!(
            "p95 TTFT {} at {} ({why}) while the engine's queue is empty; TTFT parts: {}",
            fmt::secs(ttft),
            s.load,
            split.words()
        );
        if transfer {
            ev.push_str(&format!(
                "; the prefill→decode KV transfer is the largest part (mean {} a request)",
                fmt::secs(fin(s.server.kv_transfer_time_mean).unwrap_or(0.0))
            ));
        }
        if let Some(u) = fin(s.server.gpu_util_mean) {
            ev.push_str(&format!(", GPU utilisation {}", fmt::ratio(u)));
        }
        if let Some(kv) = kv_usage(s) {
            ev.push_str(&format!(", KV-cache usage {}", fmt::ratio(kv)));
        }
        let mut finding = Finding::new(Verdict::OutsideGpu, Confidence::High, ev, Some(i));
        if transfer {
            finding.what_to_try = TRY_KV_TRANSFER;
        }
        Some(finding)
    })
}

/// Where a finding's level has a high ITL (always for decode-bound), says
/// what speculative decoding achieved there, and when its acceptance is
/// low, that the drafts are a cost: the verdict stands, the evidence line
/// carries the reason to look at speculation first.
fn cite_speculation(ctx: &Ctx<'_>, finding: &mut Finding) {
    let Some(i) = finding.step else {
        return;
    };
    let Some(&(_, s)) = ctx.sel.usable.iter().find(|(j, _)| *j == i) else {
        return;
    };
    let itl_high = finding.verdict == Verdict::DecodeBound
        || ctx.itl_state(i, s).is_some_and(|(high, _)| high);
    let Some(rate) = fin(s.server.spec_decode_acceptance_rate).filter(|_| itl_high) else {
        return;
    };
    let mut words = format!(
        "; speculative decoding accepts {} of draft tokens",
        fmt::pct(rate)
    );
    if let Some(length) = fin(s.server.spec_decode_accept_length) {
        words.push_str(&format!(" ({length:.2} tokens a step)"));
    }
    if rate < SPEC_ACCEPTANCE_LOW {
        words.push_str(&format!(
            ", low (under {}): most drafts are rejected, so every step pays for drafting and \
             verifying with little gain; try a draft model closer to the target, fewer \
             speculative tokens, or speculation off",
            fmt::pct(SPEC_ACCEPTANCE_LOW)
        ));
    } else {
        words.push_str(", so speculation is not what slows the tokens");
    }
    finding.evidence.push_str(&words);
}

/// An objective missed at a usable level that no rule explains: said as
/// such, with the numbers, never passed over as healthy.
fn unexplained_breach(ctx: &Ctx<'_>, explained: &[Finding]) -> Option<Finding> {
    let latency = |v: Verdict| {
        matches!(
            v,
            Verdict::KvCacheCapacity
                | Verdict::SchedulerLimit
                | Verdict::PrefillBound
                | Verdict::DecodeBound
                | Verdict::OutsideGpu
        )
    };
    if explained.iter().any(|f| latency(f.verdict)) {
        return None;
    }
    ctx.sel.usable.iter().find_map(|&(i, s)| {
        let misses = check_objectives(s, ctx.obj);
        if misses.is_empty() {
            return None;
        }
        let what = misses
            .iter()
            .map(|m| m.describe())
            .collect::<Vec<_>>()
            .join(", ");
        let mut ev = format!("at {} {what}", s.load);
        if let Some(w) = waiting_of(s) {
            ev.push_str(&format!("; waiting = {}", fmt::num(w)));
        }
        if let Some(r) = fin(s.server.requests_running_max) {
            ev.push_str(&format!(", running at most {}", fmt::num(r)));
        }
        if let Some(kv) = kv_usage(s) {
            ev.push_str(&format!(", KV-cache usage {}", fmt::ratio(kv)));
        }
        if let Some(sp) = TtftSplit::of(s) {
            ev.push_str(&format!("; TTFT parts: {}", sp.words()));
        }
        ev.push_str("; no rule names a cause");
        Some(Finding::new(
            Verdict::ObjectiveBreached,
            Confidence::Medium,
            ev,
            Some(i),
        ))
    })
}

/// ITL high, at its p50 as well as its p95, already at a low-load floor (at
/// most 4 requests in flight): one sequence alone decodes slowly, which no
/// batching or scheduling fixes.
fn decode_bound(ctx: &Ctx<'_>, workload: &WorkloadHints) -> Option<Finding> {
    let (i, s) = ctx.floor?;
    let (high, why) = ctx.itl_state(i, s)?;
    if !high || ctx.itl_tail_only(i, s) {
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
    // "Already at low load" is what makes it decode: the further the floor
    // is from one request alone, the more of its ITL is batching.
    // Above a few requests the gap is the batch's as much as the GPU's: an
    // ITL miss there with no other cause is said as such, not as decode.
    let mut confidence = match s.load {
        Load::Concurrency(1) => Confidence::High,
        Load::Concurrency(c) if c <= 4 => Confidence::Medium,
        Load::Concurrency(_) => return None,
        Load::RequestRate(_) => Confidence::Low,
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
        // Throughput that fell by half or more as the load doubled, with no
        // errors, is no plateau: a live band that caught a burst's edge (a
        // fresh-clone CI run's matrix: 206 → 12.9 tok/s from one band to
        // the next, judged outside the GPU, high, on a server capped at
        // its running sequences). Nothing is read from it.
        if gain <= COLLAPSE_PER_DOUBLING {
            return None;
        }
        // Flat throughput whose latency did not rise (by half, or to high)
        // is load that never reached the server, or bursty traffic between
        // a window's bands: not a limit.
        let rose = match (fin(a.ttft.p95), fin(b.ttft.p95)) {
            (Some(ta), Some(tb)) => ta > 0.0 && tb >= 1.5 * ta,
            _ => false,
        };
        if !rose && ctx.ttft_rising(bi, b).is_none() {
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

/// See [`outside_gpu`]: a fall per doubling of load this steep is not a
/// plateau (the steepest fall in the recorded real sweeps: −30 %,
/// llama-server with 4 slots from concurrency 8 to 16).
const COLLAPSE_PER_DOUBLING: f64 = -0.5;

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
