//! The tricky parts of Prometheus' semantics, each on a small hand-built
//! series whose answer is worked out in the comment beside it.

use llmwatch_promql::{
    instant_query, range_query, selections, stale_marker, InstantSample, Labels, MemorySource,
    QueryData, QueryError, QueryOptions, METRIC_NAME,
};

fn labels(name: &str, extra: &[(&str, &str)]) -> Labels {
    Labels::new(
        std::iter::once((METRIC_NAME, name))
            .chain(extra.iter().copied())
            .map(|(k, v)| (k.to_string(), v.to_string())),
    )
}

fn source(series: &[(Labels, Vec<(i64, f64)>)]) -> MemorySource {
    let mut m = MemorySource::new();
    for (l, samples) in series {
        for &(t, v) in samples {
            m.push(l, t, v);
        }
    }
    m
}

fn vector(src: &MemorySource, q: &str, t: i64) -> Vec<InstantSample> {
    match instant_query(src, q, t, &QueryOptions::default()) {
        Ok(QueryData::Vector(v)) => v,
        other => panic!("{q}: expected a vector, got {other:?}"),
    }
}

fn single(src: &MemorySource, q: &str, t: i64) -> f64 {
    let v = vector(src, q, t);
    assert_eq!(v.len(), 1, "{q}: {v:?}");
    v[0].value.v
}

fn every(step_ms: i64, from: i64, to: i64, f: impl Fn(i64) -> f64) -> Vec<(i64, f64)> {
    (0..)
        .map(|k| from + k * step_ms)
        .take_while(|&t| t <= to)
        .map(|t| (t, f(t)))
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

#[test]
fn rate_extrapolates_to_window_edges_when_samples_come_close() {
    // 10/s counter sampled every 10 s from t=0 to 300 s, starting at 1000.
    let c = labels("c_total", &[]);
    let src = source(&[(c, every(10_000, 0, 300_000, |t| 1000.0 + t as f64 / 100.0))]);
    // At 305 s the [1m] window is [245, 305]: samples 250..300 (6), 50 s
    // apart. 5 s to each edge is under 1.1 * 10 s, so extrapolate both:
    // increase 500 * 60/50 = 600, rate 10.
    assert!(close(single(&src, "increase(c_total[1m])", 305_000), 600.0));
    assert!(close(single(&src, "rate(c_total[1m])", 305_000), 10.0));
    // At 400 s the window [340, 400] has no sample; the selector is empty.
    assert!(vector(&src, "rate(c_total[1m])", 400_000).is_empty());
    // At 330 s the window [270, 330] holds 270..300 (4 samples, 30 s). The
    // end gap of 30 s exceeds 11 s, so extrapolate half an interval (5 s)
    // there; the start gap is 0: increase 300 * 35/30 = 350.
    assert!(close(single(&src, "increase(c_total[1m])", 330_000), 350.0));
}

#[test]
fn rate_never_extrapolates_a_counter_below_zero() {
    // A counter at 1 when first sampled (5 s), going up 10 per 10 s; at
    // t=60 the [1m] window is [0, 60]. Extrapolating the 5 s start gap
    // would go below zero; the zero point is 50 s * 1/50 = 1 s before the
    // first sample, so only 1 s is added there.
    let c = labels("c_total", &[]);
    let src = source(&[(
        c,
        every(10_000, 5_000, 55_000, |t| 1.0 + (t - 5_000) as f64 / 1000.0),
    )]);
    // increase = 50; sampled 50 s; start gap min(5, 1) = 1; end gap 5:
    // 50 * (50 + 1 + 5) / 50 = 56.
    assert!(close(single(&src, "increase(c_total[1m])", 60_000), 56.0));
}

#[test]
fn counter_resets_are_added_back() {
    // 0,10,20,30 then a restart: 5,15. Increase over the points is
    // (15 - 0) + 30 (the value before the reset) = 45.
    let c = labels("c_total", &[]);
    let vals = [0.0, 10.0, 20.0, 30.0, 5.0, 15.0];
    let src = source(&[(
        c,
        vals.iter()
            .enumerate()
            .map(|(i, &v)| (i as i64 * 10_000, v))
            .collect(),
    )]);
    // Window [−10, 50] at t=50: samples 0..50 s (6), first at 0 with value 0:
    // zero point is 0 s away, so no start extrapolation; end gap 0.
    assert!(close(single(&src, "increase(c_total[1m])", 50_000), 45.0));
    assert!(close(single(&src, "resets(c_total[1m])", 50_000), 1.0));
    // irate across the reset takes the new value: 15 after 10 s... the last
    // two are 5 and 15: no reset between them, (15 - 5) / 10 = 1.
    assert!(close(single(&src, "irate(c_total[1m])", 50_000), 1.0));
    // delta is not a counter function: no reset correction and no zero
    // clamp: 15 - 0 = 15 over 50 s, extrapolated by the 10 s start gap: 18.
    assert!(close(single(&src, "delta(c_total[1m])", 50_000), 18.0));
}

#[test]
fn one_sample_gives_no_rate() {
    let src = source(&[(labels("c_total", &[]), vec![(0, 1.0)])]);
    assert!(vector(&src, "rate(c_total[5m])", 1_000).is_empty());
    assert!(vector(&src, "irate(c_total[5m])", 1_000).is_empty());
    assert!(vector(&src, "deriv(c_total[5m])", 1_000).is_empty());
}

#[test]
fn lookback_is_five_minutes_and_closed() {
    let src = source(&[(labels("g", &[]), vec![(0, 7.0)])]);
    assert_eq!(single(&src, "g", 300_000), 7.0);
    assert!(vector(&src, "g", 300_001).is_empty());
    assert!(
        vector(&src, "g", -1).is_empty(),
        "no sample before its time"
    );
}

#[test]
fn staleness_marker_ends_a_series_at_once() {
    let src = source(&[(
        labels("g", &[]),
        vec![(0, 1.0), (10_000, 2.0), (20_000, stale_marker())],
    )]);
    assert_eq!(single(&src, "g", 15_000), 2.0);
    assert!(
        vector(&src, "g", 20_000).is_empty(),
        "stale marker hides the series"
    );
    assert!(vector(&src, "g", 200_000).is_empty());
    // In a range the marker is skipped, not counted as a value.
    assert_eq!(single(&src, "count_over_time(g[1m])", 25_000), 2.0);
    assert_eq!(single(&src, "max_over_time(g[1m])", 25_000), 2.0);
    // A plain NaN is a value, not a marker.
    let nan = source(&[(labels("g", &[]), vec![(0, f64::NAN)])]);
    assert!(single(&nan, "g", 1_000).is_nan());
}

#[test]
fn offset_and_at_move_the_evaluation_time() {
    let src = source(&[(
        labels("g", &[]),
        every(60_000, 0, 3_600_000, |t| t as f64 / 60_000.0),
    )]);
    assert_eq!(single(&src, "g offset 10m", 1_800_000), 20.0);
    assert_eq!(single(&src, "g @ 600", 1_800_000), 10.0);
    // @ end() in a range query answers the same value at every step.
    let QueryData::Matrix(m) = range_query(
        &src,
        "g @ end()",
        0,
        600_000,
        60_000,
        &QueryOptions::default(),
    )
    .unwrap() else {
        panic!("matrix expected");
    };
    assert!(m[0].values.iter().all(|p| p.v == 10.0));
    assert_eq!(m[0].values.len(), 11);
}

#[test]
fn one_to_one_matching_requires_unique_sides() {
    let a0 = labels("a", &[("job", "x"), ("i", "0")]);
    let a1 = labels("a", &[("job", "x"), ("i", "1")]);
    let b = labels("b", &[("job", "x")]);
    let src = source(&[
        (a0, vec![(0, 2.0)]),
        (a1, vec![(0, 4.0)]),
        (b, vec![(0, 2.0)]),
    ]);
    // Two lhs series match the one rhs series: must be explicit.
    let err = instant_query(&src, "a / on (job) b", 0, &QueryOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("many-to-one matching must be explicit"),
        "{err}"
    );
    assert_eq!(err.error_type(), "execution");
    // With group_left it works and keeps the lhs labels (name dropped).
    let v = vector(&src, "a / on (job) group_left b", 0);
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].metric, Labels::new([("i", "0"), ("job", "x")]));
    assert_eq!(v[0].value.v, 1.0);
    // Duplicates on the "one" side are many-to-many.
    let err = instant_query(
        &src,
        "b / on (job) group_left a",
        0,
        &QueryOptions::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("many-to-many matching not allowed"),
        "{err}"
    );
}

#[test]
fn comparison_filters_or_returns_bool() {
    let src = source(&[
        (labels("g", &[("i", "0")]), vec![(0, 1.0)]),
        (labels("g", &[("i", "1")]), vec![(0, 5.0)]),
    ]);
    let v = vector(&src, "g > 2", 0);
    assert_eq!(v.len(), 1);
    assert_eq!(
        v[0].metric.metric_name(),
        Some("g"),
        "filtering keeps the name"
    );
    let v = vector(&src, "g > bool 2", 0);
    assert_eq!(
        v.iter().map(|s| s.value.v).collect::<Vec<_>>(),
        vec![0.0, 1.0]
    );
    assert_eq!(v[0].metric.metric_name(), None, "bool drops the name");
    // Scalar on the left: the vector's value is kept.
    assert_eq!(single(&src, "2 < g", 0), 5.0);
}

#[test]
fn set_operators_match_on_labels_without_name() {
    let src = source(&[
        (labels("a", &[("i", "0")]), vec![(0, 1.0)]),
        (labels("a", &[("i", "1")]), vec![(0, 2.0)]),
        (labels("b", &[("i", "1")]), vec![(0, 9.0)]),
        (labels("b", &[("i", "2")]), vec![(0, 9.0)]),
    ]);
    assert_eq!(single(&src, "a and b", 0), 2.0);
    assert_eq!(single(&src, "a unless b", 0), 1.0);
    assert_eq!(vector(&src, "a or b", 0).len(), 3);
    assert_eq!(vector(&src, "a and on () b", 0).len(), 2);
    assert_eq!(single(&src, "sum(nothing) or vector(0)", 0), 0.0);
}

#[test]
fn histogram_quantile_groups_by_labels_without_le() {
    let mut series = Vec::new();
    for (inst, counts) in [("0", [10.0, 20.0, 20.0]), ("1", [0.0, 10.0, 10.0])] {
        for (le, c) in ["1", "2", "+Inf"].iter().zip(counts) {
            series.push((labels("h_bucket", &[("i", inst), ("le", le)]), vec![(0, c)]));
        }
    }
    let src = source(&series);
    let v = vector(&src, "histogram_quantile(0.5, h_bucket)", 0);
    // i=0: rank 10 reached in (0, 1] at its top: 1. i=1: rank 5 in (1, 2]: 1.5.
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].metric, Labels::new([("i", "0")]));
    assert!(close(v[0].value.v, 1.0));
    assert!(close(v[1].value.v, 1.5));
    // Summed: 10,30,30; rank 15 in (1, 2]: 1 + 5/20 = 1.25.
    assert!(close(
        single(&src, "histogram_quantile(0.5, sum by (le) (h_bucket))", 0),
        1.25
    ));
}

#[test]
fn aggregations_group_by_and_without() {
    let src = source(&[
        (labels("g", &[("job", "a"), ("i", "0")]), vec![(0, 1.0)]),
        (labels("g", &[("job", "a"), ("i", "1")]), vec![(0, 3.0)]),
        (labels("g", &[("job", "b"), ("i", "0")]), vec![(0, 10.0)]),
    ]);
    let v = vector(&src, "sum by (job) (g)", 0);
    assert_eq!(
        v.iter().map(|s| s.value.v).collect::<Vec<_>>(),
        vec![4.0, 10.0]
    );
    let v = vector(&src, "avg without (i) (g)", 0);
    assert_eq!(v[0].metric, Labels::new([("job", "a")]));
    assert_eq!(v[0].value.v, 2.0);
    assert_eq!(single(&src, "count(g)", 0), 3.0);
    assert_eq!(single(&src, "quantile(0.5, g)", 0), 3.0);
    let top = vector(&src, "topk(1, g)", 0);
    assert_eq!(top[0].metric.get("job"), Some("b"), "topk keeps the labels");
    let bottom = vector(&src, "bottomk by (job) (1, g)", 0);
    assert_eq!(bottom.len(), 2);
    assert!(
        vector(&src, "topk(0.9, g)", 0).is_empty(),
        "k truncates to 0"
    );
    assert_eq!(vector(&src, "topk(2.9, g)", 0).len(), 2, "k truncates to 2");
    // k goes through Go's int64: NaN and ±Inf fail the query, even with
    // nothing to select (Prometheus 2.42: "Scalar value NaN overflows int64").
    for q in [
        "topk(NaN, g)",
        "bottomk(+Inf, g)",
        "topk(-Inf, nothing)",
        "topk(1e19, g)",
    ] {
        let err = instant_query(&src, q, 0, &QueryOptions::default()).unwrap_err();
        assert!(err.to_string().contains("overflows int64"), "{q}: {err}");
        assert_eq!(err.error_type(), "execution", "{q}");
    }
    let mean = 14.0 / 3.0;
    let var = [1.0, 3.0, 10.0]
        .iter()
        .map(|v: &f64| (v - mean).powi(2))
        .sum::<f64>()
        / 3.0;
    assert!(close(single(&src, "stddev(g)", 0), var.sqrt()));
    assert!(close(single(&src, "stdvar(g)", 0), var));
}

#[test]
fn absent_labels_come_from_equality_matchers() {
    let src = MemorySource::new();
    let v = vector(
        &src,
        r#"absent(nope{job="a", instance=~"x.*", env="p", env="q"})"#,
        0,
    );
    assert_eq!(v[0].metric, Labels::new([("job", "a")]));
    assert_eq!(v[0].value.v, 1.0);
}

#[test]
fn label_replace_uses_anchored_regex_and_capture_groups() {
    let src = source(&[(labels("g", &[("instance", "host:9090")]), vec![(0, 1.0)])]);
    let v = vector(
        &src,
        r#"label_replace(g, "host", "$1", "instance", "(.*):.*")"#,
        0,
    );
    assert_eq!(v[0].metric.get("host"), Some("host"));
    assert_eq!(
        v[0].metric.metric_name(),
        Some("g"),
        "label_replace keeps the name"
    );
    // Not anchored at the end: no match, labels unchanged.
    let v = vector(
        &src,
        r#"label_replace(g, "host", "$1", "instance", "(.*):90")"#,
        0,
    );
    assert_eq!(v[0].metric.get("host"), None);
    let err = instant_query(
        &src,
        r#"label_replace(g, "1bad", "", "instance", ".*")"#,
        0,
        &QueryOptions::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("invalid destination label name"),
        "{err}"
    );
}

#[test]
fn errors_are_typed_for_the_http_layer() {
    let src = MemorySource::new();
    let opts = QueryOptions::default();
    let err = instant_query(&src, "sum(", 0, &opts).unwrap_err();
    assert!(matches!(err, QueryError::Parse(_)));
    assert_eq!((err.error_type(), err.http_status()), ("bad_data", 400));
    for (q, feature) in [
        (
            "double_exponential_smoothing(g[5m], 0.5, 0.5)",
            "double_exponential_smoothing",
        ),
        ("histogram_count(g)", "histogram_count"),
        ("first_over_time(g[5m])", "first_over_time"),
        ("limitk(2, g)", "limitk"),
        (r#"{a="1" or b="2"}"#, "`or` between label matchers"),
        // Found before evaluation, whatever the data.
        ("sum(nothing) or limitk(1, nothing)", "limitk"),
        ("vector(1) or histogram_sum(nothing)", "histogram_sum"),
    ] {
        let err = instant_query(&src, q, 0, &opts).unwrap_err();
        assert!(
            matches!(&err, QueryError::Unsupported(f) if f.contains(feature)),
            "{q}: {err}"
        );
        assert_eq!(err.error_type(), "bad_data");
    }
    let err = range_query(&src, "g", 0, 100, 0, &opts).unwrap_err();
    assert!(matches!(err, QueryError::BadParam(_)));
    let err = range_query(&src, "g", 0, 20_000_000, 1, &opts).unwrap_err();
    assert!(err.to_string().contains("11000"), "{err}");
    let err = range_query(&src, "g[5m]", 0, 100, 10, &opts).unwrap_err();
    assert!(err.to_string().contains("range vector"), "{err}");
    let limited = QueryOptions {
        max_samples: 5,
        ..QueryOptions::default()
    };
    let big = source(&[(labels("g", &[]), every(1_000, 0, 60_000, |_| 1.0))]);
    let err = instant_query(&big, "g[1m]", 60_000, &limited).unwrap_err();
    assert!(matches!(err, QueryError::TooManySamples(..)), "{err}");
}

#[test]
fn results_serialise_as_prometheus_data() {
    let src = source(&[(
        labels("g", &[("job", "a")]),
        vec![(1_500, 0.25), (2_000, f64::INFINITY)],
    )]);
    let opts = QueryOptions::default();
    let v = serde_json::to_value(instant_query(&src, "g", 1_500, &opts).unwrap()).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"resultType": "vector", "result": [
            {"metric": {"__name__": "g", "job": "a"}, "value": [1.5, "0.25"]}]})
    );
    let v =
        serde_json::to_value(range_query(&src, "g", 1_000, 2_000, 500, &opts).unwrap()).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"resultType": "matrix", "result": [
            {"metric": {"__name__": "g", "job": "a"}, "values": [[1.5, "0.25"], [2.0, "+Inf"]]}]})
    );
    let v = serde_json::to_value(instant_query(&src, "1 / 0", 3_000, &opts).unwrap()).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"resultType": "scalar", "result": [3.0, "+Inf"]})
    );
    let v = serde_json::to_value(instant_query(&src, "\"hi\"", 3_000, &opts).unwrap()).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"resultType": "string", "result": [3.0, "hi"]})
    );
}

#[test]
fn selections_list_every_selector_window() {
    let opts = QueryOptions::default();
    let sels = selections("rate(a[5m] offset 1m) / b", 1_000_000, 2_000_000, &opts).unwrap();
    assert_eq!(sels.len(), 2);
    assert_eq!(
        (sels[0].start_ms, sels[0].end_ms),
        (1_000_000 - 360_000, 2_000_000 - 60_000)
    );
    assert_eq!(
        (sels[1].start_ms, sels[1].end_ms),
        (1_000_000 - 300_000, 2_000_000)
    );
}

#[test]
fn extreme_times_and_windows_answer_without_panicking() {
    let src = source(&[(labels("g", &[]), vec![(0, 1.0)])]);
    let opts = QueryOptions::default();
    for q in [
        "g offset 100000y",
        "g offset -100000y",
        "rate(g[100000y])",
        "g @ 99999999999",
        "max_over_time(g[100000y:1s])",
        "max_over_time(g[10m:1s] offset 10000y)",
    ] {
        for t in [i64::MIN / 2, 0, i64::MAX / 2] {
            let _ = instant_query(&src, q, t, &opts);
        }
        let _ = range_query(&src, q, i64::MAX - 10_000, i64::MAX, 1_000, &opts);
    }
    let err = instant_query(&src, "max_over_time(g[100000y:1s])", 0, &opts).unwrap_err();
    assert!(matches!(err, QueryError::BadParam(_)), "{err}");
}
