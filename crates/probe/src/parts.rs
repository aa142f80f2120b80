//! One result from the parts of a shared schedule (`llmwatch bench
//! merge`): each part's records fed to a [`RunStats`] of its own, those
//! merged as a pool merges its workers', so the merged statistics are what
//! one accumulator fed every part's records would hold — counts exact,
//! percentiles exact up to [`crate::stats::EXACT_SAMPLES`] values per
//! metric and within the HdrHistogram's 0.05 % beyond.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::result::{RunResult, RunStats};
use crate::selfcheck::Monitored;
pub use crate::settings::PartOf;
use crate::settings::{Load, Part, RunConfig};
use crate::stats::EXACT_SAMPLES;

/// Why parts cannot be merged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MergeError {
    #[error("no part to merge")]
    NoParts,
    #[error(
        "result #{0} is not a part of a shared schedule (no `part_of`: run it with --part I/N)"
    )]
    NotAPart(usize),
    #[error("result #{index} is part {found} but result #0 is part of {expected} parts")]
    CountDiffers {
        index: usize,
        found: Part,
        expected: u32,
    },
    #[error("part {0} is given twice")]
    Duplicate(Part),
    #[error("parts {missing:?} of {count} are missing")]
    Missing { missing: Vec<u32>, count: u32 },
    #[error("part {part} differs from part {first} in its {field}: not the same schedule")]
    Differs {
        part: Part,
        first: Part,
        field: &'static str,
    },
}

/// The parts' results as one run's. Every part must be there once, cut
/// from the same schedule (seed, start, bound, objectives, warm-up, rate);
/// records must be in the results (`bench --json` writes them).
pub fn merge_parts(parts: Vec<RunResult>) -> Result<RunResult, MergeError> {
    let first = parts.first().ok_or(MergeError::NoParts)?;
    let first_of = first.part_of.ok_or(MergeError::NotAPart(0))?;
    let count = first_of.part.count;
    let mut seen = BTreeSet::new();
    for (index, result) in parts.iter().enumerate() {
        let of = result.part_of.ok_or(MergeError::NotAPart(index))?;
        if of.part.count != count {
            return Err(MergeError::CountDiffers {
                index,
                found: of.part,
                expected: count,
            });
        }
        if !seen.insert(of.part.index) {
            return Err(MergeError::Duplicate(of.part));
        }
        same_schedule(first, result)?;
    }
    let missing: Vec<u32> = (0..count).filter(|i| !seen.contains(i)).collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing { missing, count });
    }
    Ok(merged(parts))
}

fn same_schedule(first: &RunResult, other: &RunResult) -> Result<(), MergeError> {
    let (a, b) = match (first.part_of, other.part_of) {
        (Some(a), Some(b)) => (a, b),
        _ => return Ok(()),
    };
    let differs = |field| MergeError::Differs {
        part: b.part,
        first: a.part,
        field,
    };
    if a.seed != b.seed {
        return Err(differs("seed"));
    }
    if a.start_at_unix_ms != b.start_at_unix_ms {
        return Err(differs("start time"));
    }
    if first.bound != other.bound {
        return Err(differs("bound (--requests/--duration)"));
    }
    if first.objectives != other.objectives {
        return Err(differs("objectives"));
    }
    match (first.load, other.load) {
        (Load::Concurrency { .. }, Load::Concurrency { .. }) => Ok(()),
        (
            Load::Rate {
                per_second: r1,
                burstiness: b1,
                ..
            },
            Load::Rate {
                per_second: r2,
                burstiness: b2,
                ..
            },
        ) if r1 == r2 && b1 == b2 => Ok(()),
        _ => Err(differs("load (--rate/--burstiness)")),
    }
}

/// The whole schedule's load: the parts' shares of the in-flight cap
/// added back up.
fn whole_load(parts: &[RunResult]) -> Load {
    let cap = |load: &Load| match *load {
        Load::Concurrency { concurrency } => Some(concurrency),
        Load::Rate {
            max_concurrency, ..
        } => max_concurrency,
    };
    let total = parts
        .iter()
        .filter_map(|p| cap(&p.load))
        .fold(0u32, u32::saturating_add);
    match parts[0].load {
        Load::Concurrency { .. } => Load::Concurrency { concurrency: total },
        Load::Rate {
            per_second,
            burstiness,
            max_concurrency,
        } => Load::Rate {
            per_second,
            burstiness,
            max_concurrency: max_concurrency.map(|_| total),
        },
    }
}

fn merged(mut parts: Vec<RunResult>) -> RunResult {
    parts.sort_by_key(|p| p.part_of.map(|o| o.part.index));
    let first = &parts[0];
    let config = RunConfig {
        load: whole_load(&parts),
        bound: first.bound,
        warmup_requests: 0,
        objectives: first.objectives,
        limits: first.self_check.limits,
        seed: first.part_of.map_or(0, |o| o.seed),
    };
    let mut stats = RunStats::new(config.objectives, EXACT_SAMPLES);
    let mut monitored: Option<Monitored> = None;
    let (mut warmups, mut wall_s) = (0, 0.0f64);
    for part in &parts {
        let mut own = RunStats::new(config.objectives, EXACT_SAMPLES);
        part.records.iter().for_each(|r| own.add(r));
        stats.merge(&own);
        warmups += part.warmup_requests;
        // Every part counts its duration from the shared schedule's first
        // measured arrival: the whole run ends with the last part's end.
        wall_s = wall_s.max(part.duration_s);
        let seen = monitored_of(part);
        monitored = Some(monitored.map_or(seen, |m| crate::measure::worse(m, seen)));
    }
    let records = {
        let mut all: Vec<_> = parts.iter().flat_map(|p| p.records.clone()).collect();
        all.sort_by_key(|r| r.seq);
        all
    };
    let wall = Duration::from_secs_f64(wall_s.max(0.0));
    let mut result = stats.finish(
        &config,
        warmups,
        records,
        wall,
        &monitored.unwrap_or_default(),
    );
    // The server's own counters cover every client: any part's reading
    // describes the whole run.
    result.server_prefix_cache_hit_ratio =
        parts.iter().find_map(|p| p.server_prefix_cache_hit_ratio);
    result.cache_contaminated = parts.iter().find_map(|p| p.cache_contaminated.clone());
    let reasons: Vec<String> = parts
        .iter()
        .filter_map(|p| p.part_of.map(|o| (o.part, &p.self_check.reasons)))
        .flat_map(|(part, rs)| rs.iter().map(move |r| format!("part {part}: {r}")))
        .collect();
    result.self_check.client_bound = !reasons.is_empty();
    result.self_check.reasons = reasons;
    result.self_check.workers = parts.iter().map(|p| p.self_check.clone()).collect();
    result
}

/// A part's self-check read back as what its monitor saw.
fn monitored_of(part: &RunResult) -> Monitored {
    let sc = &part.self_check;
    Monitored {
        cpu_cores: sc.cpu_cores,
        cpu_measure: sc.cpu_measure,
        scheduler_lag_ms: sc
            .scheduler_lag_p99_ms
            .map(|p| (p, sc.scheduler_lag_max_ms.unwrap_or(p))),
        host_steal_pct: sc.host_steal_pct,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Api, ProbeRecord, RequestInfo};
    use crate::settings::Bound;

    fn record(seq: u64, ttft_ms: u64) -> ProbeRecord {
        let mut r = ProbeRecord::new(RequestInfo {
            api: Api::Completions,
            model: "m".into(),
            max_tokens: 4,
            min_tokens: None,
            ignore_eos: false,
            temperature: 0.0,
            prompt_chars: 10,
        });
        r.seq = Some(seq);
        r.ttft_ns = Some(ttft_ms * 1_000_000);
        r.e2e_ns = (ttft_ms + 5) * 1_000_000;
        r.output_tokens = 4;
        r.finish_reason = Some("length".into());
        r
    }

    /// Part `index` of `count` of 12 requests, as a part's result.
    fn part(index: u32, count: u32, seed: u64) -> RunResult {
        let config = RunConfig {
            load: Load::Rate {
                per_second: 10.0,
                burstiness: 1.0,
                max_concurrency: Some(Part { index, count }.share(8)),
            },
            ..RunConfig::closed(1, 12)
        };
        let records: Vec<ProbeRecord> = (0..12u64)
            .filter(|k| k % u64::from(count) == u64::from(index))
            .map(|k| record(k, 10 + k))
            .collect();
        let wall = Duration::from_secs(1 + u64::from(index));
        let mut result = RunResult::from_records(&config, 0, records, wall, &Monitored::default());
        result.part_of = Some(PartOf {
            part: Part { index, count },
            seed,
            start_at_unix_ms: 1_000,
        });
        result
    }

    #[test]
    fn merged_parts_are_one_accumulator_over_every_record() {
        let merged =
            merge_parts(vec![part(2, 3, 7), part(0, 3, 7), part(1, 3, 7)]).expect("merges");
        let all: Vec<ProbeRecord> = (0..12).map(|k| record(k, 10 + k)).collect();
        let config = RunConfig {
            load: merged.load,
            ..RunConfig::closed(1, 12)
        };
        let one = RunResult::from_records(
            &config,
            0,
            all,
            Duration::from_secs(3),
            &Monitored::default(),
        );
        assert_eq!(merged.requests, 12);
        assert_eq!(merged.ttft_ms, one.ttft_ms);
        assert_eq!(merged.e2e_ms, one.e2e_ms);
        assert_eq!(merged.total_output_tokens, one.total_output_tokens);
        assert_eq!(merged.duration_s, 3.0, "the last part's end");
        assert_eq!(
            merged.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (0..12).map(Some).collect::<Vec<_>>()
        );
        // The in-flight cap added back up: 3 + 3 + 2.
        assert!(matches!(
            merged.load,
            Load::Rate {
                max_concurrency: Some(8),
                ..
            }
        ));
        assert_eq!(merged.bound, Bound::Requests(12));
    }

    #[test]
    fn parts_that_do_not_make_one_schedule_are_refused() {
        let missing = merge_parts(vec![part(0, 3, 7), part(2, 3, 7)]).unwrap_err();
        assert_eq!(
            missing,
            MergeError::Missing {
                missing: vec![1],
                count: 3
            }
        );
        let twice = merge_parts(vec![part(0, 2, 7), part(0, 2, 7)]).unwrap_err();
        assert!(matches!(twice, MergeError::Duplicate(_)), "{twice}");
        let seeds = merge_parts(vec![part(0, 2, 7), part(1, 2, 8)]).unwrap_err();
        assert!(seeds.to_string().contains("seed"), "{seeds}");
        let counts = merge_parts(vec![part(0, 2, 7), part(1, 3, 7)]).unwrap_err();
        assert!(
            matches!(counts, MergeError::CountDiffers { .. }),
            "{counts}"
        );
        let mut lone = part(0, 1, 7);
        lone.part_of = None;
        assert_eq!(
            merge_parts(vec![lone]).unwrap_err(),
            MergeError::NotAPart(0)
        );
        assert_eq!(merge_parts(Vec::new()).unwrap_err(), MergeError::NoParts);
    }

    #[test]
    fn part_flags_parse_and_share_out() {
        assert_eq!(Part::parse("1/4"), Ok(Part { index: 1, count: 4 }));
        for bad in ["4/4", "1", "a/2", "0/0"] {
            assert!(Part::parse(bad).is_err(), "{bad}");
        }
        let shares: Vec<u32> = (0..3)
            .map(|index| Part { index, count: 3 }.share(8))
            .collect();
        assert_eq!(shares, [3, 3, 2]);
        let owned: Vec<u64> = (0..9)
            .filter(|k| Part { index: 2, count: 3 }.owns(*k))
            .collect();
        assert_eq!(owned, [2, 5, 8]);
    }
}
