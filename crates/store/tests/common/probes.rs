//! A successful probe row as the canary runner stores one.

use llmwatch_store::ProbeRow;

/// A 16-token chat probe of `target_id` sent at `ts_ms` (a canary unless
/// `run_id` names a sweep) whose first token came after `ttft_s`.
pub fn ok_probe(target_id: i64, ts_ms: i64, run_id: Option<i64>, ttft_s: f64) -> ProbeRow {
    ProbeRow {
        target_id,
        run_id,
        ts_ms,
        api: "chat".into(),
        model: "m".into(),
        shape: "64x16".into(),
        ok: true,
        error_kind: None,
        error: None,
        http_status: Some(200),
        ttfb_s: Some(0.001),
        ttft_s: Some(ttft_s),
        tpot_s: Some(0.02),
        e2e_s: ttft_s + 0.3,
        itl_s: vec![0.02; 15],
        prompt_tokens: Some(64),
        output_tokens: 16,
        cached_tokens: Some(0),
        finish_reason: Some("length".into()),
        record_json: "{}".into(),
    }
}
