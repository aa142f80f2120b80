//! The engine's typed error, and how it maps onto Prometheus' error JSON.

/// Why a query failed. [`QueryError::error_type`] gives Prometheus'
/// `errorType` for the HTTP answer
/// `{"status":"error","errorType":...,"error":...}`.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The text is not PromQL.
    #[error("parse error: {0}")]
    Parse(String),
    /// Valid PromQL that this engine does not evaluate; names the feature.
    #[error("unsupported PromQL feature: {0}")]
    Unsupported(String),
    /// A request parameter out of range (step, time range, resolution).
    #[error("invalid parameter: {0}")]
    BadParam(String),
    /// Evaluation failed as it does in Prometheus (many-to-many matching,
    /// duplicate label sets, a bad regex in `label_replace`).
    #[error("{0}")]
    Execution(String),
    /// The query would read more samples than allowed.
    #[error("query processing would load too many samples into memory ({0} > limit {1})")]
    TooManySamples(usize, usize),
    /// The series source failed.
    #[error("storage: {0}")]
    Source(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl QueryError {
    /// Prometheus' `errorType` for this error: `bad_data` for the request,
    /// `execution` for evaluation, `internal` for storage.
    pub fn error_type(&self) -> &'static str {
        match self {
            QueryError::Parse(_) | QueryError::Unsupported(_) | QueryError::BadParam(_) => {
                "bad_data"
            }
            QueryError::Execution(_) | QueryError::TooManySamples(..) => "execution",
            QueryError::Source(_) => "internal",
        }
    }

    /// The HTTP status Prometheus answers this error with.
    pub fn http_status(&self) -> u16 {
        match self.error_type() {
            "bad_data" => 400,
            "execution" => 422,
            _ => 500,
        }
    }
}

pub(crate) fn unsupported(feature: impl Into<String>) -> QueryError {
    QueryError::Unsupported(feature.into())
}

pub(crate) fn exec(msg: impl Into<String>) -> QueryError {
    QueryError::Execution(msg.into())
}
