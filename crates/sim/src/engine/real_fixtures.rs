//! The twin against every recorded real vLLM 0.32 sweep
//! (`fixtures/vllm-real-sweeps/`): the profile fitted to the default sweep
//! (`default.fitted-profile.json`), given each recording's flags, runs each
//! of its ladder levels as a closed loop of that many clients, and must
//! preempt at exactly the levels where the real server counted preemptions.
//!
//! Steps are driven directly (no clock): which requests run, wait and get
//! preempted depends on the block and slot arithmetic, not on step costs.

use std::path::PathBuf;

use serde_json::Value;

use super::*;
use crate::fit::ProfileFile;
use crate::vllm_args::parse_vllm_args;

/// Steps a client waits between its request's last token and its next
/// request: the fitted 23 ms outside the engine over a ~10 ms step.
const CLIENT_GAP_STEPS: usize = 2;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/vllm-real-sweeps")
}

/// One recording: its file and the vLLM flags it was started with
/// (the table in the fixtures' README).
struct Recording {
    file: &'static str,
    flags: &'static str,
}

const RECORDINGS: [Recording; 8] = [
    Recording {
        file: "default",
        flags: "",
    },
    Recording {
        file: "kv-blocks-40",
        flags: "--num-gpu-blocks-override 40",
    },
    Recording {
        file: "max-num-seqs-4",
        flags: "--max-num-seqs 4",
    },
    Recording {
        file: "max-num-batched-tokens-256",
        flags: "--max-num-batched-tokens 256",
    },
    Recording {
        file: "prefix-caching-shared-0.75",
        flags: "",
    },
    Recording {
        file: "no-prefix-caching-shared-0.75",
        flags: "--no-enable-prefix-caching",
    },
    // The same server on a second, slower box (2026-12-07, 13:00).
    Recording {
        file: "second-box/default",
        flags: "",
    },
    Recording {
        file: "second-box/kv-blocks-40",
        flags: "--num-gpu-blocks-override 40",
    },
];

/// A recorded ladder level: concurrency, requests completed, preemptions.
struct Level {
    concurrency: usize,
    requests: usize,
    preemptions: u64,
}

struct Sweep {
    input: usize,
    output: usize,
    /// Share of each prompt common to every request (`shared-prefix:F`).
    shared: f64,
    num_gpu_blocks: usize,
    levels: Vec<Level>,
}

fn read_sweep(name: &str) -> Sweep {
    let path = fixtures().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).expect("fixture readable");
    let doc: Value = serde_json::from_str(&text).expect("fixture is JSON");
    let shape = doc["settings"]["shape"].as_str().expect("shape");
    let (input, output) = shape.split_once('x').expect("INxOUT");
    let shared = doc["settings"]["prompt"]
        .as_str()
        .and_then(|p| p.strip_prefix("shared-prefix:"))
        .map_or(0.0, |f| f.parse().expect("fraction"));
    let levels = doc["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| &s["step"])
        .map(|s| Level {
            concurrency: s["load"]["concurrency"].as_u64().expect("closed loop") as usize,
            requests: s["requests_ok"].as_u64().expect("requests") as usize,
            preemptions: s["server"]["preemptions"].as_f64().expect("preemptions") as u64,
        })
        .collect();
    Sweep {
        input: input.parse().expect("input"),
        output: output.parse().expect("output"),
        shared,
        num_gpu_blocks: doc["card"]["num_gpu_blocks"]
            .as_str()
            .and_then(|n| n.parse().ok())
            .expect("card's num_gpu_blocks"),
        levels,
    }
}

/// Preemptions the twin counts while `level.concurrency` clients complete
/// `level.requests` requests, each sending its next one
/// `CLIENT_GAP_STEPS` after its last token.
fn preemptions_at(profile: &Profile, sweep: &Sweep, level: &Level) -> u64 {
    let shared = Arc::new(Shared::new(std::collections::HashMap::new()));
    let mut core = EngineCore::new(profile.clone(), 7, shared);
    let shared_len = (sweep.input as f64 * sweep.shared).round() as usize;
    let mut next = 0u32;
    let mut send = |core: &mut EngineCore| {
        next += 1;
        let prompt: Vec<u32> = (0..sweep.input)
            .map(|i| if i < shared_len { i as u32 } else { next })
            .collect();
        let (tx, rx) = mpsc::unbounded_channel();
        core.add(
            NewSeq {
                prompt,
                max_tokens: sweep.output,
                min_tokens: sweep.output,
                ignore_eos: true,
                arrival: Instant::now(),
                tx,
            },
            Instant::now(),
        );
        rx
    };
    // Each client: its stream, or the steps left before it sends again.
    let mut clients: Vec<Result<mpsc::UnboundedReceiver<TokenEvent>, usize>> = (0..level
        .concurrency)
        .map(|_| Ok(send(&mut core)))
        .collect();
    let mut completed = 0;
    let mut steps = 0;
    while completed < level.requests {
        steps += 1;
        assert!(
            steps < 200_000,
            "{} requests never completed",
            level.requests
        );
        core.reap_aborted();
        let plan = core.schedule(Instant::now());
        core.complete(plan, Instant::now());
        for client in clients.iter_mut() {
            *client = match std::mem::replace(client, Err(0)) {
                Ok(mut rx) => {
                    let mut done = false;
                    while let Ok(event) = rx.try_recv() {
                        done |= event.finish.is_some();
                    }
                    if done {
                        completed += 1;
                        Err(CLIENT_GAP_STEPS)
                    } else {
                        Ok(rx)
                    }
                }
                Err(0) => Ok(send(&mut core)),
                Err(wait) => Err(wait - 1),
            };
        }
    }
    let preemptions = core.shared.lock_stats().preemptions;
    preemptions
}

#[test]
fn the_twin_preempts_where_each_real_sweep_preempted() {
    let text = std::fs::read_to_string(fixtures().join("default.fitted-profile.json"))
        .expect("fitted profile readable");
    let fitted = ProfileFile::from_json(&text).expect("fitted profile");
    let mut disagreements = Vec::new();
    for rec in &RECORDINGS {
        let sweep = read_sweep(rec.file);
        let applied = parse_vllm_args(&fitted.profile, &fitted.vllm, rec.flags).expect("flags");
        let profile = applied.profile;
        assert_eq!(
            profile.num_gpu_blocks, sweep.num_gpu_blocks,
            "{}: the twin's cache is the real one",
            rec.file
        );
        for level in &sweep.levels {
            let twin = preemptions_at(&profile, &sweep, level);
            eprintln!(
                "{:<30} c={:<3} preemptions real {:>3} twin {:>3}",
                rec.file, level.concurrency, level.preemptions, twin
            );
            if (twin > 0) != (level.preemptions > 0) {
                disagreements.push(format!(
                    "{} c={}: real {}, twin {}",
                    rec.file, level.concurrency, level.preemptions, twin
                ));
            }
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
}
