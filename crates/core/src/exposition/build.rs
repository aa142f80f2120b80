//! Grouping lexed lines into families: the lenient parser (both formats) and
//! the strict Prometheus 0.0.4 parser (Go `expfmt` rules).
//!
//! Families are keyed by name over the whole page, as in Go's parser: a
//! sample joins the family of its exact name, else the declared family whose
//! type owns its suffix (`foo_bucket` → histogram `foo`), else a new
//! `Unknown` family named after the sample. Samples of one family need not be
//! contiguous (0.0.4 allows interleaving, and concatenated registries do it).

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::error::ParseError;
use super::lex::{lex_line, parse_value, Line, Lines, Syntax};
use super::model::{Exposition, Format, Label, MetricFamily, MetricType, Sample};

/// Which metadata a family has seen, so repeats can be reported.
#[derive(Debug, Default, Clone, Copy)]
struct Declared {
    help: bool,
    ty: bool,
    unit: bool,
}

/// Suffixes a declared family owns, by type.
const SUFFIXES: &[(&str, &[MetricType])] = &[
    (
        "_bucket",
        &[MetricType::Histogram, MetricType::GaugeHistogram],
    ),
    ("_total", &[MetricType::Counter]),
    ("_count", &[MetricType::Histogram, MetricType::Summary]),
    ("_sum", &[MetricType::Histogram, MetricType::Summary]),
    (
        "_created",
        &[
            MetricType::Counter,
            MetricType::Histogram,
            MetricType::Summary,
            MetricType::GaugeHistogram,
        ],
    ),
    ("_gcount", &[MetricType::GaugeHistogram]),
    ("_gsum", &[MetricType::GaugeHistogram]),
    ("_info", &[MetricType::Info]),
];

/// FxHash (rustc's hasher): family names are not attacker-chosen keys of a
/// long-lived map, and SipHash showed up in profiles.
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in chunks.by_ref() {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }
    #[inline]
    fn write_u8(&mut self, b: u8) {
        self.write(&[b]);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

#[derive(Default)]
struct Builder<'a> {
    families: Vec<MetricFamily<'a>>,
    declared: Vec<Declared>,
    by_name: HashMap<&'a str, usize, BuildHasherDefault<FxHasher>>,
    /// The last sample name resolved and its family: consecutive samples
    /// nearly always share a name (a histogram's buckets) or a family.
    cache: Option<(&'a str, usize)>,
    /// The family the last sample went to.
    last_family: Option<usize>,
    /// Sample count of the last finished run of a family, per type: the
    /// capacity a new family of that type starts with. Families of one type
    /// on a page have similar shapes (same buckets, same label variants), and
    /// growing `Vec<Sample>` by doubling was half of all bytes allocated.
    size_hint: [usize; 8],
}

fn type_slot(t: MetricType) -> usize {
    match t {
        MetricType::Counter => 0,
        MetricType::Gauge => 1,
        MetricType::Histogram => 2,
        MetricType::GaugeHistogram => 3,
        MetricType::Summary => 4,
        MetricType::Info => 5,
        MetricType::StateSet => 6,
        MetricType::Unknown => 7,
    }
}

impl<'a> Builder<'a> {
    fn new_family(&mut self, name: &'a str) -> usize {
        let idx = self.families.len();
        self.families.push(MetricFamily {
            name: Cow::Borrowed(name),
            metric_type: MetricType::Unknown,
            help: None,
            unit: None,
            samples: Vec::new(),
        });
        self.declared.push(Declared::default());
        self.by_name.insert(name, idx);
        idx
    }

    fn family_named(&mut self, name: &'a str) -> usize {
        match self.by_name.get(name) {
            Some(&idx) => idx,
            None => self.new_family(name),
        }
    }

    fn resolve(&mut self, name: &'a str) -> usize {
        if let Some((cached, idx)) = self.cache {
            if cached == name {
                return idx;
            }
        }
        let idx = self.resolve_slow(name);
        self.cache = Some((name, idx));
        idx
    }

    fn resolve_slow(&mut self, name: &'a str) -> usize {
        if let Some(&idx) = self.by_name.get(name) {
            return idx;
        }
        for (suffix, types) in SUFFIXES {
            let Some(base) = name.strip_suffix(suffix) else {
                continue;
            };
            if let Some(&idx) = self.by_name.get(base) {
                let owns = self
                    .families
                    .get(idx)
                    .is_some_and(|f| types.contains(&f.metric_type));
                if owns {
                    return idx;
                }
            }
        }
        self.new_family(name)
    }

    fn help(&mut self, name: &'a str, text: Cow<'a, str>) -> Result<(), String> {
        self.cache = None;
        let idx = self.family_named(name);
        let (Some(fam), Some(decl)) = (self.families.get_mut(idx), self.declared.get_mut(idx))
        else {
            return Ok(());
        };
        if decl.help {
            return Err(format!(
                "second HELP line for {name:?}; the first one is kept"
            ));
        }
        decl.help = true;
        fam.help = (!text.is_empty()).then_some(text);
        Ok(())
    }

    fn ty(&mut self, name: &'a str, ty: MetricType) -> Result<(), String> {
        self.cache = None;
        let idx = self.family_named(name);
        let (Some(fam), Some(decl)) = (self.families.get_mut(idx), self.declared.get_mut(idx))
        else {
            return Ok(());
        };
        if decl.ty {
            return Err(format!(
                "second TYPE line for {name:?}; the first one is kept"
            ));
        }
        if !fam.samples.is_empty() {
            return Err(format!("TYPE line for {name:?} after its samples; ignored"));
        }
        decl.ty = true;
        fam.metric_type = ty;
        Ok(())
    }

    fn unit(&mut self, name: &'a str, unit: &'a str) -> Result<(), String> {
        self.cache = None;
        let idx = self.family_named(name);
        let (Some(fam), Some(decl)) = (self.families.get_mut(idx), self.declared.get_mut(idx))
        else {
            return Ok(());
        };
        if decl.unit {
            return Err(format!(
                "second UNIT line for {name:?}; the first one is kept"
            ));
        }
        decl.unit = true;
        fam.unit = (!unit.is_empty()).then_some(Cow::Borrowed(unit));
        Ok(())
    }

    fn sample(&mut self, name: &'a str, sample: Sample<'a>) -> Result<(), String> {
        let idx = self.resolve(name);
        if self.last_family != Some(idx) {
            if let Some(prev) = self.last_family.and_then(|i| self.families.get(i)) {
                if let Some(slot) = self.size_hint.get_mut(type_slot(prev.metric_type)) {
                    *slot = prev.samples.len();
                }
            }
            self.last_family = Some(idx);
        }
        let Some(fam) = self.families.get_mut(idx) else {
            return Ok(());
        };
        check_prom_sample(fam, name, &sample.labels)?;
        if fam.samples.capacity() == 0 {
            let hint = self
                .size_hint
                .get(type_slot(fam.metric_type))
                .copied()
                .unwrap_or(0);
            fam.samples.reserve_exact(hint.clamp(1, 1024));
        }
        fam.samples.push(sample);
        Ok(())
    }
}

/// Go `expfmt`: a summary's `quantile` and a histogram's `le` must be floats.
/// Checked in lenient mode too: such a sample is useless downstream.
fn check_prom_sample(
    fam: &MetricFamily<'_>,
    name: &str,
    labels: &[Label<'_>],
) -> Result<(), String> {
    let label = |key: &str| {
        labels
            .iter()
            .find(|l| l.name == key)
            .map(|l| l.value.as_ref())
    };
    let want = match fam.metric_type {
        MetricType::Summary if name == fam.name => "quantile",
        MetricType::Histogram if name.ends_with("_bucket") && name != fam.name => "le",
        _ => return Ok(()),
    };
    match label(want) {
        Some(v) if parse_value(v).is_some() => Ok(()),
        Some(v) => Err(format!(
            "expected a float in label {want:?} of {name:?}, found {v:?}"
        )),
        None => Err(format!("missing label {want:?} on {name:?}")),
    }
}

/// Parse a page. `strict` stops at the first error (Prometheus 0.0.4 strict
/// mode; OpenMetrics strict lives in `om.rs`); otherwise every error is
/// collected, the offending line skipped, and parsing goes on.
pub(crate) fn run(input: &[u8], format: Format, strict: bool) -> (Exposition<'_>, Vec<ParseError>) {
    let syn = Syntax::new(format, strict);
    let om = format == Format::OpenMetrics;
    let mut builder = Builder::default();
    let mut errors = Vec::new();
    let mut hint = 0usize;
    let mut lines = Lines::new(input);
    let mut seen_eof = false;
    let mut reported_after_eof = false;

    for (no, line) in lines.by_ref() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                errors.push(e);
                if strict {
                    break;
                }
                continue;
            }
        };
        if seen_eof && !reported_after_eof && !line.trim().is_empty() {
            reported_after_eof = true;
            errors.push(ParseError::new(no, "text after '# EOF'"));
        }
        let result = match lex_line(line, syn, &mut hint) {
            Err(reason) => Err(reason),
            Ok(Line::Empty | Line::Comment) => Ok(()),
            Ok(Line::Eof) => {
                seen_eof |= om;
                Ok(())
            }
            Ok(Line::Help(name, text)) => builder.help(name, text),
            Ok(Line::Type(name, ty)) => builder.ty(name, ty),
            Ok(Line::Unit(name, unit)) => builder.unit(name, unit),
            Ok(Line::Sample(name, sample)) => builder.sample(name, sample),
        };
        if let Err(reason) = result {
            errors.push(ParseError::new(no, reason));
            if strict {
                break;
            }
        }
    }

    let last = lines.line_no().max(1);
    if om && !seen_eof && (errors.is_empty() || !strict) {
        errors.push(ParseError::new(
            last,
            "missing '# EOF' at the end of an OpenMetrics page",
        ));
    }
    if !om && strict && errors.is_empty() && input.last().is_some_and(|&c| c != b'\n') {
        errors.push(ParseError::new(
            last,
            "unexpected end of input: the last line must end with '\\n'",
        ));
    }
    let mut families = builder.families;
    for fam in &mut families {
        // A size hint that overshot (a small family after a big one of the
        // same type): give the slack back; shrinking reallocs in place.
        if fam.samples.capacity() > 2 * fam.samples.len() + 16 {
            fam.samples.shrink_to_fit();
        }
    }
    (Exposition { format, families }, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lenient(text: &str) -> (Exposition<'_>, Vec<ParseError>) {
        run(text.as_bytes(), Format::PrometheusText, false)
    }

    #[test]
    fn counter_declared_with_and_without_total() {
        // 0.0.4 prometheus_client: TYPE carries `_total`.
        let (exp, errs) = lenient("# TYPE vllm:x_total counter\nvllm:x_total 3\n");
        assert!(errs.is_empty());
        assert_eq!(exp.families.len(), 1);
        assert_eq!(exp.families[0].name, "vllm:x_total");
        // OpenMetrics: family without `_total`, `_created` inside it.
        let (exp, errs) = run(
            b"# TYPE x counter\nx_total 3\nx_created 1.5\n# EOF\n",
            Format::OpenMetrics,
            false,
        );
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(exp.families.len(), 1);
        assert_eq!(exp.families[0].metric_type, MetricType::Counter);
        assert_eq!(exp.families[0].samples.len(), 2);
    }

    #[test]
    fn histogram_suffixes_and_out_of_order_sum() {
        let text = "# TYPE h histogram\nh_sum 3\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 2\nother 1\nh_created 5\n";
        let (exp, errs) = lenient(text);
        assert!(errs.is_empty());
        assert_eq!(exp.families.len(), 2);
        assert_eq!(exp.families[0].samples.len(), 5);
        assert_eq!(exp.families[1].metric_type, MetricType::Unknown);
    }

    #[test]
    fn exact_name_wins_over_suffix() {
        // prometheus_client 0.0.4: `x_created` is its own gauge family.
        let text = "# TYPE x counter\nx_total 1\n# TYPE x_created gauge\nx_created 9\n";
        let (exp, _) = lenient(text);
        assert_eq!(exp.families.len(), 2);
        assert_eq!(exp.families[1].name, "x_created");
        assert_eq!(exp.families[1].samples.len(), 1);
    }

    #[test]
    fn duplicate_metadata_first_wins_with_warning() {
        let text = "# HELP a one\n# HELP a two\n# TYPE a gauge\n# TYPE a counter\na 1\n";
        let (exp, errs) = lenient(text);
        assert_eq!(errs.len(), 2);
        assert_eq!(errs[0].line, 2);
        assert_eq!(exp.families[0].help.as_deref(), Some("one"));
        assert_eq!(exp.families[0].metric_type, MetricType::Gauge);
        assert!(run(text.as_bytes(), Format::PrometheusText, true).1.len() == 1);
    }

    #[test]
    fn garbage_line_is_skipped() {
        let text = "a 1\nthis is not a metric\nb{x=\"1\",} 2\n\n# NOTE hi\nc\t 3\n";
        let (exp, errs) = lenient(text);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].line, 2);
        assert_eq!(exp.families.len(), 3);
    }

    #[test]
    fn size_hint_overshoot_is_given_back() {
        let mut text = String::from("# TYPE big histogram\n");
        for i in 0..500 {
            text.push_str(&format!("big_bucket{{le=\"{i}\"}} {i}\n"));
        }
        text.push_str("# TYPE small histogram\nsmall_bucket{le=\"+Inf\"} 1\nsmall_count 1\n");
        let (exp, errs) = lenient(&text);
        assert!(errs.is_empty());
        assert_eq!(exp.families[1].samples.len(), 2);
        assert!(exp.families[1].samples.capacity() < 32);
    }

    #[test]
    fn strict_prom_rejects_type_after_samples_and_bad_quantile() {
        for bad in [
            "metric 4.12\n# TYPE metric counter\n",
            "# TYPE metric summary\nmetric{quantile=\"bla\"} 3.14\n",
            "# TYPE metric histogram\nmetric_bucket{le=\"bla\"} 3.14\n",
            "bla 3.14",
            "metric{__name__=\"bla\"} 3.14\n",
        ] {
            let (_, errs) = run(bad.as_bytes(), Format::PrometheusText, true);
            assert_eq!(errs.len(), 1, "{bad:?}: {errs:?}");
        }
    }
}
