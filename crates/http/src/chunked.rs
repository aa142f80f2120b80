//! The chunked transfer coding (RFC 9112 §7.1), decoded incrementally: the
//! input may end anywhere, even inside a chunk-size line or its CRLF.

use std::ops::Range;

/// Why a chunked body cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChunkedError {
    #[error("a chunk size is not a hexadecimal number")]
    BadSize,
    #[error("a chunk size does not fit in 64 bits")]
    SizeOverflow,
    #[error("a chunk is not followed by CRLF")]
    MissingCrlf,
    #[error("a chunk-size line or the trailer is longer than {0} bytes")]
    LineTooLong(usize),
}

/// Longest chunk-size line (with extensions) and longest trailer accepted.
const MAX_LINE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits; `digits` read so far.
    Size {
        value: u64,
        digits: u8,
    },
    /// After the digits: whitespace or `;extension`, up to the line end.
    Extension {
        value: u64,
    },
    SizeLf {
        value: u64,
    },
    Data {
        left: u64,
    },
    DataCr,
    DataLf,
    /// A trailer line (after the last chunk); `empty` while it has no byte.
    Trailer {
        empty: bool,
    },
    TrailerLf {
        empty: bool,
    },
    Done,
}

/// The decoder's state between reads.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    /// Bytes of the current size line or of the trailer, against [`MAX_LINE`].
    line_bytes: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder {
            state: State::Size {
                value: 0,
                digits: 0,
            },
            line_bytes: 0,
        }
    }
}

/// What one call made of its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// Input bytes used up (framing and data).
    pub consumed: usize,
    /// Body data found, as a range of the input (the decoder stops after it).
    pub data: Option<Range<usize>>,
}

impl ChunkedDecoder {
    /// True once the last chunk and the trailer have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Reads framing from `input` up to the next body data, which it returns
    /// as a range of `input` (at most what is left of the current chunk).
    /// Stops at the data, at the end of the body, or at the end of `input`.
    pub fn decode(&mut self, input: &[u8]) -> Result<Decoded, ChunkedError> {
        let mut at = 0;
        while at < input.len() {
            match self.state {
                State::Done => break,
                State::Data { left } => {
                    let available = (input.len() - at) as u64;
                    let take = left.min(available);
                    self.state = if take == left {
                        State::DataCr
                    } else {
                        State::Data { left: left - take }
                    };
                    // `take` ≤ `available`, a usize.
                    let end = at + take as usize;
                    return Ok(Decoded {
                        consumed: end,
                        data: Some(at..end),
                    });
                }
                _ => {
                    self.framing_byte(input[at])?;
                    at += 1;
                }
            }
        }
        Ok(Decoded {
            consumed: at,
            data: None,
        })
    }

    fn framing_byte(&mut self, byte: u8) -> Result<(), ChunkedError> {
        self.state = match self.state {
            State::Size { value, digits } => match hex_digit(byte) {
                Some(digit) => {
                    if digits == 16 {
                        return Err(ChunkedError::SizeOverflow);
                    }
                    self.count_line_byte()?;
                    State::Size {
                        value: value << 4 | u64::from(digit),
                        digits: digits + 1,
                    }
                }
                None if digits == 0 => return Err(ChunkedError::BadSize),
                None => match byte {
                    b'\r' => State::SizeLf { value },
                    b'\n' => self.after_size(value),
                    b';' | b' ' | b'\t' => State::Extension { value },
                    _ => return Err(ChunkedError::BadSize),
                },
            },
            State::Extension { value } => match byte {
                b'\r' => State::SizeLf { value },
                b'\n' => self.after_size(value),
                _ => {
                    self.count_line_byte()?;
                    State::Extension { value }
                }
            },
            State::SizeLf { value } => match byte {
                b'\n' => self.after_size(value),
                _ => return Err(ChunkedError::BadSize),
            },
            State::DataCr => match byte {
                b'\r' => State::DataLf,
                b'\n' => self.next_size(),
                _ => return Err(ChunkedError::MissingCrlf),
            },
            State::DataLf => match byte {
                b'\n' => self.next_size(),
                _ => return Err(ChunkedError::MissingCrlf),
            },
            State::Trailer { empty } => match byte {
                b'\r' => State::TrailerLf { empty },
                b'\n' if empty => State::Done,
                b'\n' => State::Trailer { empty: true },
                _ => {
                    self.count_line_byte()?;
                    State::Trailer { empty: false }
                }
            },
            State::TrailerLf { empty } => match byte {
                b'\n' if empty => State::Done,
                b'\n' => State::Trailer { empty: true },
                _ => return Err(ChunkedError::MissingCrlf),
            },
            // Data is taken in bulk by `decode`; nothing follows the end.
            State::Data { .. } | State::Done => self.state,
        };
        Ok(())
    }

    fn after_size(&mut self, value: u64) -> State {
        self.line_bytes = 0;
        if value == 0 {
            State::Trailer { empty: true }
        } else {
            State::Data { left: value }
        }
    }

    fn next_size(&mut self) -> State {
        self.line_bytes = 0;
        State::Size {
            value: 0,
            digits: 0,
        }
    }

    fn count_line_byte(&mut self) -> Result<(), ChunkedError> {
        self.line_bytes += 1;
        if self.line_bytes > MAX_LINE {
            return Err(ChunkedError::LineTooLong(MAX_LINE));
        }
        Ok(())
    }
}

fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Decodes `wire` fed in pieces of `step` bytes; the body and whether
    /// the end was seen.
    fn decode_in_steps(wire: &[u8], step: usize) -> Result<(Vec<u8>, bool), ChunkedError> {
        let mut decoder = ChunkedDecoder::default();
        let mut body = Vec::new();
        // The unconsumed tail is kept, as a connection's buffer keeps it.
        let mut pending: Vec<u8> = Vec::new();
        for piece in wire.chunks(step.max(1)) {
            pending.extend_from_slice(piece);
            loop {
                let decoded = decoder.decode(&pending)?;
                if let Some(range) = decoded.data.clone() {
                    body.extend_from_slice(&pending[range]);
                }
                pending.drain(..decoded.consumed);
                if decoded.data.is_none() || decoder.is_done() {
                    break;
                }
            }
        }
        Ok((body, decoder.is_done()))
    }

    fn encode(chunks: &[Vec<u8>], extension: bool, trailer: bool) -> Vec<u8> {
        let mut wire = Vec::new();
        for chunk in chunks.iter().filter(|c| !c.is_empty()) {
            wire.extend_from_slice(format!("{:X}", chunk.len()).as_bytes());
            if extension {
                wire.extend_from_slice(b";name=value");
            }
            wire.extend_from_slice(b"\r\n");
            wire.extend_from_slice(chunk);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"0\r\n");
        if trailer {
            wire.extend_from_slice(b"X-Trailer: yes\r\n");
        }
        wire.extend_from_slice(b"\r\n");
        wire
    }

    #[test]
    fn reads_a_body_split_at_every_byte() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nExpires: never\r\n\r\n";
        for step in 1..=wire.len() {
            let (body, done) = decode_in_steps(wire, step).unwrap();
            assert_eq!(body, b"hello, world", "step {step}");
            assert!(done, "step {step}");
        }
    }

    #[test]
    fn bare_lf_line_ends_are_accepted() {
        let (body, done) = decode_in_steps(b"3\nabc\n0\n\n", 1).unwrap();
        assert_eq!(body, b"abc");
        assert!(done);
    }

    #[test]
    fn stops_at_the_end_and_leaves_what_follows() {
        let mut decoder = ChunkedDecoder::default();
        let wire = b"0\r\n\r\nHTTP/1.1 200 OK\r\n";
        let decoded = decoder.decode(wire).unwrap();
        assert!(decoder.is_done());
        assert_eq!(decoded.consumed, 5);
        assert_eq!(decoded.data, None);
    }

    #[test]
    fn an_unfinished_body_is_not_done() {
        let (body, done) = decode_in_steps(b"5\r\nhel", 2).unwrap();
        assert_eq!(body, b"hel");
        assert!(!done);
    }

    #[test]
    fn malformed_framing_is_an_error_naming_it() {
        let cases: [(&[u8], ChunkedError); 5] = [
            (b"zz\r\n", ChunkedError::BadSize),
            (b"\r\n", ChunkedError::BadSize),
            (b"11111111111111111\r\n", ChunkedError::SizeOverflow),
            (b"3\r\nabcX", ChunkedError::MissingCrlf),
            (b"3\r\nabc\rX", ChunkedError::MissingCrlf),
        ];
        for (wire, expected) in cases {
            assert_eq!(decode_in_steps(wire, 1).unwrap_err(), expected, "{wire:?}");
        }
        let long_extension = [b"1;".as_slice(), &[b'x'; MAX_LINE + 1]].concat();
        assert_eq!(
            decode_in_steps(&long_extension, 64).unwrap_err(),
            ChunkedError::LineTooLong(MAX_LINE)
        );
        let endless_trailer = [b"0\r\n".as_slice(), &[b'x'; MAX_LINE + 1]].concat();
        assert_eq!(
            decode_in_steps(&endless_trailer, 64).unwrap_err(),
            ChunkedError::LineTooLong(MAX_LINE)
        );
    }

    proptest! {
        #[test]
        fn any_chunking_and_any_split_give_the_body_back(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..12),
            step in 1usize..200,
            extension: bool,
            trailer: bool,
        ) {
            let wire = encode(&chunks, extension, trailer);
            let (body, done) = decode_in_steps(&wire, step).unwrap();
            prop_assert_eq!(body, chunks.concat());
            prop_assert!(done);
        }

        #[test]
        fn any_bytes_are_data_or_an_error_never_a_panic(
            wire in proptest::collection::vec(any::<u8>(), 0..600),
            step in 1usize..64,
        ) {
            if let Ok((body, _)) = decode_in_steps(&wire, step) {
                prop_assert!(body.len() <= wire.len());
            }
        }
    }
}
