//! One result from the parts of a shared schedule (`llmwatch bench
//! merge`): each part's records fed to a [`RunStats`] of its own, those
//! merged as a pool merges its workers', so the merged statistics are what
//! one accumulator fed every part's records would hold — counts exact,
//! percentiles exact up to [`crate::stats::EXACT_SAMPLES`] values per
//! metric and within the HdrHistogram's 0.05 % beyond.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::result::{RunResult, RunStats};
use crate::selfcheck::Monitored;
use crate::settings::{Load, Part, RunConfig};
use crate::stats::EXACT_SAMPLES;

/// What a part's result says of the schedule it was cut from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartOf {
    pub part: Part,
    /// The shared schedule's seed (arrivals, prompt bodies).
    pub seed: u64,
    /// The shared start instant (`--start-at`), Unix ms.
    pub start_at_unix_ms: u64,
}

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
