//! Query results in the shape of the `data` member of Prometheus'
//! `/api/v1/query` and `/api/v1/query_range` answers.

use serde::ser::{SerializeMap, SerializeTuple};
use serde::{Serialize, Serializer};

use crate::source::Labels;

/// One point: timestamp in ms and value. Serialises as Prometheus does:
/// `[seconds as a float, "value as a string"]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub t_ms: i64,
    pub v: f64,
}

impl Serialize for Point {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut tup = serializer.serialize_tuple(2)?;
        tup.serialize_element(&(self.t_ms as f64 / 1000.0))?;
        tup.serialize_element(&format_value(self.v))?;
        tup.end()
    }
}

/// Formats a sample value as Prometheus does (Go's `FormatFloat(v, 'f', -1, 64)`):
/// shortest exact decimal, `+Inf`, `-Inf`, `NaN`.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v == f64::INFINITY {
        "+Inf".to_string()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        format!("{v}")
    }
}

/// One element of an instant vector.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InstantSample {
    pub metric: Labels,
    pub value: Point,
}

/// One series of a range result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RangeSeries {
    pub metric: Labels,
    pub values: Vec<Point>,
}

/// A query's result: Prometheus' `data` object. Serialises to
/// `{"resultType": "vector"|"matrix"|"scalar"|"string", "result": ...}`.
#[derive(Clone, Debug, PartialEq)]
pub enum QueryData {
    Vector(Vec<InstantSample>),
    Matrix(Vec<RangeSeries>),
    Scalar(Point),
    /// A string result at a time (ms).
    String {
        t_ms: i64,
        value: String,
    },
}

impl QueryData {
    /// Prometheus' `resultType` name.
    pub fn result_type(&self) -> &'static str {
        match self {
            QueryData::Vector(_) => "vector",
            QueryData::Matrix(_) => "matrix",
            QueryData::Scalar(_) => "scalar",
            QueryData::String { .. } => "string",
        }
    }
}

struct StringPoint<'a>(i64, &'a str);

impl Serialize for StringPoint<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut tup = serializer.serialize_tuple(2)?;
        tup.serialize_element(&(self.0 as f64 / 1000.0))?;
        tup.serialize_element(self.1)?;
        tup.end()
    }
}

impl Serialize for QueryData {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("resultType", self.result_type())?;
        match self {
            QueryData::Vector(v) => map.serialize_entry("result", v)?,
            QueryData::Matrix(m) => map.serialize_entry("result", m)?,
            QueryData::Scalar(p) => map.serialize_entry("result", p)?,
            QueryData::String { t_ms, value } => {
                map.serialize_entry("result", &StringPoint(*t_ms, value))?
            }
        }
        map.end()
    }
}
