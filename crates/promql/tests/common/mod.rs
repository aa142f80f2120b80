//! Test and bench helpers: the dashboard expressions with Grafana's
//! variables substituted, and an hour (or a day) of realistic samples built
//! from the repository's captured exposition pages.
#![allow(dead_code)]

pub mod prometheus;

use std::collections::{BTreeMap, BTreeSet};
use std::f64::consts::PI;
use std::path::PathBuf;

use llmwatch_core::exposition::{parse_lenient, Format, MetricType};
use llmwatch_promql::{format_value, Labels, Series, METRIC_NAME};
use promql_parser::parser::Expr;

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// One dashboard expression: where it came from and its text.
pub struct DashboardExpr {
    pub line: usize,
    pub panel: String,
    pub raw: String,
}

/// The 887 expressions of `fixtures/promql/dashboards.tsv`.
pub fn dashboard_exprs() -> Vec<DashboardExpr> {
    let path = fixtures_dir().join("promql/dashboards.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.lines()
        .enumerate()
        .skip(1)
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let cols: Vec<&str> = l.splitn(3, '\t').collect();
            assert_eq!(
                cols.len(),
                3,
                "line {}: expected 3 tab-separated columns",
                i + 1
            );
            DashboardExpr {
                line: i + 1,
                panel: cols[1].to_string(),
                raw: cols[2].to_string(),
            }
        })
        .collect()
}

/// The value a Grafana variable takes in the tests: one concrete value for
/// `="$v"`, and Grafana's multi-value form `(a|b)` after `=~"`.
fn variable_values(name: &str) -> (&'static str, &'static str) {
    match name {
        "model_name" | "model" | "Deployment_id" => ("tiny-llama", "(tiny-llama|other-model)"),
        "instance" => (
            "10.0.0.1:8000",
            "(10.0.0.1:8000|10.0.0.2:8000|10.0.0.9:9090)",
        ),
        "job" => ("vllm", "(vllm|sglang|tgi|dcgm|llm-d)"),
        "namespace" | "baseline" | "llm_d" => ("llm", "(llm|other)"),
        "engine" => ("0", "(0|1)"),
        "service" => ("vllm", "(vllm|sglang)"),
        "pod" => ("vllm-0", "(vllm-0|vllm-1|sglang-0|sglang-1|epp-0)"),
        "deployment" => ("vllm", "vllm"),
        "namespace_label" => ("namespace", "namespace"),
        "variant" => ("default", "(default|canary)"),
        "gpu" => ("0", "(0|1)"),
        "topology" => ("2x2", "(2x2|4x4)"),
        "tpu_model" => ("v5e", "(v5e|v6e)"),
        "ttft_slo" => ("0.5", "0.5"),
        "tpot_slo" => ("0.05", "0.05"),
        // Grafana's intervals for a 1 h dashboard at a 60 s step over 15 s scrapes.
        "__rate_interval" | "__interval" => ("1m", "1m"),
        "__range" => ("1h", "1h"),
        "__range_s" => ("3600", "3600"),
        "__range_ms" => ("3600000", "3600000"),
        "__interval_ms" => ("60000", "60000"),
        _ => ("x", ".*"),
    }
}

/// Substitutes Grafana's template variables (`$v`, `${v}`, `${v:fmt}`,
/// `[[v]]`) with test values; a variable right after `=~"` takes the
/// regex (multi-value) form, as Grafana interpolates multi-value variables.
pub fn substitute(expr: &str) -> String {
    let b = expr.as_bytes();
    let mut out = String::with_capacity(expr.len());
    let mut i = 0;
    while i < b.len() {
        let (name, len) = if b[i] == b'$' && i + 1 < b.len() && b[i + 1] == b'{' {
            match expr[i..].find('}') {
                Some(end) => {
                    let inner = &expr[i + 2..i + end];
                    (inner.split(':').next().unwrap_or(inner), end + 1)
                }
                None => ("", 0),
            }
        } else if b[i] == b'$' {
            let n = expr[i + 1..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(expr.len() - i - 1);
            (&expr[i + 1..i + 1 + n], n + 1)
        } else if expr[i..].starts_with("[[") {
            match expr[i..].find("]]") {
                Some(end) => (&expr[i + 2..i + end], end + 2),
                None => ("", 0),
            }
        } else {
            ("", 0)
        };
        if len == 0 || name.is_empty() {
            out.push(b[i] as char);
            i += 1;
            continue;
        }
        let (single, multi) = variable_values(name);
        out.push_str(if out.ends_with("=~\"") { multi } else { single });
        i += len;
    }
    out
}

/// Metric names that selectors of `expr` pin with `name` or `__name__="x"`.
pub fn selector_names(expr: &Expr, out: &mut BTreeSet<String>) {
    match expr {
        Expr::VectorSelector(vs) => {
            if let Some(n) = &vs.name {
                out.insert(n.clone());
            }
            for m in &vs.matchers.matchers {
                if m.name == METRIC_NAME {
                    if let promql_parser::label::MatchOp::Equal = m.op {
                        out.insert(m.value.clone());
                    }
                }
            }
        }
        Expr::MatrixSelector(ms) => selector_names(&Expr::VectorSelector(ms.vs.clone()), out),
        Expr::Subquery(s) => selector_names(&s.expr, out),
        Expr::Aggregate(a) => {
            selector_names(&a.expr, out);
            if let Some(p) = &a.param {
                selector_names(p, out);
            }
        }
        Expr::Unary(u) => selector_names(&u.expr, out),
        Expr::Binary(b) => {
            selector_names(&b.lhs, out);
            selector_names(&b.rhs, out);
        }
        Expr::Paren(p) => selector_names(&p.expr, out),
        Expr::Call(c) => c.args.args.iter().for_each(|a| selector_names(a, out)),
        _ => {}
    }
}

/// A deterministic hash (FNV-1a) for picking rates and phases.
fn hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn unit(h: u64, salt: u64) -> f64 {
    let x = hash(&format!("{h}-{salt}"));
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// One scraped instance of a page.
struct Instance {
    job: &'static str,
    instance: &'static str,
    pod: &'static str,
    load: f64,
    /// Seconds after the start when the process restarts (counters reset).
    restart_at: Option<f64>,
    /// Seconds after the start when the target disappears.
    gone_at: Option<f64>,
}

const PAGES: &[(&str, &[Instance])] = &[
    (
        "vllm-live/metrics_vllm_idle.txt",
        &[
            Instance {
                job: "vllm",
                instance: "10.0.0.1:8000",
                pod: "vllm-0",
                load: 1.0,
                restart_at: None,
                gone_at: None,
            },
            Instance {
                job: "vllm",
                instance: "10.0.0.2:8000",
                pod: "vllm-1",
                load: 0.6,
                restart_at: Some(35.0 * 60.0),
                gone_at: None,
            },
        ],
    ),
    (
        "sglang/metrics_reconstructed_v0.5.txt",
        &[
            Instance {
                job: "sglang",
                instance: "10.0.0.3:30000",
                pod: "sglang-0",
                load: 0.8,
                restart_at: None,
                gone_at: None,
            },
            Instance {
                job: "sglang",
                instance: "10.0.0.4:30000",
                pod: "sglang-1",
                load: 0.5,
                restart_at: None,
                gone_at: Some(40.0 * 60.0),
            },
        ],
    ),
    (
        "tgi/metrics_example.txt",
        &[Instance {
            job: "tgi",
            instance: "10.0.0.5:80",
            pod: "tgi-0",
            load: 0.7,
            restart_at: None,
            gone_at: None,
        }],
    ),
    (
        "dcgm-exporter/metrics_example.txt",
        &[Instance {
            job: "dcgm",
            instance: "10.0.0.6:9400",
            pod: "dcgm-0",
            load: 1.0,
            restart_at: None,
            gone_at: None,
        }],
    ),
];

/// The synthetic target that carries dashboard metrics no page has.
const SYNTHETIC: Instance = Instance {
    job: "llm-d",
    instance: "10.0.0.9:9090",
    pod: "epp-0",
    load: 1.0,
    restart_at: None,
    gone_at: None,
};

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Counter,
    Gauge,
    Constant,
}

/// A histogram (one label set without `le`): bounds and its series labels.
struct Histogram {
    base: Labels,
    name: String,
    bounds: Vec<(String, f64)>,
}

/// Load that swings over 20 minutes: the cumulative count of a counter
/// with rate `r * (1 + 0.5 sin)` from 0 to `t` seconds.
fn cumulative(r: f64, t: f64, phase: f64) -> f64 {
    let w = 2.0 * PI / 1200.0;
    r * (t - 0.5 / w * ((w * t + phase).cos() - phase.cos()))
}

/// Scrape instants (ms) of one instance: every `interval_ms`, with a
/// deterministic jitter of up to ±200 ms like a real scrape loop.
fn scrape_times(inst: &Instance, start_ms: i64, duration_ms: i64, interval_ms: i64) -> Vec<i64> {
    let h = hash(inst.instance);
    let end = inst.gone_at.map_or(duration_ms, |g| (g * 1000.0) as i64);
    (0..=duration_ms / interval_ms)
        .map(|k| k * interval_ms)
        .filter(|&off| off <= end)
        .map(|off| start_ms + off + (unit(h, off as u64) * 400.0) as i64 - 200)
        .collect()
}

/// Seconds since the last (re)start at `t_s` seconds after the start.
fn since_start(inst: &Instance, t_s: f64) -> (f64, bool) {
    match inst.restart_at {
        Some(r) if t_s >= r => (t_s - r, true),
        _ => (t_s, false),
    }
}

fn counter_series(
    labels: Labels,
    initial: f64,
    inst: &Instance,
    times: &[i64],
    start_ms: i64,
) -> Series {
    let h = hash(&labels.to_string());
    // A fifth of counters stay flat (errors, preemptions), as on a healthy server.
    let rate = if unit(h, 1) < 0.2 {
        0.0
    } else {
        (0.2 + unit(h, 2) * 20.0) * inst.load
    };
    let phase = unit(h, 3) * 2.0 * PI;
    let samples = times
        .iter()
        .map(|&t| {
            let (s, restarted) = since_start(inst, (t - start_ms) as f64 / 1000.0);
            let base = if restarted { 0.0 } else { initial };
            (t, (base + cumulative(rate, s, phase)).floor())
        })
        .collect();
    Series { labels, samples }
}

fn gauge_series(labels: Labels, v0: f64, inst: &Instance, times: &[i64], start_ms: i64) -> Series {
    let h = hash(&labels.to_string());
    let phase = unit(h, 4) * 2.0 * PI;
    let period = 600.0 + unit(h, 5) * 1800.0;
    let fraction = (0.0..=1.0).contains(&v0);
    let level = if fraction { 0.5 } else { v0.abs() * inst.load };
    let samples = times
        .iter()
        .map(|&t| {
            let s = (t - start_ms) as f64 / 1000.0;
            let wave = (2.0 * PI * s / period + phase).sin();
            let v = if fraction {
                level + 0.4 * wave
            } else {
                level * (1.0 + 0.3 * wave)
            };
            (t, (v * 1000.0).round() / 1000.0)
        })
        .collect();
    Series { labels, samples }
}

fn histogram_series(
    hist: &Histogram,
    inst: &Instance,
    times: &[i64],
    start_ms: i64,
) -> Vec<Series> {
    let h = hash(&hist.base.to_string());
    let rate = (0.5 + unit(h, 6) * 10.0) * inst.load;
    let phase = unit(h, 7) * 2.0 * PI;
    let finite: Vec<f64> = hist
        .bounds
        .iter()
        .map(|b| b.1)
        .filter(|b| b.is_finite())
        .collect();
    let median = finite
        .get(finite.len() / 2)
        .copied()
        .unwrap_or(1.0)
        .max(1e-3);
    let mut acc = vec![0.0; hist.bounds.len()];
    let (mut sum, mut prev_total) = (0.0, 0.0);
    let mut buckets: Vec<Vec<(i64, f64)>> = vec![Vec::new(); hist.bounds.len()];
    let (mut count, mut sums) = (Vec::new(), Vec::new());
    let mut was_restarted = false;
    for &t in times {
        let (s, restarted) = since_start(inst, (t - start_ms) as f64 / 1000.0);
        if restarted && !was_restarted {
            acc.iter_mut().for_each(|a| *a = 0.0);
            (sum, prev_total) = (0.0, 0.0);
            was_restarted = true;
        }
        let total = cumulative(rate, s, phase);
        let new = (total - prev_total).max(0.0);
        prev_total = total;
        let scale = median * (1.0 + 0.4 * (2.0 * PI * s / 1800.0 + phase).sin());
        for (a, (_, ub)) in acc.iter_mut().zip(&hist.bounds) {
            *a += new * (1.0 - (-ub / scale).exp());
        }
        sum += new * scale;
        for (b, a) in buckets.iter_mut().zip(&acc) {
            b.push((t, a.floor()));
        }
        count.push((t, total.floor()));
        sums.push((t, (sum * 1000.0).round() / 1000.0));
    }
    let mut out: Vec<Series> = hist
        .bounds
        .iter()
        .zip(buckets)
        .map(|((le, _), samples)| Series {
            labels: hist
                .base
                .with(METRIC_NAME, &format!("{}_bucket", hist.name))
                .with("le", le),
            samples,
        })
        .collect();
    out.push(Series {
        labels: hist.base.with(METRIC_NAME, &format!("{}_count", hist.name)),
        samples: count,
    });
    out.push(Series {
        labels: hist.base.with(METRIC_NAME, &format!("{}_sum", hist.name)),
        samples: sums,
    });
    out
}

fn target_labels(inst: &Instance, mut pairs: Vec<(String, String)>) -> Labels {
    for (k, v) in [
        ("job", inst.job),
        ("instance", inst.instance),
        ("pod", inst.pod),
        ("namespace", "llm"),
        ("container", inst.job),
    ] {
        pairs.retain(|(name, _)| name != k);
        pairs.push((k.to_string(), v.to_string()));
    }
    for p in pairs.iter_mut() {
        if p.0 == "model_name" {
            p.1 = "tiny-llama".to_string();
        }
    }
    Labels::new(pairs)
}

fn page_series(path: &str, inst: &Instance, times: &[i64], start_ms: i64, out: &mut Vec<Series>) {
    let full = fixtures_dir().join(path);
    let body = std::fs::read(&full).unwrap_or_else(|e| panic!("{full:?}: {e}"));
    let (page, _) = parse_lenient(&body, Format::PrometheusText);
    for fam in &page.families {
        let mut hists: BTreeMap<Labels, Histogram> = BTreeMap::new();
        for s in &fam.samples {
            let pairs: Vec<(String, String)> = s
                .labels
                .iter()
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect();
            let name = s.name.to_string();
            if let Some(base_name) = name.strip_suffix("_bucket") {
                if let Some(le) = s.label("le") {
                    let bound = if le.contains("Inf") {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap_or(1.0)
                    };
                    let base =
                        target_labels(inst, pairs.into_iter().filter(|(k, _)| k != "le").collect());
                    hists
                        .entry(base.clone())
                        .or_insert_with(|| Histogram {
                            base,
                            name: base_name.to_string(),
                            bounds: Vec::new(),
                        })
                        .bounds
                        .push((le.to_string(), bound));
                    continue;
                }
            }
            let is_hist_part = fam.metric_type == MetricType::Histogram
                && (name.ends_with("_count") || name.ends_with("_sum"));
            if is_hist_part {
                continue;
            }
            let labels = target_labels(inst, pairs).with(METRIC_NAME, &name);
            let kind = if name.ends_with("_created") || name.ends_with("_info") {
                Kind::Constant
            } else if fam.metric_type == MetricType::Counter
                || name.ends_with("_total")
                || name.ends_with("_count")
                || name.ends_with("_sum")
            {
                Kind::Counter
            } else {
                Kind::Gauge
            };
            out.push(match kind {
                Kind::Counter => counter_series(labels, s.value.max(0.0), inst, times, start_ms),
                Kind::Gauge => gauge_series(labels, s.value, inst, times, start_ms),
                Kind::Constant => Series {
                    labels,
                    samples: times.iter().map(|&t| (t, s.value)).collect(),
                },
            });
        }
        for hist in hists.values() {
            out.extend(histogram_series(hist, inst, times, start_ms));
        }
    }
}

/// Series for dashboard metrics that no captured page has, on one
/// synthetic llm-d target: `_bucket` names become histograms, `_total`,
/// `_count`, `_sum` counters, the rest gauges.
fn synthetic_series(
    names: &BTreeSet<String>,
    have: &BTreeSet<String>,
    times: &[i64],
    start_ms: i64,
    out: &mut Vec<Series>,
) {
    let bounds: Vec<(String, f64)> = ["0.01", "0.05", "0.1", "0.5", "1", "5", "10", "+Inf"]
        .iter()
        .map(|s| {
            (
                s.to_string(),
                if *s == "+Inf" {
                    f64::INFINITY
                } else {
                    s.parse().unwrap_or(1.0)
                },
            )
        })
        .collect();
    let inst = &SYNTHETIC;
    for variant in ["default", "canary"] {
        let base = target_labels(
            inst,
            vec![
                ("model_name".into(), "tiny-llama".into()),
                ("variant_name".into(), variant.into()),
                ("engine".into(), "0".into()),
            ],
        );
        for name in names.iter().filter(|n| !have.contains(*n)) {
            if let Some(h) = name.strip_suffix("_bucket") {
                let hist = Histogram {
                    base: base.clone(),
                    name: h.to_string(),
                    bounds: bounds.clone(),
                };
                out.extend(
                    histogram_series(&hist, inst, times, start_ms)
                        .into_iter()
                        .filter(|s| !have.contains(s.labels.metric_name().unwrap_or(""))),
                );
            } else if name.ends_with("_total") || name.ends_with("_count") || name.ends_with("_sum")
            {
                out.push(counter_series(
                    base.with(METRIC_NAME, name),
                    0.0,
                    inst,
                    times,
                    start_ms,
                ));
            } else if !names.contains(&format!("{name}_bucket")) {
                out.push(gauge_series(
                    base.with(METRIC_NAME, name),
                    10.0,
                    inst,
                    times,
                    start_ms,
                ));
            }
        }
    }
}

/// `duration_ms` of samples every `interval_ms` from `start_ms`: every
/// page's series on its instances (counters and buckets advancing with a
/// swinging load, gauges varying, vllm-1 restarting at 35 min, sglang-1
/// gone at 40 min), plus the dashboard metrics no page has.
pub fn generate(start_ms: i64, duration_ms: i64, interval_ms: i64) -> Vec<Series> {
    generate_for(
        &["vllm", "sglang", "tgi", "dcgm"],
        start_ms,
        duration_ms,
        interval_ms,
    )
}

/// As [`generate`], with only the page instances of `jobs` (and only the
/// first instance of each page when `jobs` is given as `first:JOB`).
pub fn generate_for(
    jobs: &[&str],
    start_ms: i64,
    duration_ms: i64,
    interval_ms: i64,
) -> Vec<Series> {
    let mut out = Vec::new();
    for (path, instances) in PAGES {
        for (i, inst) in instances.iter().enumerate() {
            let wanted = jobs.contains(&inst.job)
                || (i == 0 && jobs.contains(&format!("first:{}", inst.job).as_str()));
            if !wanted {
                continue;
            }
            let times = scrape_times(inst, start_ms, duration_ms, interval_ms);
            page_series(path, inst, &times, start_ms, &mut out);
        }
    }
    let have: BTreeSet<String> = out
        .iter()
        .filter_map(|s| s.labels.metric_name().map(str::to_string))
        .collect();
    let mut names = BTreeSet::new();
    for e in dashboard_exprs() {
        if let Ok(expr) = promql_parser::parser::parse(&substitute(&e.raw)) {
            selector_names(&expr, &mut names);
        }
    }
    let times = scrape_times(&SYNTHETIC, start_ms, duration_ms, interval_ms);
    synthetic_series(&names, &have, &times, start_ms, &mut out);
    // One label set once: pages may repeat a series after relabelling.
    out.sort_by(|a, b| a.labels.cmp(&b.labels));
    out.dedup_by(|a, b| a.labels == b.labels);
    out
}

fn escape_label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The series as an OpenMetrics text with timestamps (seconds), for
/// `promtool tsdb create-blocks-from openmetrics`.
pub fn to_openmetrics(series: &[Series]) -> String {
    let mut out = String::new();
    for s in series {
        let name = s.labels.metric_name().unwrap_or("unnamed");
        let labels: Vec<String> = s
            .labels
            .pairs()
            .iter()
            .filter(|(k, _)| k != METRIC_NAME)
            .map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v)))
            .collect();
        let head = format!("{name}{{{}}}", labels.join(","));
        for &(t, v) in &s.samples {
            out.push_str(&format!(
                "{head} {} {}.{:03}\n",
                format_value(v),
                t / 1000,
                t % 1000
            ));
        }
    }
    out.push_str("# EOF\n");
    out
}
