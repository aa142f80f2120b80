//! Conformance: the OpenMetrics 1.0 parser test suite (strict OpenMetrics
//! mode), and the Prometheus text-format vectors (0.0.4 mode).

use std::fs;
use std::path::{Path, PathBuf};

use llmwatch_core::exposition::{parse, parse_lenient, Format, MetricType};

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures"))
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The value of a string field in the suite's tiny `test.json` files.
fn json_str<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let at = json.find(&format!("\"{key}\""))?;
    let rest = json.get(at + key.len() + 2..)?;
    let rest = rest
        .trim_start()
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix('"')?;
    rest.get(..rest.find('"')?)
}

fn json_bool(json: &str, key: &str) -> Option<bool> {
    let at = json.find(&format!("\"{key}\""))?;
    let rest = json
        .get(at + key.len() + 2..)?
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    if rest.starts_with("true") {
        Some(true)
    } else if rest.starts_with("false") {
        Some(false)
    } else {
        None
    }
}

#[test]
fn openmetrics_suite() {
    let dir = fixtures().join("openmetrics-suite/parsers");
    let mut cases: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("test.json").is_file())
        .collect();
    cases.sort();
    let mut agreed = 0;
    let mut disagreements = Vec::new();
    for case in &cases {
        let name = case
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_owned();
        let json = String::from_utf8(read(&case.join("test.json"))).expect("test.json is UTF-8");
        let should_parse = json_bool(&json, "shouldParse").expect("shouldParse");
        let file = json_str(&json, "file").unwrap_or("metrics");
        let input = read(&case.join(file));
        let result = parse(&input, Format::OpenMetrics);
        match (&result, should_parse) {
            (Ok(_), true) => agreed += 1,
            (Err(e), false) => {
                assert!(e.line >= 1 && !e.reason.is_empty(), "{name}: {e:?}");
                agreed += 1;
            }
            (Ok(_), false) => disagreements.push(format!("{name}: accepted, should be rejected")),
            (Err(e), true) => disagreements.push(format!("{name}: rejected ({e}), should parse")),
        }
    }
    println!("openmetrics conformance: {agreed} agreed / {}", cases.len());
    assert_eq!(cases.len(), 211, "the suite has 211 cases");
    assert!(
        disagreements.is_empty(),
        "disagreements:\n{}",
        disagreements.join("\n")
    );
}

fn om_case(name: &str) -> Vec<u8> {
    read(
        &fixtures()
            .join("openmetrics-suite/parsers")
            .join(name)
            .join("metrics"),
    )
}

#[test]
fn openmetrics_valid_cases_have_the_right_values() {
    let input = om_case("uint64_counter");
    let exp = parse(&input, Format::OpenMetrics).expect("valid");
    assert_eq!(
        exp.families[0].samples[0].value,
        9_223_372_036_854_775_808.0
    );

    let input = om_case("escaping");
    let exp = parse(&input, Format::OpenMetrics).expect("valid");
    let fam = &exp.families[0];
    assert_eq!(fam.help.as_deref(), Some("he\n\\l\\tp"));
    assert_eq!(fam.samples[0].label("foo"), Some("b\"a\nr"));
    assert_eq!(fam.samples[1].label("foo"), Some("b\\a\\z"));
    assert_eq!(fam.samples[2].label("foo"), Some("b\"a\nr # "));

    let input = om_case("timestamps");
    let exp = parse(&input, Format::OpenMetrics).expect("valid");
    let ts: Vec<Option<f64>> = exp.families[0]
        .samples
        .iter()
        .map(|s| s.timestamp)
        .collect();
    assert_eq!(ts[..3], [Some(0.0), Some(0.0), Some(1.1)]);
    assert_eq!(ts[4], Some(1500.0));

    let input = om_case("histogram_exemplars");
    let exp = parse(&input, Format::OpenMetrics).expect("valid");
    let fam = &exp.families[0];
    assert_eq!(fam.metric_type, MetricType::Histogram);
    let ex = fam.samples[2].exemplar.as_ref().expect("exemplar");
    assert_eq!((ex.value, ex.timestamp), (4.0, Some(123.0)));

    let input = om_case("labels_and_infinite");
    let exp = parse(&input, Format::OpenMetrics).expect("valid");
    assert_eq!(exp.families[0].samples[1].value, f64::NEG_INFINITY);

    let input = om_case("leading_zeros_float_gauge");
    let exp = parse(&input, Format::OpenMetrics).expect("valid");
    assert!((exp.families[0].samples[0].value - 0.12).abs() < 1e-15);

    let input = om_case("counter_unit");
    let exp = parse(&input, Format::OpenMetrics).expect("valid");
    assert_eq!(exp.families[0].unit.as_deref(), Some("seconds"));
    assert_eq!(exp.families[0].samples.len(), 2);

    let input = om_case("null_byte");
    let exp = parse(&input, Format::OpenMetrics).expect("valid");
    assert_eq!(exp.families[0].help.as_deref(), Some("he\0lp"));

    let input = om_case("simple_stateset");
    let exp = parse(&input, Format::OpenMetrics).expect("valid");
    assert_eq!(exp.families[0].metric_type, MetricType::StateSet);
    assert_eq!(exp.families[0].samples[1].label("a"), Some("foo"));
}

#[test]
fn openmetrics_rejections_name_line_and_reason() {
    let cases = [
        ("bad_blank_line", 2, "blank"),
        ("bad_no_eof", 1, "EOF"),
        ("bad_text_after_eof_0", 3, "after"),
        ("bad_histograms_9", 4, "order"),
        ("bad_counter_values_1", 2, "negative"),
        ("bad_exemplars_6", 2, "128"),
        ("bad_missing_or_extra_commas_2", 1, "label name"),
        ("bad_unit_4", 1, "unit"),
        ("bad_repeated_metadata_1", 2, "second HELP"),
        ("bad_type_7", 1, "untyped"),
    ];
    for (case, line, needle) in cases {
        let err = parse(&om_case(case), Format::OpenMetrics).expect_err(case);
        assert_eq!(err.line, line, "{case}: {err}");
        assert!(err.reason.contains(needle), "{case}: {err}");
    }
}

fn expfmt(name: &str) -> Vec<u8> {
    read(
        &fixtures()
            .join("prometheus-text-suite/prometheus-common-expfmt/fuzz-corpus")
            .join(name),
    )
}

#[test]
fn prometheus_expfmt_corpus() {
    let dir = fixtures().join("prometheus-text-suite/prometheus-common-expfmt/fuzz-corpus");
    let mut good = 0;
    let mut bad = 0;
    let mut entries: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("corpus dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let input = read(&path);
        if name.starts_with("from_test_parse_error_") {
            let res = parse(&input, Format::PrometheusText);
            assert!(res.is_err(), "{name} must be rejected");
            // Lenient mode skips what it cannot read, never fails.
            // Lenient mode skips what it cannot read and never fails; it
            // accepts only `bla 3.14` (Go rejects the missing final newline,
            // which dcgm-exporter and NIM omit) and `\t` in a label value
            // (unknown escapes pass through, as in Prometheus' own parser).
            let (_, errors) = parse_lenient(&input, Format::PrometheusText);
            let lenient_ok = ["from_test_parse_error_0", "from_test_parse_error_1"];
            assert_eq!(
                errors.is_empty(),
                lenient_ok.contains(&name.as_str()),
                "{name}: {errors:?}"
            );
            bad += 1;
        } else if name.starts_with("from_test_parse_") || name == "minimal" {
            if let Err(e) = parse(&input, Format::PrometheusText) {
                panic!("{name} must parse: {e}");
            }
            good += 1;
        }
    }
    println!("prometheus expfmt corpus: {good} accepted, {bad} rejected");
    assert_eq!((good, bad), (6, 20));

    // Values of the accepted ones.
    let input = expfmt("from_test_parse_2");
    let exp = parse(&input, Format::PrometheusText).expect("valid");
    let name = exp
        .families
        .iter()
        .find(|f| f.name == "name")
        .expect("name");
    assert_eq!(name.metric_type, MetricType::Counter);
    assert_eq!(name.help.as_deref(), Some("two-line\n doc  str\\ing"));
    assert!(name.samples[0].value.is_nan());
    assert_eq!(name.samples[1].label("basename"), Some("base\"v\\al\nue"));
    assert_eq!(name.samples[1].timestamp, Some(1_234_567.890));
    let name2 = exp
        .families
        .iter()
        .find(|f| f.name == "name2")
        .expect("name2");
    assert_eq!(name2.metric_type, MetricType::Gauge);
    assert_eq!(name2.help.as_deref(), Some("doc str\"ing 2"));
    assert_eq!(name2.samples[0].value, f64::INFINITY);
    assert_eq!(name2.samples[1].value, f64::NEG_INFINITY);

    let input = expfmt("from_test_parse_3");
    let exp = parse(&input, Format::PrometheusText).expect("valid");
    let summary = exp
        .families
        .iter()
        .find(|f| f.name == "my_summary")
        .expect("summary");
    assert_eq!(summary.metric_type, MetricType::Summary);
    // Interleaved with `decoy`, `fake_sum` and another summary, still grouped.
    assert_eq!(summary.samples.len(), 8);
    assert!(exp.families.iter().any(|f| f.name == "fake_sum"));
    let sum = summary
        .samples
        .iter()
        .find(|s| s.name == "my_summary_sum" && s.label("n1") == Some("val2"))
        .expect("sum");
    assert_eq!((sum.value, sum.timestamp), (8.0, Some(0.015)));

    let input = expfmt("from_test_parse_4");
    let exp = parse(&input, Format::PrometheusText).expect("valid");
    let h = &exp.families[0];
    assert_eq!(h.metric_type, MetricType::Histogram);
    assert_eq!(h.samples.len(), 7);
    assert_eq!(h.samples[3].label("le"), Some("172.8"));
    assert_eq!(h.samples[5].value, 1.756_047_3e6);
}

#[test]
fn prometheus_expfmt_testdata_text() {
    let input =
        read(&fixtures().join("prometheus-text-suite/prometheus-common-expfmt/testdata_text"));
    let exp = parse(&input, Format::PrometheusText).expect("valid");
    let (lenient, errors) = parse_lenient(&input, Format::PrometheusText);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(exp, lenient);
    assert_eq!(exp.families.len(), 37);
}

fn textparse(name: &str) -> Vec<u8> {
    read(
        &fixtures()
            .join("prometheus-text-suite/prometheus-textparse")
            .join(name),
    )
}

#[test]
fn prometheus_textparse_corpora() {
    for (file, format) in [
        ("alltypes.237mfs.prom.txt", Format::PrometheusText),
        ("alltypes.237mfs.nometa.prom.txt", Format::PrometheusText),
        ("alltypes.5mfs.om.txt", Format::OpenMetrics),
        ("1histogram.om.txt", Format::OpenMetrics),
    ] {
        let input = textparse(file);
        let (exp, errors) = parse_lenient(&input, format);
        assert!(errors.is_empty(), "{file}: {errors:?}");
        assert!(!exp.families.is_empty(), "{file}");
        if file == "1histogram.om.txt" {
            if let Err(e) = parse(&input, format) {
                panic!("{file}: strict: {e}");
            }
        }
        if file == "alltypes.5mfs.om.txt" {
            // Go's client emits a negative histogram `_sum` here, which
            // OpenMetrics forbids without negative buckets.
            let err = parse(&input, format).expect_err("negative _sum");
            assert!(err.reason.contains("negative"), "{err}");
        }
    }
    let input = textparse("alltypes.237mfs.prom.txt");
    let (exp, _) = parse_lenient(&input, Format::PrometheusText);
    assert_eq!(exp.families.len(), 237);
    let nometa = textparse("alltypes.237mfs.nometa.prom.txt");
    let (bare, _) = parse_lenient(&nometa, Format::PrometheusText);
    let samples = |e: &llmwatch_core::exposition::Exposition<'_>| -> usize {
        e.families.iter().map(|f| f.samples.len()).sum()
    };
    assert_eq!(samples(&exp), samples(&bare));
    assert!(bare
        .families
        .iter()
        .all(|f| f.metric_type == MetricType::Unknown));
}

#[test]
fn prometheus_textparse_test_inputs() {
    // TestPromParse: 0.0.4 with NUL bytes, odd HELP, `nan`, timestamps.
    let input = textparse("TestPromParse_input.prom.txt");
    let (exp, errors) = parse_lenient(&input, Format::PrometheusText);
    println!("TestPromParse lenient errors: {errors:?}");
    assert!(errors.is_empty(), "{errors:?}");
    let all: Vec<_> = exp.families.iter().flat_map(|f| f.samples.iter()).collect();
    let gc = exp
        .families
        .iter()
        .find(|f| f.name == "go_gc_duration_seconds")
        .expect("gc");
    assert_eq!(gc.metric_type, MetricType::Summary);
    assert_eq!(gc.samples.len(), 11);
    assert_eq!(gc.samples[9].label("quantile"), Some("2.0"));
    assert_eq!(gc.samples[9].label("a"), Some("b"));
    let g = all
        .iter()
        .find(|s| s.name == "go_goroutines")
        .expect("goroutines");
    assert_eq!((g.value, g.timestamp), (33.0, Some(123.123)));
    let quoted = all
        .iter()
        .find(|s| s.name == "testmetric" && s.label("label").is_some())
        .expect("quoted");
    assert_eq!(quoted.label("label"), Some("\"bar\""));
    let nul = all
        .iter()
        .find(|s| s.name == "null_byte_metric")
        .expect("nul");
    assert_eq!(nul.label("a"), Some("abc\0"));
    let counter = exp
        .families
        .iter()
        .find(|f| f.name == "some_counter_total")
        .expect("counter");
    assert_eq!(counter.help.as_deref(), Some("Help after type."));

    // TestOpenMetricsParse: exemplars, _created between samples, fizz_created.
    let input = textparse("TestOpenMetricsParse_input.om.txt");
    let (exp, errors) = parse_lenient(&input, Format::OpenMetrics);
    println!("TestOpenMetricsParse lenient errors: {errors:?}");
    let exemplars = exp
        .families
        .iter()
        .flat_map(|f| f.samples.iter())
        .filter(|s| s.exemplar.is_some())
        .count();
    assert!(exemplars >= 3);

    // Prometheus 3 quoted UTF-8 names: rejected cleanly, the rest kept.
    let input = textparse("TestUTF8PromParse_input.prom.txt");
    let (_, errors) = parse_lenient(&input, Format::PrometheusText);
    assert!(!errors.is_empty());
    assert!(parse(&input, Format::PrometheusText).is_err());
}
