//! A deterministic toy tokenizer. It only has to be *stable*: the same text
//! always gives the same ids, so `/tokenize`, `usage.prompt_tokens` and the
//! prefix cache agree with each other and a client can calibrate exact input
//! lengths against `/tokenize` as it would against a real vLLM.
//!
//! Rules: `<|...|>` is one special token; a run of letters/digits becomes
//! pieces of at most 4 characters (the first piece carries one leading
//! space, if any, like GPT-style tokenizers); any other character is its own
//! token (a single preceding space is folded into it too). Ids are an FNV-1a
//! hash of the piece modulo the vocabulary, offset past the special ids.

/// Id of the beginning-of-sequence token prepended to every prompt
/// (`add_special_tokens`).
pub const BOS_ID: u32 = 1;
const VOCAB: u32 = 32_000;
const FIRST_ORDINARY_ID: u32 = 3;
const MAX_PIECE_CHARS: usize = 4;

/// FNV-1a, 64 bit: small, deterministic across runs and platforms.
pub fn fnv1a(bytes: &[u8], seed: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A cheap 64-bit mixer (splitmix64 finaliser) for combining hashes.
pub fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn piece_id(piece: &str) -> u32 {
    FIRST_ORDINARY_ID + (fnv1a(piece.as_bytes(), 0) % u64::from(VOCAB - FIRST_ORDINARY_ID)) as u32
}

/// Splits `text` into pieces (see the module docs).
pub fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        // Special tokens.
        if text[i..].starts_with("<|") {
            if let Some(end) = text[i + 2..].find("|>") {
                let stop = i + 2 + end + 2;
                out.push(&text[i..stop]);
                i = stop;
                continue;
            }
        }
        let start = i;
        // One leading space is folded into the next piece.
        let mut j = i;
        if bytes[j] == b' ' && j + 1 < text.len() {
            let next = text[j + 1..].chars().next().unwrap_or(' ');
            if !next.is_whitespace() && !text[j + 1..].starts_with("<|") {
                j += 1;
            }
        }
        let Some(c) = text[j..].chars().next() else {
            break;
        };
        if c.is_alphanumeric() {
            let k = j + text[j..]
                .chars()
                .take(MAX_PIECE_CHARS)
                .take_while(|ch| ch.is_alphanumeric())
                .map(char::len_utf8)
                .sum::<usize>();
            out.push(&text[start..k]);
            i = k;
        } else {
            let k = j + c.len_utf8();
            out.push(&text[start..k]);
            i = k;
        }
    }
    out
}

/// Turns prompt text into token ids. The simulator's own toy tokenizer is
/// the default; a test plugs in a real one ([`crate::SimConfig::tokenizer`])
/// to hold a client to a real BPE's irregular counts (digit runs merge
/// differently from one number to the next).
pub trait TextTokenizer: Send + Sync + std::fmt::Debug {
    /// Token ids of `text`, with the beginning-of-sequence token first when
    /// `add_special`.
    fn encode(&self, text: &str, add_special: bool) -> Vec<u32>;
}

/// The built-in toy tokenizer (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct ToyTokenizer;

impl TextTokenizer for ToyTokenizer {
    fn encode(&self, text: &str, add_special: bool) -> Vec<u32> {
        encode(text, add_special)
    }
}

/// A real tokenizer read from a Hugging Face `tokenizer.json` (feature
/// `hf-tokenizer`), for tests that need a real BPE's irregular counts.
#[cfg(feature = "hf-tokenizer")]
#[derive(Debug)]
pub struct HfTokenizer(tokenizers::Tokenizer);

#[cfg(feature = "hf-tokenizer")]
impl HfTokenizer {
    /// Reads `tokenizer.json`; the error says which file and why.
    pub fn from_file(path: &std::path::Path) -> Result<HfTokenizer, String> {
        tokenizers::Tokenizer::from_file(path)
            .map(HfTokenizer)
            .map_err(|err| format!("{}: {err}", path.display()))
    }
}

#[cfg(feature = "hf-tokenizer")]
impl TextTokenizer for HfTokenizer {
    fn encode(&self, text: &str, add_special: bool) -> Vec<u32> {
        match self.0.encode(text, add_special) {
            Ok(encoding) => encoding.get_ids().to_vec(),
            // A byte-level BPE encodes any text; should one fail, count
            // with the toy tokenizer rather than report zero tokens.
            Err(err) => {
                tracing::warn!(error = %err, "the tokenizer failed; counting with the toy one");
                encode(text, add_special)
            }
        }
    }
}

/// Token ids of `text`, with [`BOS_ID`] first when `add_bos`.
pub fn encode(text: &str, add_bos: bool) -> Vec<u32> {
    let mut ids = Vec::with_capacity(text.len() / 3 + 1);
    if add_bos {
        ids.push(BOS_ID);
    }
    ids.extend(pieces(text).into_iter().map(piece_id));
    ids
}

/// One chat message, already reduced to text.
#[derive(Debug, Clone)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// Renders messages with a Llama-3-like template, ending with the
/// assistant header (`add_generation_prompt`).
pub fn render_chat(messages: &[ChatMessage]) -> String {
    let mut s = String::new();
    for m in messages {
        s.push_str("<|start_header_id|>");
        s.push_str(&m.role);
        s.push_str("<|end_header_id|>\n\n");
        s.push_str(&m.content);
        s.push_str("<|eot_id|>");
    }
    s.push_str("<|start_header_id|>assistant<|end_header_id|>\n\n");
    s
}

/// Words the simulator "generates": one per token, deterministic.
const WORDS: [&str; 64] = [
    " the", " model", " token", " cache", " block", " prefix", " batch", " step", " queue",
    " decode", " prefill", " memory", " tensor", " kernel", " stream", " latency", " request",
    " server", " engine", " metric", " signal", " sweep", " probe", " shape", " run", " GPU",
    " is", " and", " of", " to", " in", " a", " fast", " slow", " warm", " cold", " busy", " idle",
    " every", " first", " last", " next", ",", ".", " ok", " yes", " no", " then", " when", " why",
    " what", " more", " less", " full", " free", " hit", " miss", " wait", " lane", " page",
    " rank", " node", " core", " clock",
];

/// Text of the generated token at `position` of a sequence seeded by `seed`.
pub fn generated_word(seed: u64, position: usize) -> &'static str {
    WORDS[(mix(seed ^ (position as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) % WORDS.len() as u64)
        as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_words_punctuation_and_specials() {
        assert_eq!(pieces("hello world"), vec!["hell", "o", " worl", "d"]);
        assert_eq!(pieces("a, b!"), vec!["a", ",", " b", "!"]);
        assert_eq!(pieces("<|eot_id|>x"), vec!["<|eot_id|>", "x"]);
        assert_eq!(pieces("a\n\nb"), vec!["a", "\n", "\n", "b"]);
        assert_eq!(pieces("é ü"), vec!["é", " ü"]);
        assert!(pieces("").is_empty());
        assert_eq!(pieces(" "), vec![" "]);
    }

    #[test]
    fn encoding_is_stable_and_prefix_preserving() {
        let a = encode("the quick brown fox", true);
        assert_eq!(a, encode("the quick brown fox", true));
        assert_eq!(a[0], BOS_ID);
        let b = encode("the quick brown fox jumps", true);
        assert_eq!(&b[..a.len()], &a[..]);
    }

    #[test]
    fn never_panics_on_odd_input() {
        for s in ["<|", "<|x", " <|a|>", "  ", "\u{0}\u{fffd}", "a<|b|>c <|d"] {
            let _ = encode(s, false);
        }
    }
}
