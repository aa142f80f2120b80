//! `/events`: server-sent events for live pages. Every `live_interval` it
//! sends one `overview` event whose data is a JSON array of
//! [`LiveValue`](super::overview::LiveValue)s (`id`, `text`, `class`);
//! `static/live.js` finds the elements whose `data-kpi` matches each id and
//! updates them. Pages also use the events as a heartbeat to refresh their
//! charts. The first event goes out at once, so a page is current as soon
//! as it connects. Every client shares one [`LiveCache`]: ten open tabs
//! cost one overview read per interval, not ten.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};

pub use super::live_cache::{LiveCache, LiveUpdate};
use super::overview::overview_page;
use crate::AppState;
use llmwatch_engine::sources::scrape::now_ms;

async fn overview_update(state: &AppState) -> LiveUpdate {
    match overview_page(&state.store, &state.pages, now_ms()).await {
        Ok(page) => match serde_json::to_string(&page.live_values()) {
            Ok(json) => LiveUpdate {
                event: "overview",
                data: json.into(),
            },
            Err(err) => LiveUpdate {
                event: "error",
                data: err.to_string().into(),
            },
        },
        Err(err) => LiveUpdate {
            event: "error",
            data: format!("cannot read the store: {err}").into(),
        },
    }
}

pub async fn handler(
    State(state): State<AppState>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let interval = state.pages.live_interval.max(Duration::from_millis(200));
    let stream = stream::unfold((state, true), move |(state, first)| async move {
        let mut shutdown = state.pages.shutdown.clone();
        if shutdown.as_ref().is_some_and(|s| *s.borrow()) {
            return None;
        }
        if !first {
            let stopped = async {
                match shutdown.as_mut() {
                    Some(s) => {
                        let _ = s.changed().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stopped => return None,
            }
        }
        // Fresh enough for a client that waited a whole interval: younger
        // than half of it.
        let update = state
            .live
            .get_or_compute(interval / 2, || overview_update(&state))
            .await;
        let event = Event::default().event(update.event).data(&*update.data);
        Some((Ok(event), (state, false)))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn clients_share_one_computation_per_interval() {
        let cache = LiveCache::default();
        let computed = Arc::new(AtomicU32::new(0));
        let compute = || {
            let computed = computed.clone();
            async move {
                let n = computed.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                LiveUpdate {
                    event: "overview",
                    data: format!("[{n}]").into(),
                }
            }
        };
        let max_age = Duration::from_millis(500);
        // Ten clients at once: one computation, one answer for all.
        let answers =
            futures_util::future::join_all((0..10).map(|_| cache.get_or_compute(max_age, compute)))
                .await;
        assert_eq!(computed.load(Ordering::SeqCst), 1);
        assert!(answers.iter().all(|a| &*a.data == "[1]"));
        // Once it is older than a client allows, the next one recomputes.
        let fresh = cache.get_or_compute(Duration::ZERO, compute).await;
        assert_eq!(&*fresh.data, "[2]");
    }
}
