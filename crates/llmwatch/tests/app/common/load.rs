//! Background load on a simulated server for the live-verdict tests: a
//! pool of streaming workers gated by a shared count, and a cycle that
//! moves the count through load levels.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

/// What each worker sends: `/v1/completions` streams of `words` words that
/// ask for exactly `max_tokens` tokens.
#[derive(Clone)]
pub struct Completions {
    pub client: reqwest::Client,
    pub url: String,
    pub model: &'static str,
    pub words: usize,
    pub max_tokens: u32,
    /// How often an idle worker looks whether it may start.
    pub idle_poll: Duration,
}

/// Streams completions back to back while `worker < active`.
pub async fn worker(load: Completions, worker: usize, active: Arc<AtomicUsize>) {
    let mut round = 0usize;
    loop {
        if worker >= active.load(Ordering::Relaxed) {
            tokio::time::sleep(load.idle_poll).await;
            continue;
        }
        round += 1;
        // A unique first word keeps the prompts out of the prefix cache.
        let prompt = format!(
            "load-{worker}-{round} {}",
            "word ".repeat(load.words.saturating_sub(1))
        );
        let body = serde_json::json!({
            "model": load.model, "prompt": prompt, "max_tokens": load.max_tokens,
            "ignore_eos": true, "stream": true,
        });
        match load
            .client
            .post(format!("{}/v1/completions", load.url))
            .json(&body)
            .send()
            .await
        {
            Ok(response) => {
                let mut stream = response.bytes_stream();
                while let Some(Ok(_)) = stream.next().await {}
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Cycles `active` through `levels`, `phase` each.
pub async fn cycle(levels: Vec<usize>, active: Arc<AtomicUsize>, phase: Duration) {
    for level in levels.iter().cycle() {
        active.store(*level, Ordering::Relaxed);
        tokio::time::sleep(phase).await;
    }
}
