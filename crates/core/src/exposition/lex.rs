//! Line splitting and the per-line tokenizer: metadata lines and sample lines
//! (name, labels, value, timestamp, exemplar). Byte-level, borrowing from
//! the page; it allocates only for the labels `Vec` and for escaped strings.

use std::borrow::Cow;

use super::error::ParseError;
use super::model::{Exemplar, Format, Label, MetricType, Sample};

/// Which grammar a line is read with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Syntax {
    /// OpenMetrics rather than Prometheus text 0.0.4.
    pub om: bool,
    /// Reject what the reference parser of the format rejects.
    pub strict: bool,
}

impl Syntax {
    pub(crate) fn new(format: Format, strict: bool) -> Self {
        Self {
            om: format == Format::OpenMetrics,
            strict,
        }
    }
    /// Runs of blanks and tabs between tokens, blanks inside `{}`, a trailing
    /// comma in a label set, leading blanks, `\r\n`. Everything but strict OM.
    fn loose(self) -> bool {
        !(self.om && self.strict)
    }
    fn om_strict(self) -> bool {
        self.om && self.strict
    }
    fn prom_strict(self) -> bool {
        !self.om && self.strict
    }
    /// Exemplars are OpenMetrics-only; lenient 0.0.4 tolerates them too.
    fn exemplars(self) -> bool {
        self.om || !self.strict
    }
}

/// One lexed line.
#[derive(Debug)]
pub(crate) enum Line<'a> {
    /// Blank (or whitespace-only) line.
    Empty,
    /// A comment that carries no metadata (also `# HELP name` with no text).
    Comment,
    /// `# EOF`.
    Eof,
    Help(&'a str, Cow<'a, str>),
    Type(&'a str, MetricType),
    Unit(&'a str, &'a str),
    /// The sample's name (borrowed from the line) and the sample.
    Sample(&'a str, Sample<'a>),
}

// ---------------------------------------------------------------------------
// Line splitting
// ---------------------------------------------------------------------------

/// Index of the first `\n` in `hay`: eight bytes at a time (SWAR), no
/// `unsafe`. (Measured: 32-byte autovectorised blocks cost more
/// instructions on real line lengths.)
pub(crate) fn find_newline(hay: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const NL: u64 = LO * b'\n' as u64;
    let mut chunks = hay.chunks_exact(8);
    let mut offset = 0;
    for chunk in chunks.by_ref() {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word) ^ NL;
        // Classic "has zero byte": exact for the lowest zero byte.
        let found = x.wrapping_sub(LO) & !x & HI;
        if found != 0 {
            return Some(offset + (found.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&c| c == b'\n')
        .map(|p| offset + p)
}

/// Index of the first `"` or `\\` in `hay` (or its length): label values
/// are the bulk of a page.
#[inline]
fn find_quote_or_backslash(hay: &[u8]) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const QUOTE: u64 = LO * b'"' as u64;
    const BACKSLASH: u64 = LO * b'\\' as u64;
    let mut chunks = hay.chunks_exact(8);
    let mut offset = 0;
    for chunk in chunks.by_ref() {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let q = w ^ QUOTE;
        let s = w ^ BACKSLASH;
        // "Has a zero byte", per pattern; the lowest flagged byte is always
        // a true match.
        let found = (q.wrapping_sub(LO) & !q | s.wrapping_sub(LO) & !s) & HI;
        if found != 0 {
            return offset + (found.trailing_zeros() / 8) as usize;
        }
        offset += 8;
    }
    let rest = chunks.remainder();
    offset
        + rest
            .iter()
            .position(|&c| c == b'"' || c == b'\\')
            .unwrap_or(rest.len())
}

/// Length of the run at the start of `hay` whose bytes all have class `bit`.
#[inline]
fn run_len(hay: &[u8], bit: u8) -> usize {
    hay.iter()
        .position(|&c| !class(c, bit))
        .unwrap_or(hay.len())
}

/// The lines of a page, each as `&str` or an invalid-UTF-8 error. A final
/// `\n` does not open another (empty) line.
pub(crate) struct Lines<'a> {
    input: &'a [u8],
    /// The whole page when it is valid UTF-8 (the common case: one
    /// validation pass, then plain slicing).
    text: Option<&'a str>,
    pos: usize,
    line_no: usize,
}

impl<'a> Lines<'a> {
    pub(crate) fn new(input: &'a [u8]) -> Self {
        Self {
            input,
            text: std::str::from_utf8(input).ok(),
            pos: 0,
            line_no: 0,
        }
    }

    /// The number of the line returned last (1-based), 0 before the first.
    pub(crate) fn line_no(&self) -> usize {
        self.line_no
    }
}

impl<'a> Iterator for Lines<'a> {
    type Item = (usize, Result<&'a str, ParseError>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.input.len() {
            return None;
        }
        let start = self.pos;
        let rest = self.input.get(start..).unwrap_or_default();
        let end = match find_newline(rest) {
            Some(p) => {
                self.pos = start + p + 1;
                start + p
            }
            None => {
                self.pos = self.input.len();
                self.input.len()
            }
        };
        self.line_no += 1;
        let line = match self.text {
            Some(text) => Ok(text.get(start..end).unwrap_or_default()),
            None => {
                let bytes = self.input.get(start..end).unwrap_or_default();
                std::str::from_utf8(bytes).map_err(|e| {
                    ParseError::new(
                        self.line_no,
                        format!("invalid UTF-8 at byte {} of the line", e.valid_up_to() + 1),
                    )
                })
            }
        };
        Some((self.line_no, line))
    }
}

// ---------------------------------------------------------------------------
// Character classes
// ---------------------------------------------------------------------------

const NAME_START: u8 = 1;
const NAME_CONT: u8 = 2;
const LABEL_START: u8 = 4;
const LABEL_CONT: u8 = 8;

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        let alpha = b.is_ascii_alphabetic();
        let digit = b.is_ascii_digit();
        let mut v = 0;
        if alpha || b == b'_' || b == b':' {
            v |= NAME_START | NAME_CONT;
        }
        if digit {
            v |= NAME_CONT | LABEL_CONT;
        }
        if alpha || b == b'_' {
            v |= LABEL_START | LABEL_CONT;
        }
        t[c] = v;
        c += 1;
    }
    t
};

#[inline]
fn class(c: u8, bit: u8) -> bool {
    CLASS[c as usize] & bit != 0
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`
pub(crate) fn is_valid_metric_name(name: &str) -> bool {
    let b = name.as_bytes();
    match b.split_first() {
        Some((&first, rest)) => {
            class(first, NAME_START) && rest.iter().all(|&c| class(c, NAME_CONT))
        }
        None => false,
    }
}

#[inline]
fn is_blank(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

/// How an offending byte is shown in an error: `'x'`, `'\t'`, `end of line`.
fn found(s: &str, i: usize) -> String {
    match s.get(i..).and_then(|rest| rest.chars().next()) {
        Some(c) => format!("{c:?}"),
        None => "end of line".to_owned(),
    }
}

// ---------------------------------------------------------------------------
// Cursor
// ---------------------------------------------------------------------------

struct Cur<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    fn new(s: &'a str) -> Self {
        Self {
            s,
            b: s.as_bytes(),
            i: 0,
        }
    }
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    #[inline]
    fn at_end(&self) -> bool {
        self.i >= self.b.len()
    }
    #[inline]
    fn skip_blanks(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if !is_blank(c) {
                break;
            }
            self.i += 1;
        }
    }
    /// Positions are only ever taken at ASCII delimiters, so these are char
    /// boundaries; `get` keeps it panic-free regardless.
    #[inline]
    fn slice(&self, a: usize, z: usize) -> &'a str {
        self.s.get(a..z).unwrap_or_default()
    }
    fn found(&self) -> String {
        found(self.s, self.i)
    }
    /// Advance over a token that ends at a blank (space, or also tab when
    /// `tabs`) or the end of the line; return it.
    #[inline]
    fn token(&mut self, tabs: bool) -> &'a str {
        let start = self.i;
        while let Some(&c) = self.b.get(self.i) {
            if c == b' ' || (tabs && c == b'\t') {
                break;
            }
            self.i += 1;
        }
        self.slice(start, self.i)
    }
}

// ---------------------------------------------------------------------------
// Numbers
// ---------------------------------------------------------------------------

static POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// Exact fast path for `[+-]?digits[.digits]` with at most 15 digits: the
/// mantissa fits in 2^53 and the divisor is an exact power of ten, so one
/// IEEE division is correctly rounded (Clinger's fast path).
#[inline]
fn fast_decimal(b: &[u8]) -> Option<f64> {
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    let mut mantissa: u64 = 0;
    let mut n_digits = 0usize;
    let mut frac: Option<usize> = None;
    for &c in digits {
        match c {
            b'0'..=b'9' => {
                mantissa = mantissa * 10 + u64::from(c - b'0');
                n_digits += 1;
                if let Some(f) = frac.as_mut() {
                    *f += 1;
                }
            }
            b'.' if frac.is_none() => frac = Some(0),
            _ => return None,
        }
    }
    if n_digits == 0 || n_digits > 15 {
        return None;
    }
    let magnitude = match frac {
        Some(f) if f > 0 => mantissa as f64 / POW10.get(f).copied()?,
        _ => mantissa as f64,
    };
    Some(if neg { -magnitude } else { magnitude })
}

/// A sample or exemplar value: Go `ParseFloat` / Python `float` syntax
/// without hex or underscores: `1`, `-3e3`, `08`, `.5`, `1.`, `1e+011`,
/// `+Inf`, `-inf`, `Infinity`, `NaN`, `nan`.
pub(crate) fn parse_value(tok: &str) -> Option<f64> {
    if let Some(v) = fast_decimal(tok.as_bytes()) {
        return Some(v);
    }
    // std accepts exactly decimal floats plus case-insensitive inf/infinity/
    // nan, with an optional sign; no whitespace, no `_`, no hex.
    tok.parse::<f64>().ok()
}

/// A timestamp in seconds. 0.0.4: an int64 of milliseconds. OM: a finite
/// float of seconds.
fn parse_timestamp(tok: &str, om: bool) -> Result<f64, String> {
    if om {
        match parse_value(tok) {
            Some(v) if v.is_finite() => Ok(v),
            _ => Err(format!("invalid timestamp {tok:?}")),
        }
    } else {
        match tok.parse::<i64>() {
            Ok(ms) => Ok(ms as f64 / 1000.0),
            Err(_) => Err(format!(
                "invalid timestamp {tok:?}: expected integer milliseconds"
            )),
        }
    }
}

// ---------------------------------------------------------------------------
// Escapes
// ---------------------------------------------------------------------------

/// Unescape a HELP text. 0.0.4: `\\` and `\n`; OpenMetrics also `\"`.
/// Other sequences (and a trailing lone backslash) pass through literally.
pub(crate) fn unescape_help(text: &str, om: bool) -> Cow<'_, str> {
    if !text.as_bytes().contains(&b'\\') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('"') if om => out.push('"'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

/// A quoted label value; `cur` is just past the opening `"` and ends just
/// past the closing one. Borrowed unless it holds an escape.
#[inline(never)]
fn lex_quoted<'a>(cur: &mut Cur<'a>, syn: Syntax) -> Result<Cow<'a, str>, String> {
    let start = cur.i;
    let b = cur.b;
    let mut i = start + find_quote_or_backslash(b.get(start..).unwrap_or_default());
    if b.get(i) == Some(&b'"') {
        cur.i = i + 1;
        return Ok(Cow::Borrowed(cur.slice(start, i)));
    }
    if i >= b.len() {
        cur.i = i;
        return Err("unterminated label value: expected closing '\"', found end of line".into());
    }
    // Slow path: at least one escape.
    let mut out = String::with_capacity(i - start + 16);
    out.push_str(cur.slice(start, i));
    let mut run = i;
    loop {
        match b.get(i) {
            None => {
                cur.i = i;
                return Err(
                    "unterminated label value: expected closing '\"', found end of line".into(),
                );
            }
            Some(b'"') => {
                out.push_str(cur.slice(run, i));
                cur.i = i + 1;
                return Ok(Cow::Owned(out));
            }
            Some(b'\\') => {
                out.push_str(cur.slice(run, i));
                match b.get(i + 1) {
                    Some(b'\\') => out.push('\\'),
                    Some(b'"') => out.push('"'),
                    Some(b'n') => out.push('\n'),
                    None => {
                        cur.i = i + 1;
                        return Err(
                            "unterminated label value: expected closing '\"', found end of line"
                                .into(),
                        );
                    }
                    Some(_) if syn.prom_strict() => {
                        return Err(format!(
                            "invalid escape sequence '\\{}' in label value",
                            found(cur.s, i + 1).trim_matches('\'')
                        ));
                    }
                    Some(_) => {
                        // Unknown escape: keep the backslash, let the next
                        // character be read normally.
                        out.push('\\');
                        i += 1;
                        run = i;
                        continue;
                    }
                }
                i += 2;
                run = i;
            }
            Some(_) => i += 1,
        }
    }
}

// ---------------------------------------------------------------------------
// Labels
// ---------------------------------------------------------------------------

/// `cur` is just past `{`; on success it is just past `}`. Labels are pushed
/// onto `out`.
fn lex_labels<'a>(cur: &mut Cur<'a>, syn: Syntax, out: &mut Vec<Label<'a>>) -> Result<(), String> {
    // Locals rather than `cur.i` through a pointer: keeps the index in a
    // register across the `push` (measured).
    let loose = syn.loose();
    let b = cur.b;
    let s = cur.s;
    let mut i = cur.i;
    if loose {
        skip_blanks_at(b, &mut i);
    }
    if b.get(i) == Some(&b'}') {
        cur.i = i + 1;
        return Ok(());
    }
    loop {
        let name = lex_label_name(b, s, &mut i, syn)?;
        // Fast path, no escape: push the borrowed value directly (going
        // through `lex_quoted`'s returned `Cow` costs a store-forwarding
        // stall per label, measured).
        let start = i;
        let end = start + find_quote_or_backslash(b.get(start..).unwrap_or_default());
        if b.get(end) == Some(&b'"') {
            i = end + 1;
            out.push(Label {
                name: Cow::Borrowed(name),
                value: Cow::Borrowed(s.get(start..end).unwrap_or_default()),
            });
        } else {
            cur.i = i;
            let value = lex_quoted(cur, syn)?;
            i = cur.i;
            out.push(Label {
                name: Cow::Borrowed(name),
                value,
            });
        }
        let before = i;
        if loose {
            skip_blanks_at(b, &mut i);
        }
        match b.get(i) {
            Some(b',') => {
                i += 1;
                if loose {
                    skip_blanks_at(b, &mut i);
                    if b.get(i) == Some(&b'}') {
                        // Trailing comma: fine in 0.0.4.
                        cur.i = i + 1;
                        return Ok(());
                    }
                }
            }
            Some(b'}') => {
                cur.i = i + 1;
                return Ok(());
            }
            // Lenient: a missing comma between blank-separated labels, as
            // Prometheus' own text parser accepts (`{a="1" b="2"}`).
            Some(&c) if !syn.strict && i > before && class(c, LABEL_START) => {}
            _ => {
                return Err(format!(
                    "expected ',' or '}}' after label value, found {}",
                    found(s, i)
                ))
            }
        }
    }
}

/// `name="` of one label, blanks allowed around `=` in the loose formats;
/// `i` ends just past the opening quote. Inlined: it is the label loop's
/// hot path.
#[inline(always)]
fn lex_label_name<'a>(b: &[u8], s: &'a str, i: &mut usize, syn: Syntax) -> Result<&'a str, String> {
    let loose = syn.loose();
    let start = *i;
    match b.get(*i) {
        Some(&c) if class(c, LABEL_START) => *i += 1,
        _ => return Err(format!("expected label name, found {}", found(s, *i))),
    }
    *i += run_len(b.get(*i..).unwrap_or_default(), LABEL_CONT);
    let name = s.get(start..*i).unwrap_or_default();
    if loose {
        skip_blanks_at(b, i);
    }
    if b.get(*i) != Some(&b'=') {
        return Err(format!(
            "expected '=' after label name, found {}",
            found(s, *i)
        ));
    }
    *i += 1;
    if loose {
        skip_blanks_at(b, i);
    }
    if b.get(*i) != Some(&b'"') {
        return Err(format!(
            "expected '\"' to open the value of label {name:?}, found {}",
            found(s, *i)
        ));
    }
    *i += 1;
    if name.starts_with("__") && (name == "__name__" || syn.om_strict()) {
        return Err(format!(
            "label name {name:?} is reserved (starts with \"__\")"
        ));
    }
    Ok(name)
}

#[inline(always)]
fn skip_blanks_at(b: &[u8], i: &mut usize) {
    while let Some(&c) = b.get(*i) {
        if !is_blank(c) {
            break;
        }
        *i += 1;
    }
}

fn check_duplicate_labels(labels: &[Label<'_>]) -> Result<(), String> {
    for (i, a) in labels.iter().enumerate() {
        if labels
            .get(..i)
            .unwrap_or_default()
            .iter()
            .any(|b| b.name == a.name)
        {
            return Err(format!("duplicate label name {:?}", a.name));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Lines
// ---------------------------------------------------------------------------

/// Lex one line (without its `\n`).
pub(crate) fn lex_line<'a>(
    line: &'a str,
    syn: Syntax,
    hint: &mut usize,
) -> Result<Line<'a>, String> {
    if syn.om_strict() {
        return match line.as_bytes().first() {
            None => Err("blank lines are not allowed in OpenMetrics".into()),
            Some(b'#') => lex_meta_strict(line),
            Some(_) => lex_sample(Cur::new(line), syn, hint).map(|(n, s)| Line::Sample(n, s)),
        };
    }
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut cur = Cur::new(line);
    cur.skip_blanks();
    match cur.peek() {
        None => Ok(Line::Empty),
        Some(b'#') => lex_meta_loose(cur, syn),
        Some(_) => lex_sample(cur, syn, hint).map(|(n, s)| Line::Sample(n, s)),
    }
}

fn metric_type(word: &str, syn: Syntax) -> Option<MetricType> {
    let t = if syn.om_strict() {
        // Exact, lower case; `untyped` is 0.0.4 only.
        match word {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "gaugehistogram" => MetricType::GaugeHistogram,
            "summary" => MetricType::Summary,
            "info" => MetricType::Info,
            "stateset" => MetricType::StateSet,
            "unknown" => MetricType::Unknown,
            _ => return None,
        }
    } else {
        let is = |s: &str| word.eq_ignore_ascii_case(s);
        if is("counter") {
            MetricType::Counter
        } else if is("gauge") {
            MetricType::Gauge
        } else if is("histogram") {
            MetricType::Histogram
        } else if is("summary") {
            MetricType::Summary
        } else if is("untyped") {
            MetricType::Unknown
        } else if syn.prom_strict() {
            return None;
        } else if is("gaugehistogram") {
            MetricType::GaugeHistogram
        } else if is("info") {
            MetricType::Info
        } else if is("stateset") {
            MetricType::StateSet
        } else if is("unknown") {
            MetricType::Unknown
        } else {
            return None;
        }
    };
    Some(t)
}

/// Strict OpenMetrics: `# EOF`, or `# KEYWORD SP name SP text` with single
/// spaces exactly.
fn lex_meta_strict(line: &str) -> Result<Line<'_>, String> {
    if line == "# EOF" {
        return Ok(Line::Eof);
    }
    let Some(rest) = line.strip_prefix("# ") else {
        return Err(format!(
            "expected '# HELP', '# TYPE', '# UNIT' or '# EOF', found {line:?} (comments are not allowed in OpenMetrics)"
        ));
    };
    let (keyword, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    if !matches!(keyword, "HELP" | "TYPE" | "UNIT") {
        return Err(format!(
            "expected HELP, TYPE, UNIT or EOF after '# ', found {keyword:?}"
        ));
    }
    let Some((name, text)) = rest.split_once(' ') else {
        return Err(format!(
            "expected metric name, ' ' and text after '# {keyword}', found {rest:?}"
        ));
    };
    if !is_valid_metric_name(name) {
        return Err(format!("invalid metric name {name:?} in # {keyword}"));
    }
    match keyword {
        "HELP" => Ok(Line::Help(name, unescape_help(text, true))),
        "TYPE" => match metric_type(text, Syntax::new(Format::OpenMetrics, true)) {
            Some(t) => Ok(Line::Type(name, t)),
            None => Err(format!("unknown metric type {text:?} for {name:?}")),
        },
        _ => Ok(Line::Unit(name, text)),
    }
}

/// Prometheus 0.0.4 (and lenient OM): `# HELP`/`# TYPE`/`# UNIT` with any
/// blanks; anything else after `#` is a comment. `# HELP name` with no text
/// is ignored, as in Go's expfmt.
fn lex_meta_loose<'a>(mut cur: Cur<'a>, syn: Syntax) -> Result<Line<'a>, String> {
    cur.i += 1; // '#'
    cur.skip_blanks();
    let keyword = cur.token(true);
    let keyword = match keyword {
        "HELP" | "TYPE" | "UNIT" => keyword,
        "EOF" => {
            cur.skip_blanks();
            return Ok(if cur.at_end() {
                Line::Eof
            } else {
                Line::Comment
            });
        }
        _ => return Ok(Line::Comment),
    };
    if keyword == "UNIT" && syn.prom_strict() {
        // Not part of 0.0.4: a plain comment there.
        return Ok(Line::Comment);
    }
    cur.skip_blanks();
    if cur.at_end() {
        return Ok(Line::Comment);
    }
    let start = cur.i;
    match cur.peek() {
        Some(c) if class(c, NAME_START) => cur.i += 1,
        _ => {
            return Err(format!(
                "expected metric name after '# {keyword}', found {}",
                cur.found()
            ))
        }
    }
    cur.i += run_len(cur.b.get(cur.i..).unwrap_or_default(), NAME_CONT);
    let name = cur.slice(start, cur.i);
    match cur.peek() {
        None => return Ok(Line::Comment),
        Some(c) if is_blank(c) => {}
        Some(_) => {
            return Err(format!(
                "invalid metric name in # {keyword}: expected ' ' after {name:?}, found {}",
                cur.found()
            ))
        }
    }
    cur.skip_blanks();
    if cur.at_end() {
        return Ok(Line::Comment);
    }
    let text = cur.slice(cur.i, cur.b.len());
    match keyword {
        "HELP" => Ok(Line::Help(name, unescape_help(text, syn.om))),
        "TYPE" => {
            let word = text.trim_end_matches([' ', '\t']);
            match metric_type(word, syn) {
                Some(t) => Ok(Line::Type(name, t)),
                None => Err(format!("unknown metric type {word:?} for {name:?}")),
            }
        }
        _ => Ok(Line::Unit(name, text.trim_end_matches([' ', '\t']))),
    }
}

/// `name[{labels}] value [timestamp] [# {labels} value [timestamp]]`.
fn lex_sample<'a>(
    mut cur: Cur<'a>,
    syn: Syntax,
    hint: &mut usize,
) -> Result<(&'a str, Sample<'a>), String> {
    let loose = syn.loose();
    // Name.
    let start = cur.i;
    match cur.peek() {
        Some(c) if class(c, NAME_START) => cur.i += 1,
        Some(b'{') | Some(b'"') => {
            return Err(format!(
                "expected metric name, found {} (quoted UTF-8 metric names are not supported)",
                cur.found()
            ))
        }
        _ => return Err(format!("expected metric name, found {}", cur.found())),
    }
    cur.i += run_len(cur.b.get(cur.i..).unwrap_or_default(), NAME_CONT);
    let name = cur.slice(start, cur.i);

    let labels = lex_sample_labels(&mut cur, syn, hint, name)?;

    // Value.
    let tok = cur.token(loose);
    if tok.is_empty() {
        return Err(format!("expected value, found {}", cur.found()));
    }
    let Some(value) = parse_value(tok) else {
        return Err(format!("invalid value {tok:?}"));
    };

    let mut sample = Sample {
        name: Cow::Borrowed(name),
        labels,
        value,
        timestamp: None,
        exemplar: None,
    };
    lex_sample_tail(cur, syn, &mut sample)?;
    Ok((name, sample))
}

/// A sample's `{labels}` and the blank after them (or the blank after a
/// bare name); `cur` is just past the name.
fn lex_sample_labels<'a>(
    cur: &mut Cur<'a>,
    syn: Syntax,
    hint: &mut usize,
    name: &str,
) -> Result<Vec<Label<'a>>, String> {
    let loose = syn.loose();
    let mut had_blank = false;
    if loose {
        let before = cur.i;
        cur.skip_blanks();
        had_blank = cur.i > before;
    }
    let labels = if cur.peek() == Some(b'{') {
        cur.i += 1;
        // Sized like the previous sample's label set (at least 4, so a
        // histogram's `_count` does not shrink the next series' buckets):
        // one allocation, no copy, in the common case.
        let mut labels: Vec<Label<'a>> = Vec::with_capacity((*hint).max(4));
        lex_labels(cur, syn, &mut labels)?;
        if syn.strict {
            check_duplicate_labels(&labels)?;
        }
        *hint = labels.len();
        if loose {
            cur.skip_blanks();
        } else if cur.peek() == Some(b' ') {
            cur.i += 1;
        } else {
            return Err(format!(
                "expected ' ' after label set, found {}",
                cur.found()
            ));
        }
        labels
    } else {
        if loose {
            if !had_blank && !cur.at_end() {
                return Err(format!(
                    "invalid metric name: expected ' ' or '{{' after {name:?}, found {}",
                    cur.found()
                ));
            }
        } else if cur.peek() == Some(b' ') {
            cur.i += 1;
        } else {
            return Err(format!(
                "expected ' ' or '{{' after metric name {name:?}, found {}",
                cur.found()
            ));
        }
        Vec::new()
    };
    Ok(labels)
}

/// What may follow a sample's value: a timestamp, an exemplar, or both.
fn lex_sample_tail<'a>(
    mut cur: Cur<'a>,
    syn: Syntax,
    sample: &mut Sample<'a>,
) -> Result<(), String> {
    let loose = syn.loose();
    if cur.at_end() {
        return Ok(());
    }

    if loose {
        cur.skip_blanks();
        if cur.at_end() {
            return Ok(());
        }
        if cur.peek() != Some(b'#') {
            let tok = cur.token(true);
            sample.timestamp = Some(parse_timestamp(tok, syn.om)?);
            cur.skip_blanks();
            if cur.at_end() {
                return Ok(());
            }
            if cur.peek() != Some(b'#') {
                return Err(format!(
                    "expected end of line after timestamp, found {}",
                    cur.found()
                ));
            }
        }
        if !syn.exemplars() {
            return Err("unexpected '#' after the value (exemplars are OpenMetrics-only)".into());
        }
        cur.i += 1;
        cur.skip_blanks();
    } else {
        // Strict OM: exactly one space, then a timestamp and/or "# ".
        cur.i += 1; // the ' ' that ended the value token
        if cur.peek() != Some(b'#') {
            let tok = cur.token(false);
            if tok.is_empty() {
                return Err(format!(
                    "expected timestamp or exemplar after ' ', found {}",
                    cur.found()
                ));
            }
            sample.timestamp = Some(parse_timestamp(tok, true)?);
            if cur.at_end() {
                return Ok(());
            }
            cur.i += 1;
            if cur.peek() != Some(b'#') {
                return Err(format!(
                    "expected '#' to start an exemplar after the timestamp, found {}",
                    cur.found()
                ));
            }
        }
        cur.i += 1;
        if cur.peek() != Some(b' ') {
            return Err(format!("expected ' ' after '#', found {}", cur.found()));
        }
        cur.i += 1;
    }
    sample.exemplar = Some(lex_exemplar(cur, syn)?);
    Ok(())
}

/// `{labels} value [timestamp]`; `cur` is at `{`.
fn lex_exemplar<'a>(mut cur: Cur<'a>, syn: Syntax) -> Result<Exemplar<'a>, String> {
    let loose = syn.loose();
    if cur.peek() != Some(b'{') {
        return Err(format!(
            "expected '{{' to open the exemplar's label set, found {}",
            cur.found()
        ));
    }
    cur.i += 1;
    let mut labels: Vec<Label<'a>> = Vec::new();
    lex_labels(&mut cur, syn, &mut labels)?;
    if syn.strict {
        check_duplicate_labels(&labels)?;
    }
    if syn.om_strict() {
        let chars: usize = labels
            .iter()
            .map(|l| l.name.chars().count() + l.value.chars().count())
            .sum();
        if chars > 128 {
            return Err(format!(
                "exemplar label set is {chars} characters long, more than 128"
            ));
        }
    }
    if loose {
        cur.skip_blanks();
    } else if cur.peek() == Some(b' ') {
        cur.i += 1;
    } else {
        return Err(format!(
            "expected ' ' after the exemplar's label set, found {}",
            cur.found()
        ));
    }
    let tok = cur.token(loose);
    if tok.is_empty() {
        return Err(format!("expected exemplar value, found {}", cur.found()));
    }
    let Some(value) = parse_value(tok) else {
        return Err(format!("invalid exemplar value {tok:?}"));
    };
    let mut exemplar = Exemplar {
        labels,
        value,
        timestamp: None,
    };
    if cur.at_end() {
        return Ok(exemplar);
    }
    if loose {
        cur.skip_blanks();
        if cur.at_end() {
            return Ok(exemplar);
        }
    } else {
        cur.i += 1; // the ' ' that ended the value token
    }
    let tok = cur.token(loose);
    if tok.is_empty() {
        return Err(format!(
            "expected exemplar timestamp, found {}",
            cur.found()
        ));
    }
    exemplar.timestamp = Some(parse_timestamp(tok, true)?);
    if loose {
        cur.skip_blanks();
    }
    if !cur.at_end() {
        return Err(format!(
            "expected end of line after the exemplar, found {}",
            cur.found()
        ));
    }
    Ok(exemplar)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn om() -> Syntax {
        Syntax::new(Format::OpenMetrics, true)
    }
    fn prom() -> Syntax {
        Syntax::new(Format::PrometheusText, true)
    }
    fn lenient() -> Syntax {
        Syntax::new(Format::PrometheusText, false)
    }

    fn sample(line: &str, syn: Syntax) -> Result<Sample<'_>, String> {
        let mut scratch = 0usize;
        match lex_line(line, syn, &mut scratch)? {
            Line::Sample(_, s) => Ok(s),
            other => Err(format!("not a sample: {other:?}")),
        }
    }

    #[test]
    fn newline_search_matches_naive() {
        let text = b"abcdefghijklmnop\nqrstuvwxyz\n\n0123456789abcdef0123\n";
        for start in 0..text.len() {
            let hay = &text[start..];
            assert_eq!(
                find_newline(hay),
                hay.iter().position(|&c| c == b'\n'),
                "start {start}"
            );
        }
        // High bytes must not produce false positives.
        assert_eq!(
            find_newline(&[0x8a, 0x0b, 0xff, 0x09, 0x8a, 0x8a, 0x8a, 0x8a]),
            None
        );
    }

    #[test]
    fn quote_search_matches_naive() {
        let text = br#"abcdefgh\ijklmnop"qrstuvwxyz0123456789"\"#;
        for start in 0..=text.len() {
            let hay = &text[start..];
            let naive = hay
                .iter()
                .position(|&c| c == b'"' || c == b'\\')
                .unwrap_or(hay.len());
            assert_eq!(find_quote_or_backslash(hay), naive, "start {start}");
        }
        assert_eq!(
            find_quote_or_backslash(&[0xa2, 0xdc, 0x22 ^ 0x80, 0x5c ^ 0x80, 1, 2, 3, 4, 5]),
            9
        );
    }

    #[test]
    fn values() {
        for (s, v) in [
            ("1", 1.0),
            ("-3e3", -3000.0),
            ("08", 8.0),
            (".5", 0.5),
            ("1.", 1.0),
            ("1.15891634176e+011", 1.15891634176e11),
            ("0.07500000000000001", 0.07500000000000001),
            ("9223372036854775808", 9223372036854775808.0),
            ("0000000000000000000000000000000000000000001.2e-1", 0.12),
            ("+Inf", f64::INFINITY),
            ("-Inf", f64::NEG_INFINITY),
            ("inf", f64::INFINITY),
            ("-infinity", f64::NEG_INFINITY),
            ("1.23457e+06", 1.23457e6),
            ("0.000003", 0.000003),
        ] {
            assert_eq!(parse_value(s), Some(v), "{s}");
        }
        assert!(parse_value("NaN").is_some_and(f64::is_nan));
        assert!(parse_value("nan").is_some_and(f64::is_nan));
        for bad in [
            "", "1_2", "0x1", "0x1p-3", "a", " 1", "1 ", "1\t", ".", "-", "1e",
        ] {
            assert_eq!(parse_value(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn fast_path_agrees_with_std() {
        for s in [
            "0.1",
            "0.2",
            "0.3",
            "123456789012345",
            "1.23456789012345",
            "99999.9999",
            "-0.000001",
            "42.5",
            "0.00015",
            "3.14159",
        ] {
            assert_eq!(fast_decimal(s.as_bytes()), s.parse::<f64>().ok(), "{s}");
        }
    }

    #[test]
    fn label_escapes() {
        let s = sample(r#"a{x="b\"a\nr\\",y="plain"} 1"#, lenient()).expect("parses");
        assert_eq!(s.label("x"), Some("b\"a\nr\\"));
        assert!(matches!(s.labels[1].value, Cow::Borrowed("plain")));
        // Unknown escapes pass through except in strict 0.0.4.
        let s = sample(r#"a{x="b\\a\z"} 1"#, om()).expect("parses");
        assert_eq!(s.label("x"), Some("b\\a\\z"));
        assert!(sample(r#"metric{label="\t"} 3.14"#, prom()).is_err());
        // Braces, hash, comma inside values.
        let s = sample(r#"a{foo="} foo # bar # ",b="x,y=z"} 1"#, om()).expect("parses");
        assert_eq!(s.label("foo"), Some("} foo # bar # "));
        assert_eq!(s.label("b"), Some("x,y=z"));
    }

    #[test]
    fn loose_whitespace_and_trailing_comma() {
        let s = sample(
            "name2{labelname=\"val2\"\t,basename   =   \"basevalue2\"\t\t} +Inf 54321",
            prom(),
        )
        .expect("parses");
        assert_eq!(s.label("basename"), Some("basevalue2"));
        assert_eq!(s.value, f64::INFINITY);
        assert_eq!(s.timestamp, Some(54.321));
        let s = sample("name2{ labelname = \"val1\" , }-Inf", prom()).expect("parses");
        assert_eq!(s.value, f64::NEG_INFINITY);
        assert!(sample(r#"a{a="1",b="2",} 1"#, om()).is_err());
        let s = sample("  name {a=\"1\"}   2\t\t", lenient()).expect("parses");
        assert_eq!(s.value, 2.0);
    }

    #[test]
    fn error_messages_name_what_was_found() {
        let e = sample(r#"a{b"c"} 1"#, prom()).expect_err("bad");
        assert_eq!(e, "expected '=' after label name, found '\"'");
        let e = sample("a{b=c} 1", prom()).expect_err("bad");
        assert!(e.contains("found 'c'"), "{e}");
        let e = sample("a 1 2.72", prom()).expect_err("bad");
        assert!(e.contains("integer milliseconds"), "{e}");
    }

    #[test]
    fn timestamps_by_format() {
        assert_eq!(sample("a 1 1500", prom()).expect("ok").timestamp, Some(1.5));
        assert_eq!(
            sample("a 1 1.5e3", om()).expect("ok").timestamp,
            Some(1500.0)
        );
        assert!(sample("a 1 NaN", om()).is_err());
        assert!(sample("a 1 1 2", prom()).is_err());
    }

    #[test]
    fn exemplars() {
        let s = sample(r#"a_total 0 123 # {a="b"} 0.5"#, om()).expect("ok");
        assert_eq!(s.timestamp, Some(123.0));
        let ex = s.exemplar.expect("exemplar");
        assert_eq!(ex.value, 0.5);
        assert_eq!(ex.labels[0].value, "b");
        let s = sample(r#"a_bucket{le="+Inf"} 3 # {a="d"} 4 123"#, om()).expect("ok");
        assert_eq!(s.exemplar.and_then(|e| e.timestamp), Some(123.0));
        for bad in [
            r#"a_bucket{le="+Inf"} 1 #"#,
            r#"a_bucket{le="+Inf"} 1# {} 1"#,
            r#"a_bucket{le="+Inf"} 1 #{} 1"#,
            r#"a_bucket{le="+Inf"} 1 # {}1"#,
            r#"a_bucket{le="+Inf"} 1 # {} 1 "#,
            r#"a_bucket{le="+Inf"} 1 # {} 1 1 "#,
            r#"a_total 1 1 # id="a"} 1"#,
            r#"a_total 1 # {a="b"} 0.5 NaN"#,
        ] {
            assert!(sample(bad, om()).is_err(), "{bad}");
        }
        // Strict 0.0.4 has no exemplars; lenient 0.0.4 tolerates them.
        assert!(sample(r#"a_total 1 # {a="b"} 1"#, prom()).is_err());
        assert!(sample(r#"a_total 1 # {a="b"} 1"#, lenient())
            .expect("ok")
            .exemplar
            .is_some());
    }

    #[test]
    fn help_unescaping_by_format() {
        assert_eq!(unescape_help(r#"a\\b\nc\"d\x"#, false), "a\\b\nc\\\"d\\x");
        assert_eq!(unescape_help(r#"a\\b\nc\"d\x"#, true), "a\\b\nc\"d\\x");
        assert_eq!(unescape_help("trailing\\", true), "trailing\\");
        assert!(matches!(unescape_help("plain", true), Cow::Borrowed(_)));
    }

    #[test]
    fn metadata_lines() {
        let mut scratch = 0usize;
        let l = lex_line("  #    TYPE    name2 gauge", prom(), &mut scratch).expect("ok");
        assert!(matches!(l, Line::Type("name2", MetricType::Gauge)));
        let l = lex_line(" # HELP  name2  \tdoc str\"ing 2", prom(), &mut scratch).expect("ok");
        assert!(matches!(l, Line::Help("name2", ref h) if h == "doc str\"ing 2"));
        for comment in [
            "# HELP",
            "# HELP ",
            "# HELP my_summary",
            "# HELP my_summary ",
            "# NOTE x",
        ] {
            let l = lex_line(comment, prom(), &mut scratch).expect("ok");
            assert!(matches!(l, Line::Comment), "{comment}");
        }
        assert!(lex_line("# TYPE met-ric", prom(), &mut scratch).is_err());
        assert!(lex_line("# TYPE a untyped", om(), &mut scratch).is_err());
        assert!(lex_line("# TYPE a gauge ", om(), &mut scratch).is_err());
        assert!(lex_line("# HELP a", om(), &mut scratch).is_err());
        assert!(lex_line("#a_sum 0", om(), &mut scratch).is_err());
        assert!(matches!(
            lex_line("# HELP a ", om(), &mut scratch),
            Ok(Line::Help("a", ref h)) if h.is_empty()
        ));
    }

    #[test]
    fn rejects_quoted_utf8_names_cleanly() {
        let e = sample(
            r#"{"go.gc_duration_seconds",quantile="0"} 4.9e-05"#,
            lenient(),
        )
        .expect_err("bad");
        assert!(e.contains("quoted"), "{e}");
    }
}
