//! Prometheus text 0.0.4 and OpenMetrics 1.0 exposition: the typed model and
//! the parser. The parser borrows from the input where it can and never panics.
//!
//! * [`parse`] is strict: the first problem aborts. In OpenMetrics mode it
//!   enforces every rule of the OpenMetrics 1.0 conformance suite; in 0.0.4
//!   mode it follows Go's `expfmt` text parser.
//! * [`parse_lenient`] is for scraping: it skips what it cannot read, records
//!   why, and keeps everything else. It never fails.
//! * [`detect_format`] picks the format from the `Content-Type` header, else
//!   from a trailing `# EOF`.
//! * [`PageTemplate`] reads the next page of the same shape without parsing
//!   it (only values move), or says it cannot.

mod build;
mod error;
mod lex;
mod model;
mod om;
mod template;

pub use error::ParseError;
pub use model::*;
pub use template::{PageTemplate, TemplateSample};

/// Parse a page strictly: the first error aborts.
///
/// OpenMetrics: the whole OpenMetrics 1.0 rule set (EOF, no blank lines,
/// metadata order, histogram/summary/stateset/info invariants, exemplar
/// rules, timestamps...). Prometheus 0.0.4: Go `expfmt` rules (duplicate
/// HELP/TYPE, TYPE after samples, unknown escapes, `__name__` label, float
/// `le`/`quantile`, integer millisecond timestamps, final `\n`).
pub fn parse(input: &[u8], format: Format) -> Result<Exposition<'_>, ParseError> {
    match format {
        Format::OpenMetrics => om::parse_strict(input),
        Format::PrometheusText => {
            let (exposition, mut errors) = build::run(input, format, true);
            if errors.is_empty() {
                Ok(exposition)
            } else {
                Err(errors.swap_remove(0))
            }
        }
    }
}

/// Parse a page for scraping: never fails. Bad lines or samples are skipped
/// with an error each; duplicate HELP/TYPE/UNIT keep the first and record a
/// warning; blank lines, comments, tabs, runs of spaces, trailing commas in
/// label sets, `\r\n`, a missing final newline and exemplars are accepted in
/// both formats. In OpenMetrics mode a missing `# EOF` (a truncated page) and
/// text after it are reported, the samples kept.
pub fn parse_lenient(input: &[u8], format: Format) -> (Exposition<'_>, Vec<ParseError>) {
    build::run(input, format, false)
}

/// The format of a page: the `Content-Type` header decides when it names
/// one (`application/openmetrics-text` → OpenMetrics, `text/plain` → 0.0.4);
/// otherwise a body whose last non-blank line is `# EOF` is OpenMetrics.
pub fn detect_format(content_type: Option<&str>, body: &[u8]) -> Format {
    if let Some(ct) = content_type {
        let media = ct.split(';').next().unwrap_or_default().trim();
        if media.eq_ignore_ascii_case("application/openmetrics-text") {
            return Format::OpenMetrics;
        }
        if media.eq_ignore_ascii_case("text/plain") {
            return Format::PrometheusText;
        }
    }
    let trimmed = body.trim_ascii_end();
    let last_line = match trimmed.iter().rposition(|&c| c == b'\n') {
        Some(p) => trimmed.get(p + 1..).unwrap_or_default(),
        None => trimmed,
    };
    if last_line.trim_ascii() == b"# EOF" {
        Format::OpenMetrics
    } else {
        Format::PrometheusText
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_format_header_then_sniff() {
        let om_body = b"a 1\n# EOF\n";
        assert_eq!(
            detect_format(
                Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
                b""
            ),
            Format::OpenMetrics
        );
        assert_eq!(
            detect_format(Some("text/plain; version=0.0.4; charset=utf-8"), om_body),
            Format::PrometheusText
        );
        assert_eq!(detect_format(None, om_body), Format::OpenMetrics);
        assert_eq!(
            detect_format(Some("application/json"), b"a 1\n# EOF"),
            Format::OpenMetrics
        );
        assert_eq!(detect_format(None, b"a 1\n"), Format::PrometheusText);
        assert_eq!(detect_format(None, b""), Format::PrometheusText);
    }

    #[test]
    fn error_display() {
        let err = parse(b"a{b\"c\"} 1\n", Format::PrometheusText).expect_err("bad");
        assert_eq!(
            err.to_string(),
            "line 1: expected '=' after label name, found '\"'"
        );
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let input = b"a 1\nb{x=\"\xff\"} 2\nc 3\n";
        let err = parse(input, Format::PrometheusText).expect_err("bad");
        assert_eq!(err.line, 2);
        let (exp, errs) = parse_lenient(input, Format::PrometheusText);
        assert_eq!(errs.len(), 1);
        assert_eq!(exp.families.len(), 2);
    }
}
