//! A page's shape, for reading the next page of the same target without
//! parsing it.
//!
//! An inference server writes the same page every scrape with new numbers:
//! same comment lines, same series in the same order; only the values (and
//! timestamps) move. Prometheus skips re-parsing a series it has seen by
//! keying its scrape cache on the series' bytes; a [`PageTemplate`] does the
//! same for a whole page: it remembers the previous page's lines, and the
//! next page is read by comparing each line's series part byte for byte and
//! parsing only the value after it. Any difference (a line added, removed,
//! reordered, relabelled, a comment changed, an exemplar, a tab) makes
//! [`PageTemplate::values`] answer `None`, and the caller parses the page in
//! full, so the result is always the full parser's.
//!
//! A template is only built when the previous page's sample lines are, in
//! order, exactly the parsed samples written canonically
//! (`name{a="x",b="y"} value`), so line `i` is sample `i` for certain: a page
//! whose families interleave (the parser regroups them) or that is written
//! unusually gets no template, only the slower path.

use super::lex::{find_newline, parse_value};
use super::model::Format;

/// One line of the remembered page, as byte ranges into its text.
#[derive(Debug, Clone)]
enum TemplateLine {
    /// A comment, metadata or blank line: must come back byte for byte.
    Fixed { start: usize, end: usize },
    /// A sample line: `prefix_end` is just past the blank after the series
    /// part (`name{labels} `); the rest, up to `end`, is `value [timestamp]`.
    Sample {
        start: usize,
        prefix_end: usize,
        end: usize,
    },
}

/// The shape of a page that parsed without a single error.
#[derive(Debug, Clone)]
pub struct PageTemplate {
    body: Vec<u8>,
    format: Format,
    lines: Vec<TemplateLine>,
    /// The remembered page's values, in order: a line whose tail is the
    /// same bytes has the same value, unparsed (most series of an inference
    /// server never change: `_created`, info metrics, empty buckets).
    known_values: Vec<f64>,
}

/// One parsed sample of the page a template is built from, in page order.
pub struct TemplateSample<'s> {
    pub name: &'s str,
    /// Label pairs as parsed (values unescaped).
    pub labels: &'s [(String, String)],
    pub value: f64,
}

impl PageTemplate {
    /// The template of `body`, whose parse (no errors) gave `samples` in
    /// order; `None` when line `i` is not certainly sample `i`.
    pub fn build<'s>(
        body: &[u8],
        format: Format,
        samples: impl IntoIterator<Item = TemplateSample<'s>>,
    ) -> Option<PageTemplate> {
        let mut samples = samples.into_iter();
        let mut lines = Vec::new();
        let mut canonical = String::new();
        let mut known_values = Vec::new();
        for (start, end) in line_spans(body) {
            let line = body.get(start..end)?;
            if is_fixed(line) {
                lines.push(TemplateLine::Fixed { start, end });
                continue;
            }
            let sample = samples.next()?;
            canonical.clear();
            write_series(&mut canonical, sample.name, sample.labels);
            let prefix = canonical.as_bytes();
            if !line.starts_with(prefix) {
                return None;
            }
            let value = read_tail(line.get(prefix.len()..)?, format)?;
            if value.to_bits() != sample.value.to_bits()
                && !(value.is_nan() && sample.value.is_nan())
            {
                return None;
            }
            lines.push(TemplateLine::Sample {
                start,
                prefix_end: start + prefix.len(),
                end,
            });
            known_values.push(value);
        }
        if samples.next().is_some() {
            return None;
        }
        Some(PageTemplate {
            body: body.to_vec(),
            format,
            lines,
            known_values,
        })
    }

    /// The sample values of `body`, in page order, when it has exactly this
    /// template's shape; `None` (parse it in full) otherwise.
    pub fn values(&self, body: &[u8], format: Format) -> Option<Vec<f64>> {
        if format != self.format {
            return None;
        }
        let mut values = Vec::with_capacity(self.known_values.len());
        let mut spans = line_spans(body);
        for template_line in &self.lines {
            let (start, end) = spans.next()?;
            let line = body.get(start..end)?;
            match *template_line {
                TemplateLine::Fixed { start, end } => {
                    if line != self.body.get(start..end)? {
                        return None;
                    }
                }
                TemplateLine::Sample {
                    start,
                    prefix_end,
                    end,
                } => {
                    let prefix = self.body.get(start..prefix_end)?;
                    if !line.starts_with(prefix) {
                        return None;
                    }
                    let tail = line.get(prefix.len()..)?;
                    let value = if tail == self.body.get(prefix_end..end)? {
                        *self.known_values.get(values.len())?
                    } else {
                        read_tail(tail, format)?
                    };
                    values.push(value);
                }
            }
        }
        if spans.next().is_some() {
            return None;
        }
        Some(values)
    }

    /// Sample lines in the remembered page.
    pub fn samples(&self) -> usize {
        self.known_values.len()
    }
}

/// `(start, end)` of each line, without its `\n`, as the parser splits them.
fn line_spans(body: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut pos = 0;
    std::iter::from_fn(move || {
        if pos >= body.len() {
            return None;
        }
        let start = pos;
        let rest = body.get(start..).unwrap_or_default();
        let end = match find_newline(rest) {
            Some(p) => start + p,
            None => body.len(),
        };
        pos = end + 1;
        Some((start, end))
    })
}

/// Comment, metadata and blank lines carry no sample.
fn is_fixed(line: &[u8]) -> bool {
    match line.iter().position(|c| *c != b' ' && *c != b'\t') {
        None => true,
        Some(i) => line.get(i) == Some(&b'#'),
    }
}

/// `name{a="x",b="y"} ` with label values escaped as both formats write
/// them (`\\`, `\"`, `\n`).
fn write_series(out: &mut String, name: &str, labels: &[(String, String)]) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (label, value)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(label);
            out.push_str("=\"");
            for c in value.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
}

/// `value` or `value timestamp`, single spaces, nothing else (an exemplar,
/// a tab, a `\r` or a second blank sends the page to the full parser).
fn read_tail(tail: &[u8], format: Format) -> Option<f64> {
    let tail = std::str::from_utf8(tail).ok()?;
    let (value, timestamp) = match tail.split_once(' ') {
        Some((value, timestamp)) => (value, Some(timestamp)),
        None => (tail, None),
    };
    if value.is_empty() || value.contains(['\t', '\r']) {
        return None;
    }
    if let Some(timestamp) = timestamp {
        let valid = match format {
            Format::PrometheusText => timestamp.parse::<i64>().is_ok(),
            Format::OpenMetrics => parse_value(timestamp).is_some_and(f64::is_finite),
        };
        if !valid {
            return None;
        }
    }
    parse_value(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<'s>(name: &'s str, labels: &'s [(String, String)], value: f64) -> TemplateSample<'s> {
        TemplateSample {
            name,
            labels,
            value,
        }
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_next_page_of_the_same_shape_gives_its_values() {
        let first = b"# TYPE a counter\na_total{x=\"q\\\"y\"} 1\nb 2 1700000000000\n";
        let x = pairs(&[("x", "q\"y")]);
        let template = PageTemplate::build(
            first,
            Format::PrometheusText,
            [sample("a_total", &x, 1.0), sample("b", &[], 2.0)],
        )
        .expect("a template");
        let next = b"# TYPE a counter\na_total{x=\"q\\\"y\"} 7.5\nb NaN 1700000005000\n";
        let values = template.values(next, Format::PrometheusText).unwrap();
        assert_eq!(values[0], 7.5);
        assert!(values[1].is_nan());
    }

    #[test]
    fn any_other_difference_asks_for_a_full_parse() {
        let first = b"# HELP a A.\na{x=\"1\"} 1\na{x=\"2\"} 2\n";
        let one = pairs(&[("x", "1")]);
        let two = pairs(&[("x", "2")]);
        let template = PageTemplate::build(
            first,
            Format::PrometheusText,
            [sample("a", &one, 1.0), sample("a", &two, 2.0)],
        )
        .unwrap();
        let fmt = Format::PrometheusText;
        for changed in [
            &b"# HELP a B.\na{x=\"1\"} 1\na{x=\"2\"} 2\n"[..], // comment
            b"# HELP a A.\na{x=\"2\"} 1\na{x=\"1\"} 2\n",      // order
            b"# HELP a A.\na{x=\"1\"} 1\n",                    // a line fewer
            b"# HELP a A.\na{x=\"1\"} 1\na{x=\"2\"} 2\na{x=\"3\"} 3\n", // one more
            b"# HELP a A.\na{x=\"1\"} 1\na{x=\"2\"}  2\n",     // two blanks
            b"# HELP a A.\na{x=\"1\"} 1\na{x=\"2\"} 2\r\n",    // CRLF
            b"# HELP a A.\na{x=\"1\"} 1\na{x=\"2\"} 2 # {t=\"1\"} 1\n", // exemplar
            b"# HELP a A.\na{x=\"1\"} 1\na{x=\"2\"} 2 1.5\n",  // 0.0.4 timestamps are integers
            b"# HELP a A.\na{x=\"1\"} 1\na{x=\"2\"} two\n",    // not a number
        ] {
            assert!(
                template.values(changed, fmt).is_none(),
                "{:?}",
                String::from_utf8_lossy(changed)
            );
        }
        assert!(template.values(first, Format::OpenMetrics).is_none());
    }

    #[test]
    fn no_template_unless_line_i_is_sample_i() {
        let x1 = pairs(&[("x", "1")]);
        let fmt = Format::PrometheusText;
        // Interleaved families: the parser regroups them.
        let page = b"a{x=\"1\"} 1\nb 2\na{x=\"2\"} 3\n";
        let x2 = pairs(&[("x", "2")]);
        let regrouped = [
            sample("a", &x1, 1.0),
            sample("a", &x2, 3.0),
            sample("b", &[], 2.0),
        ];
        assert!(PageTemplate::build(page, fmt, regrouped).is_none());
        // Written unusually (a trailing comma, runs of blanks): full parses only.
        assert!(PageTemplate::build(b"a{x=\"1\",} 1\n", fmt, [sample("a", &x1, 1.0)]).is_none());
        assert!(PageTemplate::build(b"a{x=\"1\"}   1\n", fmt, [sample("a", &x1, 1.0)]).is_none());
        // A sample more or fewer than lines.
        assert!(PageTemplate::build(b"a{x=\"1\"} 1\n", fmt, []).is_none());
        let two = [sample("a", &x1, 1.0), sample("b", &[], 2.0)];
        assert!(PageTemplate::build(b"a{x=\"1\"} 1\n", fmt, two).is_none());
        // A value that is not the parsed one.
        assert!(PageTemplate::build(b"a{x=\"1\"} 1\n", fmt, [sample("a", &x1, 2.0)]).is_none());
    }
}
