//! Prometheus remote-write 1.0, the sending side's pure part: the protobuf
//! `WriteRequest` (messages derived by hand with `prost`, so no `protoc` or
//! build script), label sets as the specification wants them, and the
//! snappy *block* compression the wire uses. No I/O: the sender in
//! `llmwatch-engine` posts what [`WriteRequestBuilder::finish`] returns.
//!
//! Specification: <https://prometheus.io/docs/specs/remote_write_spec/>.

/// `Content-Type` of a remote-write request.
pub const CONTENT_TYPE: &str = "application/x-protobuf";
/// `Content-Encoding` of a remote-write request.
pub const CONTENT_ENCODING: &str = "snappy";
/// `X-Prometheus-Remote-Write-Version` of protocol 1.0.
pub const VERSION_HEADER: &str = "X-Prometheus-Remote-Write-Version";
pub const VERSION: &str = "0.1.0";

/// `prometheus.WriteRequest` (field 3, metadata, is never sent).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// `prometheus.TimeSeries`: one label set and its samples, oldest first.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`: a value at a Unix time in milliseconds.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// Why a request body could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("not snappy block data: {0}")]
    Snappy(#[from] snap::Error),
    #[error("not a WriteRequest: {0}")]
    Protobuf(#[from] prost::DecodeError),
}

impl Label {
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Label {
        Label {
            name: name.into(),
            value: value.into(),
        }
    }
}

/// The label set of one series as the specification wants it: `__name__`
/// = `name`, the series' own labels, then the labels the sender attaches
/// (`job`, `instance`, ...). A series label that clashes with an attached
/// one is kept as `exported_<name>` (as Prometheus does with
/// `honor_labels = false`); empty values are dropped (an empty label is an
/// absent one); names are sorted by byte order, which puts `__name__` first
/// for every conventional (lower-case) label name.
pub fn series_labels(
    name: &str,
    own: &[(String, String)],
    attached: &[(&str, &str)],
) -> Vec<Label> {
    let mut labels: Vec<Label> = Vec::with_capacity(own.len() + attached.len() + 1);
    labels.push(Label::new("__name__", name));
    for (key, value) in attached {
        if !value.is_empty() {
            labels.push(Label::new(*key, *value));
        }
    }
    for (key, value) in own {
        if value.is_empty() || key == "__name__" {
            continue;
        }
        let mut key = key.clone();
        while labels.iter().any(|l| l.name == key) {
            key = format!("exported_{key}");
        }
        labels.push(Label {
            name: key,
            value: value.clone(),
        });
    }
    labels.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    labels
}

/// A series' label set already in wire form: the `labels` entries of a
/// `TimeSeries` (field 1, one length-delimited `Label` each). A sender
/// encodes each series' labels once and keeps them; every request then
/// copies bytes instead of building and dropping strings (most of the
/// encoding cost, BENCHMARKS.md). Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedLabels(std::sync::Arc<[u8]>);

impl EncodedLabels {
    pub fn new(labels: &[Label]) -> EncodedLabels {
        let mut out = Vec::new();
        for label in labels {
            let mut message = Vec::with_capacity(label.name.len() + label.value.len() + 4);
            // proto3: an empty string is the default and is not written.
            for (tag, text) in [(0x0a, &label.name), (0x12, &label.value)] {
                if !text.is_empty() {
                    message.push(tag);
                    put_varint(&mut message, text.len() as u64);
                    message.extend_from_slice(text.as_bytes());
                }
            }
            out.push(0x0a);
            put_varint(&mut out, message.len() as u64);
            out.extend_from_slice(&message);
        }
        EncodedLabels(out.into())
    }

    /// The label set back (tests, diagnostics).
    pub fn labels(&self) -> Vec<Label> {
        <TimeSeries as prost::Message>::decode(&*self.0)
            .map(|series| series.labels)
            .unwrap_or_default()
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A `Sample` as prost writes it: proto3 leaves out a field at its default
/// (a value equal to 0.0, a timestamp of 0).
fn put_sample(out: &mut Vec<u8>, sample: &Sample) {
    let has_value = sample.value != 0.0;
    let timestamp = sample.timestamp as u64;
    let mut len = 0;
    if has_value {
        len += 9;
    }
    if timestamp != 0 {
        len += 1 + varint_len(timestamp);
    }
    out.push(0x12);
    put_varint(out, len as u64);
    if has_value {
        out.push(0x09);
        out.extend_from_slice(&sample.value.to_le_bytes());
    }
    if timestamp != 0 {
        out.push(0x10);
        put_varint(out, timestamp);
    }
}

fn varint_len(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// Builds one request, grouping the samples of a series (named by a key
/// the caller chooses, e.g. its store id) into one `TimeSeries`, so a
/// request of several scrapes carries each label set once. Samples go into
/// one flat vector tagged with their series' slot and are grouped when the
/// request is written: read in time order, most series bring one sample to
/// a request, and a vector per series was an allocation per sample.
#[derive(Debug, Default)]
pub struct WriteRequestBuilder {
    /// Each series' labels and its sample count.
    series: Vec<(EncodedLabels, u32)>,
    samples: Vec<(u32, Sample)>,
    index: rustc_hash::FxHashMap<u64, u32>,
}

impl WriteRequestBuilder {
    pub fn new() -> WriteRequestBuilder {
        WriteRequestBuilder::default()
    }

    /// Adds a sample of the series `key`; `labels` is called only the first
    /// time a key is seen. Samples of a series must come oldest first.
    pub fn push(
        &mut self,
        key: u64,
        labels: impl FnOnce() -> EncodedLabels,
        timestamp_ms: i64,
        value: f64,
    ) {
        let slot = *self.index.entry(key).or_insert_with(|| {
            self.series.push((labels(), 0));
            // A request holds far fewer than 2^32 series.
            (self.series.len() - 1) as u32
        });
        self.series[slot as usize].1 += 1;
        self.samples.push((
            slot,
            Sample {
                value,
                timestamp: timestamp_ms,
            },
        ));
    }

    /// Samples added so far.
    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The request's protobuf bytes, the same bytes prost writes for the
    /// equivalent [`WriteRequest`].
    pub fn protobuf(&self) -> Vec<u8> {
        // Each series' samples in push order, series by series: a counting
        // sort on the slots.
        let mut starts = Vec::with_capacity(self.series.len() + 1);
        let mut next = 0usize;
        for (_, count) in &self.series {
            starts.push(next);
            next += *count as usize;
        }
        starts.push(next);
        let mut fill = starts.clone();
        let mut grouped = vec![
            Sample {
                value: 0.0,
                timestamp: 0
            };
            self.samples.len()
        ];
        for (slot, sample) in &self.samples {
            let at = &mut fill[*slot as usize];
            grouped[*at] = *sample;
            *at += 1;
        }
        // A label set and ~20 bytes a sample, as a first guess.
        let labels_bytes: usize = self.series.iter().map(|(l, _)| l.0.len() + 4).sum();
        let mut out = Vec::with_capacity(labels_bytes + grouped.len() * 20);
        let mut series = Vec::new();
        for (slot, (labels, _)) in self.series.iter().enumerate() {
            series.clear();
            series.extend_from_slice(&labels.0);
            for sample in &grouped[starts[slot]..starts[slot + 1]] {
                put_sample(&mut series, sample);
            }
            out.push(0x0a);
            put_varint(&mut out, series.len() as u64);
            out.extend_from_slice(&series);
        }
        out
    }

    /// The request as built (tests, diagnostics).
    pub fn request(&self) -> WriteRequest {
        <WriteRequest as prost::Message>::decode(self.protobuf().as_slice()).unwrap_or_default()
    }

    /// The request body: protobuf, snappy block-compressed.
    pub fn finish(self) -> Vec<u8> {
        compress(&self.protobuf())
    }
}

/// A request's wire body: protobuf, then snappy's block format (not the
/// framed one: remote write says so).
pub fn encode(request: &WriteRequest) -> Vec<u8> {
    compress(&prost::Message::encode_to_vec(request))
}

fn compress(proto: &[u8]) -> Vec<u8> {
    // Compression of an in-memory buffer fails only past snappy's 4 GiB
    // input limit, which a bounded batch never reaches; fall back to an
    // empty body (rejected by any receiver, so counted) rather than panic.
    snap::raw::Encoder::new()
        .compress_vec(proto)
        .unwrap_or_default()
}

/// Reads a wire body back (tests, and receivers written against this crate).
pub fn decode(body: &[u8], max_decoded_bytes: usize) -> Result<WriteRequest, DecodeError> {
    let length = snap::raw::decompress_len(body)?;
    if length > max_decoded_bytes {
        return Err(DecodeError::Snappy(snap::Error::TooBig {
            given: length as u64,
            max: max_decoded_bytes as u64,
        }));
    }
    let proto = snap::raw::Decoder::new().decompress_vec(body)?;
    Ok(<WriteRequest as prost::Message>::decode(proto.as_slice())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn labels_are_sorted_named_and_clashes_exported() {
        let labels = series_labels(
            "vllm:num_requests_running",
            &own(&[
                ("model_name", "m"),
                ("job", "theirs"),
                ("empty", ""),
                ("instance", "x:1"),
            ]),
            &[
                ("job", "llmwatch"),
                ("instance", "127.0.0.1:8000"),
                ("target", "a"),
            ],
        );
        let names: Vec<&str> = labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "__name__",
                "exported_instance",
                "exported_job",
                "instance",
                "job",
                "model_name",
                "target"
            ]
        );
        let value = |n: &str| {
            labels
                .iter()
                .find(|l| l.name == n)
                .map(|l| l.value.as_str())
        };
        assert_eq!(value("__name__"), Some("vllm:num_requests_running"));
        assert_eq!(value("job"), Some("llmwatch"));
        assert_eq!(value("exported_job"), Some("theirs"));
        assert_eq!(value("exported_instance"), Some("x:1"));
    }

    #[test]
    fn an_already_exported_label_is_exported_again() {
        let labels = series_labels(
            "m",
            &own(&[("job", "a"), ("exported_job", "b")]),
            &[("job", "llmwatch")],
        );
        let value = |n: &str| {
            labels
                .iter()
                .find(|l| l.name == n)
                .map(|l| l.value.as_str())
        };
        assert_eq!(value("job"), Some("llmwatch"));
        assert_eq!(value("exported_job"), Some("a"));
        assert_eq!(value("exported_exported_job"), Some("b"));
    }

    #[test]
    fn a_request_round_trips_through_snappy_and_protobuf() {
        let mut builder = WriteRequestBuilder::new();
        let labels_a = || {
            EncodedLabels::new(&series_labels(
                "a_total",
                &own(&[("le", "0.5")]),
                &[("job", "j")],
            ))
        };
        let labels_b = || EncodedLabels::new(&series_labels("b", &[], &[("job", "j")]));
        builder.push(1, labels_a, 1_000, 1.0);
        builder.push(2, labels_b, 1_000, f64::NAN);
        builder.push(1, unreachable_labels, 2_000, 2.5);
        assert_eq!(builder.samples(), 3);
        let expected = builder.request();
        let body = builder.finish();
        // Snappy block format: a varint of the uncompressed length first.
        let proto = snap::raw::Decoder::new()
            .decompress_vec(&body)
            .expect("snappy block");
        let decoded = <WriteRequest as prost::Message>::decode(proto.as_slice()).expect("protobuf");
        assert_eq!(decoded.timeseries.len(), 2);
        assert_eq!(decoded.timeseries[0].labels, expected.timeseries[0].labels);
        assert_eq!(
            decoded.timeseries[0].samples,
            vec![
                Sample {
                    value: 1.0,
                    timestamp: 1_000
                },
                Sample {
                    value: 2.5,
                    timestamp: 2_000
                }
            ]
        );
        assert!(decoded.timeseries[1].samples[0].value.is_nan());
        assert_eq!(decode(&body, 1 << 20).expect("decodes").timeseries.len(), 2);
    }

    fn unreachable_labels() -> EncodedLabels {
        // A second sample of a known series must not rebuild its labels.
        EncodedLabels::new(&[Label::new("__name__", "rebuilt")])
    }

    #[test]
    fn the_builders_bytes_are_prosts() {
        // Defaults left out (0.0, timestamp 0, empty strings), a negative
        // timestamp's ten-byte varint, NaN, long labels' two-byte lengths.
        let series = [
            (
                vec![Label::new("__name__", "x"), Label::new("a", "")],
                vec![(0, 0.0), (-5, f64::NAN)],
            ),
            (
                vec![
                    Label::new("__name__", "y".repeat(300)),
                    Label::new("le", "+Inf"),
                ],
                vec![(1_750_000_000_000, -0.0), (1_750_000_005_000, 1e300)],
            ),
        ];
        let mut builder = WriteRequestBuilder::new();
        let mut request = WriteRequest::default();
        for (key, (labels, samples)) in series.iter().enumerate() {
            let mut timeseries = TimeSeries {
                labels: labels.clone(),
                samples: Vec::new(),
            };
            for &(timestamp, value) in samples {
                builder.push(key as u64, || EncodedLabels::new(labels), timestamp, value);
                timeseries.samples.push(Sample { value, timestamp });
            }
            request.timeseries.push(timeseries);
        }
        assert_eq!(builder.protobuf(), prost::Message::encode_to_vec(&request));
        assert_eq!(EncodedLabels::new(&series[1].0).labels(), series[1].0);
        assert_eq!(builder.finish(), encode(&request));
    }

    #[test]
    fn the_wire_bytes_are_those_of_the_protobuf_schema() {
        // Hand-encoded `WriteRequest{timeseries{labels{name:"a",value:"b"},
        // samples{value:1.0,timestamp:5}}}`, tags as in remote.proto.
        let request = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label::new("a", "b")],
                samples: vec![Sample {
                    value: 1.0,
                    timestamp: 5,
                }],
            }],
        };
        let mut expected = vec![0x0a, 0x15, 0x0a, 0x06, 0x0a, 0x01, b'a', 0x12, 0x01, b'b'];
        expected.extend([0x12, 0x0b, 0x09]);
        expected.extend(1.0f64.to_le_bytes());
        expected.extend([0x10, 0x05]);
        assert_eq!(prost::Message::encode_to_vec(&request), expected);
    }

    #[test]
    fn oversized_or_garbled_bodies_are_refused() {
        let body = encode(&WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label::new("__name__", "x".repeat(1000))],
                samples: vec![],
            }],
        });
        assert!(matches!(decode(&body, 100), Err(DecodeError::Snappy(_))));
        assert!(decode(b"\xff\xff\xff\xff\xff\x0fgarbage", 1 << 20).is_err());
    }
}
