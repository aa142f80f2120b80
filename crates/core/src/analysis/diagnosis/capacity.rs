//! Which capacity admits no more at a level where requests wait: the KV
//! cache or a cap on running sequences, by arithmetic where the engine
//! reports its cache (blocks x block size over tokens per sequence), else
//! by its usage; or prompt work filling the steps.

use super::super::{fin, fmt, EngineCapacity, StepResult, WorkloadHints};
use super::advice::cap_words;
use super::level::queues;
use super::{higher, Confidence, Ctx};
use crate::catalog::Engine;

/// How sequences of the workload's length fit in the engine's KV cache.
struct Fit {
    /// Sequences that fit when every one holds its whole length (prompt +
    /// output): the most that can run without preemption.
    at_peak: f64,
    /// Sequences that fit holding only their prompts: the most that can be
    /// admitted at once before the cache refuses more.
    at_admission: f64,
    /// The arithmetic in words.
    words: String,
}

fn fit_of(capacity: &EngineCapacity, input: f64, output: f64) -> Option<Fit> {
    if !(input.is_finite() && output.is_finite() && input > 0.0 && output >= 0.0) {
        return None;
    }
    // Means from counters carry a fraction that must not tip a block count.
    let (input, output) = (input.round().max(1.0), output.round());
    let per_seq = input + output;
    match (
        capacity.kv_blocks,
        capacity.usable_blocks(),
        capacity.block_size,
    ) {
        (Some(blocks), Some(usable), Some(bs)) if blocks > 0 && bs > 0 => {
            let bs = bs as f64;
            let peak_blocks = (per_seq / bs).ceil().max(1.0);
            let admit_blocks = (input / bs).ceil().max(1.0);
            let at_peak = (usable as f64 / peak_blocks).floor();
            let blocks = if usable == blocks {
                format!("{blocks} blocks")
            } else {
                format!("{usable} blocks ({blocks} less {} null)", blocks - usable)
            };
            Some(Fit {
                at_peak,
                at_admission: (usable as f64 / admit_blocks).floor(),
                words: format!(
                    "{blocks} × {} tokens / {} tokens per sequence ({} blocks) = {}",
                    fmt::num(bs),
                    fmt::num(per_seq.round()),
                    fmt::num(peak_blocks),
                    fmt::num(at_peak)
                ),
            })
        }
        _ => {
            let tokens = capacity.kv_tokens.filter(|t| *t > 0)? as f64;
            let at_peak = (tokens / per_seq).floor();
            Some(Fit {
                at_peak,
                at_admission: (tokens / input).floor(),
                words: format!(
                    "{} tokens of KV cache / {} tokens per sequence = {}",
                    fmt::num(tokens),
                    fmt::num(per_seq.round()),
                    fmt::num(at_peak)
                ),
            })
        }
    }
}

/// Where tokens per sequence came from when the workload's shape gave them.
const WORKLOAD: &str = "the workload";

/// Tokens per sequence at one level: the workload's shape where the caller
/// knows it, else the server's own token counters over its request rate.
fn tokens_per_request(
    s: &StepResult,
    workload: &WorkloadHints,
) -> Option<(f64, f64, &'static str)> {
    if let (Some(i), Some(o)) = (workload.input_tokens, workload.output_tokens) {
        return Some((i as f64, o as f64, WORKLOAD));
    }
    let rate = fin(Some(s.request_throughput)).filter(|r| *r > 0.0)?;
    let input = fin(s.server.prompt_tokens_rate)? / rate;
    let output = fin(Some(s.output_token_throughput))? / rate;
    Some((input, output, "the server's token counters"))
}

/// What admits no more requests at a level where they wait.
pub(super) enum Admission {
    /// The KV cache holds no more sequences.
    Kv { why: String, confidence: Confidence },
    /// A cap on running sequences below what the cache holds.
    Scheduler { why: String, confidence: Confidence },
    /// Neither cap: running sequences vary below both, so requests queue
    /// for prefill compute (the per-step token budget).
    Compute { why: String },
}

/// The running count at the level's plateau: the most running while
/// requests waited, over this level and the usable levels above it.
fn running_plateau(ctx: &Ctx<'_>, i: usize, s: &StepResult) -> Option<f64> {
    let here = fin(s.server.requests_running_max)?;
    let above = ctx
        .sel
        .usable
        .iter()
        .filter(|(j, t)| *j != i && higher(&s.load, &t.load) && queues(t))
        .filter_map(|(_, t)| fin(t.server.requests_running_max))
        .fold(here, f64::max);
    Some(above)
}

/// Whether this level runs as many sequences as the KV cache fits (by
/// arithmetic) while a request waits: the cache, not prompt compute, holds
/// the rest back, however small the queue's share of TTFT still is.
pub(super) fn cache_full_here(s: &StepResult, workload: &WorkloadHints) -> bool {
    let waiting = fin(s.server.requests_waiting_max).unwrap_or(0.0);
    let running = fin(s.server.requests_running_max);
    let fit = tokens_per_request(s, workload)
        .and_then(|(input, output, _)| fit_of(&workload.capacity, input, output));
    match (running, fit) {
        (Some(running), Some(fit)) => {
            waiting >= 1.0 && fit.at_peak >= 1.0 && running >= fit.at_peak
        }
        _ => false,
    }
}

/// Why this level's engine steps are full of prompt work: each step (one
/// token gap, p50) carried at least [`PROMPT_TOKENS_PER_DECODE`] prompt
/// tokens for every sequence it decoded. A cap on running sequences or a
/// full cache leaves steps mostly decoding (real vLLM 0.32, 512x128: 2–3
/// prompt tokens a decoding sequence; the simulator at 64 running: 3); a
/// per-step token budget filled with prompt chunks does not (1 536-token
/// prompts, a 256-token budget: 27).
pub(super) fn prompt_heavy_steps(s: &StepResult, workload: &WorkloadHints) -> Option<String> {
    let gap = fin(s.tpot.p50).or(fin(s.itl.p50)).filter(|g| *g > 0.0)?;
    let prompt_rate = fin(s.server.prompt_tokens_rate).or_else(|| {
        let input = workload.input_tokens? as f64;
        fin(Some(s.request_throughput)).map(|r| r * input)
    })?;
    let decoding = fin(s.server.requests_running_mean)
        .or(fin(s.server.requests_running_max))
        .filter(|r| *r >= 1.0)?;
    let per_decode = prompt_rate * gap / decoding;
    (per_decode >= PROMPT_TOKENS_PER_DECODE).then(|| {
        format!(
            "each engine step ({} token gap) carried {} prompt tokens for each of its {} decoding \
             sequences",
            fmt::secs(gap),
            fmt::num(per_decode.round()),
            fmt::num(decoding)
        )
    })
}

/// See [`prompt_heavy_steps`].
const PROMPT_TOKENS_PER_DECODE: f64 = 8.0;

/// KV capacity or a scheduler cap, by arithmetic where the engine reports
/// its cache, else by what the cache usage and preemptions show.
pub(super) fn classify_admission(
    ctx: &Ctx<'_>,
    i: usize,
    s: &StepResult,
    workload: &WorkloadHints,
) -> Option<Admission> {
    let level = LevelFacts::of(ctx, i, s, workload);
    let fit = tokens_per_request(s, workload)
        .and_then(|(inp, out, from)| fit_of(&workload.capacity, inp, out).map(|f| (f, from)));
    if let (Some(p), Some((fit, from))) = (level.plateau, &fit) {
        if let Some(admission) = by_arithmetic(&level, p, fit, from) {
            return Some(admission);
        }
    }
    by_usage(ctx, &level)
}

/// What one level shows of the running count, the cache and its cap.
struct LevelFacts {
    plateau: Option<f64>,
    preempted: Option<u64>,
    kv_mean: Option<f64>,
    kv_max: Option<f64>,
    seqs_cap: Option<f64>,
    /// Whose cap it is, for its name in the evidence.
    engine: Option<Engine>,
    /// The cache's usage and preemptions in words.
    usage: String,
    /// Why the steps are full of prompt work (see [`prompt_heavy_steps`]),
    /// where no running cap is known.
    prompt_work: Option<String>,
}

impl LevelFacts {
    fn of(ctx: &Ctx<'_>, i: usize, s: &StepResult, workload: &WorkloadHints) -> LevelFacts {
        let preempted = s.server.preemptions.filter(|p| *p > 0);
        let kv_mean = fin(s.server.kv_cache_usage_mean);
        let kv_max = fin(s.server.kv_cache_usage_max).or(kv_mean);
        let mut usage = match (kv_mean, kv_max) {
            (Some(m), Some(x)) => format!(
                "KV-cache usage mean {}, max {}",
                fmt::ratio(m),
                fmt::ratio(x)
            ),
            (None, Some(x)) => format!("KV-cache usage max {}", fmt::ratio(x)),
            _ => "KV-cache usage not reported".to_string(),
        };
        if let Some(p) = preempted {
            usage.push_str(&format!(", {p} preemptions"));
        }
        LevelFacts {
            plateau: running_plateau(ctx, i, s),
            preempted,
            kv_mean,
            kv_max,
            seqs_cap: workload.capacity.max_num_seqs.map(|n| n as f64),
            engine: workload.capacity.engine,
            usage,
            prompt_work: workload
                .capacity
                .max_num_seqs
                .is_none()
                .then(|| prompt_heavy_steps(s, workload))
                .flatten(),
        }
    }
}

/// KV cache, running cap or prompt work, from the sequences the cache fits
/// against the running plateau `p`; `None` where the plateau is above what
/// the arithmetic fits without preemptions (shared prefixes), for the usage
/// to decide.
fn by_arithmetic(level: &LevelFacts, p: f64, fit: &Fit, from: &str) -> Option<Admission> {
    let usage = &level.usage;
    // Tokens per request from a window's counters are a mean over requests
    // in flight (prompts counted when admitted, requests when done), off by
    // up to a fifth in bursts: a wider margin, and less sure.
    let (slack, confidence) = if from == WORKLOAD {
        ((0.1 * fit.at_peak).max(1.0), Confidence::High)
    } else {
        ((0.2 * fit.at_peak).max(1.0), Confidence::Medium)
    };
    let at_fit = p >= fit.at_peak - slack && p <= fit.at_admission + slack;
    if at_fit || (p > fit.at_admission + slack && level.preempted.is_some()) {
        return Some(Admission::Kv {
            why: format!(
                "{} = running plateau {} (tokens per sequence from {from}); {usage}",
                fit.words,
                fmt::num(p)
            ),
            confidence,
        });
    }
    if p >= fit.at_peak - slack {
        return None;
    }
    if let Some(n) = level.seqs_cap.filter(|n| (p - n).abs() <= 1.0) {
        return Some(Admission::Scheduler {
            why: format!(
                "running plateau {} = {}, below the {} sequences the KV cache holds ({})",
                fmt::num(p),
                cap_words(level.engine, n),
                fmt::num(fit.at_peak),
                fit.words
            ),
            confidence: Confidence::High,
        });
    }
    if level.preempted.is_some() {
        return Some(Admission::Kv {
            why: format!(
                "preemptions while running only {} of the {} sequences the arithmetic fits ({}): \
                 requests longer than the workload's mean fill the cache; {usage}",
                fmt::num(p),
                fmt::num(fit.at_peak),
                fit.words
            ),
            confidence: Confidence::Medium,
        });
    }
    if let Some(slowed) = &level.prompt_work {
        return Some(Admission::Compute {
            why: format!(
                "running {} with room for {} sequences in the KV cache ({}), and {slowed}: the \
                 steps are full of prompt work, so the per-step token budget \
                 (max-num-batched-tokens) or prefill compute admits no more; {usage}",
                fmt::num(p),
                fmt::num(fit.at_peak),
                fit.words
            ),
        });
    }
    Some(Admission::Scheduler {
        why: format!(
            "running plateau {} below the {} sequences the KV cache holds ({}); {usage}",
            fmt::num(p),
            fmt::num(fit.at_peak),
            fit.words
        ),
        confidence: Confidence::Medium,
    })
}

/// The cache's size is unknown (or the arithmetic left it open): judge by
/// its usage and preemptions.
fn by_usage(ctx: &Ctx<'_>, level: &LevelFacts) -> Option<Admission> {
    let usage = &level.usage;
    let unknown = "KV-cache size not reported, judged by usage";
    let full = level.preempted.is_some()
        || level
            .kv_mean
            .is_some_and(|m| m >= ctx.cfg.kv_usage_mean_full)
        || level.kv_max.is_some_and(|m| m >= ctx.cfg.kv_usage_high);
    let plateau_words = level
        .plateau
        .map(|p| format!("running plateau {}, ", fmt::num(p)))
        .unwrap_or_default();
    if full {
        return Some(Admission::Kv {
            why: format!("{plateau_words}{usage} ({unknown})"),
            confidence: Confidence::Medium,
        });
    }
    let room = level.kv_max.is_some_and(|m| m < ctx.cfg.kv_usage_room);
    // Without the running count a cap cannot be seen.
    let p = level.plateau?;
    if let Some(n) = level.seqs_cap.filter(|n| (p - n).abs() <= 1.0) {
        let cap = cap_words(level.engine, n);
        if room {
            return Some(Admission::Scheduler {
                why: format!("running plateau {} = {cap}; {usage}", fmt::num(p)),
                confidence: Confidence::High,
            });
        }
        if level.kv_max.is_none() {
            // No usage to weigh (llama-server reports none): the plateau at
            // the cap is the evidence. A llama-server slot holds one
            // sequence in its own share of the context, so its slots are
            // the cap by construction; elsewhere the cache may be full too.
            let confidence = if level.engine == Some(Engine::Llamacpp) {
                Confidence::High
            } else {
                Confidence::Medium
            };
            return Some(Admission::Scheduler {
                why: format!(
                    "running plateau {} = {cap} while requests waited; {usage}",
                    fmt::num(p)
                ),
                confidence,
            });
        }
    }
    if level.kv_max.is_none() && level.prompt_work.is_none() {
        // Nothing of the cache is known, and no known cap was reached.
        let cap = match level.seqs_cap {
            Some(n) => format!("below {}", cap_words(level.engine, n)),
            None => "no cap on running sequences known (state it as the target's max_num_seqs)"
                .to_string(),
        };
        return Some(Admission::Kv {
            why: format!("{plateau_words}{cap}; {usage}, nor the KV cache's size"),
            confidence: Confidence::Low,
        });
    }
    if !room && level.kv_max.is_some() {
        // Between room and full the cache neither binds nor clearly has room.
        return Some(Admission::Kv {
            why: format!("{plateau_words}{usage} ({unknown}; the cache is between room and full)"),
            confidence: Confidence::Low,
        });
    }
    if let Some(slowed) = &level.prompt_work {
        return Some(Admission::Compute {
            why: format!(
                "{plateau_words}{slowed}: the steps are full of prompt work (token budget or \
                 prefill compute); {usage} ({unknown})"
            ),
        });
    }
    Some(Admission::Scheduler {
        why: format!("{plateau_words}{usage} ({unknown})"),
        confidence: Confidence::Medium,
    })
}
