//! The latest live update, computed once and shared by every `/events`
//! client.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One live update: the SSE event name and its data.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveUpdate {
    pub event: &'static str,
    pub data: Arc<str>,
}

/// The latest live update, shared by every `/events` client. A client asks
/// for an update no older than it needs; the first to find the cached one
/// too old computes it while the others wait on the lock, then reuse it.
#[derive(Clone, Default)]
pub struct LiveCache(Arc<tokio::sync::Mutex<Option<(Instant, LiveUpdate)>>>);

impl LiveCache {
    pub async fn get_or_compute<F, Fut>(&self, max_age: Duration, compute: F) -> LiveUpdate
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = LiveUpdate>,
    {
        let mut slot = self.0.lock().await;
        if let Some((at, update)) = slot.as_ref() {
            if at.elapsed() < max_age {
                return update.clone();
            }
        }
        let update = compute().await;
        *slot = Some((Instant::now(), update.clone()));
        update
    }
}
