//! Wall-clock time as stored: milliseconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, as a wall-clock time: the one read of the wall clock in the
/// daemon (clippy.toml refuses `SystemTime::now` elsewhere).
#[allow(clippy::disallowed_methods)]
pub fn now() -> SystemTime {
    SystemTime::now()
}

/// Now, in Unix milliseconds (0 for a clock before 1970).
pub fn now_ms() -> i64 {
    now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
