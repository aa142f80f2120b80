//! The passive saturation curve: the sweep's throughput/latency-vs-load
//! curve read from production traffic over days, without a load test.
//!
//! The stored signals are cut into windows (e.g. a minute each): a window's
//! concurrency is the mean of the server's running + waiting requests seen
//! inside it, its throughput the generation-token rate over it, its p95
//! TTFT and ITL the server histograms' deltas over it. Windows are grouped
//! by concurrency — one bin per integer level up to
//! [`LINEAR_BINS_UP_TO`], [`BINS_PER_DOUBLING`] geometric bins per doubling
//! above — so "within one doubling" of a knee is a statement the curve can
//! resolve. Each bin with enough windows becomes a pseudo-step, and the
//! sweep's own [`saturation_point`] and [`max_sustainable`] read them: the
//! passive knee means what a sweep's knee means, with the same thresholds
//! ([`AnalysisConfig`]).
//!
//! Differences from a sweep, by necessity: production concurrency is not
//! chosen, so a bin's level is the mean concurrency its windows saw; and
//! latency quantiles per bin are the median of its windows' p95s (robust to
//! the odd window with one slow outlier request).

use super::live::LiveSample;
use super::saturation::{check_objectives, max_sustainable, saturation_point};
use super::{fmt, AnalysisConfig, Load, Objectives, Quantiles, Saturation, StepResult};
use crate::signals::Signal;

/// Default range of the passive curve, seconds (7 days).
pub const DEFAULT_PASSIVE_RANGE_S: u64 = 7 * 24 * 3600;
/// Default window length, seconds: long enough that a window's histogram
/// deltas hold a p95 at modest traffic, short enough that load is steady
/// within it.
pub const DEFAULT_PASSIVE_WINDOW_S: u64 = 60;
/// The most windows one curve reads: a longer range gets longer windows,
/// so the work is bounded whatever the range (7 days of 1-minute windows).
pub const MAX_PASSIVE_WINDOWS: i64 = 7 * 24 * 60;
/// Concurrency gauge readings per window, averaged into its concurrency (an
/// instant reading at the window's end alone would miss a burst inside it).
pub const GAUGE_SAMPLES_PER_WINDOW: i64 = 4;
/// Up to this concurrency every integer level is its own bin.
pub const LINEAR_BINS_UP_TO: u32 = 8;
/// Above [`LINEAR_BINS_UP_TO`], geometric bins: this many per doubling.
pub const BINS_PER_DOUBLING: f64 = 4.0;
/// A bin needs this many windows to be a point of the curve that a verdict
/// may use; thinner bins are listed, marked unsupported.
pub const MIN_WINDOWS_PER_POINT: usize = 3;
/// A knee needs this many supported points: two give a slope, not a bend.
pub const MIN_POINTS_FOR_KNEE: usize = 3;
/// A knee needs this many windows in supported points altogether.
pub const MIN_WINDOWS_FOR_KNEE: usize = 12;

/// One window of production traffic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassiveWindow {
    /// Unix milliseconds of the window's end.
    pub end_ms: i64,
    /// Mean requests the server held (running + waiting) over the window.
    pub concurrency: f64,
    /// Generation tokens per second over the window.
    pub generation_tps: Option<f64>,
    /// Requests finished per second over the window.
    pub request_rate: Option<f64>,
    /// Server p95 TTFT over the window's histogram deltas, seconds.
    pub ttft_p95: Option<f64>,
    /// Server p95 ITL over the window's histogram deltas, seconds.
    pub itl_p95: Option<f64>,
}

/// The signals a window is read from, at the window step.
pub const PASSIVE_WINDOW_SIGNALS: [Signal; 6] = [
    Signal::RequestsRunning,
    Signal::RequestsWaiting,
    Signal::GenerationTokensRate,
    Signal::RequestRate,
    Signal::ServerTtftP95,
    Signal::ServerItlP95,
];

/// The gauges read [`GAUGE_SAMPLES_PER_WINDOW`] times per window.
pub const PASSIVE_GAUGE_SIGNALS: [Signal; 2] = [Signal::RequestsRunning, Signal::RequestsWaiting];

/// Windows from the signals read at the window step (`window_samples`, each
/// stamped at its window's end) and the concurrency gauges read more often
/// (`gauge_samples`): a window's concurrency is the mean of the gauge
/// readings inside `(end − window_ms, end]`, or its own end reading when
/// none fell inside. Samples without a running count are left out. Pure.
pub fn assemble_windows(
    window_samples: &[LiveSample],
    gauge_samples: &[LiveSample],
    window_ms: i64,
) -> Vec<PassiveWindow> {
    let mut gauges: Vec<(i64, f64)> = gauge_samples
        .iter()
        .filter_map(|s| Some((s.ts_ms, s.concurrency()?)))
        .collect();
    gauges.sort_by_key(|(ts, _)| *ts);
    window_samples
        .iter()
        .filter_map(|w| {
            let start = w.ts_ms.saturating_sub(window_ms.max(1));
            let lo = gauges.partition_point(|(ts, _)| *ts <= start);
            let hi = gauges.partition_point(|(ts, _)| *ts <= w.ts_ms);
            let inside = &gauges[lo..hi.max(lo)];
            let concurrency = if inside.is_empty() {
                w.concurrency()?
            } else {
                inside.iter().map(|(_, c)| c).sum::<f64>() / inside.len() as f64
            };
            Some(PassiveWindow {
                end_ms: w.ts_ms,
                concurrency,
                generation_tps: w.get(Signal::GenerationTokensRate),
                request_rate: w.get(Signal::RequestRate),
                ttft_p95: w.get(Signal::ServerTtftP95),
                itl_p95: w.get(Signal::ServerItlP95),
            })
        })
        .collect()
}

/// One point of the passive curve: the windows of one concurrency bin.
#[derive(Debug, Clone, PartialEq)]
pub struct PassivePoint {
    /// Mean concurrency of the bin's windows.
    pub concurrency: f64,
    /// The bin's bounds: windows with `low ≤ concurrency < high`.
    pub low: f64,
    pub high: f64,
    /// Windows in the bin: the support of this point.
    pub windows: usize,
    /// At least [`MIN_WINDOWS_PER_POINT`] windows: used by the knee and
    /// the max sustainable concurrency.
    pub supported: bool,
    /// Mean generation tokens/s of the bin's windows.
    pub generation_tps: Option<f64>,
    /// Mean requests/s.
    pub request_rate: Option<f64>,
    /// Median of the windows' server p95 TTFT, seconds.
    pub ttft_p95: Option<f64>,
    /// Median of the windows' server p95 ITL, seconds.
    pub itl_p95: Option<f64>,
    /// Whether the point meets the objectives; `None` without objectives
    /// on TTFT or ITL, or for an unsupported point.
    pub meets_objectives: Option<bool>,
}

/// Why the curve names no knee.
#[derive(Debug, Clone, PartialEq)]
pub enum NoKnee {
    /// Too few windows in supported points to call a bend.
    TooFewWindows { have: usize, need: usize },
    /// Too few supported concurrency levels.
    TooFewPoints { have: usize, need: usize },
    /// Enough data, but throughput still grows at the highest level seen,
    /// or latency did not rise where it flattened.
    NotReached { highest: f64 },
}

impl NoKnee {
    /// In words.
    pub fn describe(&self) -> String {
        match self {
            NoKnee::TooFewWindows { have, need } => format!(
                "too little data for a knee: {have} windows in supported points, at least {need} needed"
            ),
            NoKnee::TooFewPoints { have, need } => format!(
                "too little data for a knee: traffic visited {have} concurrency level(s) with at least {MIN_WINDOWS_PER_POINT} windows each, at least {need} needed"
            ),
            NoKnee::NotReached { highest } => format!(
                "no knee up to concurrency {}: throughput still grows, or latency does not rise where it flattens",
                fmt::num(*highest)
            ),
        }
    }

    /// The stable machine name, for the API.
    pub fn code(&self) -> &'static str {
        match self {
            NoKnee::TooFewWindows { .. } => "too_few_windows",
            NoKnee::TooFewPoints { .. } => "too_few_points",
            NoKnee::NotReached { .. } => "not_reached",
        }
    }
}

/// Where throughput per added request stops growing while latency rises.
#[derive(Debug, Clone, PartialEq)]
pub struct PassiveKnee {
    /// Index into [`PassiveCurve::points`].
    pub point: usize,
    /// The point's mean concurrency.
    pub concurrency: f64,
    /// The sweep analysis' reading of it (its loads are the points'
    /// concurrencies rounded).
    pub saturation: Saturation,
}

/// The highest concurrency whose point, and every supported point below
/// it, met the objectives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassiveSustainable {
    /// Index into [`PassiveCurve::points`].
    pub point: usize,
    pub concurrency: f64,
}

/// The passive curve of one target over one range.
#[derive(Debug, Clone, PartialEq)]
pub struct PassiveCurve {
    /// Windows read, idle ones included.
    pub windows: usize,
    /// Windows with nothing in flight (below half a request on average).
    pub idle_windows: usize,
    /// Lowest concurrency first; every bin with at least one window.
    pub points: Vec<PassivePoint>,
    pub knee: Result<PassiveKnee, NoKnee>,
    /// `None` when no objective is set or the lowest supported point
    /// already misses.
    pub sustainable: Option<PassiveSustainable>,
}

/// The bin a concurrency falls in: its bounds `[low, high)`; `None` when
/// nothing was in flight.
pub fn bin_of(concurrency: f64) -> Option<(f64, f64)> {
    if !concurrency.is_finite() || concurrency < 0.5 {
        return None;
    }
    let linear_top = f64::from(LINEAR_BINS_UP_TO) + 0.5;
    if concurrency < linear_top {
        let level = concurrency.round();
        return Some((level - 0.5, level + 0.5));
    }
    // Bin k above the linear part: [top·2^(k/n), top·2^((k+1)/n)).
    let k = ((concurrency / linear_top).log2() * BINS_PER_DOUBLING)
        .floor()
        .clamp(0.0, 4096.0);
    let edge = |k: f64| linear_top * (k / BINS_PER_DOUBLING).exp2();
    Some((edge(k), edge(k + 1.0)))
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .filter(|v| v.is_finite())
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.filter(|v| v.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// A point as a sweep step, for the sweep's analysis.
fn pseudo_step(p: &PassivePoint) -> StepResult {
    let level = p.concurrency.round().clamp(1.0, f64::from(u32::MAX)) as u32;
    let mut step = StepResult::at(Load::Concurrency(level));
    step.requests_ok = p.windows as u64;
    step.output_token_throughput = p.generation_tps.unwrap_or(0.0).max(0.0);
    step.request_throughput = p.request_rate.unwrap_or(0.0).max(0.0);
    step.ttft = Quantiles {
        p50: None,
        p95: p.ttft_p95,
        p99: None,
    };
    step.itl = Quantiles {
        p50: None,
        p95: p.itl_p95,
        p99: None,
    };
    step
}

/// The passive curve of `windows` (any order). `objectives`' TTFT and ITL
/// are judged (production windows have no end-to-end latency or error
/// count, so those are not). Pure.
pub fn passive_curve(
    windows: &[PassiveWindow],
    objectives: &Objectives,
    config: &AnalysisConfig,
) -> PassiveCurve {
    let mut bins: std::collections::BTreeMap<u64, ((f64, f64), Vec<&PassiveWindow>)> =
        Default::default();
    let mut idle = 0usize;
    for w in windows {
        match bin_of(w.concurrency) {
            // Bounds are positive and finite: their bits order as they do.
            Some(bounds) => bins
                .entry(bounds.0.to_bits())
                .or_insert_with(|| (bounds, Vec::new()))
                .1
                .push(w),
            None => idle += 1,
        }
    }
    let objectives = Objectives {
        e2e_p95: None,
        ..*objectives
    };
    let judged = objectives.ttft_p95.is_some_and(f64::is_finite)
        || objectives.itl_p95.is_some_and(f64::is_finite);
    let mut points: Vec<PassivePoint> = bins
        .into_values()
        .map(|((low, high), members)| {
            let mut p = PassivePoint {
                concurrency: mean(members.iter().map(|w| w.concurrency)).unwrap_or(low),
                low,
                high,
                windows: members.len(),
                supported: members.len() >= MIN_WINDOWS_PER_POINT,
                generation_tps: mean(members.iter().filter_map(|w| w.generation_tps)),
                request_rate: mean(members.iter().filter_map(|w| w.request_rate)),
                ttft_p95: median(members.iter().filter_map(|w| w.ttft_p95)),
                itl_p95: median(members.iter().filter_map(|w| w.itl_p95)),
                meets_objectives: None,
            };
            if judged && p.supported {
                p.meets_objectives =
                    Some(check_objectives(&pseudo_step(&p), &objectives).is_empty());
            }
            p
        })
        .collect();
    points.sort_by(|a, b| a.concurrency.total_cmp(&b.concurrency));
    let supported: Vec<usize> = (0..points.len()).filter(|i| points[*i].supported).collect();
    let steps: Vec<StepResult> = supported.iter().map(|i| pseudo_step(&points[*i])).collect();
    let support: usize = supported.iter().map(|i| points[*i].windows).sum();
    let knee = if support < MIN_WINDOWS_FOR_KNEE {
        Err(NoKnee::TooFewWindows {
            have: support,
            need: MIN_WINDOWS_FOR_KNEE,
        })
    } else if supported.len() < MIN_POINTS_FOR_KNEE {
        Err(NoKnee::TooFewPoints {
            have: supported.len(),
            need: MIN_POINTS_FOR_KNEE,
        })
    } else {
        match saturation_point(&steps, config) {
            Some(saturation) => {
                let point = supported[saturation.step];
                Ok(PassiveKnee {
                    point,
                    concurrency: points[point].concurrency,
                    saturation,
                })
            }
            None => Err(NoKnee::NotReached {
                highest: supported
                    .last()
                    .map(|i| points[*i].concurrency)
                    .unwrap_or(0.0),
            }),
        }
    };
    let sustainable = if judged {
        max_sustainable(&steps, &objectives).map(|s| {
            let point = supported[s.step];
            PassiveSustainable {
                point,
                concurrency: points[point].concurrency,
            }
        })
    } else {
        None
    };
    PassiveCurve {
        windows: windows.len(),
        idle_windows: idle,
        points,
        knee,
        sustainable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that saturates at `knee` requests: throughput grows with
    /// concurrency up to it and stays flat beyond, while TTFT grows with
    /// the queue.
    fn window(end_ms: i64, concurrency: f64, knee: f64) -> PassiveWindow {
        let running = concurrency.min(knee);
        let waiting = (concurrency - knee).max(0.0);
        PassiveWindow {
            end_ms,
            concurrency,
            generation_tps: Some(100.0 * running),
            request_rate: Some(running),
            ttft_p95: Some(0.05 * (1.0 + waiting)),
            itl_p95: Some(0.010 + 0.0005 * running),
        }
    }

    fn ramp(levels: &[f64], per_level: usize, knee: f64) -> Vec<PassiveWindow> {
        let mut out = Vec::new();
        for (i, level) in levels.iter().enumerate() {
            for j in 0..per_level {
                // ±3 % jitter, so levels are means, not exact integers.
                let jitter = 1.0 + 0.03 * ((j % 3) as f64 - 1.0);
                out.push(window(
                    ((i * per_level + j) as i64) * 60_000,
                    level * jitter,
                    knee,
                ));
            }
        }
        out
    }

    #[test]
    fn bins_are_integers_low_and_geometric_high() {
        assert_eq!(bin_of(0.2), None);
        assert_eq!(bin_of(f64::NAN), None);
        assert_eq!(bin_of(1.3), Some((0.5, 1.5)));
        assert_eq!(bin_of(7.6), Some((7.5, 8.5)));
        let (lo, hi) = bin_of(16.0).unwrap();
        assert!(lo <= 16.0 && 16.0 < hi, "{lo}..{hi}");
        assert!((hi / lo - 2f64.powf(0.25)).abs() < 1e-9);
        // Far past any real server: still a bin, no panic.
        assert!(bin_of(1e300).is_some());
    }

    #[test]
    fn the_knee_is_where_throughput_flattens_and_latency_rises() {
        let windows = ramp(&[1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 11.0, 16.0], 5, 4.0);
        let curve = passive_curve(&windows, &Objectives::default(), &AnalysisConfig::default());
        let knee = curve.knee.expect("a knee");
        assert!(
            (knee.concurrency - 4.0).abs() < 0.5,
            "knee at {}",
            knee.concurrency
        );
        assert_eq!(curve.points.len(), 8);
        assert!(curve.points.iter().all(|p| p.windows == 5 && p.supported));
        assert_eq!(curve.idle_windows, 0);
        // No objectives: nothing is judged.
        assert_eq!(curve.sustainable, None);
        assert!(curve.points.iter().all(|p| p.meets_objectives.is_none()));
    }

    #[test]
    fn objectives_give_the_highest_concurrency_that_met_them() {
        let windows = ramp(&[1.0, 2.0, 4.0, 6.0, 8.0], 4, 4.0);
        // TTFT 0.05 s up to the knee, 0.15 s at 6, 0.25 s at 8.
        let objectives = Objectives {
            ttft_p95: Some(0.1),
            ..Objectives::default()
        };
        let curve = passive_curve(&windows, &objectives, &AnalysisConfig::default());
        let s = curve.sustainable.expect("levels met the objective");
        assert!((s.concurrency - 4.0).abs() < 0.5, "{}", s.concurrency);
        let met: Vec<Option<bool>> = curve.points.iter().map(|p| p.meets_objectives).collect();
        assert_eq!(
            met,
            vec![Some(true), Some(true), Some(true), Some(false), Some(false)]
        );
    }

    #[test]
    fn too_little_data_draws_no_knee() {
        // Two windows per level: every point is unsupported.
        let thin = ramp(&[1.0, 2.0, 4.0, 8.0, 16.0], 2, 4.0);
        let curve = passive_curve(&thin, &Objectives::default(), &AnalysisConfig::default());
        assert_eq!(
            curve.knee,
            Err(NoKnee::TooFewWindows {
                have: 0,
                need: MIN_WINDOWS_FOR_KNEE
            })
        );
        assert!(curve.points.iter().all(|p| !p.supported && p.windows == 2));
        // Plenty of windows at two levels: a slope, not a bend.
        let two = ramp(&[4.0, 8.0], 10, 4.0);
        let curve = passive_curve(&two, &Objectives::default(), &AnalysisConfig::default());
        assert_eq!(
            curve.knee,
            Err(NoKnee::TooFewPoints {
                have: 2,
                need: MIN_POINTS_FOR_KNEE
            })
        );
        assert!(curve.knee.unwrap_err().describe().contains("2 concurrency"));
    }

    #[test]
    fn a_curve_still_rising_has_no_knee() {
        let windows = ramp(&[1.0, 2.0, 4.0, 8.0], 5, 100.0);
        let curve = passive_curve(&windows, &Objectives::default(), &AnalysisConfig::default());
        match curve.knee {
            Err(NoKnee::NotReached { highest }) => assert!((highest - 8.0).abs() < 0.5),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn idle_and_non_finite_windows_do_not_panic_or_count() {
        let mut windows = ramp(&[1.0, 2.0, 4.0, 8.0], 4, 4.0);
        windows.push(window(1, 0.0, 4.0));
        windows.push(PassiveWindow {
            end_ms: 2,
            concurrency: f64::INFINITY,
            generation_tps: Some(f64::NAN),
            request_rate: None,
            ttft_p95: None,
            itl_p95: None,
        });
        let curve = passive_curve(&windows, &Objectives::default(), &AnalysisConfig::default());
        assert_eq!(curve.windows, 18);
        assert_eq!(curve.idle_windows, 2);
        assert_eq!(curve.points.iter().map(|p| p.windows).sum::<usize>(), 16);
        assert!(
            passive_curve(&[], &Objectives::default(), &AnalysisConfig::default())
                .knee
                .is_err()
        );
    }

    fn sample(ts_ms: i64, signals: &[(Signal, f64)]) -> LiveSample {
        LiveSample {
            ts_ms,
            signals: signals.to_vec(),
        }
    }

    #[test]
    fn a_windows_concurrency_is_the_mean_of_the_gauges_inside_it() {
        let windows = [
            sample(
                60_000,
                &[
                    (Signal::RequestsRunning, 9.0),
                    (Signal::GenerationTokensRate, 500.0),
                    (Signal::ServerTtftP95, 0.2),
                ],
            ),
            // No gauge reading inside: its own end reading.
            sample(120_000, &[(Signal::RequestsRunning, 3.0)]),
            // No running count at all: left out.
            sample(180_000, &[(Signal::GenerationTokensRate, 1.0)]),
        ];
        let gauges = [
            // At the window's start: belongs to the window before.
            sample(0, &[(Signal::RequestsRunning, 100.0)]),
            sample(15_000, &[(Signal::RequestsRunning, 2.0)]),
            sample(
                30_000,
                &[
                    (Signal::RequestsRunning, 2.0),
                    (Signal::RequestsWaiting, 2.0),
                ],
            ),
            sample(60_000, &[(Signal::RequestsRunning, 6.0)]),
        ];
        let out = assemble_windows(&windows, &gauges, 60_000);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].concurrency, 4.0);
        assert_eq!(out[0].generation_tps, Some(500.0));
        assert_eq!(out[0].ttft_p95, Some(0.2));
        assert_eq!(out[0].itl_p95, None);
        assert_eq!(out[1].concurrency, 3.0);
    }
}
