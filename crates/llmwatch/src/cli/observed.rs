//! `llmwatch bench --workload observed:TARGET[:RANGE]`: the workload a
//! target actually served, drawn again. Its stored request-length
//! histograms over RANGE (default the last hour) give the prompt and output
//! lengths, its finished requests per second the Poisson arrival rate
//! (`--rate` overrides it, `--trace-speed` scales it); the requests are
//! then replayed as a trace (exact input lengths through `/tokenize`,
//! arrival error reported). See `llmwatch_core::observed` for what a
//! histogram can say.

use std::fmt::Write;

use anyhow::{bail, Context};
use llmwatch_config::parse_duration;
use llmwatch_core::observed::{nearest_rank, DrawnRequest, LengthDistribution, ObservedWorkload};
use llmwatch_engine::observed::ObservedSpec;
use llmwatch_engine::runners::sweep::ObservedMix;
use llmwatch_engine::sources::server_facts::context_limit;
use llmwatch_probe::conversation::MultiTurn;
use llmwatch_probe::record::Api;
use llmwatch_probe::trace::{ScheduledRequest, TracePrompts, TraceRequest};
use llmwatch_probe::ProbeRequest;
use llmwatch_store::Store;

use super::bench::{model_of, BenchArgs};
use super::trace::{client_of, replay_on_a_measuring_thread, report};

/// What `bench --workload` asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum BenchWorkload {
    MultiTurn(MultiTurn),
    Observed(ObservedSpec),
}

/// Parses `--workload`: `multi-turn:TURNS[,think=DUR]` or
/// `observed:TARGET[:RANGE]`.
pub fn parse_bench_workload(text: &str) -> Result<BenchWorkload, String> {
    match ObservedSpec::parse(text) {
        Some(spec) => spec
            .map(BenchWorkload::Observed)
            .map_err(|err| err.to_string()),
        None => MultiTurn::parse(text)
            .map(BenchWorkload::MultiTurn)
            .map_err(|err| format!("{err} (or observed:TARGET[:RANGE])")),
    }
}

/// Reads what the target served, draws as many requests as the bench
/// would send, replays them and reports both.
pub async fn run(args: &BenchArgs, spec: &ObservedSpec) -> anyhow::Result<()> {
    let observed = read_observed(spec, &args.database).await?;
    let rate = match args.rate {
        Some(rate) if rate.is_finite() && rate > 0.0 => rate,
        Some(rate) => bail!("--rate must be a number > 0, got {rate}"),
        None => observed
            .rate_per_second()
            .filter(|r| *r > 0.0)
            .with_context(|| {
                format!(
                    "target {:?}: its histograms cover no time; give --rate",
                    spec.target
                )
            })?,
    };
    let count = match &args.duration {
        Some(text) => {
            let d = parse_duration(text).map_err(|err| anyhow::anyhow!("--duration: {err}"))?;
            (rate * d.as_secs_f64()).ceil().max(1.0) as usize
        }
        None => usize::try_from(args.requests.max(1)).unwrap_or(usize::MAX),
    };
    let (client, config) = client_of(args)?;
    let model = model_of(args, &client).await?;
    let context = context_limit(client.http(), &args.url, &model)
        .await
        .map(|(limit, _)| u32::try_from(limit).unwrap_or(u32::MAX));
    let drawn = observed.draw(count, rate, args.workload.seed, context);
    print!("{}", render_observed(spec, &observed, rate, &drawn));
    let prompts =
        TracePrompts::measure(&client, &model, llmwatch_probe::shape::fresh_salt()).await?;
    let scheduled = (0u64..)
        .zip(&drawn)
        .map(|(i, d)| {
            let line = TraceRequest {
                timestamp: d.at_ms,
                input_length: d.input_tokens,
                output_length: d.output_tokens,
                hash_ids: Vec::new(),
                session_id: None,
            };
            ScheduledRequest {
                at_ms: d.at_ms,
                input_length: d.input_tokens,
                request: ProbeRequest::fixed(
                    Api::Completions,
                    &model,
                    prompts.prompt(&line, i),
                    d.output_tokens,
                ),
            }
        })
        .collect();
    let result = replay_on_a_measuring_thread(config, scheduled, args.trace_speed).await?;
    let source = serde_json::json!({
        "observed": { "target": spec.target, "range_s": spec.range.as_secs_f64() },
        "workload": observed,
        "rate_per_second": rate,
        "drawn": drawn,
    });
    report(args, &result, Some(source))
}

/// What `spec`'s target served, read from the daemon's `database`.
pub async fn read_observed(
    spec: &ObservedSpec,
    database: &std::path::Path,
) -> anyhow::Result<ObservedWorkload> {
    if !database.exists() {
        bail!(
            "--workload observed: no database at {} (--database: the daemon's file)",
            database.display()
        );
    }
    let store = Store::open(database)
        .await
        .with_context(|| format!("opening {}", database.display()))?;
    Ok(spec.read(&store, llmwatch_engine::now_ms()).await?)
}

/// `sweep --workload observed:`: lengths drawn from what the target served
/// (the ladder sets the load, so the observed rate is not used).
pub async fn observed_mix(
    spec: &ObservedSpec,
    database: &std::path::Path,
) -> anyhow::Result<ObservedMix> {
    let observed = read_observed(spec, database).await?;
    Ok(ObservedMix::drawn(spec.label(), &observed))
}

/// The observed distribution beside the drawn one, decile by decile.
pub fn render_observed(
    spec: &ObservedSpec,
    observed: &ObservedWorkload,
    rate: f64,
    drawn: &[DrawnRequest],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Observed on {} over {}: {:.0} requests in {:.0}s ({:.3} req/s); drawing {} at {:.3} req/s",
        spec.target,
        humantime::format_duration(spec.range),
        observed.requests,
        observed.seconds,
        observed.rate_per_second().unwrap_or(0.0),
        drawn.len(),
        rate
    );
    let mut line = |name: &str, lengths: &LengthDistribution, of: fn(&DrawnRequest) -> u32| {
        let mut sorted: Vec<u32> = drawn.iter().map(of).collect();
        sorted.sort_unstable();
        let served = lengths.deciles().map(|d| format!("{d:.0}")).join(" ");
        let drawn = (1..=9)
            .map(|k| {
                nearest_rank(&sorted, f64::from(k) / 10.0).map_or("-".into(), |v| v.to_string())
            })
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(out, "{name} deciles: served {served}; drawn {drawn}");
    };
    line("Prompt tokens", &observed.prompt, |d| d.input_tokens);
    line("Output tokens", &observed.generation, |d| d.output_tokens);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn workload_flags_parse_into_their_kinds() {
        let observed = |target: &str, secs| {
            BenchWorkload::Observed(ObservedSpec {
                target: target.into(),
                range: Duration::from_secs(secs),
            })
        };
        assert_eq!(
            parse_bench_workload("observed:vllm-a"),
            Ok(observed("vllm-a", 3600))
        );
        assert_eq!(
            parse_bench_workload("observed:vllm-a:15m"),
            Ok(observed("vllm-a", 900))
        );
        // A colon inside the name: only a last part that is a duration is the range.
        assert_eq!(
            parse_bench_workload("observed:ns:vllm"),
            Ok(observed("ns:vllm", 3600))
        );
        assert!(matches!(
            parse_bench_workload("multi-turn:3"),
            Ok(BenchWorkload::MultiTurn(m)) if m.turns == 3
        ));
        let err = parse_bench_workload("observed:").unwrap_err();
        assert!(err.contains("observed:TARGET[:RANGE]"), "{err}");
        let err = parse_bench_workload("observed:a:0s").unwrap_err();
        assert!(err.contains("longer than 0s"), "{err}");
        let err = parse_bench_workload("replay:x").unwrap_err();
        assert!(err.contains("observed:TARGET"), "{err}");
    }
}
