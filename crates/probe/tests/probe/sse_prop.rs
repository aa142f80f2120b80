//! The SSE reader never panics, and chunking never changes its output.

use llmwatch_probe::sse::{parse_all, SseReader};
use proptest::prelude::*;

fn chunked(
    body: &[u8],
    cuts: &[usize],
    limit: usize,
) -> Vec<Result<llmwatch_probe::sse::SseEvent, llmwatch_probe::sse::SseError>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    points.sort_unstable();
    let mut r = SseReader::new(limit);
    let mut out = Vec::new();
    let mut prev = 0;
    for p in points.into_iter().chain(std::iter::once(body.len())) {
        r.feed(&body[prev..p]);
        prev = p;
        while let Some(e) = r.next_event() {
            out.push(e);
        }
    }
    r.finish();
    while let Some(e) = r.next_event() {
        out.push(e);
    }
    out
}

/// Bytes biased towards SSE structure, so the interesting paths are hit.
fn sse_like() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"data: ".to_vec()),
        Just(b"data:".to_vec()),
        Just(b"event: x".to_vec()),
        Just(b"id: 7".to_vec()),
        Just(b": c".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n\n".to_vec()),
        Just(b"\xEF\xBB\xBF".to_vec()),
        Just(b"[DONE]".to_vec()),
        Just(b"{\"choices\":[]}".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..12),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_any_chunking(body in proptest::collection::vec(any::<u8>(), 0..600),
                                    cuts in proptest::collection::vec(any::<usize>(), 0..20),
                                    limit in 1usize..200) {
        let whole = parse_all(&body, limit);
        prop_assert_eq!(chunked(&body, &cuts, limit), whole);
    }

    #[test]
    fn sse_shaped_bytes_any_chunking(body in sse_like(),
                                     cuts in proptest::collection::vec(any::<usize>(), 0..30),
                                     limit in prop_oneof![Just(16usize), Just(64), Just(1 << 20)]) {
        let whole = parse_all(&body, limit);
        let byte_by_byte: Vec<usize> = (0..body.len()).collect();
        prop_assert_eq!(&chunked(&body, &cuts, limit), &whole);
        prop_assert_eq!(&chunked(&body, &byte_by_byte, limit), &whole);
        // At most one error, and nothing after it.
        if let Some(i) = whole.iter().position(|e| e.is_err()) {
            prop_assert_eq!(i, whole.len() - 1);
        }
    }
}
