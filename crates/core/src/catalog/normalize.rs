//! Applies the catalog table to one parsed page.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use super::rules::{Rule, Source, Src, MIB, RULES};
use super::{CatalogMetric, Engine, NormalizedSample, Part, SampleLabels};
use crate::exposition::{Exposition, Label, Sample};

/// Labels that only say *which replica of the same scheduler* reported a
/// series (SGLang TP/PP/MoE-EP ranks, the reporting process): series that
/// differ only in these duplicate one view and are deduplicated with `max`,
/// never summed. `le` is the bucket bound, carried in [`Part::Bucket`].
const REPLICA_LABELS: &[&str] = &["tp_rank", "pp_rank", "moe_ep_rank", "pid", "le"];

/// Maps one page's raw samples to catalog metrics.
///
/// * **Name resolution**: for each [`CatalogMetric`], the first raw name of
///   METRIC_MAP's resolution order that is present on the page (with a
///   usable value) and that `engine` can emit is used, and only that one, so
///   a vLLM 0.10 page that carries both `vllm:kv_cache_usage_perc` and
///   `vllm:gpu_cache_usage_perc` is not counted twice. `Generic` tries every
///   known name; `Dynamo` also reads the backend families a worker carries.
/// * **Units**: ratios 0..1 (DCGM `*_UTIL` % ÷ 100; `PROF_*` and every
///   `*_perc`/`*_percent` LLM metric already are), bytes (DCGM MiB × 2²⁰),
///   seconds (Triton ms × 10⁻³, µs × 10⁻⁶), watts.
/// * **Selectors**: Triton's discriminator labels (`request_type="active"`,
///   `kv_cache_block_type="fraction"`, …) pick one series of a family.
/// * **Aggregation** (engine metrics end with no labels at all): usage
///   gauges (`KvCacheUsage`) and SGLang's last-transfer latency → max over
///   every series (the fullest rank or model is the one that stalls, the
///   slowest rank's shard is the one a request waits for); ratio gauges
///   (`PrefixCacheHitRate`, acceptance) and per-GPU figures (vLLM's MFU
///   counters, its sleep state) → mean; SGLang's per-rank KV transfer speed
///   → sum over every series (each TP rank moves its own shard at once);
///   everything else (running/waiting gauges, counters, histogram
///   parts) → `max` over series that differ only in [`REPLICA_LABELS`]
///   (TP/PP ranks of one DP group report the same scheduler view), then
///   `sum` over the rest (DP ranks such as vLLM's `engine="N"` or SGLang's
///   `dp_rank`, finish reasons, and models). Summing across models is a
///   decision: a target is one server, and its load is what sweeps and the
///   diagnosis reason about; a per-model breakdown is not stored.
/// * **GPU metrics** keep exactly `gpu`, `UUID` (from `UUID`, `uuid` or
///   Triton's `gpu_uuid`), `modelName` and `hostname` (from `Hostname` or
///   `hostname`); pod/container/driver labels are dropped. Two series that
///   collapse onto the same GPU keep the larger value.
/// * **Histograms** come out as `Part::Bucket(le)` (le parsed as a float,
///   wherever the label sits), `Part::Sum`, `Part::Count`. Engines with only
///   a sum and count (Triton µs counters, llama.cpp predicted seconds/tokens)
///   produce no buckets.
/// * **Dropped values**: NaN/±Inf samples, and DCGM "blank" sentinels
///   (int64 ≥ 0x7ffffffffffffff0, int32 ≥ 0x7ffffff0, FP64 2⁴⁷…2⁴⁷+5), which
///   an exporter leaks for fields a board does not support.
///
/// Output order is deterministic: [`CatalogMetric::all`] order, then labels,
/// then part (value, buckets by ascending `le`, sum, count).
pub fn normalize(engine: Engine, page: &Exposition) -> Vec<NormalizedSample> {
    let plan = &*PLAN;
    let mut index = Index {
        slots: vec![Vec::new(); plan.slots.len()],
    };
    for sample in page
        .families
        .iter()
        .flat_map(|family| family.samples.iter())
    {
        if let Some(&slot) = plan.slots.get(sample.name.as_ref()) {
            index.slots[slot].push(sample);
        }
    }
    let mut out = Vec::new();
    let mut gpu_label_sets = GpuLabelSets::default();
    for (metric, rules) in &plan.metrics {
        let chosen = rules
            .iter()
            .find(|rule| rule.rule.src.allowed(engine) && present(rule, &index));
        if let Some(rule) = chosen {
            let raws = extract(rule, &index);
            aggregate(*metric, &raws, &mut gpu_label_sets, &mut out);
        }
    }
    out
}

/// The catalog table made ready for pages: every name a rule reads gets a
/// slot, so a page is indexed with one hash per sample and no name is
/// spelled out per page (`base_bucket`, …).
struct Plan {
    /// Sample name → slot (slots are numbered from 0 in order of first use).
    slots: FxMap<String, usize>,
    /// Per catalog metric, in [`CatalogMetric::all`] order, its rules in
    /// resolution order.
    metrics: Vec<(CatalogMetric, Vec<SlottedRule>)>,
}

/// A rule and the slots of the names it reads, in the order its [`Source`]
/// lists them: `Value` its name; `Histogram` `_bucket`, `_sum`, `_count`;
/// `SumCount` the sum, then each count; `DcgmFbTotal` [`DCGM_FB_FIELDS`].
struct SlottedRule {
    rule: &'static Rule,
    slots: Vec<usize>,
}

type FxMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;

static PLAN: LazyLock<Plan> = LazyLock::new(|| {
    let mut slots: FxMap<String, usize> = FxMap::default();
    let mut slot_of = |name: String| {
        let next = slots.len();
        *slots.entry(name).or_insert(next)
    };
    let metrics = CatalogMetric::all()
        .iter()
        .map(|&metric| {
            let rules = RULES
                .iter()
                .filter(|rule| rule.metric == metric)
                .map(|rule| SlottedRule {
                    rule,
                    slots: rule_names(rule).into_iter().map(&mut slot_of).collect(),
                })
                .collect();
            (metric, rules)
        })
        .collect();
    Plan { slots, metrics }
});

/// The sample names a rule reads, in [`SlottedRule`]'s order.
fn rule_names(rule: &Rule) -> Vec<String> {
    match rule.source {
        Source::Value { name, .. } => vec![name.to_string()],
        Source::Histogram { base, .. } => ["_bucket", "_sum", "_count"]
            .iter()
            .map(|suffix| format!("{base}{suffix}"))
            .collect(),
        Source::SumCount { sum, count, .. } => std::iter::once(sum)
            .chain(count.iter().copied())
            .map(str::to_string)
            .collect(),
        Source::Sum { names, .. } => names.iter().copied().map(str::to_string).collect(),
        Source::DcgmFbTotal => DCGM_FB_FIELDS.map(str::to_string).to_vec(),
    }
}

/// One raw contribution before aggregation.
struct Raw<'p> {
    /// Which of a rule's source names it came from (so two different counters
    /// summed into one count are never deduplicated against each other).
    series: usize,
    labels: &'p [Label<'p>],
    part: Part,
    value: f64,
}

/// A page's samples by the slot of their name (only names the catalog reads).
struct Index<'p> {
    slots: Vec<Vec<&'p Sample<'p>>>,
}

impl<'p> Index<'p> {
    fn samples(&self, slot: usize) -> &[&'p Sample<'p>] {
        self.slots.get(slot).map(Vec::as_slice).unwrap_or(&[])
    }

    fn has(&self, slot: usize) -> bool {
        !self.samples(slot).is_empty()
    }
}

fn is_dcgm_blank(value: f64) -> bool {
    const INT64_BLANK: f64 = 9_223_372_036_854_775_792.0; // 0x7ffffffffffffff0
    const INT32_BLANK: f64 = 2_147_483_632.0; // 0x7ffffff0
    const FP64_BLANK: f64 = 140_737_488_355_328.0; // 2^47
    value >= INT64_BLANK
        || (INT32_BLANK..=2_147_483_647.0).contains(&value)
        || (FP64_BLANK..=FP64_BLANK + 5.0).contains(&value)
}

fn usable(src: Src, value: f64) -> bool {
    value.is_finite() && !(src == Src::Dcgm && is_dcgm_blank(value))
}

fn selected(sample: &Sample, selector: Option<(&str, &str)>) -> bool {
    selector.is_none_or(|(name, value)| sample.label(name) == Some(value))
}

fn present(slotted: &SlottedRule, index: &Index) -> bool {
    let rule = slotted.rule;
    let slots = &slotted.slots;
    match rule.source {
        Source::Value { selector, .. } => index
            .samples(slots[0])
            .iter()
            .any(|s| selected(s, selector) && usable(rule.src, s.value)),
        Source::Histogram { .. } => slots.iter().any(|&slot| index.has(slot)),
        Source::SumCount { .. } => index.has(slots[0]),
        Source::Sum { .. } => slots.iter().any(|&slot| index.has(slot)),
        Source::DcgmFbTotal => index.has(slots[0]) || (index.has(slots[1]) && index.has(slots[2])),
    }
}

/// `le` as written by any client library: `1`, `1.0`, `0.07500000000000001`, `+Inf`.
fn parse_le(text: &str) -> Option<f64> {
    let text = text.trim();
    let value = match text {
        "+Inf" | "Inf" | "+inf" | "inf" => f64::INFINITY,
        "-Inf" | "-inf" => f64::NEG_INFINITY,
        _ => text.parse::<f64>().ok()?,
    };
    (!value.is_nan()).then_some(value)
}

fn extract<'p>(slotted: &SlottedRule, index: &Index<'p>) -> Vec<Raw<'p>> {
    let rule = slotted.rule;
    let slots = &slotted.slots;
    let mut raws = Vec::new();
    let mut push = |series: usize, sample: &'p Sample<'p>, part: Part, value: f64| {
        if usable(rule.src, value) {
            raws.push(Raw {
                series,
                labels: &sample.labels,
                part,
                value,
            });
        }
    };
    match rule.source {
        Source::Value {
            selector, scale, ..
        } => {
            for &sample in index.samples(slots[0]) {
                if selected(sample, selector) && usable(rule.src, sample.value) {
                    push(0, sample, Part::Value, sample.value * scale);
                }
            }
        }
        Source::Histogram { scale, .. } => {
            for &sample in index.samples(slots[0]) {
                if let Some(le) = sample.label("le").and_then(parse_le) {
                    push(0, sample, Part::Bucket(le * scale), sample.value);
                }
            }
            for &sample in index.samples(slots[1]) {
                push(0, sample, Part::Sum, sample.value * scale);
            }
            for &sample in index.samples(slots[2]) {
                push(0, sample, Part::Count, sample.value);
            }
        }
        Source::SumCount { scale, .. } => {
            for &sample in index.samples(slots[0]) {
                push(0, sample, Part::Sum, sample.value * scale);
            }
            for (i, &slot) in slots.iter().enumerate().skip(1) {
                for &sample in index.samples(slot) {
                    push(i, sample, Part::Count, sample.value);
                }
            }
        }
        Source::Sum { scale, .. } => {
            for (i, &slot) in slots.iter().enumerate() {
                for &sample in index.samples(slot) {
                    push(i, sample, Part::Value, sample.value * scale);
                }
            }
        }
        Source::DcgmFbTotal => return dcgm_fb_total(slots, index),
    }
    raws
}

/// The framebuffer fields `FB_TOTAL` is read or summed from, in that order.
const DCGM_FB_FIELDS: [&str; 4] = [
    "DCGM_FI_DEV_FB_TOTAL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
];

/// Per GPU: `FB_TOTAL` if exported, else `FB_USED + FB_FREE (+ FB_RESERVED)`
/// when both used and free are known. MiB → bytes.
fn dcgm_fb_total<'p>(slots: &[usize], index: &Index<'p>) -> Vec<Raw<'p>> {
    #[derive(Default)]
    struct Fb<'p> {
        labels: Option<&'p [Label<'p>]>,
        total: Option<f64>,
        used: Option<f64>,
        free: Option<f64>,
        reserved: Option<f64>,
    }
    let mut gpus: BTreeMap<GpuKey<'p>, Fb<'p>> = BTreeMap::new();
    for (field, &slot) in slots.iter().enumerate() {
        for &sample in index.samples(slot) {
            if !usable(Src::Dcgm, sample.value) {
                continue;
            }
            let fb = gpus.entry(gpu_labels(&sample.labels)).or_default();
            fb.labels.get_or_insert(&sample.labels);
            let slot = match field {
                0 => &mut fb.total,
                1 => &mut fb.used,
                2 => &mut fb.free,
                _ => &mut fb.reserved,
            };
            *slot = Some(slot.map_or(sample.value, |old| old.max(sample.value)));
        }
    }
    gpus.into_values()
        .filter_map(|fb| {
            let mib = match (fb.total, fb.used, fb.free) {
                (Some(total), _, _) => total,
                (None, Some(used), Some(free)) => used + free + fb.reserved.unwrap_or(0.0),
                _ => return None,
            };
            Some(Raw {
                series: 0,
                labels: fb.labels?,
                part: Part::Value,
                value: mib * MIB,
            })
        })
        .collect()
}

/// A GPU's identity labels under one spelling, sorted by name, borrowed
/// from the page.
type GpuKey<'p> = Vec<(&'static str, &'p str)>;

/// The GPU identity labels, renamed to one spelling and sorted by name.
fn gpu_labels<'p>(labels: &'p [Label<'p>]) -> GpuKey<'p> {
    let mut out: GpuKey<'p> = Vec::new();
    for label in labels {
        let name = match label.name.as_ref() {
            "gpu" => "gpu",
            "UUID" | "uuid" | "gpu_uuid" => "UUID",
            "modelName" => "modelName",
            "Hostname" | "hostname" => "hostname",
            _ => continue,
        };
        if !out.iter().any(|(existing, _)| *existing == name) {
            out.push((name, label.value.as_ref()));
        }
    }
    out.sort_unstable();
    out
}

/// One shared label set per GPU of a page, whichever metrics carry it (a
/// reader matches a GPU's gauges by pointer first).
#[derive(Default)]
struct GpuLabelSets<'p> {
    shared: FxMap<GpuKey<'p>, SampleLabels>,
}

impl<'p> GpuLabelSets<'p> {
    fn get(&mut self, key: GpuKey<'p>) -> SampleLabels {
        self.shared
            .entry(key)
            .or_insert_with_key(|key| {
                key.iter()
                    .map(|(name, value)| (name.to_string(), value.to_string()))
                    .collect()
            })
            .clone()
    }
}

/// The label set of every engine sample: none (one allocation, shared).
static NO_LABELS: LazyLock<SampleLabels> = LazyLock::new(|| Arc::from(Vec::new()));

/// A total order on parts for map keys: value, buckets by `le`, sum, count.
fn part_key(part: Part) -> (u8, u64) {
    match part {
        Part::Value => (0, 0),
        Part::Bucket(le) => {
            // IEEE-754 bits reordered so that integer order = numeric order.
            let bits = le.to_bits();
            let ordered = if bits >> 63 == 1 {
                !bits
            } else {
                bits | (1 << 63)
            };
            (1, ordered)
        }
        Part::Sum => (2, 0),
        Part::Count => (3, 0),
    }
}

/// Label pairs borrowed from the page.
type BorrowedLabels<'p> = Vec<(&'p str, &'p str)>;

/// The labels that tell replica groups apart, borrowed from the page (a
/// day's chart normalises every instant's page: no label is copied here),
/// written into `into`.
fn replica_group<'p>(labels: &'p [Label<'p>], into: &mut BorrowedLabels<'p>) {
    into.clear();
    into.extend(
        labels
            .iter()
            .filter(|label| !REPLICA_LABELS.contains(&label.name.as_ref()))
            .map(|label| (label.name.as_ref(), label.value.as_ref())),
    );
    into.sort_unstable();
}

type PartKey = (u8, u64);

fn aggregate<'p>(
    metric: CatalogMetric,
    raws: &[Raw<'p>],
    gpu_label_sets: &mut GpuLabelSets<'p>,
    out: &mut Vec<NormalizedSample>,
) {
    if metric.is_gpu() {
        // (GPU, part key) → (part, value): the larger of series that collapse
        // onto one GPU.
        let mut result: BTreeMap<(GpuKey<'p>, PartKey), (Part, f64)> = BTreeMap::new();
        for raw in raws {
            let key = (gpu_labels(raw.labels), part_key(raw.part));
            let entry = result.entry(key).or_insert((raw.part, raw.value));
            entry.1 = entry.1.max(raw.value);
        }
        for ((labels, _), (part, value)) in result {
            if value.is_finite() {
                out.push(NormalizedSample {
                    metric,
                    labels: gpu_label_sets.get(labels),
                    part,
                    value,
                });
            }
        }
        return;
    }
    // Engine metrics end with no labels: part key → (part, value).
    let mut result: BTreeMap<PartKey, (Part, f64)> = BTreeMap::new();
    match across_series(metric) {
        AcrossSeries::Max => {
            for raw in raws {
                let entry = result
                    .entry(part_key(raw.part))
                    .or_insert((raw.part, raw.value));
                entry.1 = entry.1.max(raw.value);
            }
        }
        AcrossSeries::Mean => {
            let mut sums: BTreeMap<PartKey, (Part, f64, f64)> = BTreeMap::new();
            for raw in raws {
                let entry = sums
                    .entry(part_key(raw.part))
                    .or_insert((raw.part, 0.0, 0.0));
                entry.1 += raw.value;
                entry.2 += 1.0;
            }
            for (key, (part, sum, n)) in sums {
                result.insert(key, (part, sum / n));
            }
        }
        AcrossSeries::Sum => {
            for raw in raws {
                result
                    .entry(part_key(raw.part))
                    .or_insert((raw.part, 0.0))
                    .1 += raw.value;
            }
        }
        AcrossSeries::MaxWithinReplicasSumAcross => {
            max_within_replicas_sum_across(raws, &mut result)
        }
    }
    out.extend(
        result
            .into_values()
            .filter(|(_, value)| value.is_finite())
            .map(|(part, value)| NormalizedSample {
                metric,
                labels: NO_LABELS.clone(),
                part,
                value,
            }),
    );
}

/// How an engine metric's series (ranks, engines, models, label values)
/// become one value.
enum AcrossSeries {
    /// The largest: the fullest cache, the slowest rank's transfer.
    Max,
    /// The mean: ratios and per-GPU figures that each series reports whole.
    Mean,
    /// Everything summed, ranks included: quantities each rank holds a
    /// shard of (SGLang's per-rank KV transfer speed).
    Sum,
    /// The default: one value per replica group, the groups summed.
    MaxWithinReplicasSumAcross,
}

fn across_series(metric: CatalogMetric) -> AcrossSeries {
    use CatalogMetric as M;
    match metric {
        M::KvCacheUsage | M::KvTransferLatencySeconds => AcrossSeries::Max,
        M::PrefixCacheHitRate
        | M::SpecDecodeAcceptRate
        | M::SpecDecodeAcceptLength
        | M::EstimatedFlopsTotal
        | M::EstimatedReadBytesTotal
        | M::EstimatedWriteBytesTotal
        | M::EngineAwake => AcrossSeries::Mean,
        M::KvTransferSpeedBytesPerSecond => AcrossSeries::Sum,
        _ => AcrossSeries::MaxWithinReplicasSumAcross,
    }
}

/// `max` within a replica group (same source name, same labels but for
/// [`REPLICA_LABELS`], same part), then `sum` of the groups per part, added
/// in the order of (source name, labels, part) so that the float sums do
/// not depend on the page's line order.
fn max_within_replicas_sum_across<'p>(
    raws: &[Raw<'p>],
    result: &mut BTreeMap<PartKey, (Part, f64)>,
) {
    // Each distinct replica group once; consecutive raws (a histogram's
    // buckets) almost always share the last one.
    let mut group_of: FxMap<BorrowedLabels<'p>, usize> = FxMap::default();
    let mut groups: Vec<BorrowedLabels<'p>> = Vec::new();
    let mut labels = BorrowedLabels::new();
    let mut last: Option<usize> = None;
    // (source name, group, part key, part, value)
    let mut cells: Vec<(usize, usize, PartKey, Part, f64)> = Vec::with_capacity(raws.len());
    for raw in raws {
        replica_group(raw.labels, &mut labels);
        let group = match last {
            Some(group) if groups[group] == labels => group,
            _ => *group_of.entry(labels.clone()).or_insert_with(|| {
                groups.push(labels.clone());
                groups.len() - 1
            }),
        };
        last = Some(group);
        cells.push((raw.series, group, part_key(raw.part), raw.part, raw.value));
    }
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_unstable_by(|a, b| groups[*a].cmp(&groups[*b]));
    let mut rank = vec![0; groups.len()];
    for (position, group) in order.into_iter().enumerate() {
        rank[group] = position;
    }
    // Stable: raws of one cell keep the page's order, as `max` saw them.
    cells.sort_by_key(|(series, group, key, _, _)| (*series, rank[*group], *key));
    for cell in cells.chunk_by(|a, b| (a.0, a.1, a.2) == (b.0, b.1, b.2)) {
        let (_, _, key, part, first) = cell[0];
        let value = cell[1..].iter().fold(first, |max, c| max.max(c.4));
        result.entry(key).or_insert((part, 0.0)).1 += value;
    }
}

/// Whether any name that `engine`'s pages may carry maps to `metric`
/// (`Generic` tries every name, so it may carry all of them): tells "this
/// engine has no such histogram" from "it saw no request".
pub fn engine_may_expose(engine: Engine, metric: CatalogMetric) -> bool {
    RULES
        .iter()
        .any(|rule| rule.metric == metric && rule.src.allowed(engine))
}

/// Every sample name (as on the wire) that [`normalize`] may read for
/// `metric`, whatever the engine: a store that keeps whole pages reads only
/// these when it derives `metric` again.
pub fn source_names(metric: CatalogMetric) -> Vec<String> {
    let mut names: Vec<String> = RULES
        .iter()
        .filter(|rule| rule.metric == metric)
        .flat_map(rule_names)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::{Format, MetricFamily, MetricType};
    use std::borrow::Cow;

    fn sample(
        name: &'static str,
        labels: &[(&'static str, &'static str)],
        value: f64,
    ) -> Sample<'static> {
        Sample {
            name: Cow::Borrowed(name),
            labels: labels
                .iter()
                .map(|(n, v)| Label {
                    name: Cow::Borrowed(n),
                    value: Cow::Borrowed(v),
                })
                .collect(),
            value,
            timestamp: None,
            exemplar: None,
        }
    }

    fn page(samples: Vec<Sample<'static>>) -> Exposition<'static> {
        Exposition {
            format: Format::PrometheusText,
            families: vec![MetricFamily {
                name: Cow::Borrowed("all"),
                metric_type: MetricType::Unknown,
                help: None,
                unit: None,
                samples,
            }],
        }
    }

    fn values(out: &[NormalizedSample], metric: CatalogMetric) -> Vec<(Part, f64)> {
        out.iter()
            .filter(|s| s.metric == metric)
            .map(|s| (s.part, s.value))
            .collect()
    }

    #[test]
    fn first_present_name_wins() {
        let p = page(vec![
            sample("vllm:gpu_cache_usage_perc", &[("engine", "0")], 0.2),
            sample("vllm:kv_cache_usage_perc", &[("engine", "0")], 0.3),
        ]);
        let out = normalize(Engine::Vllm, &p);
        assert_eq!(
            values(&out, CatalogMetric::KvCacheUsage),
            vec![(Part::Value, 0.3)]
        );
    }

    #[test]
    fn sglang_ranks_dedupe_tp_and_sum_dp() {
        let p = page(vec![
            sample(
                "sglang:num_running_reqs",
                &[("dp_rank", "0"), ("tp_rank", "0")],
                5.0,
            ),
            sample(
                "sglang:num_running_reqs",
                &[("dp_rank", "0"), ("tp_rank", "1")],
                5.0,
            ),
            sample(
                "sglang:num_running_reqs",
                &[("dp_rank", "1"), ("tp_rank", "0")],
                3.0,
            ),
            sample(
                "sglang:num_running_reqs",
                &[("dp_rank", "1"), ("tp_rank", "1")],
                3.0,
            ),
            sample(
                "sglang:token_usage",
                &[("dp_rank", "0"), ("tp_rank", "0")],
                0.4,
            ),
            sample(
                "sglang:token_usage",
                &[("dp_rank", "1"), ("tp_rank", "0")],
                0.9,
            ),
        ]);
        let out = normalize(Engine::Sglang, &p);
        assert_eq!(
            values(&out, CatalogMetric::RequestsRunning),
            vec![(Part::Value, 8.0)]
        );
        assert_eq!(
            values(&out, CatalogMetric::KvCacheUsage),
            vec![(Part::Value, 0.9)]
        );
        assert!(out.iter().all(|s| s.labels.is_empty()));
    }

    #[test]
    fn vllm_dp_engines_sum_histogram_buckets_and_counters() {
        let p = page(vec![
            sample("vllm:prompt_tokens_total", &[("engine", "0")], 10.0),
            sample("vllm:prompt_tokens_total", &[("engine", "1")], 5.0),
            sample(
                "vllm:e2e_request_latency_seconds_bucket",
                &[("engine", "0"), ("le", "1.0")],
                1.0,
            ),
            sample(
                "vllm:e2e_request_latency_seconds_bucket",
                &[("le", "+Inf"), ("engine", "0")],
                2.0,
            ),
            sample(
                "vllm:e2e_request_latency_seconds_bucket",
                &[("engine", "1"), ("le", "1")],
                3.0,
            ),
            sample(
                "vllm:e2e_request_latency_seconds_bucket",
                &[("engine", "1"), ("le", "+Inf")],
                3.0,
            ),
            sample(
                "vllm:e2e_request_latency_seconds_count",
                &[("engine", "1")],
                3.0,
            ),
        ]);
        let out = normalize(Engine::Vllm, &p);
        assert_eq!(
            values(&out, CatalogMetric::PromptTokensTotal),
            vec![(Part::Value, 15.0)]
        );
        assert_eq!(
            values(&out, CatalogMetric::E2eSeconds),
            vec![
                (Part::Bucket(1.0), 4.0),
                (Part::Bucket(f64::INFINITY), 5.0),
                (Part::Count, 3.0)
            ]
        );
    }

    #[test]
    fn dcgm_units_labels_sentinels_and_total() {
        let gpu0: &[(&str, &str)] = &[
            ("gpu", "0"),
            ("UUID", "GPU-a"),
            ("Hostname", "h"),
            ("pod", "x"),
        ];
        let p = page(vec![
            sample("DCGM_FI_DEV_GPU_UTIL", gpu0, 50.0),
            sample("DCGM_FI_DEV_FB_USED", gpu0, 1.0),
            sample("DCGM_FI_DEV_FB_FREE", gpu0, 2.0),
            sample("DCGM_FI_DEV_FB_RESERVED", gpu0, 1.0),
            sample("DCGM_FI_DEV_GPU_TEMP", gpu0, 9_223_372_036_854_775_794.0),
        ]);
        let out = normalize(Engine::Dcgm, &p);
        assert_eq!(
            values(&out, CatalogMetric::GpuUtil),
            vec![(Part::Value, 0.5)]
        );
        assert_eq!(
            values(&out, CatalogMetric::GpuMemUsedBytes),
            vec![(Part::Value, MIB)]
        );
        assert_eq!(
            values(&out, CatalogMetric::GpuMemTotalBytes),
            vec![(Part::Value, 4.0 * MIB)]
        );
        assert!(values(&out, CatalogMetric::GpuTempCelsius).is_empty());
        let labels = &out[0].labels.to_vec();
        assert_eq!(
            labels,
            &vec![
                ("UUID".to_owned(), "GPU-a".to_owned()),
                ("gpu".to_owned(), "0".to_owned()),
                ("hostname".to_owned(), "h".to_owned()),
            ]
        );
    }

    #[test]
    fn triton_selectors_and_microseconds() {
        let m: &[(&str, &str)] = &[("model", "m"), ("version", "1")];
        let p = page(vec![
            sample(
                "nv_trt_llm_request_metrics",
                &[("request_type", "active"), ("model", "m")],
                4.0,
            ),
            sample(
                "nv_trt_llm_request_metrics",
                &[("request_type", "max"), ("model", "m")],
                512.0,
            ),
            sample("nv_inference_request_duration_us", m, 3_000_000.0),
            sample("nv_inference_request_success", m, 2.0),
            sample("nv_inference_request_failure", m, 1.0),
        ]);
        let out = normalize(Engine::Trtllm, &p);
        assert_eq!(
            values(&out, CatalogMetric::RequestsRunning),
            vec![(Part::Value, 4.0)]
        );
        assert_eq!(
            values(&out, CatalogMetric::E2eSeconds),
            vec![(Part::Sum, 3.0), (Part::Count, 3.0)]
        );
    }

    #[test]
    fn engine_filter_ignores_foreign_names() {
        let p = page(vec![sample("vllm:num_requests_running", &[], 2.0)]);
        assert!(normalize(Engine::Sglang, &p).is_empty());
        assert_eq!(normalize(Engine::Generic, &p).len(), 1);
    }

    #[test]
    fn parse_le_variants() {
        assert_eq!(parse_le("1"), Some(1.0));
        assert_eq!(parse_le("0.07500000000000001"), Some(0.07500000000000001));
        assert_eq!(parse_le("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_le("NaN"), None);
        assert_eq!(parse_le("x"), None);
    }
}
