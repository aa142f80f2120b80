//! How long a stored value stands for "now", shared by the store (which
//! answers queries with it) and the config (which refuses a downsampling
//! bucket too coarse for it).

/// How far back a signal query looks for a scrape before calling the value
/// stale (Prometheus's lookback delta).
pub const STALENESS_MS: i64 = 5 * 60 * 1000;

/// The coarsest downsampling bucket: a thinned range must still have a
/// scrape within [`STALENESS_MS`] of every instant.
pub const MAX_DOWNSAMPLE_BUCKET_MS: i64 = STALENESS_MS / 2;
