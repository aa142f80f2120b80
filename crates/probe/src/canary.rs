//! Always-on canary probes for the daemon: one small request per target,
//! never two at once (a slow target must not pile canaries onto itself;
//! DESIGN.md, "Production safety"). The daemon owns scheduling and jitter.

use std::time::Instant;

use thiserror::Error;
use tokio::sync::Mutex;

use crate::client::{ProbeClient, ProbeRequest};
use crate::conversation::{one_conversation, MultiTurn, Prompts, TurnRequest};
use crate::record::{Api, ProbeRecord};
use crate::shape::{approx_words, Calibration, PromptGenerator, PromptKind, Shape};

/// The previous canary of this target is still in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("a canary probe of this target is still in flight")]
pub struct CanaryBusy;

/// One target's canary.
#[derive(Debug)]
pub struct Canary {
    client: ProbeClient,
    api: Api,
    model: String,
    shape: Shape,
    prompts: PromptGenerator,
    /// Each tick one conversation of this workload instead of one request.
    conversation: Option<MultiTurn>,
    state: Mutex<u64>,
}

impl Canary {
    /// A canary of `shape` (use [`Shape::CANARY`], 64×16) on `api`. Prompts
    /// are nonce-salted, so canaries never hit the prefix cache.
    pub fn new(client: ProbeClient, api: Api, model: impl Into<String>, shape: Shape) -> Canary {
        let seed = rand::random();
        Canary {
            client,
            api,
            model: model.into(),
            shape,
            prompts: PromptGenerator::new(
                PromptKind::Random,
                approx_words(shape.input_tokens),
                seed,
            ),
            conversation: None,
            state: Mutex::new(0),
        }
    }

    /// Makes each tick one conversation: its turns are the probes (see
    /// [`Canary::conversation`]).
    pub fn with_conversation(mut self, workload: MultiTurn) -> Canary {
        self.conversation = Some(workload);
        self
    }

    /// The conversation workload, if the canary holds conversations.
    pub fn workload(&self) -> Option<MultiTurn> {
        self.conversation
    }

    /// Sends one conversation now — every turn resending the history, on
    /// this canary's connection, with the workload's think time between
    /// turns — and returns its turns' records (each with `turn` set; a
    /// failed turn is the last). One request without a conversation
    /// workload. `Err(CanaryBusy)` while the last one is in flight.
    pub async fn conversation(&self) -> Result<Vec<ProbeRecord>, CanaryBusy> {
        let Some(workload) = self.conversation else {
            return self.probe().await.map(|r| vec![r]);
        };
        let mut n = self.state.try_lock().map_err(|_| CanaryBusy)?;
        let seq = *n;
        *n += 1;
        // The answers in the history: synthetic text of the output length
        // (as `run_conversations` sends).
        let assistant = PromptGenerator::new(
            PromptKind::Random,
            approx_words(self.shape.output_tokens),
            seq,
        );
        let prompts = Prompts {
            user: &self.prompts,
            assistant: &assistant,
            key: seq << 20,
        };
        let ask = TurnRequest {
            api: self.api,
            model: &self.model,
            output_tokens: self.shape.output_tokens,
            workload,
        };
        let mut records = one_conversation(&self.client, &ask, &prompts).await;
        for r in &mut records {
            r.seq = Some(seq);
        }
        Ok(records)
    }

    /// Uses a calibrated prompt length (see [`crate::Calibrator`]), so the
    /// server sees exactly the shape's input tokens where it can count them.
    pub fn with_calibration(mut self, calibration: &Calibration) -> Canary {
        self.prompts = PromptGenerator::calibrated(PromptKind::Random, calibration, rand::random());
        self
    }

    /// Sends one canary now; `Err(CanaryBusy)` if the last one has not
    /// finished (the caller records a skipped tick rather than queueing).
    pub async fn probe(&self) -> Result<ProbeRecord, CanaryBusy> {
        let mut n = self.state.try_lock().map_err(|_| CanaryBusy)?;
        let req = ProbeRequest::fixed(
            self.api,
            self.model.clone(),
            self.prompts.prompt(*n),
            self.shape.output_tokens,
        );
        let seq = *n;
        *n += 1;
        let mut rec = self.client.probe(&req, Instant::now()).await;
        rec.seq = Some(seq);
        Ok(rec)
    }
}
