//! The sweep's charts: the method's three (throughput, TTFT, ITL vs load)
//! with GPU memory and KV-cache usage overlaid, objectives, saturation point
//! and max sustainable load marked, and the TTFT breakdown by phase.

use llmwatch_core::analysis::{Load, StepResult, SweepVerdict, TtftBreakdown};

use crate::pages::charts::{
    ttft_breakdown_series, Chart, Dash, Marker, Rule, Series, Style, XAxis,
};
use crate::pages::format;

pub(super) const SATURATION: Style = Style::new(4, Dash::Dashed, Marker::None);
pub(super) const SUSTAINABLE: Style = Style::new(3, Dash::Dashed, Marker::None);
pub(super) const OBJECTIVE: Style = Style::new(5, Dash::Dashed, Marker::None);
pub(super) const GPU_MEM: Style = Style::new(6, Dash::Dotted, Marker::Square);
pub(super) const KV: Style = Style::new(1, Dash::Dotted, Marker::Cross);

pub(super) fn load_label(steps: &[StepResult]) -> (&'static str, &'static str) {
    match steps.first().map(|s| s.load) {
        Some(Load::RequestRate(_)) => ("request rate (req/s, log2 scale)", "rate"),
        _ => ("concurrency (requests in flight, log2 scale)", "c"),
    }
}

pub(super) fn load_axis(steps: &[StepResult]) -> XAxis {
    let values = steps.iter().map(|s| s.load.value()).filter(|v| *v > 0.0);
    let min = values.clone().fold(f64::INFINITY, f64::min);
    let max = values.fold(0.0f64, f64::max);
    if min.is_finite() && max > 0.0 {
        XAxis::Load { min, max }
    } else {
        XAxis::Load { min: 1.0, max: 2.0 }
    }
}

pub(super) fn points(
    steps: &[StepResult],
    f: impl Fn(&StepResult) -> Option<f64>,
) -> Vec<[f64; 2]> {
    steps
        .iter()
        .filter_map(|s| f(s).filter(|v| v.is_finite()).map(|v| [s.load.value(), v]))
        .collect()
}

pub(super) fn series(
    name: &str,
    unit: &str,
    style: Style,
    secondary: bool,
    points: Vec<[f64; 2]>,
) -> Series {
    Series {
        name: name.to_string(),
        unit: unit.to_string(),
        style,
        secondary,
        points,
    }
}

/// GPU memory (peak) and KV-cache usage (peak), on the right-hand axis.
pub(super) fn overlays(steps: &[StepResult]) -> Vec<Series> {
    vec![
        series(
            "GPU memory used, peak (%)",
            "%",
            GPU_MEM,
            true,
            points(steps, |s| {
                s.server.gpu_mem_used_ratio_max.map(|v| v * 100.0)
            }),
        ),
        series(
            "KV-cache usage, peak (%)",
            "%",
            KV,
            true,
            points(steps, |s| s.server.kv_cache_usage_max.map(|v| v * 100.0)),
        ),
    ]
}

/// The saturation and max-sustainable loads, as vertical lines.
pub(super) fn verdict_marks(verdict: &SweepVerdict, short: &str) -> Vec<Rule> {
    let mut vlines = Vec::new();
    if let Some(s) = &verdict.saturation {
        vlines.push(Rule {
            label: format!(
                "saturation point ({short} {})",
                format::number(s.load.value())
            ),
            value: s.load.value(),
            style: SATURATION,
        });
    }
    if let Some(s) = &verdict.sustainable {
        vlines.push(Rule {
            label: format!(
                "max sustainable ({short} {})",
                format::number(s.load.value())
            ),
            value: s.load.value(),
            style: SUSTAINABLE,
        });
    }
    vlines
}

/// A p95 objective as a horizontal line (`scale`: seconds to the chart's unit).
pub(super) fn objective_rule(what: &str, objective: Option<f64>, scale: f64) -> Vec<Rule> {
    objective
        .map(|t| Rule {
            label: format!("objective p95 {what} ≤ {}", format::seconds(t)),
            value: t * scale,
            style: OBJECTIVE,
        })
        .into_iter()
        .collect()
}

/// The three charts of the method for one sweep.
pub fn sweep_charts(steps: &[StepResult], verdict: &SweepVerdict) -> Vec<Chart> {
    let (x_label, short) = load_label(steps);
    let x = load_axis(steps);
    let vlines = verdict_marks(verdict, short);
    let chart = |id: &str, title: &str, y_label: &str, mut s: Vec<Series>, hlines: Vec<Rule>| {
        s.extend(overlays(steps));
        Chart {
            id: id.to_string(),
            title: title.to_string(),
            x,
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            y2_label: Some("GPU memory, KV cache (%)".to_string()),
            series: s,
            hlines,
            vlines: vlines.clone(),
            bands: Vec::new(),
            stacked: false,
        }
    };
    let ttft_obj = objective_rule("TTFT", verdict.objectives.ttft_p95, 1.0);
    let itl_obj = objective_rule("ITL", verdict.objectives.itl_p95, 1000.0);
    let mut charts = vec![
        chart(
            "throughput",
            "Throughput vs load",
            "output tokens per second",
            vec![series(
                "output tokens/s",
                "tokens/s",
                Style::new(0, Dash::Solid, Marker::Circle),
                false,
                points(steps, |s| Some(s.output_token_throughput)),
            )],
            Vec::new(),
        ),
        chart(
            "ttft",
            "Time to first token vs load",
            "TTFT (s)",
            vec![
                series(
                    "p95 TTFT",
                    "s",
                    Style::new(0, Dash::Solid, Marker::Circle),
                    false,
                    points(steps, |s| s.ttft.p95),
                ),
                series(
                    "p50 TTFT",
                    "s",
                    Style::new(2, Dash::Dashed, Marker::Triangle),
                    false,
                    points(steps, |s| s.ttft.p50),
                ),
            ],
            ttft_obj,
        ),
        chart(
            "itl",
            "Inter-token latency vs load",
            "ITL (ms)",
            vec![
                series(
                    "p95 ITL",
                    "ms",
                    Style::new(0, Dash::Solid, Marker::Circle),
                    false,
                    points(steps, |s| s.itl.p95.map(|v| v * 1000.0)),
                ),
                series(
                    "p50 ITL",
                    "ms",
                    Style::new(2, Dash::Dashed, Marker::Triangle),
                    false,
                    points(steps, |s| s.itl.p50.map(|v| v * 1000.0)),
                ),
            ],
            itl_obj,
        ),
    ];
    if steps.iter().any(|s| s.server.latency_breakdown.is_some()) {
        charts.push(breakdown_chart(steps, x, x_label, vlines));
    }
    charts
}

/// The client's mean TTFT per step, split by the engine's phase times
/// (stacked bars; `analysis::latency_breakdown`).
pub(super) fn breakdown_chart(
    steps: &[StepResult],
    x: XAxis,
    x_label: &str,
    vlines: Vec<Rule>,
) -> Chart {
    let points: Vec<(f64, &TtftBreakdown)> = steps
        .iter()
        .filter_map(|s| Some((s.load.value(), &s.server.latency_breakdown.as_ref()?.ttft)))
        .collect();
    Chart {
        id: "ttft_breakdown".to_string(),
        title: "Mean TTFT by phase vs load".to_string(),
        x,
        x_label: x_label.to_string(),
        y_label: "mean TTFT (s)".to_string(),
        y2_label: None,
        series: ttft_breakdown_series(&points),
        hlines: Vec::new(),
        vlines,
        bands: Vec::new(),
        stacked: true,
    }
}
