//! Prefill/decode disaggregation and speculative decoding, as a vLLM 0.32
//! decode instance reports them (issue 38), so llmwatch's catalog and
//! verdicts can be driven over loopback. Off by default ([`PdSpec`]).
//!
//! * **KV transfer**: each request waits `kv_transfer_s` (engine seconds)
//!   for its prefill's KV cache before this engine sees it, as a decode
//!   instance waits on NIXL; the engine's own clocks start after it. Each
//!   wait is observed in `vllm:nixl_xfer_time_seconds`, and the prompt's KV
//!   bytes in `vllm:nixl_bytes_transferred` (vLLM 0.32's bucket bounds).
//! * **Speculative decoding**: the counters of an n-gram or draft model
//!   proposing `spec_tokens` a step, each accepted with chance
//!   `spec_acceptance` given the ones before it were. They are derived from
//!   the tokens generated (a step of a draft yields 1 + accepted tokens);
//!   the step's cost is not changed, so speculation here is what the page
//!   says, not a speed-up.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use serde::{Deserialize, Serialize};

use crate::engine::NewSeq;
use crate::stats::{py_float, Histogram, Stats};
use crate::{SimError, SimInner};

/// The P/D and speculative-decoding behaviour of a simulated decode
/// instance. All zero (the default) turns both off and adds nothing to the
/// page.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct PdSpec {
    /// Engine seconds each request waits for its KV cache from a prefill
    /// instance; 0 = not disaggregated.
    pub kv_transfer_s: f64,
    /// Tokens proposed per draft step; 0 = no speculative decoding.
    pub spec_tokens: usize,
    /// Chance a draft token is accepted given the ones before it were, 0..=1.
    pub spec_acceptance: f64,
}

impl PdSpec {
    pub(crate) fn validate(&self) -> Result<(), SimError> {
        if !(self.kv_transfer_s.is_finite() && self.kv_transfer_s >= 0.0) {
            return Err(SimError::InvalidConfig {
                field: "pd_spec.kv_transfer_s",
                why: format!("must be a finite number >= 0, found {}", self.kv_transfer_s),
            });
        }
        if !(0.0..=1.0).contains(&self.spec_acceptance) {
            return Err(SimError::InvalidConfig {
                field: "pd_spec.spec_acceptance",
                why: format!("must be within 0..=1, found {}", self.spec_acceptance),
            });
        }
        if self.spec_tokens > 16 {
            return Err(SimError::InvalidConfig {
                field: "pd_spec.spec_tokens",
                why: format!("must be at most 16, found {}", self.spec_tokens),
            });
        }
        Ok(())
    }
}

/// vLLM 0.32's NIXL transfer-time bounds (`nixl/stats.py`).
const XFER_TIME_BOUNDS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0,
];

/// The NIXL histograms of one simulated decode instance.
pub(crate) struct DisaggState {
    transfers: Mutex<(Histogram, Histogram)>,
}

impl DisaggState {
    pub(crate) fn new() -> DisaggState {
        // 2 KiB … 8 GiB, every other power of two (vLLM's bytes buckets).
        let bytes = (1..25)
            .step_by(2)
            .map(|i| f64::from(1u32 << 10) * f64::from(1u32 << i));
        DisaggState {
            transfers: Mutex::new((
                Histogram::new(XFER_TIME_BOUNDS.to_vec()),
                Histogram::new(bytes.collect()),
            )),
        }
    }

    fn observe(&self, seconds: f64, bytes: f64) {
        let mut t = self.transfers.lock().unwrap_or_else(|e| e.into_inner());
        t.0.observe(seconds);
        t.1.observe(bytes);
    }
}

/// With a KV transfer configured, hands `seq` to the engine once its KV
/// has "arrived" and returns `None`; otherwise gives `seq` back.
pub(crate) fn after_transfer(inner: &std::sync::Arc<SimInner>, seq: NewSeq) -> Option<NewSeq> {
    let spec = inner.config.pd_spec;
    if spec.kv_transfer_s <= 0.0 {
        return Some(seq);
    }
    let wait = Duration::from_secs_f64(spec.kv_transfer_s / inner.config.time_scale);
    let p = &inner.config.profile;
    let bytes_per_token = p.kv_bytes_per_block as f64 / p.block_size.max(1) as f64;
    let bytes = seq.prompt.len() as f64 * bytes_per_token;
    let inner = inner.clone();
    tokio::spawn(async move {
        let started = Instant::now();
        tokio::time::sleep(wait).await;
        inner.disagg.observe(started.elapsed().as_secs_f64(), bytes);
        // A failed send drops `tx`, which ends the client's stream.
        let _ = inner.tx.send(NewSeq {
            arrival: Instant::now(),
            ..seq
        });
    });
    None
}

/// The families this module adds to the vLLM page (nothing when off).
pub(crate) fn render(inner: &SimInner, stats: &Stats) -> String {
    let spec = inner.config.pd_spec;
    let labels = format!(
        "engine=\"0\",model_name=\"{}\"",
        inner
            .config
            .model
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
    );
    let mut out = String::new();
    if spec.kv_transfer_s > 0.0 {
        let t = inner
            .disagg
            .transfers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        histogram(&mut out, "vllm:nixl_xfer_time_seconds", &labels, &t.0);
        histogram(&mut out, "vllm:nixl_bytes_transferred", &labels, &t.1);
        counter(&mut out, "vllm:nixl_num_failed_transfers", &labels, 0.0);
    }
    if spec.spec_tokens > 0 {
        speculation(&mut out, &labels, spec, stats.generation_tokens);
    }
    out
}

/// Draft steps, drafted and accepted tokens (in total and per position)
/// for `generated` tokens: each draft step yields 1 + its accepted tokens.
fn speculation(out: &mut String, labels: &str, spec: PdSpec, generated: u64) {
    let per_position: Vec<f64> = (1..=spec.spec_tokens)
        .map(|i| spec.spec_acceptance.powi(i as i32))
        .collect();
    let accepted_per_draft: f64 = per_position.iter().sum();
    let drafts = (generated as f64 / (1.0 + accepted_per_draft)).floor();
    let accepted: Vec<f64> = per_position.iter().map(|a| (drafts * a).floor()).collect();
    counter(out, "vllm:spec_decode_num_drafts", labels, drafts);
    counter(
        out,
        "vllm:spec_decode_num_draft_tokens",
        labels,
        drafts * spec.spec_tokens as f64,
    );
    counter(
        out,
        "vllm:spec_decode_num_accepted_tokens",
        labels,
        accepted.iter().sum(),
    );
    let name = "vllm:spec_decode_num_accepted_tokens_per_pos";
    out.push_str(&format!("# TYPE {name}_total counter\n"));
    for (position, n) in accepted.iter().enumerate() {
        out.push_str(&format!(
            "{name}_total{{{labels},position=\"{position}\"}} {}\n",
            py_float(*n)
        ));
    }
}

fn counter(out: &mut String, name: &str, labels: &str, value: f64) {
    out.push_str(&format!(
        "# TYPE {name}_total counter\n{name}_total{{{labels}}} {}\n",
        py_float(value)
    ));
}

fn histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    out.push_str(&format!("# TYPE {name} histogram\n"));
    for le in h
        .bounds
        .iter()
        .copied()
        .chain(std::iter::once(f64::INFINITY))
    {
        let bound = if le.is_infinite() {
            "+Inf".to_string()
        } else {
            py_float(le)
        };
        out.push_str(&format!(
            "{name}_bucket{{{labels},le=\"{bound}\"}} {}\n",
            py_float(h.cumulative(le) as f64)
        ));
    }
    out.push_str(&format!(
        "{name}_count{{{labels}}} {}\n{name}_sum{{{labels}}} {}\n",
        py_float(h.count as f64),
        py_float(h.sum)
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speculation_counters_add_up_to_the_tokens_generated() {
        let spec = PdSpec {
            kv_transfer_s: 0.0,
            spec_tokens: 3,
            spec_acceptance: 0.5,
        };
        let mut out = String::new();
        speculation(&mut out, "engine=\"0\"", spec, 1750);
        // 0.5 + 0.25 + 0.125 accepted a draft: 1750 / 1.875 = 933 drafts.
        assert!(
            out.contains("vllm:spec_decode_num_drafts_total{engine=\"0\"} 933.0"),
            "{out}"
        );
        assert!(out.contains("vllm:spec_decode_num_draft_tokens_total{engine=\"0\"} 2799.0"));
        // 466 + 233 + 116 = 815 accepted.
        assert!(out.contains("vllm:spec_decode_num_accepted_tokens_total{engine=\"0\"} 815.0"));
        assert!(out.contains("position=\"2\"} 116.0"), "{out}");
    }

    #[test]
    fn bad_settings_name_the_field() {
        let bad = PdSpec {
            spec_acceptance: 1.5,
            ..PdSpec::default()
        };
        let err = bad.validate().unwrap_err().to_string();
        assert!(err.contains("pd_spec.spec_acceptance"), "{err}");
        assert!(PdSpec::default().validate().is_ok());
    }
}
