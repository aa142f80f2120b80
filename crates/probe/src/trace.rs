//! Trace replay (`--trace FILE.jsonl`): timestamped requests in the
//! Mooncake format — `timestamp` (ms), `input_length`, `output_length`,
//! optional `hash_ids` (one per 512-token block of the prompt; equal ids,
//! equal content) and `session_id` — sent at their recorded times
//! (`--trace-speed` scales them), with prompts built so that equal
//! `hash_ids` give equal token prefixes and every prompt has exactly its
//! `input_length` tokens.
//!
//! How the lengths are exact: a prompt is a run of words each of which the
//! target's `/tokenize` counts as one token with its leading space; a
//! byte-level BPE splits text at spaces before merging, so such a run
//! counts one token per word, plus the tokenizer's special tokens (measured
//! too). Replayed through `/v1/completions` (no chat template to count).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::client::{EncodedRequest, ProbeClient, ProbeRequest};
use crate::measure::{Spin, SpinMode};
use crate::record::{Api, ProbeRecord};
use crate::shape::tokenize_count;
use crate::stats::{Summary, EXACT_SAMPLES};
use crate::Distribution;

/// Tokens per `hash_ids` block (Mooncake's).
pub const BLOCK_TOKENS: u32 = 512;

/// One line of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRequest {
    /// Arrival, ms from the trace's start.
    pub timestamp: u64,
    pub input_length: u32,
    pub output_length: u32,
    #[serde(default)]
    pub hash_ids: Vec<u64>,
    #[serde(default)]
    pub session_id: Option<serde_json::Value>,
}

#[derive(Debug, Error)]
pub enum TraceError {
    #[error("trace line {line}: {message}")]
    Line { line: usize, message: String },
    #[error("the trace has no requests")]
    Empty,
    #[error("the target's /tokenize did not answer: input lengths cannot be made exact")]
    NoTokenizer,
    #[error("the target's tokenizer counts too few of the words as one token ({found})")]
    FewOneTokenWords { found: usize },
}

/// Parses a JSON Lines trace (blank lines skipped); errors name the line
/// and the field.
pub fn parse_trace(text: &str) -> Result<Vec<TraceRequest>, TraceError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r: TraceRequest = serde_json::from_str(line).map_err(|e| TraceError::Line {
            line: i + 1,
            message: e.to_string(),
        })?;
        let bad = |message: String| TraceError::Line {
            line: i + 1,
            message,
        };
        if r.input_length == 0 || r.output_length == 0 {
            return Err(bad(
                "input_length and output_length must be at least 1".into()
            ));
        }
        let blocks = r.input_length.div_ceil(BLOCK_TOKENS) as usize;
        if !r.hash_ids.is_empty() && r.hash_ids.len() != blocks {
            return Err(bad(format!(
                "hash_ids has {} ids; input_length {} needs {blocks} blocks of {BLOCK_TOKENS}",
                r.hash_ids.len(),
                r.input_length
            )));
        }
        out.push(r);
    }
    if out.is_empty() {
        return Err(TraceError::Empty);
    }
    Ok(out)
}

/// Builds the prompts of a trace for one target's tokenizer.
#[derive(Debug, Clone)]
pub struct TracePrompts {
    /// Words the target counts as one token each (with a leading space).
    words: Vec<&'static str>,
    /// Special tokens the target adds to every prompt (BOS).
    specials: u32,
    /// Mixed into every block's content: a rerun does not hit the cache the
    /// last one filled, while blocks shared within the trace stay shared.
    salt: u64,
}

impl TracePrompts {
    /// Measures the target's tokenizer through `/tokenize`.
    pub async fn measure(
        client: &ProbeClient,
        model: &str,
        salt: u64,
    ) -> Result<TracePrompts, TraceError> {
        let count = |text: String| async move {
            tokenize_count(client, Api::Completions, model, &text)
                .await
                .ok_or(TraceError::NoTokenizer)
        };
        let one = count(" the".into()).await?;
        let two = count(" the the".into()).await?;
        let specials = (2 * one).saturating_sub(two);
        let mut words = Vec::new();
        for word in crate::shape::WORDS {
            if count(format!(" the {word}")).await? == one + 1 {
                words.push(*word);
            }
        }
        if words.len() < 16 || two != one + 1 {
            return Err(TraceError::FewOneTokenWords { found: words.len() });
        }
        Ok(TracePrompts {
            words,
            specials,
            salt,
        })
    }

    /// The prompt of `r`: block `b` holds its token positions
    /// `512·b .. 512·(b+1)` (the first starts after the special tokens), as
    /// one-token words drawn from its hash id. Without `hash_ids` the blocks
    /// are the request's own (`unique` tells requests apart).
    pub fn prompt(&self, r: &TraceRequest, unique: u64) -> String {
        let blocks = r.input_length.div_ceil(BLOCK_TOKENS);
        let ids: Vec<u64> = if r.hash_ids.len() == blocks as usize {
            r.hash_ids.clone()
        } else {
            (0..u64::from(blocks))
                .map(|b| !(unique << 16 | b))
                .collect()
        };
        let mut text = String::with_capacity(r.input_length as usize * 6);
        for (b, id) in (0u32..).zip(ids) {
            let from = (b * BLOCK_TOKENS).max(self.specials);
            let to = ((b + 1) * BLOCK_TOKENS).min(r.input_length);
            for j in from..to.max(from) {
                let k = mix(id ^ self.salt.rotate_left(29), u64::from(j));
                text.push(' ');
                text.push_str(self.words[(k % self.words.len() as u64) as usize]);
            }
        }
        text
    }
}

/// SplitMix64 of a block's id and a position in it.
fn mix(id: u64, position: u64) -> u64 {
    let mut z = id
        .wrapping_add(position.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What a replay measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceResult {
    pub requests: u64,
    pub failed: u64,
    pub speed: f64,
    /// Sent − scheduled, per request (like the bench's dispatch lag).
    pub arrival_error_ms: Summary,
    /// Requests whose server-reported prompt tokens differ from the
    /// trace's `input_length`.
    pub input_length_mismatches: u64,
    pub total_input_tokens: u64,
    pub total_cached_tokens: u64,
    pub ttft_ms: Summary,
    pub e2e_ms: Summary,
    /// Every probe, in trace order.
    pub records: Vec<ProbeRecord>,
}

/// One request of a replay: when it arrives (ms from the replay's start,
/// before the speed-up), the input length it must have, and the request.
#[derive(Debug, Clone)]
pub struct ScheduledRequest {
    pub at_ms: u64,
    pub input_length: u32,
    pub request: ProbeRequest,
}

/// Replays `trace` against `client`, `speed` times as fast as recorded
/// (see [`replay_requests`]).
pub async fn replay(
    client: &ProbeClient,
    model: &str,
    trace: &[TraceRequest],
    prompts: &TracePrompts,
    speed: f64,
) -> TraceResult {
    let scheduled = (0u64..)
        .zip(trace)
        .map(|(i, r)| ScheduledRequest {
            at_ms: r.timestamp,
            input_length: r.input_length,
            request: ProbeRequest::fixed(
                Api::Completions,
                model,
                prompts.prompt(r, i),
                r.output_length,
            ),
        })
        .collect();
    replay_requests(client, scheduled, speed).await
}

/// Sends `scheduled` at their instants, `speed` times as fast. Run it on a
/// [`crate::MeasuringThread`] started in [`replay_spin_mode`] through
/// [`crate::MeasuringThread::spawn_measured`]: one dispatcher walks the
/// schedule on that thread and sends each request at its instant (see
/// [`arrive_at`]); a thread shared with other work wakes late.
///
/// Measured (`cargo bench -p llmwatch-probe --bench trace_arrival`,
/// BENCHMARKS.md): a task per request, each on its own timer with the last
/// millisecond spun, on a thread left to sleep, lagged p50 0.5 ms and p99
/// 1–2.3 ms here: its timer, rounded up to whole milliseconds twice (the
/// wheel's tick, the sleep's timeout), often fired after the instant the
/// spin was meant to reach; each body was encoded after the wake-up too.
pub async fn replay_requests(
    client: &ProbeClient,
    scheduled: Vec<ScheduledRequest>,
    speed: f64,
) -> TraceResult {
    let inputs: Vec<u32> = scheduled.iter().map(|s| s.input_length).collect();
    // Every body is built and encoded before the first arrival.
    let requests: Vec<(u64, EncodedRequest)> = scheduled
        .iter()
        .map(|s| (s.at_ms, s.request.encode()))
        .collect();
    drop(scheduled);
    let start = Instant::now() + Duration::from_millis(100);
    let mut tasks = Vec::with_capacity(requests.len());
    for (at_ms, request) in requests {
        let at = start + Duration::from_secs_f64(at_ms as f64 / 1000.0 / speed);
        arrive_at(at).await;
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            client.probe_encoded(request, at).await
        }));
        // On this thread the new task runs once the dispatcher yields: now,
        // so it stamps and writes its request before anything else.
        tokio::task::yield_now().await;
    }
    let mut records = Vec::with_capacity(tasks.len());
    for task in tasks {
        if let Ok(record) = task.await {
            records.push(record);
        }
    }
    summarize(&inputs, records, speed)
}

/// How a replay's measuring thread waits, from `--spin`: `auto` spins for
/// good with [`crate::measure::AUTO_SPIN_MIN_CORES`] cores and not at all
/// below. The dispatcher spins the last stretch before each arrival
/// itself; a thread spinning for good on a box it shares with the server
/// is preempted by the server's threads. Measured against the real vLLM
/// 0.32 on this 2-core machine (BENCHMARKS.md): arrival p99 0.04–0.11 ms
/// with the thread left to sleep, 1.5–18 ms adaptive, 9–12 ms spinning.
pub fn replay_spin_mode(spin: Spin) -> SpinMode {
    match spin {
        Spin::Auto if !spin.resolve() => SpinMode::Off,
        other => other.mode(),
    }
}

/// How early the dispatcher's timer fires: the timer has millisecond ticks
/// and a sleeping thread wakes when the OS lets it, so it aims this far
/// ahead.
const TIMER_LEAD: Duration = Duration::from_millis(2);
/// The last stretch, spun without yielding: one turn of the runtime may
/// take this long.
const SPIN_LAST: Duration = Duration::from_micros(50);

/// Waits for `at`: the timer until [`TIMER_LEAD`] before it, then turns of
/// the runtime (the streams in flight are read meanwhile) until
/// [`SPIN_LAST`] before it, then a spin.
async fn arrive_at(at: Instant) {
    if let Some(early) = at.checked_sub(TIMER_LEAD) {
        tokio::time::sleep_until(early.into()).await;
    }
    while Instant::now() + SPIN_LAST < at {
        tokio::task::yield_now().await;
    }
    while Instant::now() < at {
        std::hint::spin_loop();
    }
}

fn summarize(inputs: &[u32], records: Vec<ProbeRecord>, speed: f64) -> TraceResult {
    let d = || Distribution::new(EXACT_SAMPLES);
    let (mut lag, mut ttft, mut e2e) = (d(), d(), d());
    let mut mismatches = 0;
    let (mut input, mut cached) = (0, 0);
    for (&input_length, rec) in inputs.iter().zip(&records) {
        lag.add(rec.dispatch_lag_ns as f64);
        match rec.ttft_ns {
            Some(t) => ttft.add(t as f64),
            None => ttft.add_missing(1),
        }
        if rec.is_ok() {
            e2e.add(rec.e2e_ns as f64);
        }
        let usage = rec.usage.as_ref();
        let prompt = usage.and_then(|u| u.prompt_tokens);
        mismatches += u64::from(prompt != Some(u64::from(input_length)));
        input += prompt.unwrap_or(0);
        cached += usage.and_then(|u| u.cached_tokens).unwrap_or(0);
    }
    TraceResult {
        requests: records.len() as u64,
        failed: records.iter().filter(|r| !r.is_ok()).count() as u64,
        speed,
        arrival_error_ms: lag.summary_ms(),
        input_length_mismatches: mismatches,
        total_input_tokens: input,
        total_cached_tokens: cached,
        ttft_ms: ttft.summary_ms(),
        e2e_ms: e2e.summary_ms(),
        records,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mooncake_lines_and_names_bad_ones() {
        let text = "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 8, \"hash_ids\": [1, 2]}\n\n\
                    {\"timestamp\": 5, \"input_length\": 10, \"output_length\": 4, \"session_id\": \"a\"}\n";
        let t = parse_trace(text).unwrap();
        assert_eq!(
            (t.len(), t[0].hash_ids.clone(), t[1].timestamp),
            (2, vec![1, 2], 5)
        );
        let e = parse_trace(
            "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 8, \"hash_ids\": [1]}",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("line 1") && e.to_string().contains("hash_ids"),
            "{e}"
        );
        let e = parse_trace("\n{\"timestamp\": 0}").unwrap_err();
        assert!(
            e.to_string().contains("line 2") && e.to_string().contains("input_length"),
            "{e}"
        );
        assert!(matches!(parse_trace(""), Err(TraceError::Empty)));
    }

    #[test]
    fn a_replay_thread_spins_for_good_or_not_at_all() {
        assert_eq!(replay_spin_mode(Spin::On), SpinMode::On);
        assert_eq!(replay_spin_mode(Spin::Off), SpinMode::Off);
        // Never adaptive: below the cores to spin for good it sleeps.
        assert_ne!(replay_spin_mode(Spin::Auto), SpinMode::Adaptive);
    }

    #[test]
    fn equal_hash_ids_give_equal_prefixes() {
        let p = TracePrompts {
            words: vec!["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"],
            specials: 1,
            salt: 7,
        };
        let req = |len, ids: Vec<u64>| TraceRequest {
            timestamp: 0,
            input_length: len,
            output_length: 1,
            hash_ids: ids,
            session_id: None,
        };
        let a = p.prompt(&req(1025, vec![1, 2, 3]), 0);
        let b = p.prompt(&req(1100, vec![1, 2, 9]), 1);
        let c = p.prompt(&req(1025, vec![5, 2, 3]), 2);
        // 1 025 tokens: the special token and 1 024 words.
        assert_eq!(a.split(' ').count() - 1, 1024);
        let words = |s: &str, n| s.split(' ').skip(1).take(n).collect::<Vec<_>>().join(" ");
        // Two shared blocks: the first 1 023 words (positions 1..1024).
        assert_eq!(words(&a, 1023), words(&b, 1023));
        assert_ne!(words(&a, 1024), words(&b, 1024), "third blocks differ");
        assert_ne!(words(&a, 511), words(&c, 511), "first blocks differ");
    }
}
