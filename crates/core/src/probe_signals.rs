//! Client-side signals from llmwatch's own probes over a window: what a user
//! felt, as opposed to what the server's histograms guess.

use std::borrow::Borrow;

use crate::signals::Signal;
use crate::stats::percentile;

/// The parts of one probe that the rolling signals need, in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeTimings {
    pub ok: bool,
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
    pub e2e_s: f64,
    /// Per-token inter-token latencies of this probe.
    pub itl_s: Vec<f64>,
}

/// Rolling probe signals over `probes` (one window of one target).
///
/// Failed probes count in `probe_error_rate` and, where they got that far,
/// in TTFT; they are never silently dropped. Latency percentiles over an
/// empty set are omitted, never NaN.
pub fn probe_signals<P: Borrow<ProbeTimings>>(probes: &[P]) -> Vec<(Signal, f64)> {
    if probes.is_empty() {
        return Vec::new();
    }
    let count = probes.len();
    let probes = || probes.iter().map(Borrow::borrow);
    let sorted = |mut values: Vec<f64>| {
        values.retain(|v| v.is_finite());
        values.sort_by(f64::total_cmp);
        values
    };
    let ttft = sorted(probes().filter_map(|p| p.ttft_s).collect());
    let itl = sorted(probes().flat_map(|p| p.itl_s.iter().copied()).collect());
    let tpot = sorted(probes().filter_map(|p| p.tpot_s).collect());
    let e2e = sorted(probes().filter(|p| p.ok).map(|p| p.e2e_s).collect());
    let failed = probes().filter(|p| !p.ok).count();

    let mut out = Vec::new();
    let mut put = |signal, values: &[f64], q| {
        if let Some(v) = percentile(values, q) {
            out.push((signal, v));
        }
    };
    put(Signal::ProbeTtftP50, &ttft, 0.50);
    put(Signal::ProbeTtftP95, &ttft, 0.95);
    put(Signal::ProbeItlP50, &itl, 0.50);
    put(Signal::ProbeItlP95, &itl, 0.95);
    put(Signal::ProbeTpotP95, &tpot, 0.95);
    put(Signal::ProbeE2eP95, &e2e, 0.95);
    // Means over successful probes only: a failed probe's TTFT would pair a
    // request the server never finished with server histograms that only
    // count finished ones.
    let ok_ttft: Vec<f64> = probes()
        .filter(|p| p.ok)
        .filter_map(|p| p.ttft_s)
        .filter(|v| v.is_finite())
        .collect();
    if !ok_ttft.is_empty() {
        out.push((
            Signal::ProbeTtftMean,
            ok_ttft.iter().sum::<f64>() / ok_ttft.len() as f64,
        ));
    }
    if !e2e.is_empty() {
        out.push((
            Signal::ProbeE2eMean,
            e2e.iter().sum::<f64>() / e2e.len() as f64,
        ));
    }
    out.push((Signal::ProbeErrorRate, failed as f64 / count as f64));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(ttft: f64, itl: &[f64]) -> ProbeTimings {
        ProbeTimings {
            ok: true,
            ttft_s: Some(ttft),
            tpot_s: Some(itl.iter().sum::<f64>() / itl.len().max(1) as f64),
            e2e_s: ttft + itl.iter().sum::<f64>(),
            itl_s: itl.to_vec(),
        }
    }

    fn value(signals: &[(Signal, f64)], signal: Signal) -> Option<f64> {
        signals.iter().find(|(s, _)| *s == signal).map(|(_, v)| *v)
    }

    #[test]
    fn percentiles_over_every_probe_and_every_gap() {
        let probes: Vec<_> = (1..=20)
            .map(|i| ok(i as f64 * 0.1, &[0.01, 0.03]))
            .collect();
        let signals = probe_signals(&probes);
        // 20 TTFTs 0.1..2.0: p50 between the 10th and 11th, p95 near the top.
        assert!((value(&signals, Signal::ProbeTtftP50).unwrap() - 1.05).abs() < 1e-9);
        assert!((value(&signals, Signal::ProbeTtftP95).unwrap() - 1.905).abs() < 1e-9);
        assert!((value(&signals, Signal::ProbeItlP95).unwrap() - 0.03).abs() < 1e-12);
        assert_eq!(value(&signals, Signal::ProbeErrorRate), Some(0.0));
    }

    #[test]
    fn every_signal_probe_signals_returns_is_a_probe_signal() {
        let signals = probe_signals(&[ok(0.1, &[0.01, 0.02])]);
        assert_eq!(signals.len(), 9);
        assert!(signals.iter().all(|(s, _)| s.is_probe()));
        assert!(!Signal::KvCacheUsage.is_probe());
    }

    fn failed_with_ttft() -> ProbeTimings {
        ProbeTimings {
            ok: false,
            e2e_s: 9.0,
            ..ProbeTimings::default()
        }
    }

    #[test]
    fn failures_count_and_nothing_is_nan() {
        let failed = ProbeTimings {
            ok: false,
            e2e_s: 10.0,
            ..ProbeTimings::default()
        };
        let signals = probe_signals(&[failed.clone(), failed, ok(0.2, &[0.02])]);
        assert!((value(&signals, Signal::ProbeErrorRate).unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(value(&signals, Signal::ProbeE2eP95), Some(0.22));
        // Means only over the probe that succeeded (a failed one may have a
        // TTFT, but the server's histograms never count it as finished).
        let half = ProbeTimings {
            ttft_s: Some(5.0),
            ..failed_with_ttft()
        };
        let signals = probe_signals(&[half, ok(0.2, &[0.02])]);
        assert_eq!(value(&signals, Signal::ProbeTtftMean), Some(0.2));
        assert_eq!(value(&signals, Signal::ProbeE2eMean), Some(0.22));
        let all_failed = probe_signals(&[ProbeTimings::default()]);
        assert_eq!(all_failed, vec![(Signal::ProbeErrorRate, 1.0)]);
        assert!(probe_signals::<ProbeTimings>(&[]).is_empty());
    }
}
