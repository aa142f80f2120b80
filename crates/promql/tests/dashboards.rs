//! Every expression of `fixtures/promql/dashboards.tsv`, with Grafana's
//! variables substituted, parses and evaluates without error as an instant
//! and as a range query over an hour of data built from the captured pages.

mod common;

use llmwatch_promql::{instant_query, range_query, MemorySource, QueryData, QueryOptions};

const START_MS: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
const HOUR_MS: i64 = 3_600_000;

#[test]
fn every_dashboard_expression_evaluates() {
    let mut source = MemorySource::new();
    for s in common::generate(START_MS, HOUR_MS, 15_000) {
        source.add_series(s);
    }
    let exprs = common::dashboard_exprs();
    assert_eq!(
        exprs.len(),
        887,
        "dashboards.tsv should hold 887 expressions"
    );
    let opts = QueryOptions::default();
    let mut failures = Vec::new();
    let mut non_empty = 0;
    for e in &exprs {
        let q = common::substitute(&e.raw);
        assert!(!q.contains('$'), "line {}: variable left in {q}", e.line);
        let t = START_MS + 50 * 60_000;
        match instant_query(&source, &q, t, &opts) {
            Ok(QueryData::Vector(v)) if !v.is_empty() => non_empty += 1,
            Ok(QueryData::Scalar(_)) => non_empty += 1,
            Ok(_) => {}
            Err(err) => failures.push(format!("line {} instant: {q}\n    {err}", e.line)),
        }
        if let Err(err) = range_query(
            &source,
            &q,
            START_MS + 10 * 60_000,
            START_MS + HOUR_MS,
            60_000,
            &opts,
        ) {
            failures.push(format!("line {} range: {q}\n    {err}", e.line));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The data is built so that most dashboards show something.
    assert!(
        non_empty * 10 >= exprs.len() * 7,
        "only {non_empty} of {} expressions returned data",
        exprs.len()
    );
    println!("{non_empty} of {} expressions returned data", exprs.len());
}

/// Every prefix of every dashboard expression (cut every few characters)
/// either fails to parse or evaluates; nothing panics.
#[test]
fn truncated_expressions_never_panic() {
    let mut source = MemorySource::new();
    for s in common::generate_for(&["first:vllm"], START_MS, 10 * 60_000, 15_000) {
        source.add_series(s);
    }
    let opts = QueryOptions::default();
    let (mut evaluated, mut rejected) = (0, 0);
    for e in common::dashboard_exprs() {
        let q = common::substitute(&e.raw);
        let cuts: Vec<usize> = q.char_indices().map(|(i, _)| i).step_by(5).collect();
        for cut in cuts {
            let prefix = &q[..cut];
            match instant_query(&source, prefix, START_MS + 5 * 60_000, &opts) {
                Ok(_) => evaluated += 1,
                Err(_) => rejected += 1,
            }
        }
    }
    // Some prefixes are valid PromQL (a bare metric name), most are not.
    assert!(
        evaluated > 100 && rejected > 1000,
        "{evaluated} evaluated, {rejected} rejected"
    );
}
