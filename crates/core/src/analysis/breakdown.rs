//! Where the client's time to first token goes: the engine's own phase
//! histograms (queue, prefill, decode, inference, TTFT, e2e) over a window,
//! lined up with the client's mean TTFT and e2e over the same window.
//!
//! The parts, each from its own instrument:
//!
//! * **queue** — the engine's queue-time histogram (waiting for the scheduler);
//! * **prefill** — the engine core's prefill histogram (scheduled → first token);
//! * **server outside the engine core** — API server, tokenizer, detokenizer,
//!   the hop into the engine process: the server's e2e minus its inference
//!   and queue times (all three count whole requests); where the engine has
//!   no e2e/inference histograms, its TTFT minus queue and prefill;
//! * **network / client** — the client's TTFT minus the server's TTFT (the
//!   network, proxies, the client's own HTTP stack).
//!
//! What is left, `unexplained_s` = client TTFT − Σ parts, is the check: with
//! the e2e-side overhead it equals the server's TTFT − queue − prefill −
//! (e2e − inference − queue), i.e. the disagreement between the server's
//! front-end clock and its engine-core clocks, plus requests counted in one
//! histogram's window and not in another's. A small residual says the parts
//! account for the client's TTFT; a large one says they do not and is shown.
//!
//! The e2e breakdown is the same with decode added and the network part
//! taken as client e2e − server e2e.
//!
//! Where the server times each request itself (vLLM
//! `--enable-per-request-metrics`, llama.cpp's `timings`),
//! [`per_request_breakdown`] is preferred: queue, prefill and decode are then
//! the means over exactly the client's requests, and client − server
//! (request by request) is the network and the HTTP front end, so nothing
//! depends on which requests a histogram's window caught.
//!
//! Means, not quantiles: means add up (the mean of a sum is the sum of the
//! means); quantiles of the parts do not add up to a quantile of the whole.

use crate::analysis::fmt::secs;
use crate::signals::Signal;

/// The server's phase means over one window, seconds (`None`: the engine
/// has no such histogram, or it saw no request in the window).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ServerPhases {
    pub queue_s: Option<f64>,
    pub prefill_s: Option<f64>,
    pub decode_s: Option<f64>,
    pub inference_s: Option<f64>,
    pub ttft_s: Option<f64>,
    pub e2e_s: Option<f64>,
}

impl ServerPhases {
    /// The phase means among `signals` (as [`crate::signals::signals_between`]
    /// returns them over a window).
    pub fn from_signals(signals: &[(Signal, f64)]) -> ServerPhases {
        let get = |signal: Signal| {
            signals
                .iter()
                .find(|(s, _)| *s == signal)
                .map(|(_, v)| *v)
                .filter(|v| v.is_finite())
        };
        ServerPhases {
            queue_s: get(Signal::ServerQueueTimeMean),
            prefill_s: get(Signal::ServerPrefillTimeMean),
            decode_s: get(Signal::ServerDecodeTimeMean),
            inference_s: get(Signal::ServerInferenceTimeMean),
            ttft_s: get(Signal::ServerTtftMean),
            e2e_s: get(Signal::ServerE2eMean),
        }
    }

    /// Time in the server outside the engine core, per request: from the
    /// e2e side where the engine has e2e and inference histograms, else from
    /// the TTFT side.
    fn outside_core_s(&self) -> Option<f64> {
        let queue = self.queue_s?;
        match (self.e2e_s, self.inference_s) {
            (Some(e2e), Some(inference)) => Some(e2e - inference - queue),
            _ => Some(self.ttft_s? - queue - self.prefill_s?),
        }
    }

    /// Decode from its own histogram, else inference − prefill.
    fn decode_or_derived_s(&self) -> Option<f64> {
        self.decode_s
            .or_else(|| Some(self.inference_s? - self.prefill_s?))
    }
}

/// The client's mean latencies over the same window, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ClientMeans {
    pub ttft_s: Option<f64>,
    pub e2e_s: Option<f64>,
}

/// Which part of the client's TTFT is largest: the three answers the issue
/// asks the evidence to tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DominantPart {
    /// Waiting for the scheduler: capacity or scheduler limits.
    Queue,
    /// The engine computing the prompt: prefill-bound.
    Prefill,
    /// Outside the engine core: API server, tokenizer, network, proxy.
    OutsideEngine,
}

impl DominantPart {
    /// What it points at, in words.
    pub fn meaning(&self) -> &'static str {
        match self {
            DominantPart::Queue => "queue-dominated: capacity or the scheduler",
            DominantPart::Prefill => "prefill-dominated: prompt processing",
            DominantPart::OutsideEngine => {
                "outside the engine: API server, tokenizer, network or proxy"
            }
        }
    }
}

/// The client's mean TTFT split into parts (seconds). Parts may be negative
/// where instruments disagree (a canary's client TTFT against a server mean
/// over all its traffic); they are reported as measured, and where the client
/// is faster than the server the reason line says the server's means cover
/// other traffic ([`OTHER_TRAFFIC`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TtftBreakdown {
    pub client_s: f64,
    pub queue_s: f64,
    pub prefill_s: f64,
    /// In the server, outside the engine core (API server, tokenizer, IPC).
    pub server_outside_core_s: Option<f64>,
    /// Client − server TTFT: network, proxies, the client.
    pub network_s: Option<f64>,
    /// Client TTFT − queue − prefill: everything outside the engine core.
    pub outside_engine_s: f64,
    /// Client TTFT − Σ measured parts (see the module documentation).
    pub unexplained_s: f64,
}

/// The client's mean e2e latency split into parts (seconds).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct E2eBreakdown {
    pub client_s: f64,
    pub queue_s: f64,
    pub prefill_s: f64,
    pub decode_s: f64,
    pub server_outside_core_s: Option<f64>,
    /// Client − server e2e.
    pub network_s: Option<f64>,
    pub unexplained_s: f64,
}

/// The breakdown of one window.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LatencyBreakdown {
    pub ttft: TtftBreakdown,
    pub e2e: Option<E2eBreakdown>,
    pub dominant: DominantPart,
    /// The dominant part's share of the client's TTFT, 0..1.
    pub dominant_share: f64,
    /// One line: the parts and what dominates.
    pub reason: String,
    /// True when the parts are the server's own timing of the client's
    /// requests (exact, request by request); false for histogram means
    /// over the window.
    #[serde(default)]
    pub per_request: bool,
}

/// The server's own per-request timing, averaged over the client's
/// requests (seconds): vLLM's queue, scheduled → first token and first →
/// last token.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct PerRequestPhases {
    /// `None` where the server does not time its queue: llama-server's
    /// `timings` start when a slot takes the request, so a wait for a slot
    /// is in client − server, not in the server's account.
    pub queue_s: Option<f64>,
    pub prefill_s: f64,
    pub decode_s: Option<f64>,
}

/// The engine's waiting gauge over the same window as the client's
/// requests, for a queue the server does not time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WaitingGauge {
    /// Requests waiting, the window's mean.
    pub waiting_mean: f64,
    /// Requests completed per second over the window.
    pub requests_per_s: f64,
}

impl WaitingGauge {
    /// The mean wait by Little's law: requests waiting over the rate they
    /// pass through (real llama-server, 2 slots, 256x64: 681 ms against a
    /// measured 675 ms at concurrency 8, 1.77 s against 1.56 s at 16, and
    /// 129 ms against 180 ms at 4, where a 1 s scrape caught 1.4 waiting of
    /// the 2).
    pub fn mean_wait_s(&self) -> Option<f64> {
        (self.waiting_mean.is_finite()
            && self.waiting_mean >= 0.0
            && self.requests_per_s.is_finite()
            && self.requests_per_s > 0.0)
            .then(|| self.waiting_mean / self.requests_per_s)
    }
}

/// The breakdown of the client's mean TTFT (and e2e) by the server's own
/// timing of the same requests. The server's account starts when its
/// engine queues the request, so everything before — network, HTTP front
/// end, tokenizer — is `network_s` (client − server), and nothing is left
/// unexplained but the clamping of rounding.
///
/// A server that does not time its queue leaves the wait in client −
/// server: the engine's `waiting` gauge over the same window then gives the
/// queue by Little's law (at most client − server), and the reason says
/// so; without the gauge the wait stays in "outside the engine", said too.
pub fn per_request_breakdown(
    server: &PerRequestPhases,
    client: &ClientMeans,
    waiting: Option<WaitingGauge>,
) -> Result<LatencyBreakdown, NoBreakdown> {
    let prefill = server.prefill_s;
    if !prefill.is_finite() || server.queue_s.is_some_and(|q| !q.is_finite()) {
        return Err(NoBreakdown::NoServerTraffic);
    }
    let (queue, queue_note) = match server.queue_s {
        Some(queue) => (queue, String::new()),
        None => {
            let untimed = client
                .ttft_s
                .filter(|t| t.is_finite())
                .map_or(0.0, |t| (t - prefill).max(0.0));
            match waiting.and_then(|w| w.mean_wait_s().map(|q| (w, q))) {
                Some((w, wait)) => (
                    wait.min(untimed),
                    format!(
                        "; queue by Little's law (the server does not time its queue): \
                         waiting {:.2} / {:.2} requests/s",
                        w.waiting_mean, w.requests_per_s
                    ),
                ),
                None => (
                    0.0,
                    "; the server does not time its queue and shows no waiting gauge: a wait \
                     for it is counted outside the engine"
                        .to_string(),
                ),
            }
        }
    };
    let decode = server.decode_s.filter(|d| d.is_finite());
    let phases = ServerPhases {
        queue_s: Some(queue),
        prefill_s: Some(prefill),
        decode_s: decode,
        inference_s: decode.map(|d| prefill + d),
        ttft_s: Some(queue + prefill),
        e2e_s: decode.map(|d| queue + prefill + d),
    };
    let mut b = latency_breakdown(&phases, client, true)?;
    b.ttft.server_outside_core_s = None;
    if let Some(e2e) = &mut b.e2e {
        e2e.server_outside_core_s = None;
    }
    b.per_request = true;
    b.reason = format!(
        "{} (per request, from the server's own timing; outside = network, HTTP front end, tokenizer){queue_note}",
        reason_line(&b.ttft, b.dominant, b.dominant_share)
    );
    Ok(b)
}

impl TtftBreakdown {
    /// |unexplained| / client TTFT: how far the parts are from summing to
    /// what the client measured.
    pub fn unexplained_fraction(&self) -> f64 {
        if self.client_s > 0.0 {
            self.unexplained_s.abs() / self.client_s
        } else {
            0.0
        }
    }
}

/// Why a window has no breakdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoBreakdown {
    #[error("the engine exposes no queue/prefill phase histograms")]
    NoPhaseHistograms,
    #[error("no request finished on the server in the window")]
    NoServerTraffic,
    #[error("no successful client request in the window")]
    NoClientTraffic,
}

/// The breakdown of `client`'s mean TTFT (and e2e) by `server`'s phase
/// means. `has_phase_histograms` says whether the engine exposes the queue
/// and prefill histograms at all (a page without them), so "no histograms"
/// and "no traffic" are told apart.
pub fn latency_breakdown(
    server: &ServerPhases,
    client: &ClientMeans,
    has_phase_histograms: bool,
) -> Result<LatencyBreakdown, NoBreakdown> {
    let finite = |v: Option<f64>| v.filter(|v| v.is_finite());
    let (Some(queue), Some(prefill)) = (finite(server.queue_s), finite(server.prefill_s)) else {
        return Err(if has_phase_histograms {
            NoBreakdown::NoServerTraffic
        } else {
            NoBreakdown::NoPhaseHistograms
        });
    };
    let Some(client_ttft) = finite(client.ttft_s).filter(|v| *v >= 0.0) else {
        return Err(NoBreakdown::NoClientTraffic);
    };
    let outside_core = finite(server.outside_core_s());
    let network = finite(server.ttft_s).map(|ttft| client_ttft - ttft);
    let measured = queue + prefill + outside_core.unwrap_or(0.0) + network.unwrap_or(0.0);
    let ttft = TtftBreakdown {
        client_s: client_ttft,
        queue_s: queue,
        prefill_s: prefill,
        server_outside_core_s: outside_core,
        network_s: network,
        outside_engine_s: client_ttft - queue - prefill,
        unexplained_s: client_ttft - measured,
    };
    let e2e = match (finite(client.e2e_s), finite(server.decode_or_derived_s())) {
        (Some(client_e2e), Some(decode)) => {
            let network = finite(server.e2e_s).map(|e2e| client_e2e - e2e);
            let measured =
                queue + prefill + decode + outside_core.unwrap_or(0.0) + network.unwrap_or(0.0);
            Some(E2eBreakdown {
                client_s: client_e2e,
                queue_s: queue,
                prefill_s: prefill,
                decode_s: decode,
                server_outside_core_s: outside_core,
                network_s: network,
                unexplained_s: client_e2e - measured,
            })
        }
        _ => None,
    };
    let (dominant, largest) = [
        (DominantPart::Queue, queue),
        (DominantPart::Prefill, prefill),
        (DominantPart::OutsideEngine, ttft.outside_engine_s),
    ]
    .into_iter()
    .fold((DominantPart::Queue, f64::NEG_INFINITY), |best, part| {
        if part.1 > best.1 {
            part
        } else {
            best
        }
    });
    let dominant_share = if client_ttft > 0.0 {
        (largest / client_ttft).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let mut reason = reason_line(&ttft, dominant, dominant_share);
    let client_ahead_of_server = [
        (ttft.network_s, ttft.client_s),
        (
            e2e.and_then(|e2e| e2e.network_s),
            e2e.map_or(0.0, |e2e| e2e.client_s),
        ),
    ]
    .into_iter()
    .any(|(network, client)| {
        network.is_some_and(|n| n < -OTHER_TRAFFIC_TOLERANCE.max(0.1 * client))
    });
    if client_ahead_of_server {
        reason.push_str(OTHER_TRAFFIC);
    }
    Ok(LatencyBreakdown {
        ttft,
        e2e,
        dominant,
        dominant_share,
        reason,
        per_request: false,
    })
}

/// How far the client may be ahead of the server (clock skew between a
/// histogram's buckets and the client's timer) before the windows are
/// judged to count different requests.
const OTHER_TRAFFIC_TOLERANCE: f64 = 0.005;

/// Said when the client's time is shorter than the server's by more than
/// the tolerance: impossible for the same requests, so the server's means
/// cover other traffic (a sweep, users' requests of another shape).
pub const OTHER_TRAFFIC: &str = "; the server's means cover other traffic than the client's \
     requests (the client took less time than the server), so the parts describe the server's \
     traffic and do not add up to the client's time";

fn reason_line(ttft: &TtftBreakdown, dominant: DominantPart, share: f64) -> String {
    let mut outside = Vec::new();
    if let Some(core) = ttft.server_outside_core_s {
        outside.push(format!("server {}", secs(core)));
    }
    if let Some(network) = ttft.network_s {
        outside.push(format!("network/client {}", secs(network)));
    }
    let outside = if outside.is_empty() {
        String::new()
    } else {
        format!(" ({})", outside.join(", "))
    };
    format!(
        "mean TTFT {} = queue {} + prefill {} + outside the engine {}{}: {} ({:.0} %)",
        secs(ttft.client_s),
        secs(ttft.queue_s),
        secs(ttft.prefill_s),
        secs(ttft.outside_engine_s),
        outside,
        dominant.meaning(),
        share * 100.0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_faster_than_the_server_says_the_server_saw_other_traffic() {
        // Canaries of 64x16 against a server busy with a sweep's 512x128:
        // server means of 0.8 s e2e, the canaries' own 0.2 s.
        let server = ServerPhases {
            queue_s: Some(0.01),
            prefill_s: Some(0.04),
            decode_s: Some(0.75),
            inference_s: Some(0.79),
            ttft_s: Some(0.06),
            e2e_s: Some(0.85),
        };
        let client = ClientMeans {
            ttft_s: Some(0.07),
            e2e_s: Some(0.2),
        };
        let b = latency_breakdown(&server, &client, true).expect("a breakdown");
        assert!(b.reason.ends_with(OTHER_TRAFFIC), "{}", b.reason);
        // The same server means under a client that waited longer: no note.
        let client = ClientMeans {
            ttft_s: Some(0.07),
            e2e_s: Some(0.86),
        };
        let b = latency_breakdown(&server, &client, true).expect("a breakdown");
        assert!(!b.reason.contains(OTHER_TRAFFIC), "{}", b.reason);
    }

    /// The real vLLM numbers: mean TTFT 0.79 s, queue 0.05 s,
    /// prefill 0.46 s, e2e 3.45 s, inference 3.12 s.
    fn real_vllm() -> ServerPhases {
        ServerPhases {
            queue_s: Some(0.05),
            prefill_s: Some(0.46),
            decode_s: Some(2.66),
            inference_s: Some(3.12),
            ttft_s: Some(0.79),
            e2e_s: Some(3.45),
        }
    }

    #[test]
    fn parts_from_independent_histograms_sum_to_client_ttft() {
        let client = ClientMeans {
            ttft_s: Some(0.80),
            e2e_s: Some(3.47),
        };
        let b = latency_breakdown(&real_vllm(), &client, true).unwrap();
        // e2e − inference − queue = 0.28 s in the server outside the core.
        assert!((b.ttft.server_outside_core_s.unwrap() - 0.28).abs() < 1e-9);
        assert!((b.ttft.network_s.unwrap() - 0.01).abs() < 1e-9);
        // 0.79 − 0.05 − 0.46 agrees with the e2e side's 0.28 s: nothing left.
        assert!(b.ttft.unexplained_s.abs() < 1e-9, "{b:?}");
        assert_eq!(b.dominant, DominantPart::Prefill);
        assert!((b.dominant_share - 0.46 / 0.80).abs() < 1e-9);
        assert!(b.reason.contains("prefill-dominated"), "{}", b.reason);
        let e2e = b.e2e.unwrap();
        assert!((e2e.network_s.unwrap() - 0.02).abs() < 1e-9);
        assert!(e2e.unexplained_s.abs() < 1e-9, "{e2e:?}");
    }

    #[test]
    fn disagreeing_clocks_show_as_unexplained() {
        // The server's TTFT says 0.4 s outside the core, its e2e side 0.1 s:
        // 0.3 s of the client's TTFT is accounted for by no instrument.
        let server = ServerPhases {
            queue_s: Some(0.1),
            prefill_s: Some(0.2),
            decode_s: Some(1.0),
            inference_s: Some(1.2),
            ttft_s: Some(0.7),
            e2e_s: Some(1.4),
        };
        let client = ClientMeans {
            ttft_s: Some(0.75),
            e2e_s: Some(1.45),
        };
        let b = latency_breakdown(&server, &client, true).unwrap();
        assert!((b.ttft.unexplained_s - 0.3).abs() < 1e-9, "{b:?}");
        assert!(b.ttft.unexplained_fraction() > 0.1);
        assert_eq!(b.dominant, DominantPart::OutsideEngine);
    }

    /// Per-request timing: the client's mean TTFT splits into the server's
    /// queue + prefill and the rest, exactly.
    #[test]
    fn per_request_timing_splits_the_client_time_exactly() {
        let server = PerRequestPhases {
            queue_s: Some(0.010),
            prefill_s: 0.040,
            decode_s: Some(0.300),
        };
        let client = ClientMeans {
            ttft_s: Some(0.070),
            e2e_s: Some(0.372),
        };
        let b = per_request_breakdown(&server, &client, None).unwrap();
        assert!(b.per_request);
        assert!((b.ttft.network_s.unwrap() - 0.020).abs() < 1e-12);
        assert!((b.ttft.outside_engine_s - 0.020).abs() < 1e-12);
        assert_eq!(b.ttft.server_outside_core_s, None);
        assert!(b.ttft.unexplained_s.abs() < 1e-12, "{b:?}");
        let e2e = b.e2e.unwrap();
        assert!((e2e.network_s.unwrap() - 0.022).abs() < 1e-12);
        assert!(e2e.unexplained_s.abs() < 1e-12, "{e2e:?}");
        assert_eq!(b.dominant, DominantPart::Prefill);
        assert!(b.reason.contains("per request"), "{}", b.reason);
        let nan = PerRequestPhases {
            prefill_s: f64::NAN,
            ..server
        };
        assert_eq!(
            per_request_breakdown(&nan, &client, None),
            Err(NoBreakdown::NoServerTraffic)
        );
    }

    /// llama-server times a request from when a slot takes it: the wait
    /// for a slot is queue by Little's law on its `requests_deferred`
    /// gauge, not "outside the engine" (the real 2-slot server at
    /// concurrency 8: TTFT 702 ms, prefill 27 ms, 8.08 requests/s; a
    /// gauge of 5.0 waiting is used here, under the cap).
    #[test]
    fn an_untimed_queue_is_read_from_the_waiting_gauge() {
        let server = PerRequestPhases {
            queue_s: None,
            prefill_s: 0.027,
            decode_s: Some(0.200),
        };
        let client = ClientMeans {
            ttft_s: Some(0.702),
            e2e_s: Some(0.905),
        };
        let gauge = WaitingGauge {
            waiting_mean: 5.0,
            requests_per_s: 8.08,
        };
        let b = per_request_breakdown(&server, &client, Some(gauge)).unwrap();
        assert_eq!(b.dominant, DominantPart::Queue, "{}", b.reason);
        assert!((b.ttft.queue_s - 5.0 / 8.08).abs() < 1e-9, "{b:?}");
        assert!((b.ttft.network_s.unwrap() - (0.702 - 0.027 - 5.0 / 8.08)).abs() < 1e-9);
        assert!(b.reason.contains("Little's law"), "{}", b.reason);
        // Never more than the time the server did not account for.
        let crowded = WaitingGauge {
            waiting_mean: 50.0,
            ..gauge
        };
        let b = per_request_breakdown(&server, &client, Some(crowded)).unwrap();
        assert!((b.ttft.queue_s - (0.702 - 0.027)).abs() < 1e-9, "{b:?}");
        // Without a gauge the wait stays outside the engine, and it says so.
        let b = per_request_breakdown(&server, &client, None).unwrap();
        assert_eq!(
            (b.ttft.queue_s, b.dominant),
            (0.0, DominantPart::OutsideEngine)
        );
        assert!(b.reason.contains("does not time its queue"), "{}", b.reason);
    }

    #[test]
    fn queue_dominated_window() {
        let server = ServerPhases {
            queue_s: Some(2.0),
            prefill_s: Some(0.3),
            ttft_s: Some(2.35),
            ..ServerPhases::default()
        };
        let client = ClientMeans {
            ttft_s: Some(2.4),
            e2e_s: None,
        };
        let b = latency_breakdown(&server, &client, true).unwrap();
        assert_eq!(b.dominant, DominantPart::Queue);
        // Without e2e/inference the overhead comes from the TTFT side.
        assert!((b.ttft.server_outside_core_s.unwrap() - 0.05).abs() < 1e-9);
        assert!(b.ttft.unexplained_s.abs() < 1e-9);
        assert!(b.e2e.is_none());
        assert!(
            b.reason.contains("capacity or the scheduler"),
            "{}",
            b.reason
        );
    }

    #[test]
    fn missing_histograms_traffic_or_client_say_which() {
        let client = ClientMeans {
            ttft_s: Some(1.0),
            e2e_s: Some(2.0),
        };
        let none = ServerPhases::default();
        assert_eq!(
            latency_breakdown(&none, &client, false),
            Err(NoBreakdown::NoPhaseHistograms)
        );
        assert_eq!(
            latency_breakdown(&none, &client, true),
            Err(NoBreakdown::NoServerTraffic)
        );
        assert_eq!(
            latency_breakdown(&real_vllm(), &ClientMeans::default(), true),
            Err(NoBreakdown::NoClientTraffic)
        );
        let nan = ServerPhases {
            queue_s: Some(f64::NAN),
            ..real_vllm()
        };
        assert_eq!(
            latency_breakdown(&nan, &client, true),
            Err(NoBreakdown::NoServerTraffic)
        );
    }
}
