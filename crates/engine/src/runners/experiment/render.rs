//! The report a user keeps: `report.html` (self-contained: inline CSS and
//! SVG, no script, no external asset), `report.md` and `report.json`, all
//! from one [`ExperimentResult`] — so `llmwatch experiment --report ID`
//! rewrites them from the database.

use std::fmt::Write as _;
use std::path::Path;

use llmwatch_core::analysis::experiment::{CurvePoint, ExperimentResult, Interval, VariantResult};

/// Line colours of the variants, in plan order (colour-blind safe).
const COLOURS: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#f0e442", "#000000",
];

fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |s| format!("{:.1} ms", s * 1e3))
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "—".to_string(), |x| format!("{x:.digits$}"))
}

fn interval(v: Option<&Interval>, digits: usize) -> String {
    v.map_or_else(|| "—".to_string(), |i| i.describe(digits))
}

/// Writes `report.html`, `report.md` and `report.json` into `dir`.
pub fn write_report(result: &ExperimentResult, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("report.html"), render_html(result))?;
    std::fs::write(dir.join("report.md"), render_markdown(result))?;
    let json = serde_json::to_string_pretty(result).map_err(std::io::Error::other)?;
    std::fs::write(
        dir.join("report.json"),
        llmwatch_core::redact::redact_urls_in(&json),
    )
}

/// The ranked table's rows as text cells (shared by HTML and Markdown).
fn ranking_cells(result: &ExperimentResult) -> Vec<Vec<String>> {
    result
        .ranking
        .iter()
        .map(|r| {
            vec![
                r.rank.to_string(),
                r.variant.clone(),
                interval(r.max_sustainable.as_ref(), 0),
                interval(r.throughput_at_objective.as_ref(), 0),
                ms(r.ttft_p95_at_reference_s),
                ms(r.itl_p95_at_reference_s),
                num(r.tokens_per_s_per_gpu, 0),
                r.accuracy
                    .map_or_else(|| "—".into(), |a| format!("{:.0} %", a * 100.0)),
                r.energy_j_per_token
                    .map_or_else(|| "not scraped".into(), |j| format!("{j:.3} J")),
                r.binding.clone().unwrap_or_else(|| "—".into()),
                r.marks.join(", "),
            ]
        })
        .collect()
}

fn ranking_header(result: &ExperimentResult) -> Vec<String> {
    vec![
        "#".into(),
        "variant".into(),
        "max sustainable concurrency [95 % CI]".into(),
        "throughput at the objective, output tok/s [95 % CI]".into(),
        format!("p95 TTFT at c={}", result.plan.reference_concurrency),
        format!("p95 ITL at c={}", result.plan.reference_concurrency),
        "tok/s per GPU".into(),
        "accuracy".into(),
        "energy per token".into(),
        "binding limit".into(),
        "marks".into(),
    ]
}

/// The report as Markdown.
pub fn render_markdown(result: &ExperimentResult) -> String {
    let mut md = String::new();
    let p = &result.plan;
    let _ = writeln!(md, "# Experiment: {}\n", result.name);
    let _ = writeln!(
        md,
        "Status: {}. {} of {} runs. Shape {}, concurrency {:?}, objectives p95 TTFT ≤ {} ms and p95 ITL ≤ {} ms, {} repeat(s), seed {}.\n\nServer: `{}`\n",
        result.status, result.runs_done, result.runs_planned, p.shape, p.concurrency,
        p.slo_ttft_p95_s * 1e3, p.slo_itl_p95_s * 1e3, p.repeats, p.seed, p.server
    );
    md.push_str("## Answer\n\n");
    for line in &result.answer {
        let _ = writeln!(md, "- {line}");
    }
    md.push_str("\n## Ranking\n\n");
    let header = ranking_header(result);
    let _ = writeln!(md, "| {} |", header.join(" | "));
    let _ = writeln!(md, "|{}", "---|".repeat(header.len()));
    for row in ranking_cells(result) {
        let _ = writeln!(md, "| {} |", row.join(" | ").replace('\n', " "));
    }
    md.push_str("\n## Variants\n\n");
    for v in &result.variants {
        variant_markdown(&mut md, v);
    }
    md.push_str("## Checklist\n\n| item | value |\n|---|---|\n");
    for (k, v) in &result.checklist {
        let _ = writeln!(md, "| {k} | {v} |");
    }
    md
}

fn variant_markdown(md: &mut String, v: &VariantResult) {
    let _ = writeln!(md, "### {} ({})\n", v.name, v.status.as_str());
    let _ = writeln!(
        md,
        "Change: {}. Flags: `{}`.",
        v.change_line(),
        v.args.join(" ")
    );
    if let Some(reason) = &v.reason {
        let _ = writeln!(md, "\nReason: {reason}");
    }
    if let Some(tail) = &v.log_tail {
        let _ = writeln!(md, "\nLog tail:\n\n```\n{tail}\n```");
    }
    if let Some(b) = &v.binding {
        let _ = writeln!(
            md,
            "\nBinding limit: {} ({} confidence): {}. Try: {}.",
            b.verdict, b.confidence, b.evidence, b.what_to_try
        );
    }
    if let Some(text) = &v.versus_baseline {
        let _ = writeln!(md, "\nAgainst the baseline: {text}.");
    }
    if let Some(mark) = &v.quality_mark {
        let _ = writeln!(md, "\n**Quality mark:** {mark}.");
    }
    if let Some(a) = &v.accuracy {
        let _ = writeln!(
            md,
            "\nAccuracy: {} of {} ({}), {} failed.",
            a.correct,
            a.total,
            a.interval.describe(2),
            a.failed
        );
    }
    if !v.curve.is_empty() {
        md.push_str("\n| concurrency | requests | output tok/s | p50 TTFT | p95 TTFT | p50 ITL | p95 ITL | errors | KV usage mean / max |\n|---|---|---|---|---|---|---|---|---|\n");
        for p in &v.curve {
            let _ = writeln!(
                md,
                "| {} | {} | {:.1} | {} | {} | {} | {} | {:.1} % | {} / {} |",
                p.concurrency,
                p.requests,
                p.throughput,
                ms(p.ttft_p50_s),
                ms(p.ttft_p95_s),
                ms(p.itl_p50_s),
                ms(p.itl_p95_s),
                p.error_rate * 100.0,
                num(p.kv_usage_mean, 2),
                num(p.kv_usage_max, 2)
            );
        }
    }
    if !v.turns.is_empty() {
        md.push_str("\nPrefix-cache benefit per turn (reference load, mean over repeats):\n\n| turn | input tokens | cached tokens | hit ratio | p50 TTFT |\n|---|---|---|---|---|\n");
        for row in turn_cells(v) {
            let _ = writeln!(md, "| {} |", row.join(" | "));
        }
    }
    for r in &v.runs {
        let _ = writeln!(
            md,
            "\n- run {} (order {}): {}{}, max sustainable {}, sweep #{}, prefix cache reset: {}",
            r.repeat,
            r.order,
            r.status,
            r.error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default(),
            r.max_sustainable.map_or("none".into(), |c| c.to_string()),
            r.sweep_id.map_or("-".into(), |id| id.to_string()),
            match r.prefix_cache_reset {
                Some(true) => "yes",
                Some(false) => "refused",
                None => "not available",
            }
        );
    }
    md.push('\n');
}

/// One series of a chart: label suffix, dashed, the value of a point.
type Series<'a> = (&'a str, bool, fn(&CurvePoint) -> Option<f64>);

/// One chart: a series per variant (and per quantile), x = concurrency on a
/// log2 scale.
struct Chart<'a> {
    id: &'a str,
    title: &'a str,
    unit: &'a str,
    series: Vec<Series<'a>>,
}

const W: f64 = 460.0;
const H: f64 = 260.0;
const PAD_L: f64 = 56.0;
const PAD_B: f64 = 34.0;
const PAD_T: f64 = 24.0;
const PAD_R: f64 = 12.0;

fn chart_svg(chart: &Chart<'_>, result: &ExperimentResult) -> String {
    let levels = &result.plan.concurrency;
    let (lo, hi) = (
        f64::from(*levels.first().unwrap_or(&1)).log2(),
        f64::from(*levels.last().unwrap_or(&1)).log2(),
    );
    let span = (hi - lo).max(1.0);
    let mut ymax: f64 = 0.0;
    for v in &result.variants {
        for p in &v.curve {
            for (_, _, f) in &chart.series {
                ymax = ymax.max(f(p).unwrap_or(0.0));
            }
        }
    }
    let ymax = if ymax > 0.0 { ymax * 1.1 } else { 1.0 };
    let x = |c: u32| PAD_L + (f64::from(c).log2() - lo) / span * (W - PAD_L - PAD_R);
    let y = |v: f64| H - PAD_B - v / ymax * (H - PAD_B - PAD_T);
    let mut svg = format!(
        r#"<svg data-chart="{}" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{} ({}) against concurrency"><text x="{PAD_L}" y="16" class="t">{}</text>"#,
        chart.id,
        esc(chart.title),
        esc(chart.unit),
        esc(chart.title)
    );
    let _ = write!(
        svg,
        r#"<line x1="{PAD_L}" y1="{0}" x2="{1}" y2="{0}" class="ax"/><line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{0}" class="ax"/>"#,
        H - PAD_B,
        W - PAD_R
    );
    for c in levels {
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{}" class="l" text-anchor="middle">{c}</text>"#,
            x(*c),
            H - PAD_B + 14.0
        );
    }
    for i in 0..=4 {
        let v = ymax * f64::from(i) / 4.0;
        let _ = write!(
            svg,
            r#"<text x="{}" y="{:.1}" class="l" text-anchor="end">{}</text>"#,
            PAD_L - 4.0,
            y(v) + 4.0,
            short(v)
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" class="l" text-anchor="middle">concurrency</text>"#,
        (W + PAD_L) / 2.0,
        H - 4.0
    );
    for (i, v) in result.variants.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        for (label, dashed, f) in &chart.series {
            let points: Vec<String> = v
                .curve
                .iter()
                .filter_map(|p| f(p).map(|val| format!("{:.1},{:.1}", x(p.concurrency), y(val))))
                .collect();
            if points.is_empty() {
                continue;
            }
            let _ = write!(
                svg,
                r#"<polyline data-series="{} {label}" points="{}" fill="none" stroke="{colour}" stroke-width="2"{}/>"#,
                esc(&v.name),
                points.join(" "),
                if *dashed {
                    r#" stroke-dasharray="5 4""#
                } else {
                    ""
                }
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn charts() -> Vec<Chart<'static>> {
    vec![
        Chart {
            id: "throughput",
            title: "Throughput (output tok/s)",
            unit: "tok/s",
            series: vec![("", false, |p| Some(p.throughput))],
        },
        Chart {
            id: "ttft",
            title: "TTFT p50 (dashed) / p95 (ms)",
            unit: "ms",
            series: vec![
                ("p50", true, |p| p.ttft_p50_s.map(|s| s * 1e3)),
                ("p95", false, |p| p.ttft_p95_s.map(|s| s * 1e3)),
            ],
        },
        Chart {
            id: "itl",
            title: "ITL p50 (dashed) / p95 (ms)",
            unit: "ms",
            series: vec![
                ("p50", true, |p| p.itl_p50_s.map(|s| s * 1e3)),
                ("p95", false, |p| p.itl_p95_s.map(|s| s * 1e3)),
            ],
        },
        Chart {
            id: "kv",
            title: "KV-cache usage mean (dashed) / max",
            unit: "0..1",
            series: vec![
                ("mean", true, |p| p.kv_usage_mean),
                ("max", false, |p| p.kv_usage_max),
            ],
        },
    ]
}

const CSS: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}\
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}\
th{background:#f3f3f3}.charts{display:flex;flex-wrap:wrap;gap:12px}svg{background:#fff;border:1px solid #ddd}\
.t{font-size:13px;font-weight:600}.l{font-size:11px;fill:#444}.ax{stroke:#888}pre{background:#f6f6f6;padding:8px;overflow:auto;max-height:20em}\
.mark{color:#a00;font-weight:600}.key span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:14px;height:4px;margin-right:4px;vertical-align:middle}";

fn table_html(
    header: &[String],
    rows: &[Vec<String>],
    row_attr: impl Fn(usize) -> String,
) -> String {
    let mut html = String::from("<table><thead><tr>");
    for h in header {
        let _ = write!(html, "<th>{}</th>", esc(h));
    }
    html.push_str("</tr></thead><tbody>");
    for (i, row) in rows.iter().enumerate() {
        let _ = write!(html, "<tr{}>", row_attr(i));
        for cell in row {
            let _ = write!(html, "<td>{}</td>", esc(cell));
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody></table>");
    html
}

/// The report as one self-contained HTML page.
pub fn render_html(result: &ExperimentResult) -> String {
    let mut html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>Experiment {0}</title><style>{CSS}</style></head><body><h1>Experiment: {0}</h1>",
        esc(&result.name)
    );
    let p = &result.plan;
    let _ = write!(
        html,
        "<p id=\"status\" data-status=\"{}\">Status: {} — {} of {} runs. Shape {}, concurrency {:?}, objectives p95 TTFT ≤ {} ms, p95 ITL ≤ {} ms; {} repeat(s), seed {}. Server: <code>{}</code></p>",
        esc(&result.status), esc(&result.status), result.runs_done, result.runs_planned, esc(&p.shape),
        p.concurrency, p.slo_ttft_p95_s * 1e3, p.slo_itl_p95_s * 1e3, p.repeats, p.seed, esc(&p.server)
    );
    html.push_str("<h2>Answer</h2><ul id=\"answer\">");
    for line in &result.answer {
        let _ = write!(html, "<li>{}</li>", esc(line));
    }
    html.push_str("</ul><h2>Ranking</h2>");
    let ranking = &result.ranking;
    html.push_str(&table_html(
        &ranking_header(result),
        &ranking_cells(result),
        |i| format!(" data-variant=\"{}\"", esc(&ranking[i].variant)),
    ));
    html.push_str("<h2>Curves</h2><p class=\"key\">");
    for (i, v) in result.variants.iter().enumerate() {
        let _ = write!(
            html,
            "<span><i class=\"sw\" style=\"background:{}\"></i>{}</span>",
            COLOURS[i % COLOURS.len()],
            esc(&v.name)
        );
    }
    html.push_str("</p><div class=\"charts\">");
    for chart in charts() {
        html.push_str(&chart_svg(&chart, result));
    }
    html.push_str("</div><h2>Variants</h2>");
    for v in &result.variants {
        variant_html(&mut html, v);
    }
    html.push_str("<h2>Checklist</h2>");
    let rows: Vec<Vec<String>> = result
        .checklist
        .iter()
        .map(|(k, v)| vec![k.clone(), v.clone()])
        .collect();
    html.push_str(&table_html(&["item".into(), "value".into()], &rows, |_| {
        String::new()
    }));
    html.push_str("</body></html>\n");
    html
}

/// A conversation workload's rows per turn: turn, input and cached tokens,
/// hit ratio, p50 TTFT.
fn turn_cells(v: &VariantResult) -> Vec<Vec<String>> {
    v.turns
        .iter()
        .map(|t| {
            vec![
                t.turn.to_string(),
                num(t.input_tokens_mean, 1),
                num(t.cached_tokens_mean, 1),
                num(t.hit_ratio, 3),
                ms(t.ttft_p50_s),
            ]
        })
        .collect()
}

fn variant_html(html: &mut String, v: &VariantResult) {
    let _ = write!(
        html,
        "<section data-variant-section=\"{0}\" data-status=\"{1}\"><h3>{0} <small>({1})</small></h3><p>Change: {2}. Flags: <code>{3}</code></p>",
        esc(&v.name), v.status.as_str(), esc(&v.change_line()), esc(&v.args.join(" "))
    );
    if let Some(reason) = &v.reason {
        let _ = write!(html, "<p class=\"reason\">Reason: {}</p>", esc(reason));
    }
    if let Some(tail) = &v.log_tail {
        let _ = write!(
            html,
            "<details open><summary>Server log tail</summary><pre class=\"log\">{}</pre></details>",
            esc(tail)
        );
    }
    if let Some(b) = &v.binding {
        let _ = write!(html, "<p class=\"binding\" data-binding=\"{}\">Binding limit: <b>{}</b> ({} confidence): {}. Try: {}.</p>", esc(&b.kind), esc(&b.verdict), esc(&b.confidence), esc(&b.evidence), esc(&b.what_to_try));
    }
    if let Some(text) = &v.versus_baseline {
        let _ = write!(html, "<p>Against the baseline: {}.</p>", esc(text));
    }
    if let Some(mark) = &v.quality_mark {
        let _ = write!(
            html,
            "<p class=\"mark\" data-quality-mark>Quality mark: {}.</p>",
            esc(mark)
        );
    }
    if let Some(a) = &v.accuracy {
        let _ = write!(
            html,
            "<p>Accuracy: {} of {} ({}).</p>",
            a.correct,
            a.total,
            esc(&a.interval.describe(2))
        );
    }
    if !v.turns.is_empty() {
        html.push_str("<p>Prefix-cache benefit per turn (reference load, mean over repeats):</p>");
        let header: Vec<String> = [
            "turn",
            "input tokens",
            "cached tokens",
            "hit ratio",
            "p50 TTFT",
        ]
        .map(String::from)
        .to_vec();
        html.push_str(&table_html(&header, &turn_cells(v), |i| {
            format!(" data-turn=\"{}\"", i + 1)
        }));
    }
    html.push_str("</section>");
}
