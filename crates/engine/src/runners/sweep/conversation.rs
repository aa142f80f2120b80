//! A sweep step of conversations (`workload = multi-turn:TURNS[,think=DUR]`):
//! the level's concurrency is that many sessions, each holding
//! conversations back to back on one connection until the step has its
//! requests and its minimum duration. The step's run is the usual
//! [`RunResult`] over every turn's request, so the analysis judges it as any
//! step, plus its per-turn figures (`RunResult::turns`: input and cached
//! tokens, TTFT, prefix-cache hit ratio), stored with the step. No warm-up
//! requests: a conversation's cold first turn is part of what it measures.

use std::time::Duration;

use llmwatch_probe::conversation::{
    run_conversations_bounded, ConversationBound, ConversationSpec, MultiTurn,
};
use llmwatch_probe::{
    Bound, ClientConfig, MeasuringThread, Monitored, RunConfig, RunError, RunResult, Shape,
};

use super::settings::SweepSettings;

/// Everything one conversation step sends.
pub(super) struct ConversationStep<'a> {
    pub settings: &'a SweepSettings,
    pub workload: MultiTurn,
    pub client: ClientConfig,
    pub model: String,
    /// Concurrent conversations.
    pub sessions: u32,
    /// The step's run config: its request bound and objectives.
    pub config: RunConfig,
}

/// Runs the step on the measuring thread (spinning as its runs do).
pub(super) async fn run_conversation_step(
    thread: &MeasuringThread,
    step: ConversationStep<'_>,
) -> Result<RunResult, RunError> {
    let settings = step.settings;
    let requests = match step.config.bound {
        Bound::Requests(n) => n,
        Bound::Duration(_) => 0,
    };
    let spec = ConversationSpec {
        api: settings.api,
        model: step.model,
        shape: settings.shape,
        sessions: step.sessions,
        workload: step.workload,
        seed: step.config.seed,
    };
    let bound = conversation_bound(requests, step.sessions, step.workload.turns, settings);
    let client = step.client;
    let done = thread
        .spawn_measured(async move { run_conversations_bounded(&client, &spec, bound).await })
        .await
        .map_err(|_| RunError::MeasuringThreadGone)?
        .map_err(|err| RunError::Client(err.to_string()))?;
    let mut records: Vec<_> = done.records.into_iter().map(|(_, _, r)| r).collect();
    records.sort_by_key(|r| r.sent_at);
    let wall = Duration::from_secs_f64(done.wall_s.max(0.0));
    // The thread's CPU and scheduler lag are not sampled here: the
    // self-check judges the dispatch lag and tokens per event alone.
    let mut run = RunResult::from_records(&step.config, 0, records, wall, &Monitored::default());
    run.turns = done.turns;
    Ok(run)
}

/// Conversations per session so that the step sends at least `requests`,
/// and the step's minimum duration.
fn conversation_bound(
    requests: u64,
    sessions: u32,
    turns: u32,
    settings: &SweepSettings,
) -> ConversationBound {
    let per_round = u64::from(sessions.max(1)) * u64::from(turns.max(1));
    ConversationBound {
        conversations: u32::try_from(requests.div_ceil(per_round).max(1)).unwrap_or(u32::MAX),
        min_duration: settings.min_step_duration,
    }
}

/// The longest prompt a conversation sends: its last turn carries every
/// earlier turn and answer. The context check takes this, not the shape.
pub(super) fn longest_prompt(shape: Shape, workload: MultiTurn) -> Shape {
    let turns = workload.turns.max(1);
    Shape {
        input_tokens: shape.input_tokens.saturating_mul(turns)
            + shape.output_tokens.saturating_mul(turns - 1),
        output_tokens: shape.output_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enough_conversations_for_the_step_and_the_longest_prompt() {
        let settings = SweepSettings::new("http://127.0.0.1:1");
        let b = conversation_bound(100, 4, 5, &settings);
        // 4 sessions × 5 turns = 20 requests a round: 5 rounds.
        assert_eq!(b.conversations, 5);
        assert_eq!(b.min_duration, settings.min_step_duration);
        assert_eq!(conversation_bound(3, 4, 5, &settings).conversations, 1);
        let workload = MultiTurn::parse("multi-turn:5").expect("parses");
        let longest = longest_prompt(Shape::new(100, 20), workload);
        assert_eq!((longest.input_tokens, longest.output_tokens), (580, 20));
    }
}
