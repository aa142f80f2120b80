//! Strict OpenMetrics 1.0: every rule of the OpenMetrics conformance suite
//! (`OpenObservability/OpenMetrics` `tests/testdata/parsers`). The rules and
//! their order follow the reference parser (`prometheus_client`'s
//! `openmetrics/parser.py`): families are contiguous and declared before
//! their samples, names never clash, each metric's samples are contiguous,
//! and histogram/summary/stateset/info/counter invariants hold.

use std::borrow::Cow;
use std::collections::HashSet;

use super::error::ParseError;
use super::lex::{lex_line, parse_value, Line, Lines, Syntax};
use super::model::{Exposition, Format, Label, MetricFamily, MetricType, Sample};

/// The sample-name suffixes a family of each type may use.
fn suffixes(ty: Option<MetricType>) -> &'static [&'static str] {
    match ty {
        Some(MetricType::Counter) => &["_total", "_created"],
        Some(MetricType::Summary) => &["", "_count", "_sum", "_created"],
        Some(MetricType::Histogram) => &["_count", "_sum", "_bucket", "_created"],
        Some(MetricType::GaugeHistogram) => &["_gcount", "_gsum", "_bucket"],
        Some(MetricType::Info) => &["_info"],
        _ => &[""],
    }
}

/// A metric's identity within its family: its labels without the one that
/// tells its samples apart (`le`, `quantile`, the stateset's own label).
type GroupKey = Vec<(String, String)>;

struct Family<'a> {
    name: &'a str,
    ty: Option<MetricType>,
    help: Option<Cow<'a, str>>,
    help_seen: bool,
    unit: Option<&'a str>,
    allowed: &'static [&'static str],
    samples: Vec<Sample<'a>>,
    group: Option<GroupKey>,
    group_ts: Option<f64>,
    seen_groups: HashSet<GroupKey>,
    last_line: usize,
}

impl<'a> Family<'a> {
    fn new(name: &'a str, line: usize) -> Self {
        Self {
            name,
            ty: None,
            help: None,
            help_seen: false,
            unit: None,
            allowed: &[""],
            samples: Vec::new(),
            group: None,
            group_ts: None,
            seen_groups: HashSet::new(),
            last_line: line,
        }
    }

    fn allows(&self, sample_name: &str) -> bool {
        sample_name
            .strip_prefix(self.name)
            .is_some_and(|suffix| self.allowed.contains(&suffix))
    }

    fn group_for(&self, sample_name: &str, labels: &[Label<'_>]) -> GroupKey {
        let ty = self.ty;
        if ty == Some(MetricType::Info) {
            return Vec::new();
        }
        let skip: Option<&str> = match ty {
            Some(MetricType::Summary) if sample_name == self.name => Some("quantile"),
            Some(MetricType::StateSet) => Some(self.name),
            Some(MetricType::Histogram | MetricType::GaugeHistogram)
                if sample_name.len() == self.name.len() + "_bucket".len()
                    && sample_name.ends_with("_bucket") =>
            {
                Some("le")
            }
            _ => None,
        };
        let mut key: GroupKey = labels
            .iter()
            .filter(|l| Some(l.name.as_ref()) != skip)
            .map(|l| (l.name.to_string(), l.value.to_string()))
            .collect();
        key.sort();
        key
    }
}

struct Checker<'a> {
    current: Option<Family<'a>>,
    seen_names: HashSet<String>,
    families: Vec<MetricFamily<'a>>,
}

fn err<T>(line: usize, reason: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError::new(line, reason))
}

fn is_integer(v: f64) -> bool {
    v.fract() == 0.0
}

impl<'a> Checker<'a> {
    /// Close the current family: name clashes, unit rules, histogram
    /// invariants; then move it to the output.
    fn finish(&mut self) -> Result<(), ParseError> {
        let Some(fam) = self.current.take() else {
            return Ok(());
        };
        let line = fam.last_line;
        let ty = fam.ty.unwrap_or(MetricType::Unknown);
        let mut names: Vec<&str> = suffixes(Some(ty)).to_vec();
        if !names.contains(&"") {
            names.push("");
        }
        for suffix in names {
            let full = format!("{}{}", fam.name, suffix);
            if !self.seen_names.insert(full.clone()) {
                return err(
                    line,
                    format!("clashing name {full:?}: already used by an earlier family"),
                );
            }
        }
        if let Some(unit) = fam.unit.filter(|u| !u.is_empty()) {
            if !fam.name.ends_with(&format!("_{unit}")) {
                return err(
                    line,
                    format!(
                        "metric name {:?} must end with its unit \"_{unit}\"",
                        fam.name
                    ),
                );
            }
            if matches!(ty, MetricType::Info | MetricType::StateSet) {
                return err(
                    line,
                    format!("{:?}: a UNIT is not allowed for {ty:?} families", fam.name),
                );
            }
        }
        if matches!(ty, MetricType::Histogram | MetricType::GaugeHistogram) {
            check_histogram(&fam)?;
        }
        self.families.push(MetricFamily {
            name: Cow::Borrowed(fam.name),
            metric_type: ty,
            help: fam.help.filter(|h| !h.is_empty()),
            unit: fam.unit.filter(|u| !u.is_empty()).map(Cow::Borrowed),
            samples: fam.samples,
        });
        Ok(())
    }

    fn start(&mut self, name: &'a str, line: usize) -> Result<(), ParseError> {
        self.finish()?;
        self.current = Some(Family::new(name, line));
        Ok(())
    }

    fn metadata(&mut self, line: usize, parsed: Line<'a>) -> Result<(), ParseError> {
        let name = match &parsed {
            Line::Help(n, _) | Line::Type(n, _) | Line::Unit(n, _) => *n,
            _ => return Ok(()),
        };
        let same = self.current.as_ref().is_some_and(|f| f.name == name);
        if same {
            if self.current.as_ref().is_some_and(|f| !f.samples.is_empty()) {
                return err(line, format!("metadata for {name:?} after its samples"));
            }
        } else {
            self.start(name, line)?;
        }
        let Some(fam) = self.current.as_mut() else {
            return Ok(());
        };
        fam.last_line = line;
        match parsed {
            Line::Help(_, text) => {
                if fam.help_seen {
                    return err(line, format!("second HELP line for {name:?}"));
                }
                fam.help_seen = true;
                fam.help = Some(text);
            }
            Line::Type(_, ty) => {
                if fam.ty.is_some() {
                    return err(line, format!("second TYPE line for {name:?}"));
                }
                fam.ty = Some(ty);
                fam.allowed = suffixes(Some(ty));
            }
            Line::Unit(_, unit) => {
                if fam.unit.is_some() {
                    return err(line, format!("second UNIT line for {name:?}"));
                }
                fam.unit = Some(unit);
            }
            _ => {}
        }
        Ok(())
    }

    fn sample(&mut self, line: usize, name: &'a str, sample: Sample<'a>) -> Result<(), ParseError> {
        let fits = self.current.as_ref().is_some_and(|f| f.allows(name));
        if !fits {
            // A sample of no declared family: a new `unknown` family.
            self.start(name, line)?;
            if let Some(fam) = self.current.as_mut() {
                fam.ty = Some(MetricType::Unknown);
            }
        }
        let Some(fam) = self.current.as_mut() else {
            return Ok(());
        };
        fam.last_line = line;
        let ty = fam.ty;
        let fname = fam.name;
        let suffix = name.get(fname.len()..).unwrap_or_default();
        let is_quantile = check_sample_labels(line, name, ty, fname, suffix, &sample)?;
        check_grouping(fam, line, name, &sample)?;
        check_sample_value(line, name, ty, suffix, is_quantile, &sample)?;
        fam.samples.push(sample);
        Ok(())
    }
}

/// A sample's labels as its family's type needs them (`le`, `quantile`,
/// the stateset's own label) and integer counts; `true` for a summary
/// quantile.
fn check_sample_labels(
    line: usize,
    name: &str,
    ty: Option<MetricType>,
    fname: &str,
    suffix: &str,
    sample: &Sample<'_>,
) -> Result<bool, ParseError> {
    let label = |key: &str| {
        sample
            .labels
            .iter()
            .find(|l| l.name == key)
            .map(|l| l.value.as_ref())
    };
    if ty == Some(MetricType::StateSet) && label(fname).is_none() {
        return err(
            line,
            format!("stateset sample is missing its label {fname:?}"),
        );
    }
    if suffix == "_bucket" {
        match label("le") {
            None => return err(line, format!("{name}: bucket without an \"le\" label")),
            Some(le) => match parse_value(le) {
                Some(b) if b.is_nan() || (b.is_infinite() && le != "+Inf" && le != "-Inf") => {
                    return err(line, format!("{name}: invalid \"le\" label {le:?}"))
                }
                None => return err(line, format!("{name}: invalid \"le\" label {le:?}")),
                Some(_) => {}
            },
        }
        if !is_integer(sample.value) {
            return err(
                line,
                format!(
                    "{name}: bucket value must be an integer, found {}",
                    sample.value
                ),
            );
        }
    }
    if (suffix == "_count" || suffix == "_gcount") && !is_integer(sample.value) {
        return err(
            line,
            format!("{name}: count must be an integer, found {}", sample.value),
        );
    }
    let is_quantile = ty == Some(MetricType::Summary) && suffix.is_empty();
    if is_quantile {
        let q = label("quantile");
        let ok = q
            .and_then(parse_value)
            .is_some_and(|q| (0.0..=1.0).contains(&q));
        if !ok {
            return err(
                line,
                format!(
                    "{name}: summary quantile needs a \"quantile\" label in [0, 1], found {q:?}"
                ),
            );
        }
    }
    Ok(is_quantile)
}

/// One metric's samples are contiguous, and all or none carry
/// timestamps, which never go back in time (info metrics aside).
fn check_grouping(
    fam: &mut Family<'_>,
    line: usize,
    name: &str,
    sample: &Sample<'_>,
) -> Result<(), ParseError> {
    let ty = fam.ty;
    // Metric grouping and timestamps.
    let g = fam.group_for(name, &sample.labels);
    if let Some(group) = &fam.group {
        if *group != g && fam.seen_groups.contains(&g) {
            return err(
                line,
                format!("{name}: samples of one metric must be contiguous"),
            );
        }
        if *group == g {
            if sample.timestamp.is_none() != fam.group_ts.is_none() {
                return err(
                    line,
                    format!("{name}: mix of samples with and without timestamps in one metric"),
                );
            }
            if let (Some(prev), Some(ts)) = (fam.group_ts, sample.timestamp) {
                if prev > ts && ty != Some(MetricType::Info) {
                    return err(
                        line,
                        format!("{name}: timestamp {ts} goes back in time (after {prev})"),
                    );
                }
            }
        }
    }
    fam.group_ts = sample.timestamp;
    if fam.group.as_ref() != Some(&g) {
        fam.seen_groups.insert(g.clone());
        fam.group = Some(g);
    }
    Ok(())
}

/// Values each type allows: stateset 0/1, info 1, no negative quantile or
/// counter-like value, exemplars only where OpenMetrics puts them.
fn check_sample_value(
    line: usize,
    name: &str,
    ty: Option<MetricType>,
    suffix: &str,
    is_quantile: bool,
    sample: &Sample<'_>,
) -> Result<(), ParseError> {
    let v = sample.value;
    if ty == Some(MetricType::StateSet) && v != 0.0 && v != 1.0 {
        return err(
            line,
            format!("{name}: stateset values must be 0 or 1, found {v}"),
        );
    }
    if ty == Some(MetricType::Info) && v != 1.0 {
        return err(line, format!("{name}: info values must be 1, found {v}"));
    }
    if is_quantile && v < 0.0 {
        return err(
            line,
            format!("{name}: quantile values cannot be negative, found {v}"),
        );
    }
    let counter_like = matches!(
        suffix,
        "_total" | "_sum" | "_count" | "_bucket" | "_gcount" | "_gsum"
    );
    if counter_like && v.is_nan() {
        return err(line, format!("{name}: counter-like samples cannot be NaN"));
    }
    if counter_like && suffix != "_gsum" && v < 0.0 {
        return err(
            line,
            format!("{name}: counter-like samples cannot be negative, found {v}"),
        );
    }
    if sample.exemplar.is_some() {
        let allowed = (matches!(ty, Some(MetricType::Histogram | MetricType::GaugeHistogram))
            && name.ends_with("_bucket"))
            || (ty == Some(MetricType::Counter) && name.ends_with("_total"));
        if !allowed {
            return err(
                line,
                format!(
                    "{name}: exemplars are only allowed on histogram buckets and counter totals"
                ),
            );
        }
    }
    Ok(())
}

/// Histogram and gauge-histogram invariants, per metric (label set and
/// timestamp): a `+Inf` bucket, increasing `le`, cumulative counts,
/// `_count` == `+Inf` bucket, `_sum` and `_count` together, no `_sum` with
/// negative buckets, no negative `_gsum` without them.
fn check_histogram(fam: &Family<'_>) -> Result<(), ParseError> {
    let line = fam.last_line;
    let name = fam.name;
    let mut state: Option<HistogramMetric> = None;
    let mut group: Option<GroupKey> = None;
    let mut timestamp: Option<f64> = None;
    for s in &fam.samples {
        let sname = s.name.as_ref();
        let suffix = sname.get(name.len()..).unwrap_or_default();
        if suffix.is_empty() {
            continue;
        }
        let g = fam.group_for(sname, &s.labels);
        let same = group.as_ref() == Some(&g)
            && timestamp.map(f64::to_bits) == s.timestamp.map(f64::to_bits);
        if !same {
            if let Some(st) = &state {
                st.finish(line, name)?;
            }
            state = Some(HistogramMetric::default());
        }
        group = Some(g);
        timestamp = s.timestamp;
        if let Some(st) = state.as_mut() {
            st.observe(suffix, s, line, name)?;
        }
    }
    if let Some(st) = &state {
        st.finish(line, name)?;
    }
    Ok(())
}

/// One histogram metric (label set and timestamp) as its samples go by.
#[derive(Default)]
struct HistogramMetric {
    /// The last bucket's `le`, and its (cumulative) value.
    bucket: Option<f64>,
    value: f64,
    count: Option<f64>,
    negative_buckets: bool,
    sum: bool,
    gsum: bool,
    negative_gsum: bool,
}

impl HistogramMetric {
    fn observe(
        &mut self,
        suffix: &str,
        s: &Sample<'_>,
        line: usize,
        name: &str,
    ) -> Result<(), ParseError> {
        match suffix {
            "_bucket" => {
                let b = s.label("le").and_then(parse_value).unwrap_or(f64::NAN);
                if b < 0.0 {
                    self.negative_buckets = true;
                }
                if self.bucket.is_some_and(|prev| b <= prev) {
                    return err(line, format!("histogram {name:?}: buckets out of order"));
                }
                if s.value < self.value {
                    return err(
                        line,
                        format!("histogram {name:?}: bucket values are not cumulative"),
                    );
                }
                self.bucket = Some(b);
                self.value = s.value;
            }
            "_count" | "_gcount" => self.count = Some(s.value),
            "_sum" => self.sum = true,
            "_gsum" => {
                self.gsum = true;
                if s.value < 0.0 {
                    self.negative_gsum = true;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The invariants that hold only once every sample is seen.
    fn finish(&self, line: usize, name: &str) -> Result<(), ParseError> {
        if self.bucket != Some(f64::INFINITY) {
            return err(line, format!("histogram {name:?}: +Inf bucket missing"));
        }
        if self.count.is_some_and(|c| c != self.value) {
            return err(
                line,
                format!("histogram {name:?}: _count does not match the +Inf bucket"),
            );
        }
        if self.sum && self.count.is_none() {
            return err(
                line,
                format!("histogram {name:?}: _count must be present if _sum is"),
            );
        }
        if self.gsum && self.count.is_none() {
            return err(
                line,
                format!("histogram {name:?}: _gcount must be present if _gsum is"),
            );
        }
        if !(self.sum || self.gsum) && self.count.is_some() {
            return err(
                line,
                format!("histogram {name:?}: _sum/_gsum must be present if _count is"),
            );
        }
        if self.negative_buckets && self.sum {
            return err(
                line,
                format!("histogram {name:?}: _sum is not allowed with negative buckets"),
            );
        }
        if !self.negative_buckets && self.negative_gsum {
            return err(
                line,
                format!("histogram {name:?}: negative _gsum without negative buckets"),
            );
        }
        Ok(())
    }
}

/// Parse a page as strict OpenMetrics 1.0.
pub(crate) fn parse_strict(input: &[u8]) -> Result<Exposition<'_>, ParseError> {
    let syn = Syntax::new(Format::OpenMetrics, true);
    let mut checker = Checker {
        current: None,
        seen_names: HashSet::new(),
        families: Vec::new(),
    };
    let mut hint = 0usize;
    let mut lines = Lines::new(input);
    let mut eof = false;
    for (no, line) in lines.by_ref() {
        let line = line?;
        if eof {
            return err(no, "text after '# EOF'");
        }
        match lex_line(line, syn, &mut hint).map_err(|r| ParseError::new(no, r))? {
            Line::Eof => eof = true,
            Line::Empty => return err(no, "blank lines are not allowed in OpenMetrics"),
            Line::Comment => return err(no, "comments are not allowed in OpenMetrics"),
            Line::Sample(name, sample) => checker.sample(no, name, sample)?,
            meta => checker.metadata(no, meta)?,
        }
    }
    checker.finish()?;
    if !eof {
        return err(
            lines.line_no().max(1),
            "missing '# EOF' at the end of an OpenMetrics page",
        );
    }
    Ok(Exposition {
        format: Format::OpenMetrics,
        families: checker.families,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Exposition<'_> {
        match parse_strict(text.as_bytes()) {
            Ok(e) => e,
            Err(e) => panic!("{text:?}: {e}"),
        }
    }

    #[test]
    fn histogram_invariants() {
        let exp = ok("# TYPE a histogram\na_bucket{le=\"1.0\"} 0\na_bucket{le=\"+Inf\"} 3\na_count 3\na_sum 2\n# EOF\n");
        assert_eq!(exp.families[0].samples.len(), 4);
        for bad in [
            "# TYPE a histogram\na_sum 1\n# EOF\n",
            "# TYPE a histogram\na_bucket{le=\"2\"} 0\na_bucket{le=\"1\"} 0\na_bucket{le=\"+Inf\"} 0\n# EOF\n",
            "# TYPE a histogram\na_bucket{le=\"+INF\"} 0\n# EOF\n",
            "# TYPE a histogram\na_count 1\na_bucket{le=\"+Inf\"} 0\n# EOF\n",
            "# TYPE a histogram\na_bucket{le=\"-1.0\"} 1\na_bucket{le=\"+Inf\"} 2\na_sum 1\n# EOF\n",
        ] {
            assert!(parse_strict(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn grouping_clashes_and_eof() {
        ok("# TYPE a gauge\na{a=\"1\"} 1 0\na{a=\"1\"} 2 0\n# EOF");
        for bad in [
            "# TYPE a gauge\na 0 1\na 0 0\n# EOF\n",
            "# TYPE a counter\n# TYPE a counter\n# EOF\n",
            "# TYPE a_created gauge\n# TYPE a counter\n# EOF\n",
            "a 1\n# EOF\nblah",
            "a 1\n\n# EOF\n",
            "a 1\n",
            "",
        ] {
            assert!(parse_strict(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn values_keep_family_types() {
        let exp = ok(
            "# TYPE a counter\n# HELP a help\na_total 9223372036854775808\na_created 1.5\n# EOF\n",
        );
        let fam = &exp.families[0];
        assert_eq!(fam.name, "a");
        assert_eq!(fam.metric_type, MetricType::Counter);
        assert_eq!(fam.help.as_deref(), Some("help"));
        assert_eq!(fam.samples[0].value, 9223372036854775808.0);
    }
}
