//! The engine's counters, gauges and histograms, in the units vLLM reports,
//! and the float formatting of Python's prometheus_client.

use std::collections::HashMap;

/// Finish reasons in the order vLLM 0.32 lists them on `request_success_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinishReason {
    Stop,
    Length,
    Abort,
    Error,
}

impl FinishReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::Error => "error",
        }
    }
}

/// A cumulative histogram with fixed upper bounds (the `+Inf` bucket is
/// implicit).
#[derive(Debug, Clone)]
pub(crate) struct Histogram {
    pub(crate) bounds: Vec<f64>,
    /// Non-cumulative counts per bound, plus one for `+Inf`.
    counts: Vec<u64>,
    pub(crate) sum: f64,
    pub(crate) count: u64,
}

impl Histogram {
    pub(crate) fn new(bounds: Vec<f64>) -> Histogram {
        let n = bounds.len();
        Histogram {
            bounds,
            counts: vec![0; n + 1],
            sum: 0.0,
            count: 0,
        }
    }

    pub(crate) fn observe(&mut self, v: f64) {
        let i = self.bounds.partition_point(|&b| b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// Cumulative count of observations `<= le`.
    pub(crate) fn cumulative(&self, le: f64) -> u64 {
        if le.is_infinite() {
            return self.count;
        }
        let i = self.bounds.partition_point(|&b| b <= le);
        self.counts[..i].iter().sum()
    }
}

/// Everything `/metrics` reports, updated by the engine task.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) running: usize,
    pub(crate) waiting: usize,
    pub(crate) kv_usage: f64,
    pub(crate) kv_blocks_used: usize,
    pub(crate) prefix_queries: u64,
    pub(crate) prefix_hits: u64,
    pub(crate) preemptions: u64,
    pub(crate) prompt_tokens: u64,
    pub(crate) prompt_tokens_computed: u64,
    pub(crate) prompt_tokens_cached: u64,
    pub(crate) generation_tokens: u64,
    pub(crate) finished_stop: u64,
    pub(crate) finished_length: u64,
    pub(crate) finished_abort: u64,
    pub(crate) finished_error: u64,
    /// Seconds from scheduling to first token, summed over requests
    /// (llama-server's `prompt_seconds_total`).
    pub(crate) prompt_seconds: f64,
    /// Seconds from first to last token, summed over finished requests
    /// (llama-server's `tokens_predicted_seconds_total`).
    pub(crate) decode_seconds: f64,
    /// Engine steps (llama-server's `n_decode_total`).
    pub(crate) decode_calls: u64,
    /// Running sequences summed over engine steps: divided by
    /// `decode_calls`, llama-server's `n_busy_slots_per_decode`.
    pub(crate) busy_slot_decodes: u64,
    /// Longest sequence seen, prompt + output (llama-server's `n_tokens_max`).
    pub(crate) max_sequence_tokens: usize,
    /// Histograms by logical name (vLLM family name without `vllm:`).
    pub(crate) histograms: HashMap<String, Histogram>,
}

impl Stats {
    pub(crate) fn new(bounds: HashMap<String, Vec<f64>>) -> Stats {
        Stats {
            histograms: bounds
                .into_iter()
                .map(|(k, b)| (k, Histogram::new(b)))
                .collect(),
            ..Stats::default()
        }
    }

    /// Records `v` in the histogram `name` if this flavor exposes one.
    pub(crate) fn observe(&mut self, name: &str, v: f64) {
        if let Some(h) = self.histograms.get_mut(name) {
            h.observe(v);
        }
    }

    pub(crate) fn finished(&mut self, reason: FinishReason) {
        match reason {
            FinishReason::Stop => self.finished_stop += 1,
            FinishReason::Length => self.finished_length += 1,
            FinishReason::Abort => self.finished_abort += 1,
            FinishReason::Error => self.finished_error += 1,
        }
    }
}

/// Formats a float exactly like prometheus_client's `floatToGoString`:
/// Python's `repr`, except that positive numbers with more than six digits
/// before the point switch to Go-style exponents (`1.7962045395368457e+09`).
pub(crate) fn py_float(d: f64) -> String {
    if d.is_nan() {
        return "NaN".to_string();
    }
    if d == f64::INFINITY {
        return "+Inf".to_string();
    }
    if d == f64::NEG_INFINITY {
        return "-Inf".to_string();
    }
    let s = py_repr(d);
    if d > 0.0 {
        if let Some(dot) = s.find('.') {
            if dot > 6 {
                let digits: String = format!("{}{}", &s[1..dot], &s[dot + 1..]);
                let mantissa = format!("{}.{}", &s[..1], digits);
                let mantissa = mantissa.trim_end_matches(['0', '.']);
                return format!("{mantissa}e+0{}", dot - 1);
            }
        }
    }
    s
}

/// Python's `repr(float)`: shortest round-trip digits; fixed notation for
/// decimal exponents in `-4..16`, else `d.ddde+XX`.
fn py_repr(d: f64) -> String {
    if d == 0.0 {
        return if d.is_sign_negative() { "-0.0" } else { "0.0" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let e = format!("{d:e}");
    let (mant, exp) = e.split_once('e').unwrap_or((e.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let sign = if neg { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        if exp >= 0 {
            let int_len = exp + 1;
            if n <= int_len {
                let zeros = "0".repeat((int_len - n) as usize);
                format!("{sign}{digits}{zeros}.0")
            } else {
                let (a, b) = digits.split_at(int_len as usize);
                format!("{sign}{a}.{b}")
            }
        } else {
            let zeros = "0".repeat((-exp - 1) as usize);
            format!("{sign}0.{zeros}{digits}")
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let m = if rest.is_empty() {
            first.to_string()
        } else {
            format!("{first}.{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{esign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_prometheus_client() {
        assert_eq!(py_float(0.0), "0.0");
        assert_eq!(py_float(1.0), "1.0");
        assert_eq!(py_float(0.92), "0.92");
        assert_eq!(py_float(20000.0), "20000.0");
        assert_eq!(py_float(1_796_204_539.536_845_7), "1.7962045395368457e+09");
        assert_eq!(py_float(1_020_960_768.0), "1.020960768e+09");
        assert_eq!(py_float(4_784_173_056.0), "4.784173056e+09");
        assert_eq!(py_float(115_891_634_176.0), "1.15891634176e+011");
        assert_eq!(py_float(1_048_576.0), "1.048576e+06");
        assert_eq!(py_float(0.000_1), "0.0001");
        assert_eq!(py_float(0.000_01), "1e-05");
        assert_eq!(py_float(12.17), "12.17");
        assert_eq!(py_float(f64::INFINITY), "+Inf");
        assert_eq!(py_float(1e16), "1e+16");
    }

    #[test]
    fn histogram_is_cumulative_and_le_inclusive() {
        let mut h = Histogram::new(vec![0.1, 0.5, 1.0]);
        for v in [0.05, 0.1, 0.3, 2.0] {
            h.observe(v);
        }
        assert_eq!(h.cumulative(0.1), 2);
        assert_eq!(h.cumulative(0.5), 3);
        assert_eq!(h.cumulative(1.0), 3);
        assert_eq!(h.cumulative(f64::INFINITY), 4);
        assert_eq!(h.count, 4);
    }
}
