//! The one error type of the exposition parser.

/// A problem found on one line of an exposition page.
///
/// In strict mode ([`crate::exposition::parse`]) the first one aborts the
/// parse; in lenient mode ([`crate::exposition::parse_lenient`]) each one is
/// collected (the offending line or sample is skipped, or for duplicate
/// metadata the first declaration wins) and parsing goes on.
///
/// `line` is 1-based. Problems that belong to the page as a whole (a missing
/// `# EOF`) name the last line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    pub line: usize,
    /// What was expected and what was found, e.g.
    /// `expected '=' after label name, found '"'`.
    pub reason: String,
}

impl ParseError {
    pub(crate) fn new(line: usize, reason: impl Into<String>) -> Self {
        Self {
            line,
            reason: reason.into(),
        }
    }
}
