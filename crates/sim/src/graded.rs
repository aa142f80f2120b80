//! What the simulator adds for experiments: answers to graded arithmetic
//! prompts (llmwatch's `builtin:arith-50`, "What is A op B? Answer with the
//! number only.") with a configurable error rate, so a variant whose
//! accuracy drops is testable; and vLLM's `POST /reset_prefix_cache`.
//!
//! The answer replaces the generated text of a non-streamed reply only:
//! the engine still times the request as any other. Which questions are
//! answered wrong is a fixed function of the prompt and the seed, as a
//! model at temperature 0 is deterministic.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;

use crate::tokenizer::fnv1a;
use crate::SimInner;

/// The answer to a graded arithmetic prompt, wrong (off by one) for about
/// `error_rate` of the prompts; `None` for any other prompt.
pub(crate) fn graded_answer(prompt: &str, error_rate: f64, seed: u64) -> Option<String> {
    let start = prompt.rfind("What is ")? + "What is ".len();
    let rest = &prompt[start..];
    let question = &rest[..rest.find('?')?];
    let mut words = question.split_whitespace();
    let a: i64 = words.next()?.parse().ok()?;
    let op = words.next()?;
    let b: i64 = words.next()?.parse().ok()?;
    let right = match op {
        "+" => a.checked_add(b)?,
        "-" => a.checked_sub(b)?,
        "*" | "×" => a.checked_mul(b)?,
        _ => return None,
    };
    let draw = (fnv1a(question.as_bytes(), seed) % 10_000) as f64 / 10_000.0;
    let value = if draw < error_rate { right + 1 } else { right };
    Some(value.to_string())
}

impl SimInner {
    /// The answer to `prompt` if it is a graded one.
    pub(crate) fn graded(&self, prompt: &str) -> Option<String> {
        graded_answer(prompt, self.config.quality_error_rate, self.config.seed)
    }
}

/// `POST /reset_prefix_cache`: empties the prefix cache before the next
/// request is scheduled (vLLM serves it with `VLLM_SERVER_DEV_MODE=1`).
pub(crate) async fn reset_prefix_cache(State(inner): State<Arc<SimInner>>) -> StatusCode {
    inner
        .shared
        .reset_prefix_cache
        .store(true, Ordering::Relaxed);
    StatusCode::OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_graded_prompts_with_the_error_rate() {
        let q = |a: i64, b: i64| format!("What is {a} * {b}? Answer with the number only.");
        assert_eq!(graded_answer(&q(12, 3), 0.0, 0).as_deref(), Some("36"));
        assert_eq!(graded_answer("Tell me a story", 0.0, 0), None);
        assert_eq!(graded_answer(&q(12, 3), 1.0, 0).as_deref(), Some("37"));
        let wrong = (0..200)
            .filter(|i| {
                let right = (i * 7).to_string();
                graded_answer(&q(*i, 7), 0.3, 0).as_deref() != Some(right.as_str())
            })
            .count();
        assert!(
            (40..=80).contains(&wrong),
            "about 30 % wrong, got {wrong} of 200"
        );
        assert_eq!(
            graded_answer(&q(5, 7), 0.3, 0),
            graded_answer(&q(5, 7), 0.3, 0)
        );
    }

    #[test]
    fn a_reset_forgets_cached_prefixes_only_while_no_block_is_in_use() {
        let mut pool = crate::blocks::BlockPool::new(8, true);
        let held = pool.allocate().expect("a block");
        pool.commit(held, 11);
        assert!(
            !pool.reset_prefix_cache(),
            "refused while a block is in use"
        );
        pool.free_blocks(&[held]);
        assert_eq!(
            pool.lookup_prefix(&[11]),
            vec![held],
            "cached after it is freed"
        );
        assert!(pool.reset_prefix_cache());
        assert!(pool.lookup_prefix(&[11]).is_empty());
    }
}
