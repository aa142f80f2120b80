//! The decision: variants ranked by throughput at the objective, each
//! compared with the baseline only where the intervals separate, and the
//! origin question answered — which change helped by how much, what binds
//! now, and what to try next (an option, more GPUs, or a smaller or
//! quantized model).

use super::result::{Binding, RankRow, VariantResult, VariantStatus};

/// The next step a binding limit points to, in the origin's three
/// directions.
pub fn next_step(binding: Option<&Binding>) -> String {
    let Some(b) = binding else {
        return "No limit was named within the ladder: extend the ladder (higher concurrency) \
                before changing the setup."
            .to_string();
    };
    let direction = match b.kind.as_str() {
        "SchedulerLimit" => {
            "an option: raise --max-num-seqs while the KV cache has room (more GPUs would not help \
             a scheduler cap)"
        }
        "KvCacheCapacity" => {
            "an option first (FP8 KV cache, a lower --max-model-len, a higher \
             --gpu-memory-utilization); then more GPUs (tensor parallelism adds KV memory)"
        }
        "DecodeBound" => {
            "a smaller or quantized model (FP8/INT4 weights read less memory per token), or a \
             faster-memory GPU; more GPUs with tensor parallelism split the reads"
        }
        "PrefillBound" => {
            "an option (chunked prefill, prefix caching, a larger --max-num-batched-tokens); \
             then more GPUs for prompt compute"
        }
        "OutsideGpu" => {
            "not the GPU: the API server, tokenizer or network (an option such as more API \
             server processes); more GPUs would sit idle"
        }
        "UnbalancedSplit" => "an option: rebalance the model split across GPUs",
        _ => {
            "the objective is missed without a named cause: look at the evidence before adding GPUs"
        }
    };
    format!("{} binds ({}): try {}.", b.verdict, b.evidence, direction)
}

fn pct(new: f64, old: f64) -> Option<f64> {
    (old > 0.0).then(|| (new / old - 1.0) * 100.0)
}

/// Compares each completed variant with the baseline (the first variant),
/// filling `versus_baseline` and `raises_capacity`. Capacity is called up
/// (or down) when the throughput-at-objective or the max-sustainable
/// intervals separate that way and neither separates the other way.
pub fn compare_with_baseline(variants: &mut [VariantResult]) {
    let Some(base) = variants
        .first()
        .filter(|v| v.status == VariantStatus::Completed)
        .and_then(|v| v.capacity.clone())
    else {
        return;
    };
    for v in variants.iter_mut().skip(1) {
        let Some(cap) = v.capacity.clone() else {
            continue;
        };
        let (a, b) = (&base.throughput_at_objective, &cap.throughput_at_objective);
        let (ma, mb) = (&base.max_sustainable, &cap.max_sustainable);
        let up = (b.separates(a) && b.estimate > a.estimate)
            || (mb.separates(ma) && mb.estimate > ma.estimate);
        let down = (b.separates(a) && b.estimate < a.estimate)
            || (mb.separates(ma) && mb.estimate < ma.estimate);
        let change =
            pct(b.estimate, a.estimate).map_or_else(|| "n/a".to_string(), |p| format!("{p:+.0} %"));
        let numbers = format!(
            "throughput at the objective {} vs {} output tok/s ({change}); max sustainable concurrency {} vs {}",
            b.describe(0),
            a.describe(0),
            mb.describe(0),
            ma.describe(0),
        );
        let (called, words) = match (up, down) {
            (true, false) => (Some(true), "raises capacity"),
            (false, true) => (Some(false), "lowers capacity"),
            (true, true) => (None, "no difference called (the two measures disagree)"),
            (false, false) => (None, "no difference called (the intervals overlap)"),
        };
        v.raises_capacity = called;
        v.versus_baseline = Some(format!("{words}: {numbers}"));
    }
}

/// The ranked table: completed variants by throughput at the objective
/// (then max sustainable load), best first; failed and refused ones last.
pub fn rank(variants: &[VariantResult]) -> Vec<RankRow> {
    let mut order: Vec<&VariantResult> = variants.iter().collect();
    let key = |v: &VariantResult| {
        v.capacity.as_ref().map_or((f64::NEG_INFINITY, 0.0), |c| {
            (
                c.throughput_at_objective.estimate,
                c.max_sustainable.estimate,
            )
        })
    };
    order.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        kb.0.total_cmp(&ka.0).then(kb.1.total_cmp(&ka.1))
    });
    order
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let mut marks = Vec::new();
            if v.quality_mark.is_some() {
                marks.push("accuracy dropped".to_string());
            }
            if v.status != VariantStatus::Completed {
                marks.push(v.status.as_str().to_string());
            }
            if v.raises_capacity == Some(true) {
                marks.push("raises capacity".to_string());
            }
            RankRow {
                rank: i as u32 + 1,
                variant: v.name.clone(),
                max_sustainable: v.capacity.as_ref().map(|c| c.max_sustainable),
                throughput_at_objective: v.capacity.as_ref().map(|c| c.throughput_at_objective),
                ttft_p95_at_reference_s: v.at_reference.as_ref().and_then(|p| p.ttft_p95_s),
                itl_p95_at_reference_s: v.at_reference.as_ref().and_then(|p| p.itl_p95_s),
                tokens_per_s_per_gpu: v.tokens_per_s_per_gpu,
                accuracy: v.accuracy.as_ref().map(|a| a.interval.estimate),
                energy_j_per_token: v.energy_j_per_token,
                binding: v.binding.as_ref().map(|b| b.verdict.clone()),
                marks,
            }
        })
        .collect()
}

/// The answer in a few sentences: the best change and by how much, the
/// others, quality marks, what binds now and what to try next.
pub fn answer(variants: &[VariantResult]) -> Vec<String> {
    let mut lines = Vec::new();
    let Some(base) = variants.first() else {
        return vec!["The plan has no variants.".to_string()];
    };
    if base.status != VariantStatus::Completed {
        lines.push(format!(
            "The baseline {} did not complete ({}): nothing can be compared with it.",
            base.name,
            base.reason.as_deref().unwrap_or("no reason recorded")
        ));
    }
    let helped: Vec<&VariantResult> = variants
        .iter()
        .filter(|v| v.raises_capacity == Some(true) && v.quality_mark.is_none())
        .collect();
    let best = helped.iter().copied().max_by(|a, b| {
        let t = |v: &VariantResult| {
            v.capacity
                .as_ref()
                .map_or(0.0, |c| c.throughput_at_objective.estimate)
        };
        t(a).total_cmp(&t(b))
    });
    match best {
        Some(v) => lines.push(format!(
            "{} ({}) helped most: it {}.",
            v.name,
            v.change_line(),
            v.versus_baseline.as_deref().unwrap_or("raises capacity")
        )),
        None if base.status == VariantStatus::Completed => lines.push(
            "No change raised capacity beyond the intervals: keep the baseline's settings."
                .to_string(),
        ),
        None => {}
    }
    for v in variants.iter().skip(1) {
        if best.is_some_and(|b| b.name == v.name) {
            continue;
        }
        let what = match v.status {
            VariantStatus::Completed => v.versus_baseline.clone().unwrap_or_default(),
            _ => format!(
                "{}: {}",
                v.status.as_str(),
                v.reason.as_deref().unwrap_or("")
            ),
        };
        lines.push(format!("{} ({}): {}.", v.name, v.change_line(), what));
        if let Some(mark) = &v.quality_mark {
            lines.push(format!(
                "{} is marked: {mark}; its speed is no gain.",
                v.name
            ));
        }
    }
    let now = best.unwrap_or(base);
    if now.status == VariantStatus::Completed {
        lines.push(format!(
            "With {}: {}",
            now.name,
            next_step(now.binding.as_ref())
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::experiment::{CapacityEstimate, Interval};

    fn capacity(sustained: f64, tps: (f64, f64, f64)) -> CapacityEstimate {
        let point = |x: f64| Interval {
            estimate: x,
            low: x,
            high: x,
        };
        CapacityEstimate {
            max_sustainable: point(sustained),
            throughput_at_objective: Interval {
                estimate: tps.0,
                low: tps.1,
                high: tps.2,
            },
            saturation_load: None,
            saturation_throughput: None,
            resamples: 10,
            confidence: 0.95,
        }
    }

    fn variant(name: &str, cap: CapacityEstimate) -> VariantResult {
        let mut v = VariantResult::pending(name, &[], Vec::new());
        v.status = VariantStatus::Completed;
        v.capacity = Some(cap);
        v
    }

    #[test]
    fn a_difference_is_called_only_where_intervals_separate() {
        let mut vs = vec![
            variant("base", capacity(4.0, (300.0, 220.0, 370.0))),
            // Throughput overlaps, but it sustains a step the baseline does not.
            variant("more-blocks", capacity(8.0, (410.0, 350.0, 470.0))),
            variant("same", capacity(4.0, (310.0, 250.0, 360.0))),
            variant("worse", capacity(2.0, (100.0, 90.0, 110.0))),
        ];
        vs[1].binding = Some(Binding {
            verdict: "KV-cache capacity".into(),
            kind: "KvCacheCapacity".into(),
            confidence: "high".into(),
            evidence: "19 blocks hold 3 sequences".into(),
            what_to_try: String::new(),
        });
        compare_with_baseline(&mut vs);
        let called: Vec<Option<bool>> = vs.iter().map(|v| v.raises_capacity).collect();
        assert_eq!(called, [None, Some(true), None, Some(false)]);
        assert!(vs[2]
            .versus_baseline
            .as_deref()
            .unwrap_or("")
            .contains("overlap"));
        let ranking = rank(&vs);
        assert_eq!(ranking[0].variant, "more-blocks");
        assert_eq!(ranking[3].variant, "worse");
        let lines = answer(&vs);
        assert!(
            lines[0].starts_with("more-blocks (baseline) helped most"),
            "{lines:?}"
        );
        let last = lines.last().expect("next step");
        assert!(
            last.contains("KV-cache capacity binds") && last.contains("more GPUs"),
            "{last}"
        );
    }
}
