//! What one OpenAI-compatible stream chunk (`data:` JSON) means for timing.
//!
//! Only the fields the measurements need are read; everything else is
//! ignored, since every engine adds its own extras (`timings`,
//! `prompt_token_ids`, `system_fingerprint`, …).
//!
//! Two readers, one meaning: [`parse_chunk`] first tries a validating scan
//! (`scan`) that walks the JSON once without building anything — serde
//! into borrowed structs cost ~5 000 instructions per chunk, a fifth of the
//! client's work per event (BENCHMARKS.md, "Probe client capacity"). The
//! scan answers only when the chunk is plain (no escaped keys, no
//! surrogate escapes, no duplicate fields, no in-stream error object, only
//! the types the fields expect); anything else goes to serde, which also
//! words the errors. A property test holds the two equal.

use std::borrow::Cow;

use serde::Deserialize;

use crate::record::{ServerTiming, ServerTimingSource, Usage};

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<UsageWire>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    /// vLLM `--enable-per-request-metrics`, on the final usage chunk.
    #[serde(default)]
    metrics: Option<VllmMetrics>,
    /// llama.cpp, on its final chunk.
    #[serde(default)]
    timings: Option<LlamacppTimings>,
}

/// vLLM 0.32's `PerRequestMetrics` (fixtures/vllm-live/sse_vllm_*_metrics.txt).
#[derive(Deserialize)]
struct VllmMetrics {
    #[serde(default)]
    time_to_first_token_ms: Option<f64>,
    #[serde(default)]
    generation_time_ms: Option<f64>,
    #[serde(default)]
    queue_time_ms: Option<f64>,
    #[serde(default)]
    mean_itl_ms: Option<f64>,
}

/// llama-server's `timings` (fixtures/llamacpp-live/sse_llamacpp_*.txt).
#[derive(Deserialize)]
struct LlamacppTimings {
    #[serde(default)]
    cache_n: Option<u64>,
    #[serde(default)]
    prompt_ms: Option<f64>,
    #[serde(default)]
    predicted_ms: Option<f64>,
    #[serde(default)]
    predicted_per_token_ms: Option<f64>,
}

impl From<VllmMetrics> for ServerTiming {
    fn from(m: VllmMetrics) -> ServerTiming {
        ServerTiming {
            source: ServerTimingSource::VllmMetrics,
            queue_ms: m.queue_time_ms,
            prefill_ms: m.time_to_first_token_ms,
            decode_ms: m.generation_time_ms,
            mean_itl_ms: m.mean_itl_ms,
            cached_tokens: None,
        }
    }
}

impl From<LlamacppTimings> for ServerTiming {
    fn from(t: LlamacppTimings) -> ServerTiming {
        ServerTiming {
            source: ServerTimingSource::LlamacppTimings,
            queue_ms: None,
            prefill_ms: t.prompt_ms,
            decode_ms: t.predicted_ms,
            mean_itl_ms: t.predicted_per_token_ms,
            cached_tokens: t.cache_n,
        }
    }
}

/// The server timing a chunk carries (vLLM's `metrics` first: an engine
/// sends one or the other).
fn server_timing(
    metrics: Option<VllmMetrics>,
    timings: Option<LlamacppTimings>,
) -> Option<ServerTiming> {
    metrics
        .map(ServerTiming::from)
        .or_else(|| timings.map(ServerTiming::from))
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow, default)]
    function: Option<FunctionCall<'a>>,
}

#[derive(Deserialize)]
struct FunctionCall<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub(crate) struct UsageWire {
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    #[serde(default)]
    pub total_tokens: Option<u64>,
    #[serde(default)]
    pub prompt_tokens_details: Option<Details>,
    #[serde(default)]
    pub completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
pub(crate) struct Details {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
pub(crate) struct CompletionDetails {
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}

impl From<UsageWire> for Usage {
    fn from(u: UsageWire) -> Usage {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
            cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
            reasoning_tokens: u.completion_tokens_details.and_then(|d| d.reasoning_tokens),
        }
    }
}

/// The timing-relevant content of one chunk.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChunkInfo {
    /// Carries generated output: non-empty text, content, reasoning or
    /// tool-call text. Only such an event can set TTFT or end an ITL gap.
    pub output: bool,
    /// Carries output the user sees (text, content or a tool call, not
    /// reasoning): sets TTFO.
    pub visible: bool,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// An in-stream error object (some servers report failures mid-stream).
    pub error: Option<String>,
    /// The server's own timing of the request (final chunk only).
    pub server_timing: Option<ServerTiming>,
}

fn non_empty(s: &Option<Cow<'_, str>>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

/// Reads one chunk's JSON. Errors are the caller's `InvalidJson`.
pub fn parse_chunk(data: &str) -> Result<ChunkInfo, serde_json::Error> {
    match scan(data) {
        Some(info) => Ok(info),
        None => parse_chunk_serde(data),
    }
}

/// [`parse_chunk`] through serde alone (the reference the scan is held to).
pub fn parse_chunk_serde(data: &str) -> Result<ChunkInfo, serde_json::Error> {
    let chunk: Chunk<'_> = serde_json::from_str(data)?;
    let mut info = ChunkInfo {
        usage: chunk.usage.map(Usage::from),
        error: chunk.error.map(|e| error_message(&e)),
        server_timing: server_timing(chunk.metrics, chunk.timings),
        ..ChunkInfo::default()
    };
    for choice in chunk.choices.iter().flatten() {
        if non_empty(&choice.text) {
            info.output = true;
            info.visible = true;
        }
        if let Some(d) = &choice.delta {
            if non_empty(&d.content) {
                info.output = true;
                info.visible = true;
            }
            if non_empty(&d.reasoning_content) || non_empty(&d.reasoning) {
                info.output = true;
            }
            let tool_text = d.tool_calls.iter().flatten().any(|t| {
                t.function
                    .as_ref()
                    .is_some_and(|f| non_empty(&f.name) || non_empty(&f.arguments))
            });
            if tool_text {
                info.output = true;
                info.visible = true;
            }
        }
        if let Some(f) = &choice.finish_reason {
            info.finish_reason = Some(f.to_string());
        }
    }
    Ok(info)
}

/// The fast reader: `Some` only where its answer is certainly serde's.
fn scan(data: &str) -> Option<ChunkInfo> {
    let mut s = Scan {
        b: data.as_bytes(),
        i: 0,
    };
    let mut info = ChunkInfo::default();
    let mut seen = [false; 5];
    let (mut metrics, mut timings) = (None, None);
    s.object(|s, key| {
        let slot = match key {
            b"choices" => 0,
            b"usage" => 1,
            b"error" => 2,
            b"metrics" => 3,
            b"timings" => 4,
            _ => return s.skip(0),
        };
        if std::mem::replace(&mut seen[slot], true) {
            return None;
        }
        match slot {
            0 => s.nullable(|s| s.array(|s| s.choice(&mut info))),
            1 => {
                info.usage = s.usage()?;
                Some(())
            }
            // A real error object is rare: serde reads it.
            2 => s.literal(b"null"),
            // Once per stream: the validated value goes through serde.
            3 => {
                metrics = s.value_with_serde()?;
                Some(())
            }
            _ => {
                timings = s.value_with_serde()?;
                Some(())
            }
        }
    })?;
    s.ws();
    info.server_timing = server_timing(metrics, timings);
    (s.i == s.b.len()).then_some(info)
}

/// A cursor over JSON text that validates what it skips (so it never
/// accepts what serde would reject) and gives up (`None`) on anything
/// it does not handle.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

/// Bytes that end a run of plain string content: quote, backslash and
/// the control characters JSON forbids inside a string.
const STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Deeper nesting goes to serde (its own limit is 128).
const MAX_DEPTH: u32 = 64;

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        self.i += usize::from(hit);
        hit
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.ws();
        let hit = self.b.get(self.i..self.i + word.len()) == Some(word);
        self.i += word.len() * usize::from(hit);
        hit.then_some(())
    }

    /// A string's raw contents (between the quotes), with whether it holds
    /// an escape. Rejects control characters, bad escapes and surrogate
    /// `\u` escapes (serde's treatment of those is left to serde).
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.i;
        let mut escaped = false;
        loop {
            // Most strings are short: a table lookup per byte beats a
            // vectorized search's setup.
            while let Some(&c) = self.b.get(self.i) {
                if STRING_STOP[usize::from(c)] {
                    break;
                }
                self.i += 1;
            }
            match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    return Some((&self.b[start..self.i - 1], escaped));
                }
                b'\\' => {
                    escaped = true;
                    match *self.b.get(self.i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                        b'u' => {
                            let hex = self.b.get(self.i + 2..self.i + 6)?;
                            let hex = std::str::from_utf8(hex).ok()?;
                            let code = u16::from_str_radix(hex, 16).ok()?;
                            if hex.starts_with('+') || (0xD800..0xE000).contains(&code) {
                                return None;
                            }
                            self.i += 6;
                        }
                        _ => return None,
                    }
                }
                c if c < 0x20 => return None,
                _ => self.i += 1,
            }
        }
    }

    /// A string or `null` into `Option<Cow<str>>`: whether it is non-empty.
    fn text(&mut self) -> Option<bool> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            return Some(false);
        }
        self.string().map(|(raw, _)| !raw.is_empty())
    }

    /// An unsigned integer or `null` into `Option<u64>`.
    fn count(&mut self) -> Option<Option<u64>> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            return Some(None);
        }
        let start = self.i;
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        let digits = &self.b[start..self.i];
        // A fraction, exponent, sign or leading zero: serde decides.
        if digits.is_empty()
            || (digits.len() > 1 && digits[0] == b'0')
            || matches!(self.b.get(self.i), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok().map(Some)
    }

    fn number(&mut self) -> Option<()> {
        self.ws();
        let digits = |s: &mut Scan<'_>| {
            let start = s.i;
            while s.b.get(s.i).is_some_and(u8::is_ascii_digit) {
                s.i += 1;
            }
            s.i - start
        };
        self.i += usize::from(self.b.get(self.i) == Some(&b'-'));
        let int_start = self.i;
        let n = digits(self);
        if n == 0 || (n > 1 && self.b[int_start] == b'0') {
            return None;
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if digits(self) == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if digits(self) == 0 {
                return None;
            }
        }
        Some(())
    }

    /// Any value, validated and dropped.
    fn skip(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => self.object(|s, _| s.skip(depth + 1)),
            b'[' => self.array(|s| s.skip(depth + 1)),
            b'"' => self.string().map(|_| ()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number(),
        }
    }

    /// An object, calling `field` at each value with its (unescaped) key.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let (key, escaped) = self.string()?;
            if escaped || !self.eat(b':') {
                return None;
            }
            field(self, key)?;
            if self.eat(b',') {
                continue;
            }
            return self.eat(b'}').then_some(());
        }
    }

    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if !self.eat(b'[') {
            return None;
        }
        if self.eat(b']') {
            return Some(());
        }
        loop {
            item(self)?;
            if self.eat(b',') {
                continue;
            }
            return self.eat(b']').then_some(());
        }
    }

    /// `null` or what `inner` reads.
    fn nullable(&mut self, inner: impl FnOnce(&mut Self) -> Option<()>) -> Option<()> {
        if self.peek() == Some(b'n') {
            return self.literal(b"null");
        }
        inner(self)
    }

    fn choice(&mut self, info: &mut ChunkInfo) -> Option<()> {
        let mut seen = [false; 3];
        self.object(|s, key| {
            let slot = match key {
                b"text" => 0,
                b"delta" => 1,
                b"finish_reason" => 2,
                _ => return s.skip(0),
            };
            if std::mem::replace(&mut seen[slot], true) {
                return None;
            }
            match slot {
                0 => {
                    if s.text()? {
                        info.output = true;
                        info.visible = true;
                    }
                }
                1 => s.nullable(|s| s.delta(info))?,
                _ => {
                    if s.peek() == Some(b'n') {
                        return s.literal(b"null");
                    }
                    let (raw, escaped) = s.string()?;
                    if escaped {
                        return None;
                    }
                    info.finish_reason = Some(std::str::from_utf8(raw).ok()?.to_string());
                }
            }
            Some(())
        })
    }

    fn delta(&mut self, info: &mut ChunkInfo) -> Option<()> {
        let mut seen = [false; 4];
        self.object(|s, key| {
            let slot = match key {
                b"content" => 0,
                b"reasoning_content" => 1,
                b"reasoning" => 2,
                b"tool_calls" => 3,
                _ => return s.skip(0),
            };
            if std::mem::replace(&mut seen[slot], true) {
                return None;
            }
            let (output, visible) = match slot {
                0 => (s.text()?, true),
                1 | 2 => (s.text()?, false),
                _ => {
                    let mut any = false;
                    s.nullable(|s| s.array(|s| s.tool_call(&mut any)))?;
                    (any, true)
                }
            };
            if output {
                info.output = true;
                info.visible |= visible;
            }
            Some(())
        })
    }

    fn tool_call(&mut self, any: &mut bool) -> Option<()> {
        let mut seen = false;
        self.object(|s, key| {
            if key != b"function" {
                return s.skip(0);
            }
            if std::mem::replace(&mut seen, true) {
                return None;
            }
            s.nullable(|s| {
                let mut seen = [false; 2];
                s.object(|s, key| {
                    let slot = match key {
                        b"name" => 0,
                        b"arguments" => 1,
                        _ => return s.skip(0),
                    };
                    if std::mem::replace(&mut seen[slot], true) {
                        return None;
                    }
                    *any |= s.text()?;
                    Some(())
                })
            })
        })
    }

    fn usage(&mut self) -> Option<Option<Usage>> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            return Some(None);
        }
        let mut u = Usage::default();
        let mut seen = [false; 5];
        self.object(|s, key| {
            let slot = match key {
                b"prompt_tokens" => 0,
                b"completion_tokens" => 1,
                b"total_tokens" => 2,
                b"prompt_tokens_details" => 3,
                b"completion_tokens_details" => 4,
                _ => return s.skip(0),
            };
            if std::mem::replace(&mut seen[slot], true) {
                return None;
            }
            match slot {
                0 => u.prompt_tokens = s.count()?,
                1 => u.completion_tokens = s.count()?,
                2 => u.total_tokens = s.count()?,
                3 => u.cached_tokens = s.detail(b"cached_tokens")?,
                _ => u.reasoning_tokens = s.detail(b"reasoning_tokens")?,
            }
            Some(())
        })?;
        Some(Some(u))
    }
}

impl Scan<'_> {
    /// The next value (validated by the scan) read by serde into `T`.
    fn value_with_serde<T: for<'de> Deserialize<'de>>(&mut self) -> Option<T> {
        self.ws();
        let start = self.i;
        self.skip(0)?;
        let text = std::str::from_utf8(&self.b[start..self.i]).ok()?;
        serde_json::from_str(text).ok()
    }

    /// One count out of a `…_tokens_details` object (or `null`).
    fn detail(&mut self, name: &[u8]) -> Option<Option<u64>> {
        let (mut seen, mut value) = (false, None);
        self.nullable(|s| {
            s.object(|s, key| {
                if key != name {
                    return s.skip(0);
                }
                if std::mem::replace(&mut seen, true) {
                    return None;
                }
                value = s.count()?;
                Some(())
            })
        })?;
        Some(value)
    }
}

/// The human message inside an error JSON, whatever the engine's shape:
/// OpenAI/vLLM/llama.cpp `{"error":{"message":…}}`, vLLM's older
/// `{"object":"error","message":…}`, TGI `{"error":"…"}`, FastAPI
/// `{"detail":…}`.
pub fn error_message(v: &serde_json::Value) -> String {
    let pick = |v: &serde_json::Value| -> Option<String> {
        match v {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Object(m) => m
                .get("message")
                .and_then(|m| m.as_str().map(str::to_string)),
            _ => None,
        }
    };
    if let Some(e) = v.get("error").and_then(pick) {
        return e;
    }
    if let Some(m) = v.get("message").and_then(|m| m.as_str()) {
        return m.to_string();
    }
    if let Some(d) = v.get("detail") {
        return match d {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
    }
    truncate(&v.to_string(), 300)
}

/// Cuts `s` to at most `max` bytes on a char boundary, marking the cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_only_and_empty_are_not_output() {
        let c =
            parse_chunk(r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#).unwrap();
        assert!(!c.output);
        let c =
            parse_chunk(r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#).unwrap();
        assert!(!c.output);
        let c = parse_chunk(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}"#).unwrap();
        assert!(!c.output);
        let u = c.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            (Some(3), Some(2), Some(1))
        );
        // vLLM with a reasoning parser counts the reasoning tokens.
        let data = r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9,"completion_tokens_details":{"reasoning_tokens":7}}}"#;
        assert_eq!(scan(data), parse_chunk_serde(data).ok());
        let u = parse_chunk(data).unwrap().usage.unwrap();
        assert_eq!((u.reasoning_tokens, u.cached_tokens), (Some(7), None));
    }

    #[test]
    fn kinds_of_output() {
        let c = parse_chunk(r#"{"choices":[{"text":"hi","finish_reason":null}]}"#).unwrap();
        assert!(c.output && c.visible);
        let c = parse_chunk(r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#).unwrap();
        assert!(c.output && !c.visible);
        let c = parse_chunk(r#"{"choices":[{"delta":{"reasoning":"hm"}}]}"#).unwrap();
        assert!(c.output && !c.visible);
        let c = parse_chunk(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]}}]}"#).unwrap();
        assert!(c.output && c.visible);
        let c = parse_chunk(r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#).unwrap();
        assert!(!c.output);
        assert_eq!(c.finish_reason.as_deref(), Some("length"));
        let c = parse_chunk(r#"{"choices":[{"delta":{"content":"a\"b\u00e9"}}]}"#).unwrap();
        assert!(c.output);
    }

    /// Every data event of every engine's captured stream: the scan reads
    /// each one itself (no serde fallback) and agrees with serde.
    #[test]
    fn scan_reads_every_fixture_chunk_as_serde_does() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures");
        let mut chunks = 0;
        for dir in std::fs::read_dir(root).unwrap() {
            let dir = dir.unwrap().path();
            for file in std::fs::read_dir(&dir).into_iter().flatten() {
                let path = file.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().to_string();
                if !name.starts_with("sse_") || name.contains("_headers") {
                    continue;
                }
                let body = std::fs::read_to_string(&path).unwrap();
                for line in body.lines() {
                    let Some(data) = line.strip_prefix("data: ") else {
                        continue;
                    };
                    if data == "[DONE]" {
                        continue;
                    }
                    chunks += 1;
                    let fast = scan(data);
                    assert!(fast.is_some(), "{name}: scan gave up on {data}");
                    assert_eq!(fast, parse_chunk_serde(data).ok(), "{name}: {data}");
                }
            }
        }
        assert!(chunks > 20, "only {chunks} fixture chunks found");
    }

    #[test]
    fn scan_gives_up_where_serde_decides() {
        for data in [
            r#"{"choices":[{"delta":{"content":"a"}}],"choices":null}"#,
            r#"{"cho\u0069ces":[{"text":"a"}]}"#,
            r#"{"choices":[{"text":"\ud800"}]}"#,
            r#"{"usage":{"completion_tokens":1.0}}"#,
            r#"{"usage":{"completion_tokens":-1}}"#,
            r#"{"error":{"message":"boom"}}"#,
            r#"{"choices":[["hi",null,"stop"]]}"#,
            r#"{"choices":[{"finish_reason":"st\u006fp"}]}"#,
            r#"[1]"#,
            r#"{"a":01}"#,
            r#"{"a":1} x"#,
        ] {
            assert_eq!(scan(data), None, "{data}");
        }
        assert!(parse_chunk(r#"{"error":{"message":"boom"}}"#)
            .unwrap()
            .error
            .is_some());
        assert!(parse_chunk(r#"{"a":01}"#).is_err());
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let keys = prop::sample::select(vec![
            "choices",
            "delta",
            "text",
            "content",
            "reasoning",
            "reasoning_content",
            "tool_calls",
            "function",
            "name",
            "arguments",
            "finish_reason",
            "usage",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "prompt_tokens_details",
            "cached_tokens",
            "completion_tokens_details",
            "reasoning_tokens",
            "metrics",
            "queue_time_ms",
            "time_to_first_token_ms",
            "timings",
            "prompt_ms",
            "cache_n",
            "error",
            "index",
            "id",
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u32>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-z\\\"\u{e9}\u{1f600}\n]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((keys.clone(), inner), 0..5).prop_map(|kv| {
                    Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                }),
            ]
        })
    }

    proptest::proptest! {
        /// Wherever the scan answers, serde answers the same; wherever
        /// serde fails, the scan does not answer.
        #[test]
        fn scan_never_disagrees_with_serde(v in json_value(), pretty in proptest::bool::ANY) {
            let text = if pretty {
                serde_json::to_string_pretty(&v).unwrap()
            } else {
                serde_json::to_string(&v).unwrap()
            };
            let reference = parse_chunk_serde(&text).ok();
            if let Some(fast) = scan(&text) {
                proptest::prop_assert_eq!(Some(fast), reference, "{}", text);
            }
            // Cut anywhere: broken JSON is never read as a chunk.
            for cut in [text.len() / 2, text.len().saturating_sub(1)] {
                if let Some(part) = text.get(..cut) {
                    if parse_chunk_serde(part).is_err() {
                        proptest::prop_assert_eq!(scan(part), None, "{}", part);
                    }
                }
            }
        }
    }

    #[test]
    fn error_shapes() {
        let v: serde_json::Value =
            serde_json::from_str(r#"{"error":{"message":"bad model","type":"x"}}"#).unwrap();
        assert_eq!(error_message(&v), "bad model");
        let v: serde_json::Value =
            serde_json::from_str(r#"{"object":"error","message":"too long"}"#).unwrap();
        assert_eq!(error_message(&v), "too long");
        let v: serde_json::Value = serde_json::from_str(r#"{"error":"overloaded"}"#).unwrap();
        assert_eq!(error_message(&v), "overloaded");
        let v: serde_json::Value = serde_json::from_str(r#"{"detail":"Not Found"}"#).unwrap();
        assert_eq!(error_message(&v), "Not Found");
        assert_eq!(truncate("héllo", 2), "h…");
    }
}
