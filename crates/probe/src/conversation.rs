//! Conversations (`--workload multi-turn:TURNS[,think=DUR]`): each session
//! sends its whole history plus a new user turn, waits its think time, and
//! sends the next — on a connection of its own, so a session stays on one
//! connection as a chat client's would. What it shows is the prefix cache's
//! benefit per turn: input tokens grow with the history, and on a server
//! that caches prefixes so do the cached ones.
//!
//! The assistant turns in the history are synthetic text of the shape's
//! output length, not what the server generated (a random-weights model's
//! output is noise, and a fixed text keeps runs reproducible); the server
//! caches the previous *prompt*, which is what the next turn shares.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::client::{ClientConfig, ClientError, ProbeClient, ProbeRequest};
use crate::record::{Api, ProbeRecord};
use crate::shape::{approx_words, PromptGenerator, PromptKind, Shape};
use crate::stats::{Summary, EXACT_SAMPLES};
use crate::Distribution;

/// A multi-turn workload.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MultiTurn {
    pub turns: u32,
    /// Pause between a turn's answer and the session's next turn.
    pub think: Duration,
}

/// A `--workload` value that is not understood.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("--workload {text:?}: {why} (expected multi-turn:TURNS[,think=DUR], e.g. multi-turn:5,think=1s)")]
pub struct WorkloadError {
    pub text: String,
    pub why: String,
}

impl std::fmt::Display for MultiTurn {
    /// The `--workload` text it parses from.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "multi-turn:{}", self.turns)?;
        if !self.think.is_zero() {
            write!(f, ",think={}", humantime::format_duration(self.think))?;
        }
        Ok(())
    }
}

impl MultiTurn {
    /// Parses `multi-turn:TURNS[,think=DUR]` (TURNS 1..=1000).
    pub fn parse(text: &str) -> Result<MultiTurn, WorkloadError> {
        let fail = |why: &str| WorkloadError {
            text: text.to_string(),
            why: why.to_string(),
        };
        let rest = text
            .trim()
            .strip_prefix("multi-turn:")
            .ok_or_else(|| fail("unknown workload"))?;
        let mut parts = rest.split(',');
        let turns: u32 = parts
            .next()
            .and_then(|t| t.trim().parse().ok())
            .filter(|t| (1..=1000).contains(t))
            .ok_or_else(|| fail("TURNS must be a whole number from 1 to 1000"))?;
        let mut think = Duration::ZERO;
        for part in parts {
            let value = part
                .trim()
                .strip_prefix("think=")
                .ok_or_else(|| fail("the only option is think=DUR"))?;
            think = humantime::parse_duration(value.trim())
                .map_err(|e| fail(&format!("think: {e}")))?;
        }
        Ok(MultiTurn { turns, think })
    }
}

/// One turn over all sessions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStats {
    /// From 1.
    pub turn: u32,
    pub requests: u64,
    pub failed: u64,
    /// Server-reported prompt tokens, mean per request.
    pub input_tokens_mean: Option<f64>,
    /// `usage.prompt_tokens_details.cached_tokens`, mean per request;
    /// `None` when the server reports none.
    pub cached_tokens_mean: Option<f64>,
    /// Σ cached / Σ input tokens of the turn.
    pub hit_ratio: Option<f64>,
    pub ttft_ms: Summary,
}

/// A conversation run: per turn, and every probe with its session and turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversationResult {
    pub workload: MultiTurn,
    pub sessions: u32,
    pub turns: Vec<TurnStats>,
    /// From the first send to the last answer's end.
    #[serde(default)]
    pub wall_s: f64,
    /// (session, turn from 1, record).
    pub records: Vec<(u32, u32, ProbeRecord)>,
}

/// How long a conversation run lasts: each session holds at least
/// `conversations` conversations back to back (on its one connection), and
/// starts another while `min_duration` has not passed since the run began.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConversationBound {
    pub conversations: u32,
    pub min_duration: Duration,
}

impl Default for ConversationBound {
    /// One conversation per session.
    fn default() -> Self {
        ConversationBound {
            conversations: 1,
            min_duration: Duration::ZERO,
        }
    }
}

/// What a conversation run sends.
#[derive(Debug, Clone)]
pub struct ConversationSpec {
    pub api: Api,
    pub model: String,
    /// Input tokens of each new user turn (about: words, not calibrated)
    /// and output tokens of each answer.
    pub shape: Shape,
    pub sessions: u32,
    pub workload: MultiTurn,
    pub seed: u64,
}

/// Runs `spec.sessions` conversations at once, each on a client (and so a
/// connection) of its own.
pub async fn run_conversations(
    client: &ClientConfig,
    spec: &ConversationSpec,
) -> Result<ConversationResult, ClientError> {
    run_conversations_bounded(client, spec, ConversationBound::default()).await
}

/// [`run_conversations`], each session holding conversations back to back
/// as `bound` says (a sweep step's length).
pub async fn run_conversations_bounded(
    client: &ClientConfig,
    spec: &ConversationSpec,
    bound: ConversationBound,
) -> Result<ConversationResult, ClientError> {
    let salt = crate::shape::fresh_salt();
    let words = approx_words(spec.shape.input_tokens);
    let user = PromptGenerator::new(PromptKind::Random, words, spec.seed).with_salt(salt);
    let reply_words = approx_words(spec.shape.output_tokens);
    let assistant =
        PromptGenerator::new(PromptKind::Random, reply_words, spec.seed ^ 1).with_salt(salt);
    let started = Instant::now();
    let deadline = started + bound.min_duration;
    let mut tasks = Vec::new();
    for session in 0..spec.sessions.max(1) {
        let probe = ProbeClient::new(client.clone())?;
        let (spec, user, assistant) = (spec.clone(), user.clone(), assistant.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            let mut held = 0u32;
            while held < bound.conversations.max(1) || Instant::now() < deadline {
                let prompts = Prompts {
                    user: &user,
                    assistant: &assistant,
                    key: u64::from(session) << 40 | u64::from(held) << 20,
                };
                let ask = TurnRequest {
                    api: spec.api,
                    model: &spec.model,
                    output_tokens: spec.shape.output_tokens,
                    workload: spec.workload,
                };
                let done = one_conversation(&probe, &ask, &prompts).await;
                let failed = done.iter().any(|r| !r.is_ok());
                out.extend(done.into_iter().map(|r| (session, r.turn.unwrap_or(0), r)));
                held += 1;
                if failed {
                    // A failing server: this session stops adding load.
                    break;
                }
            }
            out
        }));
    }
    let mut records = Vec::new();
    for task in tasks {
        if let Ok(mut done) = task.await {
            records.append(&mut done);
        }
    }
    Ok(ConversationResult {
        workload: spec.workload,
        sessions: spec.sessions,
        turns: turn_stats(spec.workload.turns, &records),
        wall_s: started.elapsed().as_secs_f64(),
        records,
    })
}

/// Where a conversation's turns come from.
pub(crate) struct Prompts<'a> {
    pub user: &'a PromptGenerator,
    pub assistant: &'a PromptGenerator,
    /// Mixed into each turn's prompt number: each conversation's text is
    /// its own (the turn is added to it).
    pub key: u64,
}

/// What every turn of a conversation asks for.
pub(crate) struct TurnRequest<'a> {
    pub api: Api,
    pub model: &'a str,
    pub output_tokens: u32,
    pub workload: MultiTurn,
}

/// One conversation's turns, in order, each record marked with its turn:
/// a turn is sent after the previous answer ended and the think time
/// passed. A failed turn ends it (the history would no longer be what the
/// server saw).
pub(crate) async fn one_conversation(
    probe: &ProbeClient,
    ask: &TurnRequest<'_>,
    prompts: &Prompts<'_>,
) -> Vec<ProbeRecord> {
    let mut history: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for turn in 1..=ask.workload.turns {
        let k = prompts.key | u64::from(turn);
        let text = prompts.user.prompt(k);
        let mut request = ProbeRequest::fixed(ask.api, ask.model, text.clone(), ask.output_tokens);
        request.history = history.clone();
        let mut record = probe.probe(&request, Instant::now()).await;
        record.turn = Some(turn);
        let ok = record.is_ok();
        out.push(record);
        if !ok {
            break;
        }
        history.push(text);
        history.push(prompts.assistant.prompt(k));
        if !ask.workload.think.is_zero() && turn < ask.workload.turns {
            tokio::time::sleep(ask.workload.think).await;
        }
    }
    out
}

/// Per-turn figures over every session's records.
pub fn turn_stats(turns: u32, records: &[(u32, u32, ProbeRecord)]) -> Vec<TurnStats> {
    (1..=turns)
        .map(|turn| {
            let of_turn: Vec<&ProbeRecord> = records
                .iter()
                .filter(|(_, t, _)| *t == turn)
                .map(|(_, _, r)| r)
                .collect();
            let usage = |f: fn(&crate::Usage) -> Option<u64>| -> Vec<u64> {
                of_turn
                    .iter()
                    .filter_map(|r| r.usage.as_ref().and_then(f))
                    .collect()
            };
            let input = usage(|u| u.prompt_tokens);
            let cached = usage(|u| u.cached_tokens);
            let mean =
                |v: &[u64]| (!v.is_empty()).then(|| v.iter().sum::<u64>() as f64 / v.len() as f64);
            let (sum_in, sum_cached) = (input.iter().sum::<u64>(), cached.iter().sum::<u64>());
            let mut ttft = Distribution::new(EXACT_SAMPLES);
            for r in &of_turn {
                match r.ttft_ns {
                    Some(ns) => ttft.add(ns as f64),
                    None => ttft.add_missing(1),
                }
            }
            TurnStats {
                turn,
                requests: of_turn.len() as u64,
                failed: of_turn.iter().filter(|r| !r.is_ok()).count() as u64,
                input_tokens_mean: mean(&input),
                cached_tokens_mean: mean(&cached),
                hit_ratio: (sum_in > 0 && !cached.is_empty())
                    .then(|| sum_cached as f64 / sum_in as f64),
                ttft_ms: ttft.summary_ms(),
            }
        })
        .collect()
}

/// The per-turn table.
pub fn render_turns(r: &ConversationResult) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Conversations: {} session(s) x {} turn(s), think {:?}, each session on its own connection",
        r.sessions, r.workload.turns, r.workload.think
    );
    out.push_str(&render_turn_table(&r.turns));
    out
}

/// Per turn: requests, failures, mean input and cached tokens, hit ratio,
/// TTFT p50 (the bench's table and a sweep step's).
pub fn render_turn_table(turns: &[TurnStats]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>5} {:>8} {:>7} {:>12} {:>13} {:>9} {:>13}",
        "turn", "requests", "failed", "input tok", "cached tok", "hit", "TTFT p50 ms"
    );
    let num = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |v| format!("{v:.d$}"));
    for t in turns {
        let _ = writeln!(
            out,
            "{:>5} {:>8} {:>7} {:>12} {:>13} {:>9} {:>13}",
            t.turn,
            t.requests,
            t.failed,
            num(t.input_tokens_mean, 1),
            num(t.cached_tokens_mean, 1),
            num(t.hit_ratio, 3),
            num(t.ttft_ms.p50, 2),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_turns_and_think_time() {
        assert_eq!(
            MultiTurn::parse("multi-turn:5,think=1500ms").unwrap(),
            MultiTurn {
                turns: 5,
                think: Duration::from_millis(1500)
            }
        );
        assert_eq!(
            MultiTurn::parse("multi-turn:3").unwrap().think,
            Duration::ZERO
        );
        for text in ["multi-turn:5,think=1s 500ms", "multi-turn:3"] {
            let parsed = MultiTurn::parse(text).unwrap();
            assert_eq!(MultiTurn::parse(&parsed.to_string()).unwrap(), parsed);
        }
        assert_eq!(
            MultiTurn::parse("multi-turn:5,think=1500ms")
                .unwrap()
                .to_string(),
            "multi-turn:5,think=1s 500ms"
        );
        for bad in [
            "multi-turn:0",
            "multi-turn:x",
            "random",
            "multi-turn:2,sleep=1s",
            "multi-turn:2,think=soon",
        ] {
            let e = MultiTurn::parse(bad).unwrap_err();
            assert!(e.to_string().contains("--workload"), "{e}");
        }
    }
}
