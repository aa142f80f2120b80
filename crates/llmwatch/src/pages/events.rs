//! `/events`: server-sent events for live pages. Every `live_interval` it
//! sends one `overview` event whose data is a JSON array of
//! [`LiveValue`](super::overview::LiveValue)s (`id`, `text`, `class`);
//! `static/live.js` finds the elements whose `data-kpi` matches each id and
//! updates them. Pages also use the events as a heartbeat to refresh their
//! charts. The first event goes out at once, so a page is current as soon
//! as it connects.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};

use super::overview::overview_page;
use crate::scrape::now_ms;
use crate::web::AppState;

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
        let event = match overview_page(&state.store, &state.pages, now_ms()).await {
            Ok(page) => {
                let values = page.live_values();
                match Event::default().event("overview").json_data(&values) {
                    Ok(event) => event,
                    Err(err) => Event::default().event("error").data(err.to_string()),
                }
            }
            Err(err) => Event::default()
                .event("error")
                .data(format!("cannot read the store: {err}")),
        };
        Some((Ok(event), (state, false)))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
