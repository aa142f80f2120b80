//! The typed model of one exposition page. Strings borrow from the page text
//! (`Cow::Borrowed`) unless unescaping forced a copy.

use std::borrow::Cow;

/// Which text format a page is written in. Decides blank-line, EOF,
/// timestamp-unit and metadata rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`: timestamps are integer milliseconds.
    PrometheusText,
    /// `application/openmetrics-text; version=1.0.0`: ends with `# EOF`,
    /// timestamps are (fractional) seconds.
    OpenMetrics,
}

/// The declared type of a family. `Unknown` covers 0.0.4's `untyped`, OM's
/// `unknown`, and samples with no TYPE line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    StateSet,
    Unknown,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Label<'a> {
    pub name: Cow<'a, str>,
    /// Unescaped.
    pub value: Cow<'a, str>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Exemplar<'a> {
    pub labels: Vec<Label<'a>>,
    pub value: f64,
    /// Seconds since the Unix epoch.
    pub timestamp: Option<f64>,
}

/// One sample line: `name{labels} value [timestamp] [# exemplar]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// The full sample name as written, e.g. `vllm:e2e_request_latency_seconds_bucket`.
    pub name: Cow<'a, str>,
    pub labels: Vec<Label<'a>>,
    pub value: f64,
    /// Seconds since the Unix epoch, whatever the wire unit was.
    pub timestamp: Option<f64>,
    pub exemplar: Option<Exemplar<'a>>,
}

impl Sample<'_> {
    /// The value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|label| label.name == name)
            .map(|label| label.value.as_ref())
    }
}

/// A metric family: metadata plus every sample that belongs to it
/// (`_bucket`, `_sum`, `_count`, `_total`, `_created`, … included).
#[derive(Debug, Clone, PartialEq)]
pub struct MetricFamily<'a> {
    /// Family name as declared by TYPE/HELP (or the sample name when there is
    /// no metadata). In OpenMetrics a counter family has no `_total`.
    pub name: Cow<'a, str>,
    pub metric_type: MetricType,
    /// Unescaped HELP text; `None` when absent or empty.
    pub help: Option<Cow<'a, str>>,
    pub unit: Option<Cow<'a, str>>,
    pub samples: Vec<Sample<'a>>,
}

/// A parsed page.
#[derive(Debug, Clone, PartialEq)]
pub struct Exposition<'a> {
    pub format: Format,
    pub families: Vec<MetricFamily<'a>>,
}
