//! `llmwatch db stats`: what the stored samples cost on disk, overall and
//! per target.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use llmwatch_store::{DbStats, Store};

/// `llmwatch db …`
#[derive(Debug, clap::Subcommand)]
pub enum DbCommand {
    /// Samples stored, bytes on disk, bytes per sample (overall and per
    /// target), series, time range.
    Stats {
        /// The database file.
        #[arg(long, default_value = "llmwatch.db")]
        database: PathBuf,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(command: DbCommand) -> anyhow::Result<()> {
    match command {
        DbCommand::Stats { database, json } => {
            let stats = stats_of(&database).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                print!("{}", render(&stats));
            }
            Ok(())
        }
    }
}

/// Opens an existing database (never creates one) and reads its figures.
pub async fn stats_of(database: &Path) -> anyhow::Result<DbStats> {
    if !database.is_file() {
        anyhow::bail!("no database file at {}", database.display());
    }
    let store = Store::open(database)
        .await
        .with_context(|| format!("opening {}", database.display()))?;
    Ok(store.db_stats().await?)
}

fn time(ms: Option<i64>) -> String {
    ms.and_then(|ms| {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).ok()?);
        Some(humantime::format_rfc3339_seconds(t).to_string())
    })
    .unwrap_or_else(|| "-".to_string())
}

fn per_sample(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / 1_048_576.0)
}

/// The table `llmwatch db stats` prints.
pub fn render(stats: &DbStats) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "file {} ({} free); samples {} in {}: {} bytes/sample",
        mib(stats.file_bytes),
        mib(stats.free_bytes),
        stats.samples,
        mib(stats.sample_bytes),
        per_sample(stats.bytes_per_sample)
    );
    let _ = writeln!(
        out,
        "scrapes {} ({} not yet compressed, {} blocks); series {}; oldest {}; newest {}",
        stats.scrapes,
        stats.head_scrapes,
        stats.blocks,
        stats.series,
        time(stats.oldest_ms),
        time(stats.newest_ms)
    );
    let _ = writeln!(
        out,
        "\n{:<24} {:>7} {:>12} {:>9} {:>8} {:>12} {:>8}  {:<20}  {:<20}",
        "target", "kind", "samples", "scrapes", "series", "bytes", "B/sample", "oldest", "newest"
    );
    for t in &stats.targets {
        let _ = writeln!(
            out,
            "{:<24} {:>7} {:>12} {:>9} {:>8} {:>12} {:>8}  {:<20}  {:<20}",
            t.name,
            t.kind.as_str(),
            t.samples,
            t.scrapes,
            t.series,
            t.bytes,
            per_sample(t.bytes_per_sample),
            time(t.oldest_ms),
            time(t.newest_ms)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmwatch_store::{RawSample, ScrapeRecord, TargetKind};

    #[tokio::test]
    async fn stats_of_a_stored_fixture_page() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("llmwatch.db");
        assert!(stats_of(&path).await.is_err(), "a missing file is an error");
        let body = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../fixtures/vllm-live/metrics_vllm_idle.txt"),
        )
        .unwrap();
        let (page, _) = llmwatch_core::exposition::parse_lenient(
            &body,
            llmwatch_core::exposition::Format::PrometheusText,
        );
        let raw = RawSample::all_of(&page);
        {
            let store = Store::open(&path).await.unwrap();
            let target = store
                .upsert_target("vllm-a", TargetKind::Engine, "http://127.0.0.1:9", 0)
                .await
                .unwrap();
            let batch: Vec<ScrapeRecord> = (0..10)
                .map(|i| ScrapeRecord {
                    target_id: target,
                    ts_ms: 1_750_000_000_000 + i * 5000,
                    up: true,
                    duration_ms: 2.0,
                    body_bytes: body.len() as u64,
                    error: None,
                    engine: Some("vllm".into()),
                    samples: Vec::new(),
                    raw: raw.clone(),
                })
                .collect();
            store.write_scrapes(&batch).await.unwrap();
            store.seal_heads().await.unwrap();
        }
        let stats = stats_of(&path).await.unwrap();
        assert_eq!(stats.samples, 10 * raw.len() as u64);
        assert_eq!(stats.targets[0].series, raw.len() as u64);
        assert_eq!(stats.oldest_ms, Some(1_750_000_000_000));
        let text = render(&stats);
        assert!(text.contains("vllm-a"), "{text}");
        assert!(text.contains("2025-06-15T15:06:40Z"), "{text}");
        let json = serde_json::to_value(&stats).unwrap();
        assert!(json["targets"][0]["bytes_per_sample"].as_f64().unwrap() > 0.0);
    }
}
