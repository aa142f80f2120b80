//! Autoscaling signals (issue 38): how loaded a target is against the
//! capacity llmwatch measured, as gauges an autoscaler (KEDA, an HPA through
//! prometheus-adapter) can scale on.
//!
//! * **load ratio** = requests in flight (running + waiting) ÷ the highest
//!   concurrency that met the objectives: from the target's last finished
//!   sweep, else from its passive curve (production windows). 0 when idle,
//!   1 at the measured capacity, above 1 past it.
//! * **queue** = requests waiting in the engine now.
//! * **predicted TTFT** = the p95 TTFT the same reference measured at the
//!   current in-flight count (linear between measured concurrencies; past
//!   the highest one, the last segment's slope continued: a closed queue's
//!   wait grows about linearly with what is in it), and its ratio to the
//!   TTFT objective (1 = at the objective).
//!
//! Pure: the caller reads the reference and the gauges; nothing here does
//! I/O or reads a clock.

/// Where a target's capacity reference comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacitySource {
    /// The last finished sweep's steps and verdict.
    Sweep,
    /// The passive saturation curve of production windows.
    Passive,
}

impl CapacitySource {
    /// The `source` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacitySource::Sweep => "sweep",
            CapacitySource::Passive => "passive",
        }
    }
}

/// What llmwatch measured a target can carry.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityReference {
    pub source: CapacitySource,
    /// Highest concurrency that met the objectives (else the saturation
    /// point where no objective was set), requests in flight; > 0.
    pub max_sustainable: f64,
    /// Measured p95 TTFT (seconds) by concurrency; any order, any length.
    pub ttft_p95_by_concurrency: Vec<(f64, f64)>,
}

/// The autoscaling gauges of one target now; a field is `None` when what
/// it needs was not measured.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AutoscaleSignals {
    /// Running + waiting requests.
    pub in_flight: Option<f64>,
    /// Waiting requests.
    pub queue: Option<f64>,
    /// `in_flight / max_sustainable`.
    pub load_ratio: Option<f64>,
    /// The reference's p95 TTFT at `in_flight`, seconds.
    pub predicted_ttft_p95: Option<f64>,
    /// `predicted_ttft_p95 / objective`.
    pub ttft_objective_ratio: Option<f64>,
}

/// One exported gauge: its name, help text, whether it carries the
/// reference's `source` label, and its value.
pub type NamedGauge = (&'static str, &'static str, bool, Option<f64>);

impl AutoscaleSignals {
    /// The gauges under the names `/metrics` and remote write both use.
    pub fn named(&self) -> [NamedGauge; 5] {
        [
            (
                "llmwatch_autoscale_load_ratio",
                "Requests in flight over the highest concurrency that met the objectives (last sweep, else the passive curve): 1 at measured capacity.",
                true,
                self.load_ratio,
            ),
            (
                "llmwatch_autoscale_queue_requests",
                "Requests waiting in the engine.",
                false,
                self.queue,
            ),
            (
                "llmwatch_autoscale_in_flight_requests",
                "Requests running plus waiting in the engine.",
                false,
                self.in_flight,
            ),
            (
                "llmwatch_autoscale_predicted_ttft_seconds",
                "p95 TTFT the capacity reference measured at the current in-flight count.",
                true,
                self.predicted_ttft_p95,
            ),
            (
                "llmwatch_autoscale_ttft_objective_ratio",
                "Predicted p95 TTFT over the target's TTFT objective: 1 at the objective.",
                true,
                self.ttft_objective_ratio,
            ),
        ]
    }
}

/// The gauges of one target from its engine's running and waiting counts,
/// its capacity reference and its TTFT objective (seconds).
pub fn autoscale_signals(
    reference: Option<&CapacityReference>,
    running: Option<f64>,
    waiting: Option<f64>,
    ttft_objective: Option<f64>,
) -> AutoscaleSignals {
    let finite = |v: Option<f64>| v.filter(|v| v.is_finite() && *v >= 0.0);
    let (running, waiting) = (finite(running), finite(waiting));
    let in_flight = match (running, waiting) {
        (None, None) => None,
        (r, w) => Some(r.unwrap_or(0.0) + w.unwrap_or(0.0)),
    };
    let reference = reference.filter(|r| r.max_sustainable.is_finite() && r.max_sustainable > 0.0);
    let load_ratio = in_flight.zip(reference).map(|(n, r)| n / r.max_sustainable);
    let predicted = in_flight
        .zip(reference)
        .and_then(|(n, r)| predict_ttft_p95(&r.ttft_p95_by_concurrency, n));
    let ttft_objective_ratio = predicted
        .zip(ttft_objective.filter(|o| o.is_finite() && *o > 0.0))
        .map(|(p, o)| p / o);
    AutoscaleSignals {
        in_flight,
        queue: waiting,
        load_ratio,
        predicted_ttft_p95: predicted,
        ttft_objective_ratio,
    }
}

/// The p95 TTFT the curve gives at `concurrency`: the lowest point's below
/// it, linear between points, the last segment continued above the highest
/// (never below the highest measured value). `None` without a point.
pub fn predict_ttft_p95(curve: &[(f64, f64)], concurrency: f64) -> Option<f64> {
    let mut points: Vec<(f64, f64)> = curve
        .iter()
        .copied()
        .filter(|(c, t)| c.is_finite() && t.is_finite() && *c >= 0.0 && *t >= 0.0)
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points.dedup_by(|b, a| a.0 == b.0);
    let first = *points.first()?;
    if !concurrency.is_finite() || concurrency <= first.0 {
        return Some(first.1);
    }
    let at = |(c0, t0): (f64, f64), (c1, t1): (f64, f64)| {
        t0 + (t1 - t0) * (concurrency - c0) / (c1 - c0)
    };
    if let Some(w) = points
        .windows(2)
        .find(|w| concurrency >= w[0].0 && concurrency <= w[1].0)
    {
        return Some(at(w[0], w[1]));
    }
    let last = *points.last()?;
    match points.len() {
        1 => Some(last.1),
        n => Some(at(points[n - 2], last).max(last.1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> CapacityReference {
        CapacityReference {
            source: CapacitySource::Sweep,
            max_sustainable: 16.0,
            ttft_p95_by_concurrency: vec![(4.0, 0.2), (1.0, 0.1), (16.0, 0.8), (8.0, 0.3)],
        }
    }

    #[test]
    fn load_is_in_flight_over_the_measured_capacity() {
        let s = autoscale_signals(Some(&reference()), Some(12.0), Some(12.0), Some(1.0));
        assert_eq!(s.in_flight, Some(24.0));
        assert_eq!(s.queue, Some(12.0));
        assert_eq!(s.load_ratio, Some(1.5));
        // Past 16: the 8 → 16 slope (0.5 s per 8) continued to 24.
        assert_eq!(s.predicted_ttft_p95, Some(1.3));
        assert_eq!(s.ttft_objective_ratio, Some(1.3));
        let idle = autoscale_signals(Some(&reference()), Some(0.0), Some(0.0), Some(1.0));
        assert_eq!(idle.load_ratio, Some(0.0));
        assert_eq!(idle.predicted_ttft_p95, Some(0.1));
    }

    #[test]
    fn prediction_interpolates_between_measured_levels() {
        let curve = &reference().ttft_p95_by_concurrency;
        assert_eq!(predict_ttft_p95(curve, 6.0), Some(0.25));
        assert_eq!(predict_ttft_p95(curve, 0.5), Some(0.1));
        assert_eq!(predict_ttft_p95(&[(2.0, 0.4)], 9.0), Some(0.4));
        assert_eq!(predict_ttft_p95(&[], 1.0), None);
        // A falling last segment never predicts below what was measured.
        assert_eq!(predict_ttft_p95(&[(1.0, 0.5), (2.0, 0.4)], 9.0), Some(0.4));
    }

    #[test]
    fn nothing_is_made_up_without_its_inputs() {
        let none = autoscale_signals(None, Some(3.0), None, Some(1.0));
        assert_eq!(none.in_flight, Some(3.0));
        assert_eq!(none.load_ratio, None);
        assert_eq!(none.predicted_ttft_p95, None);
        let no_objective = autoscale_signals(Some(&reference()), Some(4.0), Some(0.0), None);
        assert_eq!(no_objective.predicted_ttft_p95, Some(0.2));
        assert_eq!(no_objective.ttft_objective_ratio, None);
        let unmeasured = autoscale_signals(Some(&reference()), None, Some(f64::NAN), Some(1.0));
        assert_eq!(unmeasured, AutoscaleSignals::default());
    }
}
