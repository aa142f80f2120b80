//! `llmwatch bench --dataset sharegpt:FILE.json --rate R`: the human turns
//! of a ShareGPT-format dataset as prompts, each asking for its assistant
//! reply's length, arriving as a Poisson process (see
//! `llmwatch_probe::dataset`).

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};
use llmwatch_core::observed::poisson_arrivals_ms;
use llmwatch_engine::sources::server_facts::context_limit;
use llmwatch_probe::dataset::{count_turns, parse_sharegpt, schedule, MAX_DATASET_BYTES};

use super::bench::{model_of, BenchArgs};
use super::trace::{client_of, replay_on_a_measuring_thread, report};

/// Reads at most `limit` bytes of `path` as UTF-8; a longer file is an
/// error, not a silently cut one.
pub fn read_bounded(path: &Path, limit: u64) -> anyhow::Result<String> {
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > limit {
        bail!(
            "{}: larger than {} MiB; take a slice of the dataset",
            path.display(),
            limit >> 20
        );
    }
    String::from_utf8(bytes).with_context(|| format!("{}: not UTF-8", path.display()))
}

/// Runs `--dataset SOURCE`.
pub async fn run(args: &BenchArgs, source: &str) -> anyhow::Result<()> {
    let Some(path) = source.strip_prefix("sharegpt:") else {
        bail!("--dataset: expected sharegpt:FILE.json, got {source:?}");
    };
    let Some(rate) = args.rate else {
        bail!("--dataset needs --rate (requests per second, Poisson arrivals)");
    };
    if !(rate.is_finite() && rate > 0.0) {
        bail!("--rate must be a number > 0, got {rate}");
    }
    let path = Path::new(path);
    let text = read_bounded(path, MAX_DATASET_BYTES)?;
    let mut turns = parse_sharegpt(&text).with_context(|| format!("{}", path.display()))?;
    turns.truncate(usize::try_from(args.requests.max(1)).unwrap_or(usize::MAX));
    let (client, config) = client_of(args)?;
    let model = model_of(args, &client).await?;
    let mut counted = count_turns(&client, &model, &turns).await?;
    let before = counted.len();
    if let Some((limit, _)) = context_limit(client.http(), &args.url, &model).await {
        counted.retain(|t| u64::from(t.input_tokens) + u64::from(t.output_tokens) <= limit);
    }
    let skipped = before - counted.len();
    if counted.is_empty() {
        bail!("{}: no turn fits {model}'s context", path.display());
    }
    println!(
        "Dataset {}: {} turn(s) at {rate} req/s{}",
        path.display(),
        counted.len(),
        if skipped > 0 {
            format!(", {skipped} longer than the context left out")
        } else {
            String::new()
        }
    );
    let arrivals = poisson_arrivals_ms(counted.len(), rate, args.workload.seed);
    let scheduled = schedule(&model, &counted, &arrivals);
    let result = replay_on_a_measuring_thread(config, scheduled, args.trace_speed).await?;
    let source = serde_json::json!({
        "dataset": path.display().to_string(),
        "format": "sharegpt",
        "turns": counted.len(),
        "skipped_past_context": skipped,
        "rate_per_second": rate,
    });
    report(args, &result, Some(source))
}
