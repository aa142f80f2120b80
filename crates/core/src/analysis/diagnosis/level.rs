//! Reading one load level: how its TTFT splits (queue, prefill, the P/D
//! KV transfer, outside the engine) and whether the engine held requests
//! back.

use super::super::{fin, fmt, Load, StepResult};

/// The parts of one level's TTFT, seconds: from the client-side breakdown
/// where the step has one, else from the engine's phase means.
#[derive(Debug, Clone, Copy)]
pub(super) struct TtftSplit {
    pub(super) queue: f64,
    pub(super) prefill: f64,
    /// Everything outside the engine core (API server, tokenizer, network);
    /// `None` from phase means without a TTFT mean to subtract from.
    pub(super) outside: Option<f64>,
    /// The prefill→decode KV transfer (P/D disaggregation), where the
    /// engine reports one: carved out of the time outside the engine core,
    /// then out of the queue, wherever the engine's clocks counted it.
    pub(super) transfer: Option<f64>,
}

impl TtftSplit {
    pub(super) fn of(s: &StepResult) -> Option<TtftSplit> {
        let split = if let Some(b) = &s.server.latency_breakdown {
            TtftSplit {
                queue: b.ttft.queue_s.max(0.0),
                prefill: b.ttft.prefill_s.max(0.0),
                outside: Some(b.ttft.outside_engine_s.max(0.0)),
                transfer: None,
            }
        } else {
            let p = &s.server.phases;
            let queue = fin(p.queue_s)?.max(0.0);
            let prefill = fin(p.prefill_s)?.max(0.0);
            let outside = fin(p.ttft_s).map(|t| (t - queue - prefill).max(0.0));
            TtftSplit {
                queue,
                prefill,
                outside,
                transfer: None,
            }
        };
        Some(split.with_transfer(fin(s.server.kv_transfer_time_mean)))
    }

    /// Moves a request's mean KV-transfer time out of the parts that hold
    /// it: a decode instance waits for the prefill's KV before (outside)
    /// or while (queue) its engine schedules the request.
    fn with_transfer(mut self, transfer: Option<f64>) -> TtftSplit {
        let Some(transfer) = transfer.filter(|t| *t > 0.0) else {
            return self;
        };
        let mut left = transfer;
        if let Some(outside) = self.outside.as_mut() {
            let taken = left.min(*outside);
            *outside -= taken;
            left -= taken;
        }
        let taken = left.min(self.queue);
        self.queue -= taken;
        left -= taken;
        self.transfer = Some(transfer - left);
        self
    }

    pub(super) fn total(&self) -> f64 {
        self.queue + self.prefill + self.outside.unwrap_or(0.0) + self.transfer.unwrap_or(0.0)
    }

    /// Share of the total, 0..1.
    pub(super) fn share(&self, part: f64) -> f64 {
        let t = self.total();
        if t > 0.0 {
            part / t
        } else {
            0.0
        }
    }

    pub(super) fn queue_dominated(&self) -> bool {
        self.queue >= self.prefill
            && self.queue >= self.outside.unwrap_or(0.0)
            && self.queue >= self.transfer.unwrap_or(0.0)
    }

    /// Prompt work is the largest part of TTFT.
    pub(super) fn prefill_dominated(&self) -> bool {
        self.prefill >= self.queue
            && self.prefill >= self.outside.unwrap_or(0.0)
            && self.prefill >= self.transfer.unwrap_or(0.0)
    }

    /// Prompt work is at least half of TTFT: the rest together weighs less,
    /// so a prompt-side change is what moves TTFT most.
    pub(super) fn prefill_majority(&self) -> bool {
        self.share(self.prefill) >= 0.5
    }

    /// Waiting is at least two thirds of TTFT: requests queue whatever a
    /// waiting gauge sampled at scrapes happened to see.
    pub(super) fn queue_clearly_dominated(&self) -> bool {
        self.queue
            >= 2.0 * (self.prefill + self.outside.unwrap_or(0.0) + self.transfer.unwrap_or(0.0))
    }

    pub(super) fn outside_dominated(&self) -> bool {
        self.outside
            .is_some_and(|o| o > self.queue && o > self.prefill && o > self.transfer.unwrap_or(0.0))
    }

    /// The prefill→decode KV transfer is the largest part of TTFT.
    pub(super) fn transfer_dominated(&self) -> bool {
        self.transfer
            .is_some_and(|t| t > self.queue && t > self.prefill && t > self.outside.unwrap_or(0.0))
    }

    pub(super) fn words(&self) -> String {
        let mut w = format!(
            "queue {} ({}), prefill {} ({})",
            fmt::secs(self.queue),
            fmt::pct(self.share(self.queue)),
            fmt::secs(self.prefill),
            fmt::pct(self.share(self.prefill))
        );
        if let Some(t) = self.transfer {
            w.push_str(&format!(
                ", KV transfer {} ({})",
                fmt::secs(t),
                fmt::pct(self.share(t))
            ));
        }
        if let Some(o) = self.outside {
            w.push_str(&format!(
                ", outside the engine {} ({})",
                fmt::secs(o),
                fmt::pct(self.share(o))
            ));
        }
        w
    }
}

/// Requests the server held waiting at one level: the mean where measured,
/// else the maximum.
pub(super) fn waiting_of(s: &StepResult) -> Option<f64> {
    fin(s.server.requests_waiting_mean).or(fin(s.server.requests_waiting_max))
}

/// A level queues when at least half a request waits on average (or one at
/// some scrape when only the maximum is known).
pub(super) fn queues(s: &StepResult) -> bool {
    match fin(s.server.requests_waiting_mean) {
        Some(w) => w >= 0.5,
        None => fin(s.server.requests_waiting_max).is_some_and(|w| w >= 1.0),
    }
}

/// Whether the engine held requests back at this level: a request or more
/// waiting on average (else, with no waiting gauge, fewer running than were
/// offered). Less than that is a step or two spent for the token budget
/// while everything offered runs, not a cap.
pub(super) fn held_back(s: &StepResult) -> bool {
    match (fin(s.server.requests_waiting_mean), s.load) {
        (Some(w), _) => w >= 1.0,
        (None, Load::Concurrency(c)) => {
            fin(s.server.requests_running_max).is_none_or(|r| r + 1.0 < f64::from(c))
        }
        (None, Load::RequestRate(_)) => true,
    }
}
