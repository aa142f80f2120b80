//! Shapes (input × output tokens) and the prompts that realize them.
//!
//! Cache hygiene (DESIGN.md): a `random` or `rag` prompt starts with a
//! per-request nonce, so no two probes share a prefix and the prefix cache
//! cannot flatter TTFT; `shared-prefix` deliberately puts a common prefix of
//! a chosen share of the input first and the nonce after it, so the hit
//! ratio is what the caller asked for. Exact input length comes from the
//! target's `/tokenize` where it has one ([`Calibrator`]); otherwise from
//! ≈0.75 words per token, and the server-reported prompt tokens are what
//! gets stored either way.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::record::Api;

/// Input tokens × output tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    pub input_tokens: u32,
    pub output_tokens: u32,
}

/// A shape string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ShapeError {
    #[error("invalid shape {input:?}: expected INPUTxOUTPUT token counts such as 512x128")]
    Syntax { input: String },
    #[error("invalid shape {input:?}: token counts must be at least 1")]
    Zero { input: String },
    #[error("invalid prompt kind {input:?}: expected random, shared-prefix[:RATIO] or rag[:DOCS]")]
    Kind { input: String },
}

impl Shape {
    /// The short always-on canary shape.
    pub const CANARY: Shape = Shape::new(64, 16);
    /// Standard shapes from public benchmarks.
    pub const STANDARD: [Shape; 7] = [
        Shape::new(512, 512),
        Shape::new(1024, 1024),
        Shape::new(4096, 1024),
        Shape::new(500, 2000),
        Shape::new(20000, 2000),
        Shape::new(200, 4000),
        Shape::new(20000, 200),
    ];

    pub const fn new(input_tokens: u32, output_tokens: u32) -> Shape {
        Shape {
            input_tokens,
            output_tokens,
        }
    }

    /// Parses `512x128` (also `512×128`, `512X128`, surrounding spaces).
    pub fn parse(s: &str) -> Result<Shape, ShapeError> {
        let syntax = || ShapeError::Syntax {
            input: s.to_string(),
        };
        let t = s.trim();
        let (a, b) = t.split_once(['x', 'X', '×']).ok_or_else(syntax)?;
        let input: u32 = a.trim().parse().map_err(|_| syntax())?;
        let output: u32 = b.trim().parse().map_err(|_| syntax())?;
        if input == 0 || output == 0 {
            return Err(ShapeError::Zero {
                input: s.to_string(),
            });
        }
        Ok(Shape::new(input, output))
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.input_tokens, self.output_tokens)
    }
}

impl FromStr for Shape {
    type Err = ShapeError;
    fn from_str(s: &str) -> Result<Shape, ShapeError> {
        Shape::parse(s)
    }
}

/// How the prompt text is built.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PromptKind {
    /// Random words after a unique nonce: never a prefix-cache hit.
    Random,
    /// A common prefix of `hit_ratio` of the input, then a nonce and random
    /// words: the expected cache hit ratio is `hit_ratio`.
    SharedPrefix { hit_ratio: f64 },
    /// A long context of `documents` "documents" and a question, after a
    /// nonce (long-context RAG prefill).
    Rag { documents: u32 },
}

impl PromptKind {
    /// Parses `random`, `shared-prefix[:RATIO]` (default 0.8),
    /// `rag[:DOCS]` (default 4).
    pub fn parse(s: &str) -> Result<PromptKind, ShapeError> {
        let bad = || ShapeError::Kind {
            input: s.to_string(),
        };
        let t = s.trim().to_ascii_lowercase();
        let (name, arg) = match t.split_once(':') {
            Some((n, a)) => (n.to_string(), Some(a.to_string())),
            None => (t.clone(), None),
        };
        match (name.as_str(), arg) {
            ("random", None) => Ok(PromptKind::Random),
            ("shared-prefix", a) => {
                let hit_ratio = match a {
                    Some(a) => a.parse::<f64>().map_err(|_| bad())?,
                    None => 0.8,
                };
                if !(0.0..1.0).contains(&hit_ratio) {
                    return Err(bad());
                }
                Ok(PromptKind::SharedPrefix { hit_ratio })
            }
            ("rag", a) => {
                let documents = match a {
                    Some(a) => a.parse::<u32>().map_err(|_| bad())?,
                    None => 4,
                };
                if documents == 0 {
                    return Err(bad());
                }
                Ok(PromptKind::Rag { documents })
            }
            _ => Err(bad()),
        }
    }

    /// The share of input tokens this kind of prompt is meant to find in
    /// the prefix cache: 0 for random and RAG prompts (unique nonce first),
    /// the chosen ratio for shared-prefix.
    pub fn intended_hit_ratio(self) -> f64 {
        match self {
            PromptKind::SharedPrefix { hit_ratio } => hit_ratio,
            PromptKind::Random | PromptKind::Rag { .. } => 0.0,
        }
    }

    /// A stable name for cache keys and reports.
    pub fn label(&self) -> String {
        match self {
            PromptKind::Random => "random".into(),
            PromptKind::SharedPrefix { hit_ratio } => format!("shared-prefix:{hit_ratio}"),
            PromptKind::Rag { documents } => format!("rag:{documents}"),
        }
    }
}

/// Common short English words: mostly one token each in BPE vocabularies,
/// so word count tracks token count closely.
pub(crate) const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "are", "with", "as", "his", "they",
    "be", "at", "one", "have", "this", "from", "or", "had", "by", "word", "but", "what", "some",
    "we", "can", "out", "other", "were", "all", "there", "when", "up", "use", "your", "how",
    "said", "an", "each", "she", "which", "do", "their", "time", "if", "will", "way", "about",
    "many", "then", "them", "write", "would", "like", "so", "these", "her", "long", "make",
    "thing", "see", "him", "two", "has", "look", "more", "day", "could", "go", "come", "did",
    "number", "sound", "no", "most", "people", "my", "over", "know", "water", "than", "call",
    "first", "who", "may", "down", "side", "been", "now", "find", "any", "new", "work", "part",
    "take", "get", "place", "made", "live", "where", "after", "back", "little", "only", "round",
    "man", "year", "came", "show", "every", "good", "me", "give", "our", "under", "name", "very",
    "through", "just", "form", "great", "think", "say", "help", "low", "line", "differ", "turn",
    "cause", "much", "mean", "before", "move", "right", "boy", "old", "too", "same", "tell",
    "does", "set", "three", "want", "air", "well", "also", "play", "small", "end", "put", "home",
    "read", "hand", "port", "large", "spell", "add", "even", "land", "here", "must", "big", "high",
    "such", "follow", "act", "why", "ask", "men", "change", "went", "light", "kind", "off", "need",
    "house", "picture", "try", "us", "again", "animal", "point", "mother", "world", "near",
    "build", "self", "earth", "father", "head", "stand", "own", "page", "should", "country",
    "found", "answer", "school", "grow", "study", "still", "learn", "plant", "cover", "food",
    "sun", "four", "between", "state", "keep", "eye", "never", "last", "let", "thought", "city",
    "tree", "cross", "farm", "hard", "start", "might", "story", "saw", "far", "sea", "draw",
    "left", "late", "run", "while", "press", "close", "night", "real", "life", "few", "north",
];

/// Words per token used when the target cannot tokenize for us.
pub const WORDS_PER_TOKEN: f64 = 0.75;

/// Approximate word count for `tokens` input tokens.
pub fn approx_words(tokens: u32) -> u32 {
    ((f64::from(tokens) * WORDS_PER_TOKEN).round() as u32).max(1)
}

fn push_words(out: &mut String, rng: &mut StdRng, n: u32) {
    for _ in 0..n {
        if !out.is_empty() && !out.ends_with(['\n', ' ']) {
            out.push(' ');
        }
        out.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
}

/// Builds prompts of one kind and length.
///
/// Only the nonce differs between requests; the body after it is fixed for
/// a (kind, word count). That is enough for cache hygiene — prefix caches
/// (vLLM's hash-chained blocks, SGLang's radix tree) match from the first
/// token, so a unique start defeats every later block — and it makes the
/// calibrated token count hold for every request, not just the sample.
/// The nonce is 16 decimal digits joined by `-` (`[3-1-4-…]`). A plain digit
/// run is not a fixed number of tokens on a byte-level BPE: its merges
/// depend on the digits (on vLLM 0.32 with a 4 096-token BPE, 16-digit runs
/// counted 78–83 tokens in the same prompt). With a separator every digit
/// is a pre-token of its own — GPT-2/Llama-3 pre-tokenizer regexes split
/// digits from punctuation, SentencePiece models split digits — so the
/// nonce counts the same on every tokenizer we know; [`Calibrator`] checks
/// it on the target anyway.
#[derive(Debug, Clone)]
pub struct PromptGenerator {
    kind: PromptKind,
    words: u32,
    seed: u64,
    /// Mixed into every nonce: fresh OS randomness per generator, so no two
    /// runs send the same prompt even with the same `seed`; 0 when prompts
    /// are deliberately reused ([`PromptGenerator::reusing_prompts`]).
    salt: u64,
    /// Text before the nonce (the shared prefix, if any).
    head: String,
    /// Text after the nonce.
    tail: String,
}

/// Seeds the fixed body text (never the nonce).
const BODY_SEED: u64 = 0x6c6c_6d77_6174_6368;

impl PromptGenerator {
    /// `words` is the body length in words: from [`Calibrator`] for an
    /// exact token count, or [`approx_words`]. `seed` varies the nonces
    /// reproducibly; a fresh random salt keeps them unique across runs.
    pub fn new(kind: PromptKind, words: u32, seed: u64) -> PromptGenerator {
        let mut rng = StdRng::seed_from_u64(BODY_SEED);
        let mut head = String::new();
        let mut tail = String::new();
        match kind {
            PromptKind::Random => push_words(&mut tail, &mut rng, words),
            PromptKind::SharedPrefix { hit_ratio } => {
                let prefix_words = (f64::from(words) * hit_ratio).round() as u32;
                head.push_str("You are a helpful assistant. Shared context: ");
                push_words(&mut head, &mut rng, prefix_words);
                head.push('\n');
                push_words(&mut tail, &mut rng, words.saturating_sub(prefix_words));
            }
            PromptKind::Rag { documents } => {
                tail.push_str("Answer using the documents.\n");
                let question_words = 12.min(words);
                let body = words - question_words;
                for d in 0..documents {
                    let n = body / documents + u32::from(d < body % documents);
                    tail.push_str(&format!("\nDocument {}:\n", d + 1));
                    push_words(&mut tail, &mut rng, n);
                }
                tail.push_str("\n\nQuestion: ");
                push_words(&mut tail, &mut rng, question_words);
                tail.push('?');
            }
        }
        PromptGenerator {
            kind,
            words,
            seed,
            salt: fresh_salt(),
            head,
            tail,
        }
    }

    /// The generator a calibration found: its word count and padding.
    pub fn calibrated(kind: PromptKind, calibration: &Calibration, seed: u64) -> PromptGenerator {
        PromptGenerator::new(kind, calibration.words, seed).with_padding(calibration.padding)
    }

    /// Appends `padding` to every prompt (see [`Padding`]).
    pub fn with_padding(mut self, padding: Padding) -> PromptGenerator {
        self.tail.push_str(&padding.text());
        self
    }

    /// The same prompts as any other generator of this kind, length and
    /// seed: for deliberate prefix-cache experiments (`--reuse-prompts`).
    pub fn reusing_prompts(mut self) -> PromptGenerator {
        self.salt = 0;
        self
    }

    /// Mixes `salt` into every nonce in place of the fresh OS salt, so the
    /// prompts are a function of (kind, length, seed, salt): for tests that
    /// must not depend on OS randomness. 0 is [`Self::reusing_prompts`].
    pub fn with_salt(mut self, salt: u64) -> PromptGenerator {
        self.salt = salt;
        self
    }

    /// True when the nonces are not salted (prompts repeat across runs).
    pub fn reuses_prompts(&self) -> bool {
        self.salt == 0
    }

    pub fn kind(&self) -> PromptKind {
        self.kind
    }

    pub fn words(&self) -> u32 {
        self.words
    }

    /// The prompt of request number `i` (unique nonce per `i` and seed).
    pub fn prompt(&self, i: u64) -> String {
        let mixed = self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ self
                .salt
                .rotate_left(17)
                .wrapping_mul(0xBF58_476D_1CE4_E5B9)
            ^ i;
        let mut rng = StdRng::seed_from_u64(mixed);
        let nonce: u64 = rng.random_range(0..10_000_000_000_000_000);
        let mut out = String::with_capacity(self.head.len() + NONCE_CHARS + self.tail.len());
        out.push_str(&self.head);
        out.push('[');
        for (k, digit) in format!("{nonce:016}").chars().enumerate() {
            if k > 0 {
                out.push('-');
            }
            out.push(digit);
        }
        out.push_str("] ");
        out.push_str(&self.tail);
        out
    }
}

/// Text appended to a prompt to reach an exact token count when one more
/// word would overshoot: `count` repeats of one of [`PADDING_UNITS`], each
/// a pre-token of its own that most vocabularies hold as a single token.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Padding {
    pub unit: u8,
    pub count: u8,
}

/// Candidate one-token units, tried in order.
const PADDING_UNITS: [&str; 6] = [" a", ".", ",", " I", "!", " x"];

impl Padding {
    pub const NONE: Padding = Padding { unit: 0, count: 0 };

    /// Paddings of `short` units, one per unit kind; none past 16 units
    /// (a gap that large means the count is not a count).
    fn candidates(short: u32) -> impl Iterator<Item = Padding> {
        let count = u8::try_from(short).ok().filter(|c| *c <= 16);
        (0..PADDING_UNITS.len() as u8).filter_map(move |unit| {
            Some(Padding {
                unit,
                count: count?,
            })
        })
    }

    fn text(self) -> String {
        PADDING_UNITS
            .get(usize::from(self.unit))
            .map_or_else(String::new, |u| u.repeat(usize::from(self.count)))
    }
}

/// `[`, 16 digits, 15 separators, `] `.
const NONCE_CHARS: usize = 1 + 16 + 15 + 2;

/// Prompts tokenized with different nonces to check that the nonce does not
/// change the count (see [`PromptGenerator`]).
const NONCE_SAMPLES: u64 = 6;

/// A non-zero salt from the OS-seeded thread generator.
/// A fresh salt for prompts (never 0): each run's prompts are its own, so
/// none hits a cache an earlier run left behind.
pub fn fresh_salt() -> u64 {
    rand::random::<u64>().max(1)
}

/// Finds the word count that gives an exact input token count on a target,
/// through its `/tokenize` endpoint, and caches it per target and kind.
#[derive(Debug, Default)]
pub struct Calibrator {
    cache: Mutex<HashMap<(String, String, String, u32), Calibration>>,
    /// The salt of every calibration prompt's nonce; `None` (the default):
    /// a fresh OS salt per prompt generator.
    salt: Option<u64>,
}

/// The outcome of a calibration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub words: u32,
    /// One-token units appended after the words to reach the exact count.
    #[serde(default)]
    pub padding: Padding,
    /// Tokens the target counted for that word count, when it could count.
    pub tokens: Option<u32>,
    /// False when the target had no `/tokenize` and `words` is ≈0.75/token,
    /// or when prompts that differ only in their nonce counted differently
    /// (`spread`).
    pub exact: bool,
    /// The fewest and most tokens counted over sample prompts of that word
    /// count when they differed: the target's tokenizer splits the nonce
    /// irregularly, so input lengths will vary about that much.
    #[serde(default)]
    pub spread: Option<(u32, u32)>,
}

impl Calibration {
    /// Why the input length is not exact, for the run's notes; `None` when it is.
    pub fn inexact_reason(&self) -> Option<String> {
        match (self.exact, self.spread, self.tokens) {
            (true, _, _) => None,
            (false, Some((lo, hi)), _) => Some(format!(
                "prompts that differ only in their nonce counted {lo}–{hi} tokens on the \
                 target's /tokenize, so input lengths vary by up to {} tokens",
                hi - lo
            )),
            (false, None, Some(t)) => Some(format!(
                "the closest prompt the target's /tokenize allowed counted {t} tokens"
            )),
            (false, None, None) => Some(
                "the target has no /tokenize; prompt length is approximate \
                 (≈0.75 words per token; server-reported tokens are recorded)"
                    .to_string(),
            ),
        }
    }
}

impl Calibrator {
    pub fn new() -> Calibrator {
        Calibrator::default()
    }

    /// Salts every calibration prompt's nonce with `salt` (see
    /// [`PromptGenerator::with_salt`]), so the prompts sent to `/tokenize`,
    /// and the calibration, are reproducible.
    pub fn with_salt(mut self, salt: u64) -> Calibrator {
        self.salt = Some(salt);
        self
    }

    /// The word count for `shape.input_tokens` of `kind` on the target
    /// behind `client`. Binary search on the word count (prompt tokens grow
    /// monotonically with words), ≈ log2(input) `/tokenize` calls, once per
    /// target, model, kind and length.
    ///
    /// For [`Api::Chat`] the count includes the chat template (the
    /// `/tokenize` request carries `messages`), since that is what the
    /// server will report as prompt tokens.
    pub async fn calibrate(
        &self,
        client: &crate::client::ProbeClient,
        api: Api,
        model: &str,
        kind: PromptKind,
        input_tokens: u32,
    ) -> Calibration {
        let key = (
            client.base_url().to_string(),
            model.to_string(),
            format!("{api:?}/{}", kind.label()),
            input_tokens,
        );
        if let Some(c) = self.cache.lock().ok().and_then(|m| m.get(&key).copied()) {
            return c;
        }
        let counter = TokenCounter {
            client,
            api,
            model,
            kind,
            salt: self.salt,
        };
        let result = counter.calibrate(input_tokens).await;
        if let Ok(mut m) = self.cache.lock() {
            m.insert(key, result);
        }
        result
    }
}

/// Counts the tokens of calibration prompts on one target, for one API,
/// model and prompt kind.
#[derive(Clone, Copy)]
struct TokenCounter<'a> {
    client: &'a crate::client::ProbeClient,
    api: Api,
    model: &'a str,
    kind: PromptKind,
    salt: Option<u64>,
}

impl TokenCounter<'_> {
    /// The calibration prompts of `words` words.
    fn generator(self, words: u32) -> PromptGenerator {
        let generator = PromptGenerator::new(self.kind, words, 1);
        match self.salt {
            Some(salt) => generator.with_salt(salt),
            None => generator,
        }
    }

    /// Tokens of the first prompt of `words` words; `None`: no count.
    async fn count_words(self, words: u32) -> Option<u32> {
        let text = self.generator(words).prompt(0);
        tokenize_count(self.client, self.api, self.model, &text).await
    }

    /// Tokens of prompt `i` of `words` words topped up with `padding`.
    async fn count_padded(self, words: u32, padding: Padding, i: u64) -> Option<u32> {
        let text = self.generator(words).with_padding(padding).prompt(i);
        tokenize_count(self.client, self.api, self.model, &text).await
    }

    /// See [`Calibrator::calibrate`]; without a count, the ≈0.75 words per
    /// token guess.
    async fn calibrate(self, input_tokens: u32) -> Calibration {
        let approx = approx_words(input_tokens);
        let Some(t0) = self.count_words(approx).await else {
            return Calibration {
                words: approx,
                padding: Padding::NONE,
                tokens: None,
                exact: false,
                spread: None,
            };
        };
        let (words, seen) = self.search_words(approx, t0, input_tokens).await;
        let tokens = match seen {
            Some(t) => Some(t),
            None => self.count_words(words).await,
        };
        let (padding, tokens) = self.pad(words, tokens, input_tokens).await;
        let spread = nonce_spread(tokens, |i| self.count_padded(words, padding, i)).await;
        Calibration {
            words,
            padding,
            tokens,
            exact: tokens == Some(input_tokens) && spread.is_none(),
            spread,
        }
    }

    /// The most words (at least 1) whose prompt counts at most
    /// `input_tokens`, and their count when the search saw it. `t0` is the
    /// count of `approx` words.
    async fn search_words(self, approx: u32, t0: u32, input_tokens: u32) -> (u32, Option<u32>) {
        // Bracket [lo, hi] with tokens(lo) <= target < tokens(hi).
        let (mut lo, mut hi) = (0u32, approx.max(1));
        let mut t_hi = t0;
        while t_hi <= input_tokens && hi < 4_000_000 {
            lo = hi;
            hi = hi.saturating_mul(2);
            match self.count_words(hi).await {
                // Twice the words must count more tokens; a count that does
                // not grow is no count (stop, never build an ever longer
                // prompt on it).
                Some(t) if t > t_hi => t_hi = t,
                _ => break,
            }
        }
        let mut lo_tokens = None;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match self.count_words(mid).await {
                Some(t) if t <= input_tokens => {
                    lo = mid;
                    lo_tokens = Some(t);
                }
                Some(_) => hi = mid,
                None => break,
            }
        }
        (lo.max(1), lo_tokens)
    }

    /// One more word may add several tokens: tops the prompt up with a
    /// padding of one-token units to the exact count when one gives it.
    /// Returns the padding and the prompt's count with it.
    async fn pad(
        self,
        words: u32,
        tokens: Option<u32>,
        input_tokens: u32,
    ) -> (Padding, Option<u32>) {
        let short = tokens.and_then(|t| input_tokens.checked_sub(t));
        if let Some(short) = short.filter(|s| *s > 0) {
            for candidate in Padding::candidates(short) {
                if self.count_padded(words, candidate, 0).await == Some(input_tokens) {
                    return (candidate, Some(input_tokens));
                }
            }
        }
        (Padding::NONE, tokens)
    }
}

/// The (fewest, most) tokens over [`NONCE_SAMPLES`] prompts that differ
/// only in their nonce, when they differ from each other or from
/// `calibrated` (the count of prompt 0); `None` when all agree.
async fn nonce_spread<F, Fut>(calibrated: Option<u32>, count_prompt: F) -> Option<(u32, u32)>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Option<u32>>,
{
    let mut counts: Vec<u32> = calibrated.into_iter().collect();
    for i in 1..=NONCE_SAMPLES {
        counts.extend(count_prompt(i).await);
    }
    let (lo, hi) = (counts.iter().min()?, counts.iter().max()?);
    (lo != hi).then_some((*lo, *hi))
}

/// Token count of `text` from the target's `/tokenize`: vLLM/SGLang shape
/// (`{"model","messages"}` for chat, `{"model","prompt"}` otherwise →
/// `{"count"}`) first, then llama.cpp's (`{"content"}` → `{"tokens":[…]}`).
/// `None` when none answers. Zero tokens for non-empty text is not a count
/// (llama-server answers vLLM-shaped bodies with `{"tokens":[]}`): the next
/// body shape is tried.
pub async fn tokenize_count(
    client: &crate::client::ProbeClient,
    api: Api,
    model: &str,
    text: &str,
) -> Option<u32> {
    let base = client.base_url();
    let tokenize = format!("{base}/tokenize");
    let messages = serde_json::json!([{ "role": "user", "content": text }]);
    if api == Api::Chat {
        // vLLM and SGLang apply the chat template themselves.
        let body = serde_json::json!({
            "model": model,
            "messages": messages,
            "add_generation_prompt": true,
        });
        if let Some(c) = count_of(post_json(client, &tokenize, &body).await?.as_ref(), text) {
            return Some(c);
        }
        // llama-server's /tokenize does not: render the template with its
        // /apply-template first, or the count misses the template's tokens.
        let body = serde_json::json!({ "messages": messages });
        let rendered = post_json(client, &format!("{base}/apply-template"), &body).await?;
        if let Some(prompt) = rendered.as_ref().and_then(|v| v["prompt"].as_str()) {
            let body = serde_json::json!({ "content": prompt, "add_special": true });
            if let Some(c) = count_of(post_json(client, &tokenize, &body).await?.as_ref(), prompt) {
                return Some(c);
            }
        }
    }
    let bodies = [
        serde_json::json!({ "model": model, "prompt": text, "add_special_tokens": true }),
        serde_json::json!({ "content": text, "add_special": true }),
    ];
    for body in bodies {
        if let Some(c) = count_of(post_json(client, &tokenize, &body).await?.as_ref(), text) {
            return Some(c);
        }
    }
    None
}

/// The JSON answer of a POST: `None` (the outer option) when the server
/// cannot be reached, `Some(None)` when it answers with an error or not JSON.
async fn post_json(
    client: &crate::client::ProbeClient,
    url: &str,
    body: &serde_json::Value,
) -> Option<Option<serde_json::Value>> {
    let mut rb = client
        .http()
        .post(url)
        .timeout(std::time::Duration::from_secs(30))
        .json(body);
    if let Some(k) = &client.config().api_key {
        rb = rb.bearer_auth(k.expose());
    }
    let resp = rb.send().await.ok()?;
    if !resp.status().is_success() {
        return Some(None);
    }
    Some(resp.json::<serde_json::Value>().await.ok())
}

/// The token count in a `/tokenize` answer: vLLM's `count`, or the length
/// of llama.cpp's `tokens`. Zero tokens for non-empty text is no count.
fn count_of(answer: Option<&serde_json::Value>, text: &str) -> Option<u32> {
    let v = answer?;
    let counted = v
        .get("count")
        .and_then(|c| c.as_u64())
        .or_else(|| {
            v.get("tokens")
                .and_then(|t| t.as_array())
                .map(|t| t.len() as u64)
        })
        .filter(|c| *c > 0 || text.is_empty())?;
    u32::try_from(counted).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_parse() {
        assert_eq!(Shape::parse("512x128"), Ok(Shape::new(512, 128)));
        assert_eq!(Shape::parse(" 64 × 16 "), Ok(Shape::new(64, 16)));
        assert_eq!("20000X200".parse::<Shape>(), Ok(Shape::new(20000, 200)));
        assert!(matches!(
            Shape::parse("512"),
            Err(ShapeError::Syntax { .. })
        ));
        assert!(matches!(Shape::parse("0x5"), Err(ShapeError::Zero { .. })));
        assert!(Shape::parse("-1x5").is_err());
        assert_eq!(Shape::new(512, 128).to_string(), "512x128");
    }

    #[test]
    fn kind_parse() {
        assert_eq!(PromptKind::parse("random"), Ok(PromptKind::Random));
        assert_eq!(
            PromptKind::parse("shared-prefix:0.5"),
            Ok(PromptKind::SharedPrefix { hit_ratio: 0.5 })
        );
        assert_eq!(
            PromptKind::parse("rag"),
            Ok(PromptKind::Rag { documents: 4 })
        );
        assert!(PromptKind::parse("shared-prefix:1.5").is_err());
        assert!(PromptKind::parse("bogus").is_err());
    }

    #[test]
    fn random_prompts_differ_at_the_start() {
        let g = PromptGenerator::new(PromptKind::Random, 100, 7);
        let (a, b) = (g.prompt(0), g.prompt(1));
        // `[d-d-…-d] `: single digits apart, so no BPE merges a digit run.
        let nonce = &a[..NONCE_CHARS];
        assert!(nonce.starts_with('[') && nonce.ends_with("] "), "{nonce:?}");
        let digits: Vec<&str> = nonce[1..NONCE_CHARS - 2].split('-').collect();
        assert_eq!(digits.len(), 16, "{nonce:?}");
        assert!(digits
            .iter()
            .all(|d| d.len() == 1 && d.as_bytes()[0].is_ascii_digit()));
        assert_ne!(a[..NONCE_CHARS], b[..NONCE_CHARS]);
        assert_eq!(a[NONCE_CHARS..], b[NONCE_CHARS..]);
        assert_eq!(a, g.prompt(0));
        assert_eq!(a.split_whitespace().count(), 101);
    }

    #[test]
    fn same_seed_gives_different_prompts_unless_reused() {
        let a = PromptGenerator::new(PromptKind::Random, 50, 0);
        let b = PromptGenerator::new(PromptKind::Random, 50, 0);
        assert!(!a.reuses_prompts());
        assert!((0..100).all(|i| a.prompt(i) != b.prompt(i)));
        let (a, b) = (a.reusing_prompts(), b.reusing_prompts());
        assert!(a.reuses_prompts());
        assert!((0..100).all(|i| a.prompt(i) == b.prompt(i)));
    }

    #[test]
    fn a_fixed_salt_gives_the_same_prompts() {
        let a = PromptGenerator::new(PromptKind::Random, 50, 0).with_salt(39);
        let b = PromptGenerator::new(PromptKind::Random, 50, 0).with_salt(39);
        let c = PromptGenerator::new(PromptKind::Random, 50, 0).with_salt(40);
        assert!(!a.reuses_prompts());
        assert!((0..100).all(|i| a.prompt(i) == b.prompt(i) && a.prompt(i) != c.prompt(i)));
        assert_ne!(a.prompt(0), a.prompt(1));
    }

    #[test]
    fn shared_prefix_shares_its_prefix() {
        let g = PromptGenerator::new(PromptKind::SharedPrefix { hit_ratio: 0.5 }, 200, 7);
        let (a, b) = (g.prompt(0), g.prompt(1));
        let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        assert!(common >= g.head.len(), "{common} < {}", g.head.len());
        assert!(g.head.split_whitespace().count() > 100);
        assert_ne!(a, b);
    }

    #[test]
    fn rag_has_documents_and_question() {
        let g = PromptGenerator::new(PromptKind::Rag { documents: 3 }, 300, 7);
        let p = g.prompt(0);
        assert!(p.contains("Document 3:") && p.contains("Question:"));
    }
}
