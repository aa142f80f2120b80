//! `llmwatch inspect URL|FILE`: what llmwatch understands of one metrics page.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use llmwatch_core::catalog::detect_engine;
use llmwatch_core::exposition::{detect_format, parse_lenient, Format, MetricType};
use llmwatch_core::signals::{signals_between, Snapshot};
use serde::Serialize;

use llmwatch_config::EngineChoice;
use llmwatch_engine::sources::scrape::{fetch_page, scrape_client, understand, Page};

#[derive(Debug, Serialize)]
pub struct Inspection {
    pub source: String,
    pub format: &'static str,
    pub engine: String,
    pub families: Vec<FamilySummary>,
    pub parse_errors: Vec<String>,
    pub signals: Vec<SignalValue>,
    pub catalog_samples: usize,
}

#[derive(Debug, Serialize)]
pub struct FamilySummary {
    pub name: String,
    #[serde(rename = "type")]
    pub metric_type: &'static str,
    pub samples: usize,
}

#[derive(Debug, Serialize)]
pub struct SignalValue {
    pub signal: &'static str,
    pub value: f64,
    pub unit: &'static str,
}

/// Reads `source` (an `http(s)://` URL or a file path) and describes it.
pub async fn inspect(source: &str, max_body_bytes: u64) -> anyhow::Result<Inspection> {
    let page = if source.starts_with("http://") || source.starts_with("https://") {
        let client = scrape_client()?;
        fetch_page(&client, source, Duration::from_secs(10), max_body_bytes)
            .await
            .with_context(|| format!("fetching {source}"))?
    } else {
        let body = std::fs::read(Path::new(source)).with_context(|| format!("reading {source}"))?;
        Page {
            body,
            content_type: None,
        }
    };
    Ok(describe(source, &page))
}

/// The pure part of [`inspect`].
pub fn describe(source: &str, page: &Page) -> Inspection {
    let format = detect_format(page.content_type.as_deref(), &page.body);
    let (exposition, errors) = parse_lenient(&page.body, format);
    let understood = understand(page, EngineChoice::Auto);
    let snapshot = Snapshot {
        ts: 0.0,
        samples: &understood.samples,
    };
    Inspection {
        source: source.to_string(),
        format: match format {
            Format::PrometheusText => "prometheus-text-0.0.4",
            Format::OpenMetrics => "openmetrics-1.0",
        },
        engine: detect_engine(&exposition).as_str().to_string(),
        families: exposition
            .families
            .iter()
            .map(|family| FamilySummary {
                name: family.name.to_string(),
                metric_type: type_name(family.metric_type),
                samples: family.samples.len(),
            })
            .collect(),
        parse_errors: errors.iter().map(ToString::to_string).collect(),
        signals: signals_between(None, snapshot)
            .into_iter()
            .map(|(signal, value)| SignalValue {
                signal: signal.as_str(),
                value,
                unit: signal.unit(),
            })
            .collect(),
        catalog_samples: understood.samples.len(),
    }
}

fn type_name(metric_type: MetricType) -> &'static str {
    match metric_type {
        MetricType::Counter => "counter",
        MetricType::Gauge => "gauge",
        MetricType::Histogram => "histogram",
        MetricType::GaugeHistogram => "gaugehistogram",
        MetricType::Summary => "summary",
        MetricType::Info => "info",
        MetricType::StateSet => "stateset",
        MetricType::Unknown => "unknown",
    }
}

/// The human-readable report.
pub fn render(inspection: &Inspection) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "source:   {}", inspection.source);
    let _ = writeln!(out, "format:   {}", inspection.format);
    let _ = writeln!(out, "engine:   {} (detected)", inspection.engine);
    let _ = writeln!(
        out,
        "families: {}   catalog samples: {}   parse errors: {}",
        inspection.families.len(),
        inspection.catalog_samples,
        inspection.parse_errors.len()
    );
    for error in inspection.parse_errors.iter().take(10) {
        let _ = writeln!(out, "  ! {error}");
    }
    let _ = writeln!(
        out,
        "\nsignals (single page: lifetime quantiles and ratios, no rates):"
    );
    if inspection.signals.is_empty() {
        let _ = writeln!(out, "  (none: no metric of this page is in the catalog)");
    }
    for signal in &inspection.signals {
        let _ = writeln!(
            out,
            "  {:<28} {:>16} {}",
            signal.signal,
            format_number(signal.value),
            signal.unit
        );
    }
    let _ = writeln!(out, "\nfamilies:");
    for family in &inspection.families {
        let _ = writeln!(
            out,
            "  {:<60} {:<14} {:>6} samples",
            family.name, family.metric_type, family.samples
        );
    }
    out
}

fn format_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else if value.abs() >= 1e6 || value.abs() < 1e-3 {
        format!("{value:.4e}")
    } else {
        format!("{value:.4}")
    }
}
