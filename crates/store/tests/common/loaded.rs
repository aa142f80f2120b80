//! A page sequence built from a real capture (`fixtures/vllm-live/`): the
//! captured page's every line, with counters and histograms advancing as a
//! server under varying load would (requests finish, observations land in
//! buckets, token counters grow) and its load gauges following the load.
//! `_created` lines, info metrics and labels stay as captured.

use std::collections::HashMap;

use llmwatch_core::exposition::{detect_format, parse_lenient};
use llmwatch_store::RawSample;

/// How a line of the page moves.
#[derive(Debug, Clone, Copy)]
enum Role {
    /// `_bucket` of histogram `group`, bucket `index` of its sorted bounds.
    Bucket {
        group: usize,
        le: f64,
    },
    Sum {
        group: usize,
    },
    Count {
        group: usize,
    },
    /// A counter advancing by `weight` per finished request.
    Counter {
        weight: f64,
    },
    /// A gauge following the load between 0 and `scale`.
    LoadGauge {
        scale: f64,
    },
    Constant,
}

/// The pages of a loaded vLLM server, one per [`LoadedVllm::next_page`].
pub struct LoadedVllm {
    lines: Vec<RawSample>,
    roles: Vec<Role>,
    /// Per histogram: its sorted bucket bounds.
    bounds: Vec<Vec<f64>>,
    step: u64,
    rng: u64,
}

fn histogram_base(name: &str) -> Option<&str> {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
}

/// A stable small number per name, so each counter has its own pace.
fn weight_of(name: &str) -> f64 {
    let hash = name.bytes().fold(1469598103934665603u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(1099511628211)
    });
    [1.0, 3.0, 17.0, 230.0, 512.0][(hash % 5) as usize]
}

impl LoadedVllm {
    /// From the text of a captured `/metrics` page.
    pub fn new(body: &[u8]) -> LoadedVllm {
        let (page, _) = parse_lenient(body, detect_format(None, body));
        let lines = RawSample::all_of(&page);
        let mut groups: HashMap<(String, Vec<(String, String)>), usize> = HashMap::new();
        let mut group_of = |base: &str, labels: &[(String, String)]| {
            let key: Vec<(String, String)> =
                labels.iter().filter(|(k, _)| k != "le").cloned().collect();
            let next = groups.len();
            *groups.entry((base.to_string(), key)).or_insert(next)
        };
        let mut bounds: Vec<Vec<f64>> = Vec::new();
        let has_buckets: std::collections::HashSet<String> = lines
            .iter()
            .filter_map(|l| l.name.strip_suffix("_bucket").map(str::to_string))
            .collect();
        let mut roles = Vec::with_capacity(lines.len());
        for line in &lines {
            let base = histogram_base(&line.name).filter(|b| has_buckets.contains(*b));
            let role = match base {
                Some(base) if line.name.ends_with("_bucket") => {
                    let le = line
                        .labels
                        .iter()
                        .find(|(k, _)| k == "le")
                        .and_then(|(_, v)| v.replace("+Inf", "inf").parse().ok())
                        .unwrap_or(f64::INFINITY);
                    let group = group_of(base, &line.labels);
                    if group >= bounds.len() {
                        bounds.resize(group + 1, Vec::new());
                    }
                    bounds[group].push(le);
                    Role::Bucket { group, le }
                }
                Some(base) if line.name.ends_with("_sum") => Role::Sum {
                    group: group_of(base, &line.labels),
                },
                Some(base) => Role::Count {
                    group: group_of(base, &line.labels),
                },
                None if line.name.ends_with("_total") => Role::Counter {
                    weight: weight_of(&line.name),
                },
                None if ["running", "waiting", "usage", "perc"]
                    .iter()
                    .any(|w| line.name.contains(w)) =>
                {
                    Role::LoadGauge {
                        scale: if line.name.contains("perc") || line.name.contains("usage") {
                            1.0
                        } else {
                            64.0
                        },
                    }
                }
                None => Role::Constant,
            };
            roles.push(role);
        }
        let groups_seen = roles
            .iter()
            .filter_map(|r| match r {
                Role::Bucket { group, .. } | Role::Sum { group } | Role::Count { group } => {
                    Some(*group + 1)
                }
                _ => None,
            })
            .max()
            .unwrap_or(0);
        if groups_seen > bounds.len() {
            bounds.resize(groups_seen, Vec::new());
        }
        for b in &mut bounds {
            b.sort_by(f64::total_cmp);
        }
        LoadedVllm {
            lines,
            roles,
            bounds,
            step: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn uniform(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The load now, between 0.05 and 1: slow waves with noise.
    fn load(&mut self) -> f64 {
        let t = self.step as f64;
        let wave = 0.55 + 0.35 * (t / 180.0).sin() + 0.1 * (t / 23.0).sin();
        (wave + 0.1 * (self.uniform() - 0.5)).clamp(0.05, 1.0)
    }

    /// The next page, one scrape interval later.
    pub fn next_page(&mut self) -> Vec<RawSample> {
        self.step += 1;
        let load = self.load();
        let finished = (load * 12.0 * self.uniform() * 2.0).round();
        // Per histogram: this interval's observations (a bucket bound each).
        let observations: Vec<Vec<f64>> = (0..self.bounds.len())
            .map(|group| {
                let finite: Vec<f64> = self.bounds[group]
                    .iter()
                    .copied()
                    .filter(|b| b.is_finite())
                    .collect();
                (0..finished as usize)
                    .map(|_| {
                        let centre = finite.len() as f64 * (0.25 + 0.4 * load);
                        let spread = (self.uniform() + self.uniform() - 1.0) * 4.0;
                        let index = (centre + spread).clamp(0.0, finite.len() as f64 - 1.0);
                        finite.get(index as usize).copied().unwrap_or(1.0) * 0.9
                    })
                    .collect()
            })
            .collect();
        for i in 0..self.lines.len() {
            let delta = match self.roles[i] {
                Role::Bucket { group, le } => {
                    observations[group].iter().filter(|o| **o <= le).count() as f64
                }
                Role::Sum { group } => observations[group].iter().sum(),
                Role::Count { group } => observations[group].len() as f64,
                Role::Counter { weight } => (finished * weight * (0.5 + self.uniform())).round(),
                Role::LoadGauge { scale } => {
                    let target = (load * scale * 100.0).round() / 100.0;
                    let target = if scale > 1.0 { target.round() } else { target };
                    self.lines[i].value = target;
                    0.0
                }
                Role::Constant => 0.0,
            };
            self.lines[i].value += delta;
        }
        self.lines.clone()
    }
}
