//! `llmwatch bench --workload multi-turn:TURNS[,think=DUR]`: conversations
//! instead of one-shot requests (see `llmwatch_probe::conversation`).

use llmwatch_probe::conversation::{render_turns, run_conversations, ConversationSpec, MultiTurn};
use llmwatch_probe::{ClientConfig, MeasuringThread};

use super::bench::BenchArgs;
use llmwatch_config::parse_duration;

/// Runs `--concurrency` sessions of `workload` on a measuring thread (as a
/// sweep step does, waiting as `--spin` says), prints the per-turn table
/// and writes it with every probe to `--json`.
pub async fn run(args: &BenchArgs, workload: MultiTurn) -> anyhow::Result<()> {
    let parsed = args.workload.parse()?;
    let mut client = ClientConfig::new(args.url.clone());
    client.timeout =
        parse_duration(&args.timeout).map_err(|err| anyhow::anyhow!("--timeout: {err}"))?;
    client.api_key = parsed.api_key;
    let model = match &args.workload.model {
        Some(model) => model.clone(),
        None => anyhow::bail!("--workload multi-turn needs --model"),
    };
    let spec = ConversationSpec {
        api: parsed.api,
        model,
        shape: parsed.shape,
        sessions: args.concurrency.max(1),
        workload,
        seed: args.workload.seed,
    };
    let thread = MeasuringThread::start_mode(args.workload.spin.mode())?;
    let result = thread
        .spawn_measured(async move { run_conversations(&client, &spec).await })
        .await??;
    print!("{}", render_turns(&result));
    if let Some(path) = &args.json {
        super::write_json_redacted(path, &result)?;
    }
    Ok(())
}
