//! A response head: status, headers, and what they say about the body's
//! framing and the connection's reuse (RFC 9112 §6.3, §9.3).

use std::ops::Range;

/// Most header fields a response may carry.
const MAX_HEADERS: usize = 64;

/// How the body that follows a head ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (HEAD, 1xx, 204, 304).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// The chunked coding.
    Chunked,
    /// Everything until the server closes the connection.
    UntilClose,
}

/// Why a head cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("malformed response head: {0}")]
    Malformed(String),
    #[error("invalid Content-Length {0:?}")]
    BadLength(String),
    #[error("conflicting Content-Length values")]
    ConflictingLengths,
}

/// A parsed head. Header names and values are kept as ranges of `bytes`,
/// a copy of the head, so a response allocates twice whatever its size.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    pub framing: Framing,
    /// Whether the connection may carry another request after this body.
    pub keep_alive: bool,
    bytes: Vec<u8>,
    fields: Vec<(Range<usize>, Range<usize>)>,
}

impl Head {
    /// The first value of header `name` (case-insensitive), if it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(field, _)| self.bytes[field.clone()].eq_ignore_ascii_case(name.as_bytes()))
            .and_then(|(_, value)| std::str::from_utf8(&self.bytes[value.clone()]).ok())
    }
}

/// Parses a head from the start of `input`: `Ok(None)` when more bytes are
/// needed, else the head and its length. `head_request` says the request
/// was a HEAD (whose answer has no body whatever it says).
pub fn parse(input: &[u8], head_request: bool) -> Result<Option<(Head, usize)>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(input) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(err) => return Err(HeadError::Malformed(err.to_string())),
    };
    let status = response
        .code
        .ok_or_else(|| HeadError::Malformed("no status code".into()))?;
    let http11 = response.version == Some(1);
    let base = input.as_ptr() as usize;
    let offset = |slice: &[u8]| {
        let start = slice.as_ptr() as usize - base;
        start..start + slice.len()
    };
    let mut fields = Vec::with_capacity(response.headers.len());
    let mut chunked = false;
    let mut transfer_coded = false;
    let mut content_length: Option<u64> = None;
    let mut close = !http11;
    for header in response.headers.iter() {
        let name = header.name;
        let value = header.value;
        fields.push((offset(name.as_bytes()), offset(value)));
        if name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_coded = true;
            // Chunked must be the final coding for the length to be known.
            chunked = last_token(value).eq_ignore_ascii_case(b"chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            let text = String::from_utf8_lossy(value).trim().to_string();
            let parsed: u64 = text.parse().map_err(|_| HeadError::BadLength(text))?;
            if content_length.is_some_and(|known| known != parsed) {
                return Err(HeadError::ConflictingLengths);
            }
            content_length = Some(parsed);
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && !http11 {
                    close = false;
                }
            }
        }
    }
    let framing = if head_request || (100..200).contains(&status) || status == 204 || status == 304
    {
        Framing::Empty
    } else if chunked {
        Framing::Chunked
    } else if transfer_coded {
        // A coding we cannot delimit: the body runs to the close.
        Framing::UntilClose
    } else {
        match content_length {
            Some(0) => Framing::Empty,
            Some(length) => Framing::Length(length),
            None => Framing::UntilClose,
        }
    };
    let keep_alive = !close && framing != Framing::UntilClose;
    let head = Head {
        status,
        framing,
        keep_alive,
        bytes: input[..length].to_vec(),
        fields,
    };
    Ok(Some((head, length)))
}

fn last_token(value: &[u8]) -> &[u8] {
    value
        .rsplit(|&b| b == b',')
        .next()
        .unwrap_or_default()
        .trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(wire: &str) -> Head {
        parse(wire.as_bytes(), false).unwrap().unwrap().0
    }

    #[test]
    fn framing_follows_the_headers() {
        assert_eq!(
            head("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n").framing,
            Framing::Length(12)
        );
        assert_eq!(
            head(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n"
            )
            .framing,
            Framing::Chunked
        );
        assert_eq!(
            head("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n").framing,
            Framing::UntilClose
        );
        assert_eq!(
            head("HTTP/1.1 204 No Content\r\n\r\n").framing,
            Framing::Empty
        );
        assert_eq!(head("HTTP/1.1 200 OK\r\n\r\n").framing, Framing::UntilClose);
        let (answer, _) = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert_eq!(answer.framing, Framing::Empty);
    }

    #[test]
    fn reuse_follows_version_and_connection() {
        assert!(head("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n").keep_alive);
        assert!(
            !head("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n").keep_alive
        );
        assert!(!head("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n").keep_alive);
        assert!(
            head("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\n")
                .keep_alive
        );
        // A body that ends with the connection leaves nothing to reuse.
        assert!(!head("HTTP/1.1 200 OK\r\n\r\n").keep_alive);
    }

    #[test]
    fn headers_are_found_by_any_case() {
        let answer = head("HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(answer.status, 200);
        assert_eq!(
            answer.header("Content-Type"),
            Some("text/plain; version=0.0.4")
        );
        assert_eq!(answer.header("X-Missing"), None);
    }

    #[test]
    fn a_partial_head_asks_for_more_and_its_length_is_exact() {
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Le", false)
            .unwrap()
            .is_none());
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
        let (_, length) = parse(wire, false).unwrap().unwrap();
        assert_eq!(&wire[length..], b"hi");
    }

    #[test]
    fn bad_heads_name_what_is_wrong() {
        assert!(matches!(
            parse(b"garbage\r\n\r\n", false),
            Err(HeadError::Malformed(_))
        ));
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false).unwrap_err(),
            HeadError::BadLength("-1".into())
        );
        assert_eq!(
            parse(
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                false
            )
            .unwrap_err(),
            HeadError::ConflictingLengths
        );
    }
}
