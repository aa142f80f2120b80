//! A lean HTTP/1.1 client for llmwatch's hot paths: every scrape and every
//! probe stream. reqwest (over hyper) spent about 4 300 instructions per
//! streamed event and parsed each scrape's URL again; this client parses a
//! target's URL once, writes a request in one system call, reads the answer
//! into one buffer per connection and hands out body bytes in place.
//!
//! It does plain `http://` only, without credentials in the URL or a proxy:
//! [`split_url`] says whether a URL qualifies, and callers keep reqwest for
//! the rest (TLS, proxies, redirects, basic auth).
//!
//! Limits: a connect timeout, a cap on the response head, the chunked
//! framing's own line caps; the body cap and the overall deadline are the
//! caller's ([`Response::read_to_end`], `tokio::time::timeout`).

mod chunked;
mod head;

pub use chunked::{ChunkedDecoder, ChunkedError, Decoded};
pub use head::{parse as parse_head, Framing, Head, HeadError};

use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why an exchange failed. Messages never carry request headers (they may
/// hold keys) nor the URL's path and query.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot resolve {authority}: {source}")]
    Resolve {
        authority: String,
        source: io::Error,
    },
    #[error("connecting to {authority} failed: {source}")]
    Connect {
        authority: String,
        source: io::Error,
    },
    #[error("connecting to {authority} timed out after {after:?}")]
    ConnectTimeout { authority: String, after: Duration },
    #[error("header {0:?} has a line break or NUL in its name or value")]
    InvalidHeader(String),
    #[error("sending the request failed: {0}")]
    Send(io::Error),
    /// The connection ended (EOF or reset) before any byte of an answer.
    #[error("the server closed the connection before answering")]
    ClosedBeforeAnswer,
    #[error("reading the response failed: {0}")]
    Read(io::Error),
    #[error("the connection closed inside the response head")]
    HeadCut,
    #[error(transparent)]
    Head(#[from] HeadError),
    #[error("response head larger than {0} bytes")]
    HeadTooLarge(usize),
    #[error("malformed chunked body: {0}")]
    Chunked(#[from] ChunkedError),
    #[error("the connection closed before the body ended")]
    BodyCut,
    #[error("body larger than the {0}-byte limit")]
    TooLarge(u64),
}

impl Error {
    /// Whether no connection could be made (nothing was sent).
    pub fn is_connect(&self) -> bool {
        matches!(
            self,
            Error::Resolve { .. } | Error::Connect { .. } | Error::ConnectTimeout { .. }
        )
    }
}

/// Where requests go: a host and port, and the `Host` header naming them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// A name to resolve or an IP address (IPv6 without brackets).
    host: String,
    port: u16,
    /// `host[:port]` as the URL spelled it, for the `Host` header.
    authority: String,
}

impl Origin {
    pub fn authority(&self) -> &str {
        &self.authority
    }
}

/// Splits a URL this client can fetch (`http`, no user or password) into
/// its origin and request target (path and query); `None` for any other
/// URL, which is reqwest's to fetch.
pub fn split_url(raw: &str) -> Option<(Origin, String)> {
    let url = url::Url::parse(raw.trim()).ok()?;
    if url.scheme() != "http" || !url.username().is_empty() || url.password().is_some() {
        return None;
    }
    let host = match url.host()? {
        url::Host::Domain(name) => name.to_string(),
        url::Host::Ipv4(address) => address.to_string(),
        url::Host::Ipv6(address) => address.to_string(),
    };
    let port = url.port_or_known_default()?;
    let host_str = url.host_str()?;
    let authority = match url.port() {
        Some(port) => format!("{host_str}:{port}"),
        None => host_str.to_string(),
    };
    let target = url[url::Position::BeforePath..url::Position::AfterQuery].to_string();
    Some((
        Origin {
            host,
            port,
            authority,
        },
        target,
    ))
}

/// A client's settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub connect_timeout: Duration,
    /// An idle connection older than this is closed, not reused.
    pub idle_timeout: Duration,
    /// Idle connections kept for reuse.
    pub max_idle: usize,
    /// Cap on a response head (status line and headers).
    pub max_head_bytes: usize,
    /// Sent as `User-Agent` when set.
    pub user_agent: Option<String>,
}

impl Default for ClientConfig {
    /// 5 s to connect, 30 s idle, 256 idle connections, 64 KiB heads.
    fn default() -> Self {
        ClientConfig {
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            max_idle: 256,
            max_head_bytes: 64 << 10,
            user_agent: None,
        }
    }
}

/// One request: method, target (path and query) and headers; the client
/// adds `Host`, `User-Agent` and `Content-Length`.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub target: &'a str,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

/// A request written out once, to be sent any number of times (a scrape
/// sends the same bytes every interval).
#[derive(Debug, Clone)]
pub struct Encoded {
    wire: Vec<u8>,
    head_request: bool,
}

/// A client for one origin, with its pool of kept-alive connections.
/// Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    origin: Origin,
    config: ClientConfig,
    idle: Mutex<Vec<Idle>>,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("origin", &self.inner.origin.authority)
            .finish()
    }
}

/// How often a request is resent after a pooled connection turned out to
/// be closed by the server before it read the request (one per idle
/// connection it may have dropped at once). llama-server, for one, closes
/// every connection after a stream while advertising keep-alive.
const MAX_RESENDS: u32 = 3;

/// A CR, LF or NUL would end a request line or header early: text that
/// holds one could smuggle headers in.
fn breaks_line(text: &str) -> bool {
    text.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0))
}

impl Client {
    pub fn new(origin: Origin, config: ClientConfig) -> Client {
        Client {
            inner: Arc::new(Inner {
                origin,
                config,
                idle: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Writes `request` out in wire form.
    pub fn encode(&self, request: &Request<'_>) -> Result<Encoded, Error> {
        let config = &self.inner.config;
        if breaks_line(request.method) || breaks_line(request.target) {
            return Err(Error::InvalidHeader("request line".into()));
        }
        let mut wire = Vec::with_capacity(160 + request.target.len() + request.body.len());
        wire.extend_from_slice(request.method.as_bytes());
        wire.push(b' ');
        wire.extend_from_slice(request.target.as_bytes());
        wire.extend_from_slice(b" HTTP/1.1\r\n");
        let mut line = |name: &str, value: &str| -> Result<(), Error> {
            if breaks_line(name) || breaks_line(value) || name.contains(':') {
                return Err(Error::InvalidHeader(name.to_string()));
            }
            wire.extend_from_slice(name.as_bytes());
            wire.extend_from_slice(b": ");
            wire.extend_from_slice(value.as_bytes());
            wire.extend_from_slice(b"\r\n");
            Ok(())
        };
        line("Host", &self.inner.origin.authority)?;
        if let Some(agent) = &config.user_agent {
            line("User-Agent", agent)?;
        }
        for (name, value) in request.headers {
            line(name, value)?;
        }
        if !request.body.is_empty() || !matches!(request.method, "GET" | "HEAD") {
            line("Content-Length", &request.body.len().to_string())?;
        }
        wire.extend_from_slice(b"\r\n");
        wire.extend_from_slice(request.body);
        Ok(Encoded {
            wire,
            head_request: request.method == "HEAD",
        })
    }

    /// Sends `request` and reads the answer's head.
    pub async fn send(&self, request: &Request<'_>) -> Result<Response, Error> {
        let encoded = self.encode(request)?;
        self.send_encoded(&encoded).await
    }

    /// Sends a request written by [`Client::encode`] and reads the answer's
    /// head. A pooled connection the server had closed is replaced and the
    /// request resent (it was never read); the time that takes is the
    /// caller's to count.
    pub async fn send_encoded(&self, encoded: &Encoded) -> Result<Response, Error> {
        let max_head = self.inner.config.max_head_bytes;
        let mut resends = 0;
        loop {
            let (mut conn, reused) = match self.inner.take_idle() {
                Some(conn) => (conn, true),
                None => (self.connect().await?, false),
            };
            match conn
                .exchange(&encoded.wire, encoded.head_request, max_head)
                .await
            {
                Ok(head) => return Ok(Response::new(head, conn, self.inner.clone())),
                Err(Error::ClosedBeforeAnswer) if reused && resends < MAX_RESENDS => resends += 1,
                Err(err) => return Err(err),
            }
        }
    }

    async fn connect(&self) -> Result<Conn, Error> {
        let origin = &self.inner.origin;
        let after = self.inner.config.connect_timeout;
        let attempt = async {
            let addresses = tokio::net::lookup_host((origin.host.as_str(), origin.port))
                .await
                .map_err(|source| Error::Resolve {
                    authority: origin.authority.clone(),
                    source,
                })?;
            let mut last = None;
            for address in addresses {
                match TcpStream::connect(address).await {
                    Ok(stream) => return Ok(stream),
                    Err(err) => last = Some(err),
                }
            }
            Err(Error::Connect {
                authority: origin.authority.clone(),
                source: last.unwrap_or_else(|| {
                    io::Error::new(io::ErrorKind::NotFound, "the name has no address")
                }),
            })
        };
        let stream =
            tokio::time::timeout(after, attempt)
                .await
                .map_err(|_| Error::ConnectTimeout {
                    authority: origin.authority.clone(),
                    after,
                })??;
        // Requests go out whole in one write; Nagle would only delay them.
        stream.set_nodelay(true).map_err(|source| Error::Connect {
            authority: origin.authority.clone(),
            source,
        })?;
        Ok(Conn::new(stream))
    }

    /// Idle connections in the pool (for tests and telemetry).
    pub fn idle_connections(&self) -> usize {
        self.inner.idle.lock().map(|idle| idle.len()).unwrap_or(0)
    }
}

impl Inner {
    /// The most recently used idle connection that is still open.
    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().ok()?;
        while let Some(candidate) = idle.pop() {
            if candidate.since.elapsed() < self.config.idle_timeout && candidate.conn.is_open() {
                return Some(candidate.conn);
            }
        }
        None
    }

    fn put_idle(&self, conn: Conn) {
        if let Ok(mut idle) = self.idle.lock() {
            let timeout = self.config.idle_timeout;
            idle.retain(|old| old.since.elapsed() < timeout);
            if idle.len() < self.config.max_idle {
                idle.push(Idle {
                    conn,
                    since: Instant::now(),
                });
            }
        }
    }
}

/// Read buffer per connection; a head may grow it up to `max_head_bytes`.
const BUFFER: usize = 16 << 10;

/// One TCP connection and the bytes read from it but not yet used.
struct Conn {
    stream: TcpStream,
    buffer: Vec<u8>,
    start: usize,
    end: usize,
}

fn closed_by_peer(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::UnexpectedEof
    )
}

impl Conn {
    fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            buffer: vec![0; BUFFER],
            start: 0,
            end: 0,
        }
    }

    fn unread(&self) -> &[u8] {
        &self.buffer[self.start..self.end]
    }

    /// An idle connection is open when reading it would block: no EOF, no
    /// stray bytes. tokio answers from its readiness flags without a
    /// system call when nothing has arrived.
    fn is_open(&self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.stream.try_read(&mut probe), Err(err) if err.kind() == io::ErrorKind::WouldBlock)
    }

    /// Reads more bytes after the unread ones; 0 at EOF. The buffer is
    /// compacted first, and grown (up to `limit`) only when it is full of
    /// unread bytes.
    async fn fill(&mut self, limit: usize) -> io::Result<usize> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buffer.len() {
            if self.start > 0 {
                self.buffer.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buffer.len() < limit {
                let grown = (self.buffer.len() * 2).min(limit);
                self.buffer.resize(grown, 0);
            }
        }
        let n = self.stream.read(&mut self.buffer[self.end..]).await?;
        self.end += n;
        Ok(n)
    }

    /// Writes a request and reads its answer's head (skipping interim 1xx
    /// answers).
    async fn exchange(
        &mut self,
        wire: &[u8],
        head_request: bool,
        max_head: usize,
    ) -> Result<Head, Error> {
        self.start = 0;
        self.end = 0;
        if let Err(err) = self.stream.write_all(wire).await {
            return Err(if closed_by_peer(&err) {
                Error::ClosedBeforeAnswer
            } else {
                Error::Send(err)
            });
        }
        let mut answered = false;
        loop {
            if self.end > self.start {
                if let Some((head, length)) = head::parse(self.unread(), head_request)? {
                    self.start += length;
                    if (100..200).contains(&head.status) && head.status != 101 {
                        continue;
                    }
                    return Ok(head);
                }
                if self.end - self.start >= max_head {
                    return Err(Error::HeadTooLarge(max_head));
                }
            }
            match self.fill(max_head).await {
                Ok(0) if answered => return Err(Error::HeadCut),
                Ok(0) => return Err(Error::ClosedBeforeAnswer),
                Ok(_) => answered = true,
                Err(err) if !answered && closed_by_peer(&err) => {
                    return Err(Error::ClosedBeforeAnswer)
                }
                Err(err) => return Err(Error::Read(err)),
            }
        }
    }
}

/// Where a response's body stands.
enum Body {
    Length { left: u64 },
    Chunked(ChunkedDecoder),
    UntilClose,
    Done,
}

/// An answer: its head, and its body to read. Reading the body to its end
/// returns the connection to the pool (when the server allows); dropping
/// the response before then closes the connection.
pub struct Response {
    head: Head,
    body: Body,
    conn: Option<Conn>,
    pool: Arc<Inner>,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.head.status)
            .field("framing", &self.head.framing)
            .finish()
    }
}

impl Response {
    fn new(head: Head, conn: Conn, pool: Arc<Inner>) -> Response {
        let body = match head.framing {
            Framing::Empty => Body::Done,
            Framing::Length(left) => Body::Length { left },
            Framing::Chunked => Body::Chunked(ChunkedDecoder::default()),
            Framing::UntilClose => Body::UntilClose,
        };
        let mut response = Response {
            head,
            body,
            conn: Some(conn),
            pool,
        };
        if matches!(response.body, Body::Done) {
            response.release();
        }
        response
    }

    pub fn status(&self) -> u16 {
        self.head.status
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }

    /// The body's length where the head states it.
    pub fn content_length(&self) -> Option<u64> {
        match self.head.framing {
            Framing::Length(length) => Some(length),
            Framing::Empty => Some(0),
            Framing::Chunked | Framing::UntilClose => None,
        }
    }

    /// The next piece of the body, as it arrives; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<&[u8]>, Error> {
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return Ok(None);
            };
            let mut data: Option<Range<usize>> = None;
            let unread = conn.end - conn.start;
            match &mut self.body {
                Body::Done => {}
                Body::Length { left } => {
                    // `take` ≤ `unread`, a usize.
                    let take = (*left).min(unread as u64) as usize;
                    *left -= take as u64;
                    if take > 0 {
                        data = Some(conn.start..conn.start + take);
                        conn.start += take;
                    }
                    if *left == 0 {
                        self.body = Body::Done;
                    }
                }
                Body::Chunked(decoder) => {
                    let base = conn.start;
                    let decoded = decoder.decode(&conn.buffer[conn.start..conn.end])?;
                    conn.start += decoded.consumed;
                    data = decoded
                        .data
                        .map(|range| base + range.start..base + range.end);
                    if decoder.is_done() {
                        self.body = Body::Done;
                    }
                }
                Body::UntilClose => {
                    if unread > 0 {
                        data = Some(conn.start..conn.end);
                        conn.start = conn.end;
                    }
                }
            }
            if let Some(range) = data {
                // At the body's end the connection is released on the next
                // call, once these bytes are no longer borrowed.
                return Ok(self.conn.as_ref().map(|c| &c.buffer[range]));
            }
            if matches!(self.body, Body::Done) {
                self.release();
                return Ok(None);
            }
            let Some(conn) = self.conn.as_mut() else {
                return Ok(None);
            };
            match conn.fill(BUFFER).await {
                Ok(0) if matches!(self.body, Body::UntilClose) => {
                    self.body = Body::Done;
                    self.conn = None;
                    return Ok(None);
                }
                Ok(0) => return Err(Error::BodyCut),
                Ok(_) => {}
                Err(err) if closed_by_peer(&err) => return Err(Error::BodyCut),
                Err(err) => return Err(Error::Read(err)),
            }
        }
    }

    /// The whole body, refused past `limit` bytes (before reading, where
    /// the head states a larger length).
    pub async fn read_to_end(&mut self, limit: u64) -> Result<Vec<u8>, Error> {
        let mut body = Vec::new();
        if let Some(length) = self.content_length() {
            if length > limit {
                return Err(Error::TooLarge(limit));
            }
            // Bounded by `limit` just above.
            body.reserve_exact(length as usize);
        }
        while let Some(piece) = self.chunk().await? {
            if body.len() as u64 + piece.len() as u64 > limit {
                return Err(Error::TooLarge(limit));
            }
            body.extend_from_slice(piece);
        }
        Ok(body)
    }

    /// The body has ended: the connection goes back to the pool if the
    /// server keeps it open and sent nothing after the body.
    fn release(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.head.keep_alive && conn.start == conn.end {
                self.pool.put_idle(conn);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_without_credentials_is_ours() {
        let (origin, target) = split_url("http://127.0.0.1:8000/metrics?x=1#frag").unwrap();
        assert_eq!(origin.authority(), "127.0.0.1:8000");
        assert_eq!((origin.host.as_str(), origin.port), ("127.0.0.1", 8000));
        assert_eq!(target, "/metrics?x=1");
        let (origin, target) = split_url("http://[::1]/").unwrap();
        assert_eq!((origin.host.as_str(), origin.port), ("::1", 80));
        assert_eq!(origin.authority(), "[::1]");
        assert_eq!(target, "/");
        let (origin, target) = split_url("http://vllm.internal").unwrap();
        assert_eq!(origin.authority(), "vllm.internal");
        assert_eq!(target, "/");
        for other in [
            "https://vllm.internal/metrics",
            "http://user:secret@vllm.internal/metrics",
            "http://user@vllm.internal/metrics",
            "not a url",
        ] {
            assert!(split_url(other).is_none(), "{other}");
        }
    }

    #[test]
    fn a_request_is_written_in_one_piece() {
        let (origin, target) = split_url("http://h:9/v1/chat/completions").unwrap();
        let client = Client::new(
            origin,
            ClientConfig {
                user_agent: Some("llmwatch/test".into()),
                ..ClientConfig::default()
            },
        );
        let encoded = client
            .encode(&Request {
                method: "POST",
                target: &target,
                headers: &[("Content-Type", "application/json")],
                body: b"{}",
            })
            .unwrap();
        assert_eq!(
            String::from_utf8(encoded.wire).unwrap(),
            "POST /v1/chat/completions HTTP/1.1\r\nHost: h:9\r\nUser-Agent: llmwatch/test\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        );
        let get = client
            .encode(&Request {
                method: "GET",
                target: "/metrics",
                headers: &[],
                body: b"",
            })
            .unwrap();
        assert!(!String::from_utf8(get.wire)
            .unwrap()
            .contains("Content-Length"));
    }
}
