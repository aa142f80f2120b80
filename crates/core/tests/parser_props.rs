//! The parser never panics, whatever the bytes, in every mode; lenient mode
//! keeps every well-formed line of a page even when others are garbage.

use std::sync::OnceLock;

use llmwatch_core::exposition::{detect_format, parse, parse_lenient, Format};
use proptest::prelude::*;

fn fixture() -> &'static [u8] {
    static DATA: OnceLock<Vec<u8>> = OnceLock::new();
    DATA.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures");
        let mut page =
            std::fs::read(format!("{dir}/vllm-live/metrics_vllm_idle.txt")).expect("vllm fixture");
        // Add OpenMetrics constructs: exemplars, escapes, EOF.
        page.extend_from_slice(
            std::fs::read(format!("{dir}/openmetrics-suite/parsers/escaping/metrics"))
                .expect("om fixture")
                .as_slice(),
        );
        page
    })
}

fn exercise(input: &[u8]) {
    for format in [Format::PrometheusText, Format::OpenMetrics] {
        let strict = parse(input, format);
        let (lenient, errors) = parse_lenient(input, format);
        // Every error names a real line.
        let lines = input.split(|&c| c == b'\n').count().max(1);
        for e in &errors {
            assert!(e.line >= 1 && e.line <= lines, "{e} (of {lines} lines)");
        }
        if let Err(e) = &strict {
            assert!(e.line >= 1 && e.line <= lines, "{e} (of {lines} lines)");
        }
        // A page strict mode accepts loses nothing in lenient mode.
        if let Ok(strict) = strict {
            let n = |e: &llmwatch_core::exposition::Exposition<'_>| -> usize {
                e.families.iter().map(|f| f.samples.len()).sum()
            };
            assert_eq!(n(&strict), n(&lenient));
        }
    }
    let _ = detect_format(None, input);
    let _ = detect_format(std::str::from_utf8(input).ok(), input);
}

/// Bytes biased towards the exposition alphabet, so mutations reach deep
/// parser states rather than failing at the first byte.
fn exposition_bytes() -> impl Strategy<Value = Vec<u8>> {
    let alphabet: Vec<u8> = b"abc_:{}=\",# \t\n\\.+-eE019InfNa\r\xff\x00le\"quantile".to_vec();
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(alphabet),
            1 => any::<u8>(),
        ],
        0..400,
    )
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (
            any::<usize>(),
            prop::sample::select(b"{}\"=,# \n\\".to_vec())
        )
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Delete),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 0usize..200).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

fn apply(page: &mut Vec<u8>, m: &Mutation) {
    if page.is_empty() {
        return;
    }
    let len = page.len();
    match *m {
        Mutation::Flip(i, b) => page[i % len] = b,
        Mutation::Insert(i, b) => page.insert(i % (len + 1), b),
        Mutation::Delete(i) => {
            page.remove(i % len);
        }
        Mutation::Truncate(i) => page.truncate(i % len),
        Mutation::Duplicate(i, n) => {
            let start = i % len;
            let end = (start + n).min(len);
            let chunk = page[start..end].to_vec();
            page.splice(start..start, chunk);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..300)) {
        exercise(&input);
    }

    #[test]
    fn exposition_like_bytes_never_panic(input in exposition_bytes()) {
        exercise(&input);
    }

    #[test]
    fn mutated_fixture_never_panics(mutations in prop::collection::vec(mutation(), 1..8)) {
        let mut page = fixture().to_vec();
        for m in &mutations {
            apply(&mut page, m);
        }
        exercise(&page);
    }

    /// Lenient mode skips a garbage line and keeps everything else.
    #[test]
    fn garbage_line_costs_only_itself(at in 0usize..500, garbage in "[a-z{}=\" #]{1,20}") {
        let page = fixture();
        let (clean, clean_errors) = parse_lenient(page, Format::PrometheusText);
        prop_assert!(clean_errors.is_empty() || clean_errors.iter().all(|e| e.line > 500));
        let lines: Vec<&[u8]> = page.split(|&c| c == b'\n').collect();
        let at = at % lines.len();
        let mut mutated = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            if i == at {
                mutated.extend_from_slice(garbage.as_bytes());
                mutated.push(b'\n');
            }
            mutated.extend_from_slice(line);
            mutated.push(b'\n');
        }
        let (dirty, _) = parse_lenient(&mutated, Format::PrometheusText);
        let n = |e: &llmwatch_core::exposition::Exposition<'_>| -> usize {
            e.families.iter().map(|f| f.samples.len()).sum()
        };
        // The inserted line may itself be a sample or shadow a TYPE, but it
        // never costs more than one sample of the rest of the page.
        prop_assert!(n(&dirty) + 1 >= n(&clean));
    }
}
