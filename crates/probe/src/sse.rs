//! An incremental Server-Sent Events reader, written for timing.
//!
//! Why our own: the probe must timestamp each event *as it is parsed off the
//! byte stream*. A pull-based reader lets the caller feed a network chunk and
//! then take events one by one, reading the monotonic clock after each, so a
//! chunk carrying several events yields several honest timestamps and no
//! event waits for the rest of its chunk to be decoded.
//!
//! It follows the WHATWG event-stream rules that matter to LLM servers: lines
//! end in `\n`, `\r\n` or `\r` (also when the `\r` and `\n` arrive in
//! different chunks); `:` starts a comment; `data` lines of one event are
//! joined with `\n`; a blank line dispatches; a leading UTF-8 BOM is
//! skipped. Invariants: it never panics on any input, it does no I/O, its
//! output does not depend on how the bytes were chunked, and its memory is
//! bounded by the per-event size limit.

use std::borrow::Cow;

use thiserror::Error;

/// One dispatched event. `data` is the joined `data` lines (invalid UTF-8 is
/// replaced with U+FFFD: generated text from random-weight models may hold
/// broken bytes, and that must not fail a probe).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
    pub id: Option<String>,
}

/// One dispatched event, borrowed from the reader until its next call
/// (the probe's hot path: no allocation per event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEventRef<'a> {
    pub event: Option<&'a str>,
    /// Borrowed when valid UTF-8 (always, from a sane server).
    pub data: Cow<'a, str>,
}

/// Why the reader gave up.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SseError {
    /// The lines of one event (or one unterminated line) exceeded the limit.
    #[error("an SSE event exceeded the limit of {limit} bytes per event")]
    EventTooLarge { limit: usize },
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Incremental SSE reader: [`feed`](SseReader::feed) bytes as they arrive,
/// then drain [`next_event`](SseReader::next_event) until it returns `None`.
#[derive(Debug)]
pub struct SseReader {
    buf: Vec<u8>,
    pos: usize,
    /// Bytes of `buf[pos..]` already searched for a line end.
    scanned: usize,
    pending_cr: bool,
    bom_done: bool,
    eof: bool,
    failed: bool,
    data: Vec<u8>,
    has_data: bool,
    /// The last call handed out an event still held in `data`/`event`.
    dispatched: bool,
    event: Option<String>,
    id: Option<String>,
    /// Sum of line lengths of the event being assembled.
    event_bytes: usize,
    max_event_bytes: usize,
}

impl SseReader {
    /// A reader that fails once one event's lines sum to more than
    /// `max_event_bytes` (the guard against a server that never sends a
    /// line end).
    pub fn new(max_event_bytes: usize) -> SseReader {
        SseReader {
            buf: Vec::new(),
            pos: 0,
            scanned: 0,
            pending_cr: false,
            bom_done: false,
            eof: false,
            failed: false,
            data: Vec::new(),
            has_data: false,
            dispatched: false,
            event: None,
            id: None,
            event_bytes: 0,
            max_event_bytes,
        }
    }

    /// Appends a chunk of the body. Ignored after [`finish`](Self::finish)
    /// or after an error.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.eof || self.failed {
            return;
        }
        if self.pos > 0 && (self.pos == self.buf.len() || self.pos > 4096) {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// Marks the end of the body: a final unterminated line is still read,
    /// and a final event without its blank line is still dispatched (lenient
    /// on purpose: a server that closes right after its last `data:` line
    /// has sent everything).
    pub fn finish(&mut self) {
        self.eof = true;
    }

    /// Bytes buffered but not yet consumed (for diagnostics).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next complete event, `None` when more input is needed (or the
    /// input is exhausted), or an error once (then `None` forever).
    pub fn next_event(&mut self) -> Option<Result<SseEvent, SseError>> {
        let owned = match self.next_borrowed()? {
            Ok(ev) => Ok((ev.event.map(str::to_string), ev.data.into_owned())),
            Err(e) => Err(e),
        };
        Some(owned.map(|(event, data)| SseEvent {
            event,
            data,
            // The last event id persists across events, per the spec.
            id: self.id.clone(),
        }))
    }

    /// The last event id seen (it persists across events, per the spec).
    pub fn last_event_id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// [`next_event`](Self::next_event) without copying: the event borrows
    /// the reader's buffers until the next call.
    pub fn next_borrowed(&mut self) -> Option<Result<SseEventRef<'_>, SseError>> {
        if self.dispatched {
            self.dispatched = false;
            self.data.clear();
            self.event = None;
        }
        match self.advance()? {
            Ok(()) => {
                let data = match std::str::from_utf8(&self.data) {
                    Ok(s) => Cow::Borrowed(s),
                    Err(_) => String::from_utf8_lossy(&self.data),
                };
                Some(Ok(SseEventRef {
                    event: self.event.as_deref(),
                    data,
                }))
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// Reads lines until an event is ready in `data`/`event` (`Ok`), more
    /// input is needed (`None`), or the event limit is passed.
    fn advance(&mut self) -> Option<Result<(), SseError>> {
        if self.failed {
            return None;
        }
        loop {
            let rest = &self.buf[self.pos..];
            if !self.bom_done {
                if rest.len() < BOM.len() && BOM.starts_with(rest) && !self.eof {
                    return None;
                }
                if rest.starts_with(BOM) {
                    self.pos += BOM.len();
                }
                self.bom_done = true;
                continue;
            }
            if self.pending_cr {
                match rest.first() {
                    None if !self.eof => return None,
                    Some(b'\n') => self.pos += 1,
                    _ => {}
                }
                self.pending_cr = false;
                continue;
            }
            let rest = &self.buf[self.pos..];
            let from = self.scanned.min(rest.len());
            let found = memchr::memchr2(b'\n', b'\r', &rest[from..]).map(|i| i + from);
            let (line_end, next_pos) = match found {
                Some(i) => {
                    if rest[i] == b'\r' {
                        self.pending_cr = true;
                    }
                    (i, self.pos + i + 1)
                }
                None => {
                    if self.event_bytes + rest.len() > self.max_event_bytes {
                        return Some(Err(self.fail()));
                    }
                    if !self.eof {
                        self.scanned = rest.len();
                        return None;
                    }
                    if rest.is_empty() {
                        // End of input: dispatch what is pending, once.
                        return self.dispatch().then_some(Ok(()));
                    }
                    (rest.len(), self.buf.len())
                }
            };
            self.scanned = 0;
            let start = self.pos;
            self.pos = next_pos;
            let line_len = line_end;
            if line_len == 0 {
                if self.dispatch() {
                    return Some(Ok(()));
                }
                continue;
            }
            if self.event_bytes + line_len > self.max_event_bytes {
                return Some(Err(self.fail()));
            }
            self.event_bytes += line_len;
            // Borrow the line out of `buf` by index to keep `self` mutable.
            let line = start..start + line_len;
            self.process_line(line);
        }
    }

    fn fail(&mut self) -> SseError {
        self.failed = true;
        self.buf = Vec::new();
        self.pos = 0;
        self.data = Vec::new();
        SseError::EventTooLarge {
            limit: self.max_event_bytes,
        }
    }

    fn process_line(&mut self, range: std::ops::Range<usize>) {
        let line = &self.buf[range];
        if line.first() == Some(&b':') {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &line[line.len()..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            b"id" if !value.contains(&0) => {
                self.id = Some(String::from_utf8_lossy(value).into_owned())
            }
            _ => {}
        }
    }

    /// Ends the event being assembled: true when it had data (then it
    /// stays in `data`/`event` until the next call).
    fn dispatch(&mut self) -> bool {
        self.event_bytes = 0;
        if !self.has_data {
            self.event = None;
            return false;
        }
        self.has_data = false;
        self.dispatched = true;
        true
    }
}

/// Parses a whole body in one go (tests, fixtures, tools).
pub fn parse_all(body: &[u8], max_event_bytes: usize) -> Vec<Result<SseEvent, SseError>> {
    let mut r = SseReader::new(max_event_bytes);
    r.feed(body);
    r.finish();
    std::iter::from_fn(|| r.next_event()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datas(body: &[u8]) -> Vec<String> {
        parse_all(body, 1 << 20)
            .into_iter()
            .map(|e| e.map(|e| e.data).unwrap_or_else(|e| format!("ERR {e}")))
            .collect()
    }

    #[test]
    fn basic_lines_comments_multiline() {
        let body =
            b": keep-alive\n\ndata: a\ndata:b\n\nevent: x\ndata: {\"k\":1}\r\n\r\ndata: [DONE]\n\n";
        assert_eq!(datas(body), vec!["a\nb", "{\"k\":1}", "[DONE]"]);
        let evs = parse_all(body, 1 << 20);
        assert_eq!(evs[1].as_ref().unwrap().event.as_deref(), Some("x"));
    }

    #[test]
    fn cr_only_and_split_crlf() {
        let mut r = SseReader::new(1024);
        r.feed(b"data: one\r");
        assert!(r.next_event().is_none());
        r.feed(b"\n\r");
        let first = r.next_event();
        assert_eq!(first.unwrap().unwrap().data, "one");
        r.feed(b"\ndata: two\r\r");
        assert_eq!(r.next_event().unwrap().unwrap().data, "two");
        assert!(r.next_event().is_none());
    }

    #[test]
    fn data_line_split_across_chunks() {
        let mut r = SseReader::new(1024);
        r.feed(b"da");
        assert!(r.next_event().is_none());
        r.feed(b"ta: hel");
        assert!(r.next_event().is_none());
        r.feed(b"lo\n");
        assert!(r.next_event().is_none());
        r.feed(b"\n");
        assert_eq!(r.next_event().unwrap().unwrap().data, "hello");
    }

    #[test]
    fn bom_and_eof_without_blank_line() {
        assert_eq!(datas(b"\xEF\xBB\xBFdata: x\n\ndata: y"), vec!["x", "y"]);
        assert_eq!(datas(b"\xEF\xBB"), Vec::<String>::new());
    }

    #[test]
    fn size_limit() {
        let evs = parse_all(b"data: 0123456789\n\n", 8);
        assert_eq!(evs, vec![Err(SseError::EventTooLarge { limit: 8 })]);
        let mut r = SseReader::new(8);
        r.feed(b"data: 01234567890123");
        assert!(matches!(r.next_event(), Some(Err(_))));
        assert!(r.next_event().is_none());
        assert_eq!(datas(b"data: ok\n\ndata: a\ndata: b\n\n").len(), 2);
    }

    #[test]
    fn invalid_utf8_replaced() {
        assert_eq!(datas(b"data: \xff\xfe\n\n"), vec!["\u{fffd}\u{fffd}"]);
    }
}
