//! The step scheduler, modelled on vLLM V1's: one loop, one batch per step.
//!
//! Each step: running sequences first (each gets its remaining prompt chunk
//! or one decode token, within the step's token budget; a sequence that
//! needs a new KV block when none is free preempts the most recently
//! admitted running sequence — recompute: its blocks are freed and it goes
//! back to the front of the waiting queue); then, if nothing was preempted,
//! waiting sequences in FIFO order while there are free slots, budget and
//! blocks for their whole known tokens (prefix-cache hits are looked up at
//! admission). The step then "runs": the task sleeps for its cost divided
//! by `time_scale`, and every sequence whose scheduled tokens reach the end
//! of its known tokens samples one new token, which is sent to its HTTP
//! stream at once.
//!
//! vLLM 0.32 schedules step N+1 while step N runs (async scheduling,
//! `EngineCore.step_with_batch_queue`), and only then processes step N's
//! output and reports its stats. Two things follow, both modelled here:
//! the slot for every token step N samples is allocated (preempting from
//! the back when no block is free) before the gauges are read, and the
//! requests that finish in step N still hold their blocks and their
//! `max_num_seqs` slot while step N+1 admits. Admission checks only the
//! blocks of the prompt (`scheduler_reserve_full_isl`), so a request
//! admitted into the last free blocks, whose first sampled token starts a
//! new block, is preempted by its own next-token allocation at once: its
//! first token is still delivered, and it waits, now one token longer,
//! until its whole sequence fits (`fixtures/vllm-real-sweeps/`
//! `kv-blocks-40`: 8–13 preemptions a step, running 7, KV usage 35/39).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::blocks::{BlockId, BlockPool};
use crate::stats::{FinishReason, Stats};
use crate::tokenizer::{generated_word, mix};
use crate::{Profile, Shared};

/// One output event of a sequence, sent to its HTTP handler.
#[derive(Debug, Clone)]
pub(crate) struct TokenEvent {
    /// Token text ("" for the pseudo-EOS).
    pub(crate) text: &'static str,
    /// Set on the last token.
    pub(crate) finish: Option<FinishReason>,
    /// Prompt tokens served from the prefix cache at first admission.
    pub(crate) cached_tokens: usize,
    /// When the engine queued and first scheduled the sequence (vLLM's
    /// per-request metrics).
    pub(crate) queued: Instant,
    pub(crate) scheduled: Option<Instant>,
    /// When the engine produced this token.
    pub(crate) at: Instant,
}

/// A request handed to the engine.
pub(crate) struct NewSeq {
    pub(crate) prompt: Vec<u32>,
    pub(crate) max_tokens: usize,
    pub(crate) min_tokens: usize,
    pub(crate) ignore_eos: bool,
    pub(crate) arrival: Instant,
    pub(crate) tx: mpsc::UnboundedSender<TokenEvent>,
}

struct Seq {
    prompt_len: usize,
    block_hashes: Vec<u64>,
    /// Prompt plus generated tokens.
    num_tokens: usize,
    num_computed: usize,
    output_len: usize,
    max_tokens: usize,
    min_tokens: usize,
    ignore_eos: bool,
    text_seed: u64,
    blocks: Vec<BlockId>,
    committed_blocks: usize,
    tx: mpsc::UnboundedSender<TokenEvent>,
    arrival: Instant,
    queued: Instant,
    scheduled: Option<Instant>,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    cached_tokens: Option<usize>,
    num_preemptions: u32,
    /// Preempted while the step that samples its next token was already
    /// scheduled: that token is still delivered when the step completes
    /// (vLLM's stale output of a preempted request).
    sample_in_flight: bool,
}

/// What one step will compute.
struct Plan {
    /// (index into `running`, tokens scheduled).
    items: Vec<(usize, usize)>,
    decode_seqs: usize,
    prefill_tokens: usize,
}

pub(crate) struct EngineCore {
    profile: Profile,
    max_model_len: usize,
    seed: u64,
    pool: BlockPool,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    shared: Arc<Shared>,
    /// What the requests that finished in the last step held: vLLM frees
    /// them only after the next step's admissions.
    finishing: Finishing,
    /// The last step's next-token allocation preempted: as vLLM, the next
    /// step admits nothing.
    preempted_for_next_step: bool,
}

/// Blocks and `max_num_seqs` slots still held by requests that finished in
/// the last step, while the next step admits.
#[derive(Default, Clone, Copy)]
struct Finishing {
    seqs: usize,
    blocks: usize,
}

impl EngineCore {
    pub(crate) fn new(profile: Profile, seed: u64, shared: Arc<Shared>) -> EngineCore {
        EngineCore {
            pool: BlockPool::new(profile.num_gpu_blocks, profile.enable_prefix_caching),
            max_model_len: profile.max_model_len,
            profile,
            seed,
            waiting: VecDeque::new(),
            running: Vec::new(),
            shared,
            finishing: Finishing::default(),
            preempted_for_next_step: false,
        }
    }

    fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    fn add(&mut self, req: NewSeq, now: Instant) {
        let bs = self.profile.block_size;
        let mut block_hashes = Vec::with_capacity(req.prompt.len() / bs);
        let mut parent = self.seed;
        for chunk in req.prompt.chunks_exact(bs) {
            let mut h = parent;
            for &t in chunk {
                h = mix(h ^ u64::from(t));
            }
            block_hashes.push(h);
            parent = h;
        }
        let text_seed = mix(parent ^ req.prompt.len() as u64);
        {
            let mut st = self.shared.lock_stats();
            st.observe("request_params_n", 1.0);
            st.observe("request_params_max_tokens", req.max_tokens as f64);
            st.observe("request_max_num_generation_tokens", req.max_tokens as f64);
        }
        self.waiting.push_back(Seq {
            prompt_len: req.prompt.len(),
            block_hashes,
            num_tokens: req.prompt.len(),
            num_computed: 0,
            output_len: 0,
            max_tokens: req.max_tokens,
            min_tokens: req.min_tokens,
            ignore_eos: req.ignore_eos,
            text_seed,
            blocks: Vec::new(),
            committed_blocks: 0,
            tx: req.tx,
            arrival: req.arrival,
            queued: now,
            scheduled: None,
            first_token: None,
            last_token: None,
            cached_tokens: None,
            num_preemptions: 0,
            sample_in_flight: false,
        });
    }

    /// Drops sequences whose client went away, freeing their blocks.
    fn reap_aborted(&mut self) {
        let mut aborted = 0u64;
        let pool = &mut self.pool;
        self.running.retain(|s| {
            if s.tx.is_closed() {
                pool.free_blocks(&s.blocks);
                aborted += 1;
                false
            } else {
                true
            }
        });
        self.waiting.retain(|s| {
            if s.tx.is_closed() {
                pool.free_blocks(&s.blocks);
                aborted += 1;
                false
            } else {
                true
            }
        });
        if aborted > 0 {
            let mut st = self.shared.lock_stats();
            st.finished_abort += aborted;
        }
    }

    fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.profile.block_size)
    }

    /// Publishes the full prompt blocks of `seq` up to `computed` tokens to
    /// the prefix cache.
    fn commit_prompt_blocks(pool: &mut BlockPool, seq: &mut Seq, computed: usize, bs: usize) {
        let full = (computed.min(seq.prompt_len) / bs).min(seq.block_hashes.len());
        while seq.committed_blocks < full {
            let k = seq.committed_blocks;
            if let Some(&b) = seq.blocks.get(k) {
                pool.commit(b, seq.block_hashes[k]);
            }
            seq.committed_blocks += 1;
        }
    }

    fn preempt_last(&mut self) -> Option<usize> {
        let mut victim = self.running.pop()?;
        self.pool.free_blocks(&victim.blocks);
        victim.blocks.clear();
        victim.committed_blocks = 0;
        victim.num_computed = 0;
        victim.num_preemptions += 1;
        self.waiting.push_front(victim);
        self.shared.lock_stats().preemptions += 1;
        Some(self.running.len())
    }

    fn schedule(&mut self, now: Instant) -> Plan {
        let mut budget = self.profile.max_num_batched_tokens;
        let mut items: Vec<(usize, usize)> = Vec::new();
        let preempted = self.schedule_running(&mut budget, &mut items)
            || std::mem::take(&mut self.preempted_for_next_step);
        // As vLLM: no new admissions in a step that had to preempt.
        if !preempted {
            self.admit_waiting(now, &mut budget, &mut items);
        }
        self.finishing = Finishing::default();
        let mut plan = self.plan_of(items);
        self.reserve_next_tokens(&mut plan);
        plan
    }

    /// New blocks the tokens sampled by this step's `items` will need.
    fn next_token_blocks(&self, items: &[(usize, usize)]) -> usize {
        items
            .iter()
            .map(|&(idx, n)| {
                let s = &self.running[idx];
                let after = s.num_computed + n;
                if after < s.num_tokens {
                    return 0; // mid-prefill: no token sampled this step
                }
                if s.output_len + 1 >= s.max_tokens || after + 1 > self.max_model_len {
                    // Its last token: vLLM schedules no step after it.
                    return 0;
                }
                self.blocks_for(after + 1).saturating_sub(s.blocks.len())
            })
            .sum()
    }

    /// vLLM 0.32 schedules the next step while this one runs (async
    /// scheduling): every sequence that will sample a token this step needs
    /// a slot for it at once, and when the free blocks cannot give one,
    /// sequences are preempted from the back before the step's stats are
    /// reported (a preemption counted), so the gauges never show a
    /// sequence the next step drops. The victim's step still runs: the
    /// blocks it computes stay in the prefix cache (vLLM hashes them when
    /// it allocates them) and the token it samples is still delivered.
    fn reserve_next_tokens(&mut self, plan: &mut Plan) {
        loop {
            let needed = self.next_token_blocks(&plan.items);
            if needed <= self.pool.num_free() || self.running.len() <= 1 {
                return;
            }
            let victim = self.running.len() - 1;
            if let Some(&(_, n)) = plan.items.iter().find(|&&(idx, _)| idx == victim) {
                let bs = self.profile.block_size;
                let seq = &mut self.running[victim];
                let computed = seq.num_computed + n;
                Self::commit_prompt_blocks(&mut self.pool, seq, computed, bs);
                seq.sample_in_flight = computed >= seq.num_tokens;
            }
            if self.preempt_last().is_none() {
                return;
            }
            self.preempted_for_next_step = true;
            plan.items.retain(|&(idx, _)| idx != victim);
        }
    }

    /// Running sequences first, in order, each with the tokens it needs
    /// (preempting from the back when blocks run out); `true` if any was
    /// preempted.
    fn schedule_running(&mut self, budget: &mut usize, items: &mut Vec<(usize, usize)>) -> bool {
        let chunked = self.profile.enable_chunked_prefill;
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() && *budget > 0 {
            let remaining = self.running[i].num_tokens - self.running[i].num_computed;
            let n = if chunked {
                remaining.min(*budget)
            } else if remaining > *budget && !items.is_empty() {
                i += 1;
                continue;
            } else {
                remaining
            };
            let need = self
                .blocks_for(self.running[i].num_computed + n)
                .saturating_sub(self.running[i].blocks.len());
            let mut self_preempted = false;
            while self.pool.num_free() < need {
                preempted = true;
                match self.preempt_last() {
                    Some(pos) if pos == i => {
                        self_preempted = true;
                        break;
                    }
                    Some(_) => {}
                    None => {
                        self_preempted = true;
                        break;
                    }
                }
            }
            if self_preempted {
                break;
            }
            for _ in 0..need {
                if let Some(b) = self.pool.allocate() {
                    self.running[i].blocks.push(b);
                }
            }
            items.push((i, n));
            *budget = budget.saturating_sub(n);
            i += 1;
        }
        preempted
    }

    /// Then waiting sequences, while the budget, `max_num_seqs` and free
    /// blocks (after prefix-cache hits) allow.
    fn admit_waiting(&mut self, now: Instant, budget: &mut usize, items: &mut Vec<(usize, usize)>) {
        let chunked = self.profile.enable_chunked_prefill;
        let held = self.finishing;
        while *budget > 0 && self.running.len() + held.seqs < self.profile.max_num_seqs {
            let Some(seq) = self.waiting.front() else {
                break;
            };
            // A full hit must still compute one token (vLLM caps hits at
            // num_tokens - 1).
            let max_hit_blocks = (seq.num_tokens - 1) / self.profile.block_size;
            let cap = max_hit_blocks.min(seq.block_hashes.len());
            let hit = self.pool.lookup_prefix(&seq.block_hashes[..cap]);
            let hit_tokens = hit.len() * self.profile.block_size;
            let remaining = seq.num_tokens - hit_tokens;
            let n = if chunked {
                remaining.min(*budget)
            } else if remaining > *budget && !items.is_empty() {
                break;
            } else {
                remaining
            };
            let need_new = self.blocks_for(hit_tokens + n).saturating_sub(hit.len());
            // Admitted only with room for all its known tokens (vLLM's
            // `scheduler_reserve_full_isl`, chunked or not): the prompt, and
            // for a preempted request the tokens it has sampled. Nothing is
            // kept for the token it will sample: the next step's allocation
            // preempts for that (`reserve_next_tokens`).
            let need_admit = self
                .blocks_for(seq.num_tokens + 1)
                .saturating_sub(hit.len());
            let free_after_touch = self
                .pool
                .num_free()
                .saturating_sub(held.blocks)
                .saturating_sub(self.pool.count_free_among(&hit));
            if free_after_touch < need_admit {
                break;
            }
            let Some(mut seq) = self.waiting.pop_front() else {
                break;
            };
            for &b in &hit {
                self.pool.touch(b);
            }
            // Hit blocks are already in the cache; new ones are
            // published as their prompt tokens get computed.
            seq.committed_blocks = hit.len();
            seq.blocks = hit;
            for _ in 0..need_new {
                if let Some(b) = self.pool.allocate() {
                    seq.blocks.push(b);
                }
            }
            seq.num_computed = hit_tokens;
            {
                let mut st = self.shared.lock_stats();
                // vLLM counts a preempted request's lookups apart
                // (`PrefixCacheStats.preempted_*`), not in these counters.
                if seq.num_preemptions == 0 {
                    st.prefix_queries += seq.num_tokens as u64;
                    st.prefix_hits += hit_tokens as u64;
                }
                if seq.scheduled.is_none() {
                    st.observe(
                        "request_queue_time_seconds",
                        (now - seq.queued).as_secs_f64(),
                    );
                }
            }
            if seq.scheduled.is_none() {
                seq.scheduled = Some(now);
                seq.cached_tokens = Some(hit_tokens);
            }
            self.running.push(seq);
            items.push((self.running.len() - 1, n));
            *budget = budget.saturating_sub(n);
        }
    }

    /// The step's batch: which items decode, how many tokens prefill.
    fn plan_of(&self, items: Vec<(usize, usize)>) -> Plan {
        let mut decode_seqs = 0;
        let mut prefill_tokens = 0;
        for &(idx, n) in &items {
            let s = &self.running[idx];
            if n == 1 && s.output_len > 0 && s.num_computed + 1 == s.num_tokens {
                decode_seqs += 1;
            } else {
                prefill_tokens += n;
            }
        }
        Plan {
            items,
            decode_seqs,
            prefill_tokens,
        }
    }

    fn step_cost_s(&self, plan: &Plan) -> f64 {
        if plan.items.is_empty() {
            return 0.0;
        }
        self.profile.step_base_s
            + self.profile.decode_per_seq_s * plan.decode_seqs as f64
            + self.profile.prefill_per_token_s * plan.prefill_tokens as f64
    }

    /// Applies a finished step: advances sequences, samples tokens, sends
    /// them, retires finished sequences (whose blocks and slots the next
    /// step's admissions still see as taken).
    fn complete(&mut self, plan: Plan, now: Instant) {
        let bs = self.profile.block_size;
        let mut finished_idx: Vec<usize> = Vec::new();
        let mut st = self.shared.lock_stats();
        st.observe(
            "iteration_tokens_total",
            (plan.prefill_tokens + plan.decode_seqs) as f64,
        );
        st.decode_calls += 1;
        st.busy_slot_decodes += plan.items.len() as u64;
        for &(idx, n) in &plan.items {
            let seq = &mut self.running[idx];
            seq.num_computed += n;
            let computed = seq.num_computed;
            Self::commit_prompt_blocks(&mut self.pool, seq, computed, bs);
            if seq.num_computed < seq.num_tokens {
                continue; // mid-prefill chunk
            }
            if sample_token(&self.profile, self.max_model_len, &mut st, seq, now) {
                finished_idx.push(idx);
            }
        }
        // Preempted with this step's token in flight: delivered all the
        // same; the request waits one token longer.
        let mut finished_waiting = false;
        for seq in self.waiting.iter_mut().filter(|s| s.sample_in_flight) {
            seq.sample_in_flight = false;
            let done = sample_token(&self.profile, self.max_model_len, &mut st, seq, now);
            seq.sample_in_flight = done;
            finished_waiting |= done;
        }
        drop(st);
        if finished_waiting {
            self.waiting.retain(|s| !s.sample_in_flight);
        }
        let free_before = self.pool.num_free();
        finished_idx.sort_unstable();
        for &idx in finished_idx.iter().rev() {
            let seq = self.running.remove(idx);
            self.pool.free_blocks(&seq.blocks);
        }
        self.finishing = Finishing {
            seqs: finished_idx.len(),
            blocks: self.pool.num_free() - free_before,
        };
    }

    fn publish_gauges(&self) {
        let mut st = self.shared.lock_stats();
        st.running = self.running.len();
        st.waiting = self.waiting.len();
        st.kv_usage = self.pool.usage();
        st.kv_blocks_used = self.pool.num_used();
    }
}

impl EngineCore {
    /// Resets the prefix cache if `POST /reset_prefix_cache` asked (only
    /// while idle, as vLLM refuses while blocks are in use).
    fn take_prefix_cache_reset(&mut self) {
        if self
            .shared
            .reset_prefix_cache
            .swap(false, Ordering::Relaxed)
        {
            self.pool.reset_prefix_cache();
        }
    }
}

/// The engine task: drains new requests, plans a step, sleeps its cost
/// (scaled), applies it. Sleeps are taken against a running deadline so
/// that timer granularity (~1 ms) does not add up over many short steps.
pub(crate) async fn run(
    mut core: EngineCore,
    mut rx: mpsc::UnboundedReceiver<NewSeq>,
    time_scale: f64,
) {
    let mut deadline: Option<Instant> = None;
    loop {
        if core.is_idle() {
            core.publish_gauges();
            // Idle: the last step's output has long been processed.
            core.finishing = Finishing::default();
            deadline = None;
            match rx.recv().await {
                Some(req) => {
                    core.take_prefix_cache_reset();
                    core.add(req, Instant::now())
                }
                None => return,
            }
        }
        while let Ok(req) = rx.try_recv() {
            core.add(req, Instant::now());
        }
        core.reap_aborted();
        let now = Instant::now();
        let plan = core.schedule(now);
        core.publish_gauges();
        if plan.items.is_empty() {
            // Nothing fits this step (all waiting on blocks held by
            // sequences that were just reaped, etc.): try again shortly.
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let slowdown = f64::from_bits(core.shared.slowdown_bits.load(Ordering::Relaxed));
        let cost_s = core.step_cost_s(&plan) * slowdown / time_scale;
        let prefill_share = {
            let total = core.profile.prefill_per_token_s * plan.prefill_tokens as f64
                + core.profile.decode_per_seq_s * plan.decode_seqs as f64;
            if total > 0.0 {
                core.profile.prefill_per_token_s * plan.prefill_tokens as f64 / total
            } else {
                0.0
            }
        };
        let started = Instant::now();
        if cost_s > 0.0 && cost_s.is_finite() {
            let base = match deadline {
                // Do not bank more than 20 ms of lag: a stalled runtime
                // should not be followed by a burst of instant steps.
                Some(d) if started.saturating_duration_since(d) < Duration::from_millis(20) => d,
                _ => started,
            };
            let target = base + Duration::from_secs_f64(cost_s);
            deadline = Some(target);
            if target > Instant::now() {
                tokio::time::sleep_until(target).await;
            } else {
                tokio::task::yield_now().await;
            }
        } else {
            deadline = None;
            tokio::task::yield_now().await;
        }
        let done = Instant::now();
        core.shared
            .record_activity((done - started).as_secs_f64(), cost_s, prefill_share);
        core.complete(plan, done);
        core.publish_gauges();
    }
}

/// Samples one token for `seq`, sends it, and records it; `true` if it
/// was the sequence's last.
fn sample_token(
    profile: &Profile,
    max_model_len: usize,
    st: &mut Stats,
    seq: &mut Seq,
    now: Instant,
) -> bool {
    seq.output_len += 1;
    seq.num_tokens += 1;
    st.generation_tokens += 1;
    let cached = seq.cached_tokens.unwrap_or(0);
    observe_token(st, seq, now, cached);
    seq.last_token = Some(now);
    let eos = !seq.ignore_eos
        && seq.output_len > seq.min_tokens
        && profile.eos_probability > 0.0
        && (mix(seq.text_seed ^ 0x5eed ^ ((seq.output_len as u64) << 20)) as f64 / u64::MAX as f64)
            < profile.eos_probability;
    let finish = if eos {
        Some(FinishReason::Stop)
    } else if seq.output_len >= seq.max_tokens || seq.num_tokens > max_model_len {
        Some(FinishReason::Length)
    } else {
        None
    };
    let text = if eos {
        ""
    } else {
        generated_word(seq.text_seed, seq.output_len)
    };
    // A closed receiver is reaped at the start of the next step.
    let _ = seq.tx.send(TokenEvent {
        text,
        finish,
        cached_tokens: cached,
        queued: seq.queued,
        scheduled: seq.scheduled,
        at: now,
    });
    if let Some(reason) = finish {
        observe_finished(st, seq, now, reason);
    }
    finish.is_some()
}

/// A sampled token's latency: TTFT and the prompt's token counts for the
/// first, ITL for the others.
fn observe_token(st: &mut Stats, seq: &mut Seq, now: Instant, cached: usize) {
    match seq.last_token {
        None => {
            st.observe(
                "time_to_first_token_seconds",
                (now - seq.arrival).as_secs_f64(),
            );
            st.prompt_tokens += seq.prompt_len as u64;
            st.prompt_tokens_cached += cached as u64;
            st.prompt_tokens_computed += (seq.prompt_len - cached) as u64;
            st.observe(
                "request_prefill_kv_computed_tokens",
                (seq.prompt_len - cached) as f64,
            );
            if let Some(scheduled) = seq.scheduled {
                st.prompt_seconds += (now - scheduled).as_secs_f64();
            }
            seq.first_token = Some(now);
        }
        Some(prev) => {
            st.observe("inter_token_latency_seconds", (now - prev).as_secs_f64());
        }
    }
}

/// A finished request's histograms, as vLLM records them at the end.
fn observe_finished(st: &mut Stats, seq: &Seq, now: Instant, reason: FinishReason) {
    st.finished(reason);
    let e2e = (now - seq.arrival).as_secs_f64();
    st.observe("e2e_request_latency_seconds", e2e);
    st.observe("request_prompt_tokens", seq.prompt_len as f64);
    st.observe("request_generation_tokens", seq.output_len as f64);
    st.observe("request_num_preemptions", f64::from(seq.num_preemptions));
    st.max_sequence_tokens = st.max_sequence_tokens.max(seq.prompt_len + seq.output_len);
    if let (Some(sched), Some(first)) = (seq.scheduled, seq.first_token) {
        st.observe(
            "request_inference_time_seconds",
            (now - sched).as_secs_f64(),
        );
        st.observe(
            "request_prefill_time_seconds",
            (first - sched).as_secs_f64(),
        );
        let decode = (now - first).as_secs_f64();
        st.observe("request_decode_time_seconds", decode);
        st.decode_seconds += decode;
        if seq.output_len > 1 {
            st.observe(
                "request_time_per_output_token_seconds",
                decode / (seq.output_len - 1) as f64,
            );
        }
    }
}

#[cfg(test)]
impl EngineCore {
    fn used_blocks(&self) -> usize {
        self.pool.num_used()
    }
}

#[cfg(test)]
mod real_fixtures;

#[cfg(test)]
mod tests {
    use super::*;

    fn core_with(profile: Profile) -> EngineCore {
        let shared = Arc::new(Shared::new(std::collections::HashMap::new()));
        EngineCore::new(profile, 7, shared)
    }

    fn add(
        core: &mut EngineCore,
        prompt: Vec<u32>,
        max_tokens: usize,
    ) -> mpsc::UnboundedReceiver<TokenEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        core.add(
            NewSeq {
                prompt,
                max_tokens,
                min_tokens: 0,
                ignore_eos: true,
                arrival: Instant::now(),
                tx,
            },
            Instant::now(),
        );
        rx
    }

    fn step(core: &mut EngineCore) {
        core.reap_aborted();
        let plan = core.schedule(Instant::now());
        core.complete(plan, Instant::now());
    }

    /// The real vLLM 0.32 recording (`fixtures/vllm-real-sweeps/
    /// kv-blocks-40.json`): 40 blocks of 128 tokens, 512 + 128 tokens a
    /// request, 16 in flight. Once past the opening burst (whose fourth
    /// prompt the 2 048-token budget splits, so an 8th runs for a step, as
    /// vLLM's scheduler would) at most 7 run and at most 35 of the 39
    /// usable blocks are in use whenever the gauges are read, while
    /// requests are preempted (admitted into the last 4 blocks, dropped by
    /// their own first decode slot) and still get every token once.
    #[tokio::test]
    async fn a_full_cache_runs_7_and_preempts_the_request_admitted_into_its_last_blocks() {
        let mut p = Profile::named("balanced").expect("known");
        p.num_gpu_blocks = 40;
        p.block_size = 128;
        p.max_model_len = 2048;
        p.max_num_seqs = 128;
        let mut core = core_with(p);
        let mut next = 0u32;
        let mut new_request = |core: &mut EngineCore| {
            next += 1;
            (add(core, vec![next; 512], 128), 0usize)
        };
        let mut clients: Vec<_> = (0..16).map(|_| new_request(&mut core)).collect();
        let (mut max_running, mut max_used, mut finished) = (0, 0, 0);
        for step in 0..3000 {
            core.reap_aborted();
            let plan = core.schedule(Instant::now());
            if step >= 4 {
                max_running = max_running.max(core.running.len());
                max_used = max_used.max(core.pool.num_used());
            }
            core.complete(plan, Instant::now());
            for (rx, tokens) in clients.iter_mut() {
                while let Ok(event) = rx.try_recv() {
                    *tokens += 1;
                    if event.finish.is_some() {
                        assert_eq!(*tokens, 128, "every token once");
                        finished += 1;
                        (*rx, *tokens) = new_request(&mut core);
                        break;
                    }
                }
            }
        }
        assert!(finished >= 40, "requests go on finishing: {finished}");
        assert_eq!((max_running, max_used), (7, 35));
        let preemptions = core.shared.lock_stats().preemptions;
        assert!(
            preemptions > 0 && preemptions < finished,
            "{preemptions} preemptions for {finished} requests"
        );
    }

    #[tokio::test]
    async fn kv_pressure_preempts_and_everything_finishes() {
        let mut p = Profile::named("balanced").expect("known");
        p.num_gpu_blocks = 8;
        p.max_model_len = 128;
        let mut core = core_with(p);
        let mut rxs: Vec<_> = (0..4)
            .map(|i| add(&mut core, vec![10 + i; 20], 20))
            .collect();
        for _ in 0..2000 {
            if core.is_idle() {
                break;
            }
            step(&mut core);
            assert!(core.used_blocks() <= 8);
        }
        assert!(core.is_idle());
        assert!(core.shared.lock_stats().preemptions > 0);
        for rx in &mut rxs {
            let mut n = 0;
            while let Ok(ev) = rx.try_recv() {
                n += 1;
                if ev.finish.is_some() {
                    assert_eq!(n, 20);
                }
            }
            assert_eq!(n, 20);
        }
        assert_eq!(core.used_blocks(), 0);
    }

    #[tokio::test]
    async fn shared_prefix_hits_the_cache() {
        let p = Profile::named("balanced").expect("known");
        let mut core = core_with(p);
        let prompt: Vec<u32> = (0..64).collect();
        let mut rx = add(&mut core, prompt.clone(), 2);
        while !core.is_idle() {
            step(&mut core);
        }
        let _ = rx.try_recv();
        let mut rx2 = add(&mut core, prompt, 2);
        while !core.is_idle() {
            step(&mut core);
        }
        let ev = rx2.try_recv().expect("token");
        // 64 tokens: 3 full blocks may hit (the 4th would leave nothing to compute).
        assert_eq!(ev.cached_tokens, 48);
        let st = core.shared.lock_stats();
        assert_eq!(st.prefix_queries, 128);
        assert_eq!(st.prefix_hits, 48);
    }

    #[tokio::test]
    async fn chunked_prefill_shares_steps_with_decodes() {
        let mut p = Profile::named("balanced").expect("known");
        p.max_num_batched_tokens = 512;
        let mut core = core_with(p);
        let mut short = add(&mut core, vec![3; 10], 50);
        step(&mut core); // short prefill -> first token
        assert!(short.try_recv().is_ok());
        let mut long = add(&mut core, vec![4; 2000], 5);
        // 2000 prompt tokens in chunks of <= 511 (1 budget token goes to
        // the short sequence's decode): 4 steps, the 4th emits the token.
        for i in 0..4 {
            let plan = core.schedule(Instant::now());
            assert_eq!(plan.decode_seqs, 1, "step {i}: the decode keeps running");
            assert!(plan.prefill_tokens <= 511);
            core.complete(plan, Instant::now());
            assert!(
                short.try_recv().is_ok(),
                "one token per step for the short one"
            );
        }
        assert!(long.try_recv().is_ok(), "first token after the last chunk");
    }

    #[tokio::test]
    async fn unchunked_prefill_is_scheduled_whole() {
        let mut p = Profile::named("balanced").expect("known");
        p.enable_chunked_prefill = false;
        p.max_num_batched_tokens = p.max_model_len;
        let mut core = core_with(p);
        let mut long = add(&mut core, vec![4; 3000], 2);
        let plan = core.schedule(Instant::now());
        assert_eq!(plan.prefill_tokens, 3000);
        core.complete(plan, Instant::now());
        assert!(long.try_recv().is_ok());
    }

    #[tokio::test]
    async fn dropped_receiver_frees_blocks() {
        let p = Profile::named("balanced").expect("known");
        let mut core = core_with(p);
        let rx = add(&mut core, vec![5; 40], 100);
        step(&mut core);
        assert!(core.used_blocks() > 0);
        drop(rx);
        step(&mut core);
        assert!(core.is_idle());
        assert_eq!(core.used_blocks(), 0);
        assert_eq!(core.shared.lock_stats().finished_abort, 1);
    }
}
