//! `--workload observed:` against a real vLLM 0.32's histograms: the
//! request-length histograms' increases over a recorded replay of a known
//! mix (fixtures/vllm-live/SOURCE.md) give the mix back, decile by decile,
//! when lengths are drawn from them.

use llmwatch_core::catalog::{normalize, CatalogMetric, Engine, Part};
use llmwatch_core::exposition::{parse_lenient, Format};
use llmwatch_core::observed::{nearest_rank, LengthDistribution, ObservedWorkload};

fn read(name: &str) -> String {
    let path = format!(
        "{}/../../fixtures/vllm-live/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// The cumulative buckets of `metric` on a page.
fn buckets(text: &str, metric: CatalogMetric) -> Vec<(f64, f64)> {
    let (page, errors) = parse_lenient(text.as_bytes(), Format::PrometheusText);
    assert!(errors.is_empty(), "{errors:?}");
    normalize(Engine::Vllm, &page)
        .into_iter()
        .filter(|s| s.metric == metric)
        .filter_map(|s| match s.part {
            Part::Bucket(le) => Some((le, s.value)),
            _ => None,
        })
        .collect()
}

/// The bucket increases from `before` to `after`.
fn increase(metric: CatalogMetric) -> LengthDistribution {
    let before = buckets(&read("metrics_vllm_observed_mix_before.txt"), metric);
    let after = buckets(&read("metrics_vllm_observed_mix_after.txt"), metric);
    let delta: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, a)| {
            let b = before
                .iter()
                .find(|(l, _)| l == le)
                .map_or(0.0, |(_, b)| *b);
            (*le, a - b)
        })
        .collect();
    LengthDistribution::from_cumulative(&delta).expect("requests in the window")
}

#[test]
fn the_real_histograms_give_the_replayed_mix_back() {
    let mix: Vec<(u32, u32)> = read("observed_mix_trace.jsonl")
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let n = |k: &str| u32::try_from(v[k].as_u64().unwrap()).unwrap();
            (n("input_length"), n("output_length"))
        })
        .collect();
    let w = ObservedWorkload {
        prompt: increase(CatalogMetric::RequestPromptTokens),
        generation: increase(CatalogMetric::RequestGenerationTokens),
        requests: 120.0,
        seconds: 60.0,
    };
    assert_eq!((w.prompt.total(), w.generation.total()), (120.0, 120.0));
    let drawn = w.draw(4000, 2.0, 3, Some(2048));
    for (what, served, drawn) in [
        (
            "prompt",
            mix.iter().map(|m| m.0).collect::<Vec<_>>(),
            drawn.iter().map(|d| d.input_tokens).collect::<Vec<_>>(),
        ),
        (
            "output",
            mix.iter().map(|m| m.1).collect(),
            drawn.iter().map(|d| d.output_tokens).collect(),
        ),
    ] {
        let (mut served, mut drawn) = (served, drawn);
        served.sort_unstable();
        drawn.sort_unstable();
        let deciles = |v: &[u32]| -> Vec<u32> {
            (1..=9)
                .filter_map(|k| nearest_rank(v, f64::from(k) / 10.0))
                .collect()
        };
        println!(
            "{what}: served {:?}, drawn {:?}",
            deciles(&served),
            deciles(&drawn)
        );
        for k in 1..=9 {
            let q = f64::from(k) / 10.0;
            let want = f64::from(nearest_rank(&served, q).unwrap());
            let got = f64::from(nearest_rank(&drawn, q).unwrap());
            assert!(
                (got - want).abs() <= 0.1 * want,
                "{what} decile {k}: drawn {got}, served {want}"
            );
        }
    }
}

/// The other engines' length histograms feed the same catalog metrics
/// (their fixture pages: TGI and NIM as recorded, Dynamo's frontend).
#[test]
fn other_engines_length_histograms_are_read() {
    for (file, engine) in [
        ("tgi/metrics_example.txt", Engine::Tgi),
        ("nim/metrics_example.txt", Engine::Nim),
        ("dynamo/metrics_example.txt", Engine::Dynamo),
    ] {
        let path = format!("{}/../../fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"));
        let (page, _) = parse_lenient(text.as_bytes(), Format::PrometheusText);
        let samples = normalize(engine, &page);
        for metric in [
            CatalogMetric::RequestPromptTokens,
            CatalogMetric::RequestGenerationTokens,
        ] {
            let buckets: Vec<(f64, f64)> = samples
                .iter()
                .filter(|s| s.metric == metric)
                .filter_map(|s| match s.part {
                    Part::Bucket(le) => Some((le, s.value)),
                    _ => None,
                })
                .collect();
            assert!(
                buckets.iter().any(|(le, _)| le.is_infinite()) && buckets.len() > 2,
                "{file}: {metric} has {buckets:?}"
            );
        }
    }
}
