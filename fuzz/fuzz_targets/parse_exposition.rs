//! Fuzz the exposition parser: any bytes, both formats, strict and lenient.
//! Invariants: no panic; every error names a line of the input; a page the
//! strict parser accepts loses no sample in lenient mode.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmwatch_core::exposition::{detect_format, parse, parse_lenient, Exposition, Format};

fn samples(e: &Exposition<'_>) -> usize {
    e.families.iter().map(|f| f.samples.len()).sum()
}

fuzz_target!(|data: &[u8]| {
    let lines = data.split(|&c| c == b'\n').count().max(1);
    for format in [Format::PrometheusText, Format::OpenMetrics] {
        let strict = parse(data, format);
        let (lenient, errors) = parse_lenient(data, format);
        for e in &errors {
            assert!(e.line >= 1 && e.line <= lines);
        }
        match strict {
            Ok(strict) => assert_eq!(samples(&strict), samples(&lenient)),
            Err(e) => assert!(e.line >= 1 && e.line <= lines),
        }
    }
    let _ = detect_format(None, data);
    let _ = detect_format(std::str::from_utf8(data).ok(), data);
});
