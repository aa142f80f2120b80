//! Energy per output token from GPU power sampled during a step: the mean
//! power over the step's window times its duration, over the tokens it
//! produced. Power comes from a dcgm-exporter page
//! (`DCGM_FI_DEV_POWER_USAGE`, watts, summed over the GPUs of the page).

/// Joules per output token over `[start_ms, end_ms]`, from `(unix ms,
/// watts)` samples; `None` with fewer than two samples in the window or no
/// tokens. dcgm-exporter refreshes every 30 s by default, so a short step
/// may hold repeats of one reading: the mean is still the right weight.
pub fn joules_per_token(
    samples: &[(i64, f64)],
    start_ms: i64,
    end_ms: i64,
    output_tokens: u64,
) -> Option<f64> {
    let inside: Vec<f64> = samples
        .iter()
        .filter(|(t, w)| (start_ms..=end_ms).contains(t) && w.is_finite() && *w >= 0.0)
        .map(|(_, w)| *w)
        .collect();
    if inside.len() < 2 || output_tokens == 0 || end_ms <= start_ms {
        return None;
    }
    let mean_w = inside.iter().sum::<f64>() / inside.len() as f64;
    let seconds = (end_ms - start_ms) as f64 / 1000.0;
    Some(mean_w * seconds / output_tokens as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_power_times_duration_over_tokens() {
        let samples = [
            (0, 999.0),
            (1_000, 300.0),
            (1_500, 500.0),
            (2_000, 400.0),
            (9_000, 1.0),
        ];
        // 400 W mean over 1 s of the window [1000, 2000], 200 tokens.
        assert_eq!(joules_per_token(&samples, 1_000, 2_000, 200), Some(2.0));
        assert_eq!(joules_per_token(&samples, 1_000, 2_000, 0), None);
        assert_eq!(joules_per_token(&samples, 3_000, 4_000, 10), None);
    }
}
