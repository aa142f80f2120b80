//! Fuzz the lean HTTP client's response reading: any bytes as a response
//! head, then the rest as a chunked body fed in pieces. Invariants: no
//! panic; the head's length is within the input; every data range the
//! decoder hands out lies within what it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmwatch_http::{parse_head, ChunkedDecoder};

fuzz_target!(|data: &[u8]| {
    let body = match parse_head(data, false) {
        Ok(Some((head, length))) => {
            assert!(length <= data.len());
            let _ = head.header("content-type");
            &data[length..]
        }
        Ok(None) | Err(_) => data,
    };
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    let mut decoder = ChunkedDecoder::default();
    let mut pending: Vec<u8> = Vec::new();
    for piece in body.chunks(step) {
        pending.extend_from_slice(piece);
        loop {
            let Ok(decoded) = decoder.decode(&pending) else {
                return;
            };
            assert!(decoded.consumed <= pending.len());
            if let Some(range) = &decoded.data {
                assert!(range.start <= range.end && range.end <= decoded.consumed);
            }
            pending.drain(..decoded.consumed);
            if decoded.data.is_none() || decoder.is_done() {
                break;
            }
        }
    }
});
