//! Quality beside speed: graded exact-match sets and accuracy with its
//! interval. A faster setting that answers worse is no gain, so every
//! variant answers the same questions at temperature 0.

use serde::{Deserialize, Serialize};

use super::bootstrap::Interval;

/// The name of the built-in set.
pub const BUILTIN_ARITH_50: &str = "builtin:arith-50";

/// One graded question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GradedItem {
    pub prompt: String,
    pub answer: String,
}

/// A variant's accuracy on the set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    pub correct: u32,
    pub total: u32,
    /// Failed requests (counted as wrong).
    pub failed: u32,
    /// The fraction correct with its 95 % Wilson score interval.
    pub interval: Interval,
}

/// The built-in set by name (`builtin:arith-50`): 50 integer sums,
/// differences and products of two-digit numbers, fixed (no RNG), each
/// asking for the number only.
pub fn builtin_set(name: &str) -> Option<Vec<GradedItem>> {
    if name != BUILTIN_ARITH_50 {
        return None;
    }
    Some(
        (0..50i64)
            .map(|i| {
                let a = 12 + (i * 37) % 88;
                let b = 3 + (i * 53) % 97;
                let (op, value) = match i % 3 {
                    0 => ("+", a + b),
                    1 => ("-", a - b),
                    _ => ("*", a * b),
                };
                GradedItem {
                    prompt: format!("What is {a} {op} {b}? Answer with the number only."),
                    answer: value.to_string(),
                }
            })
            .collect(),
    )
}

/// Exact match after trimming: the reply's first word, without trailing
/// punctuation or thousands separators, equals the answer
/// (case-insensitively). A model that explains before answering is wrong
/// here by design: the set asks for the answer only.
pub fn grade(reply: &str, answer: &str) -> bool {
    let clean = |s: &str| -> String {
        s.trim()
            .trim_end_matches(['.', '!', ','])
            .replace(',', "")
            .to_lowercase()
    };
    let first = reply.split_whitespace().next().unwrap_or("");
    let expected = clean(answer);
    !expected.is_empty() && (clean(first) == expected || clean(reply) == expected)
}

/// Accuracy from counts, with the 95 % Wilson score interval (well-behaved
/// at 0 and 1, unlike the normal approximation).
pub fn accuracy(correct: u32, total: u32, failed: u32) -> Accuracy {
    let n = f64::from(total.max(1));
    let p = f64::from(correct.min(total)) / n;
    let z = 1.959_963_984_540_054_f64;
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * ((p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt()) / denom;
    Accuracy {
        correct,
        total,
        failed,
        interval: Interval {
            estimate: p,
            low: (centre - half).max(0.0),
            high: (centre + half).min(1.0),
        },
    }
}

/// Why a variant's accuracy is marked: it dropped from the baseline's by
/// more than `max_drop`.
pub fn quality_drop(baseline: &Accuracy, variant: &Accuracy, max_drop: f64) -> Option<String> {
    let drop = baseline.interval.estimate - variant.interval.estimate;
    (drop > max_drop).then(|| {
        format!(
            "accuracy {:.0} % vs the baseline's {:.0} % ({} of {} vs {} of {}): a drop of {:.0} points, more than the {:.0} allowed",
            variant.interval.estimate * 100.0,
            baseline.interval.estimate * 100.0,
            variant.correct,
            variant.total,
            baseline.correct,
            baseline.total,
            drop * 100.0,
            max_drop * 100.0
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_set_is_fixed_and_graded_exactly() {
        let set = builtin_set(BUILTIN_ARITH_50).expect("built in");
        assert_eq!(set.len(), 50);
        assert_eq!(set, builtin_set(BUILTIN_ARITH_50).expect("again"));
        assert_eq!(
            set[0].prompt,
            "What is 12 + 3? Answer with the number only."
        );
        assert_eq!(set[0].answer, "15");
        assert!(set.iter().any(|i| i.answer.starts_with('-')));
        assert!(builtin_set("builtin:other").is_none());
        assert!(grade(" 15.", "15"));
        assert!(grade("1,234", "1234"));
        assert!(!grade("The answer is 15", "15"));
        assert!(!grade("", "15"));
    }

    #[test]
    fn wilson_interval_and_the_drop_mark() {
        let full = accuracy(50, 50, 0);
        assert_eq!(full.interval.estimate, 1.0);
        assert!(full.interval.low > 0.9 && full.interval.high == 1.0);
        let worse = accuracy(30, 50, 0);
        assert!(worse.interval.separates(&full.interval));
        assert!(quality_drop(&full, &worse, 0.05)
            .expect("marked")
            .contains("60 %"));
        assert!(quality_drop(&full, &accuracy(49, 50, 0), 0.05).is_none());
    }
}
