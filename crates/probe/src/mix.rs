//! Request lengths that vary request by request (`observed:` sweeps): each
//! request takes the next of a list of shapes, its prompt exact to its
//! length from the target's one-token words ([`TracePrompts`]), sent
//! through `/v1/completions` (no chat template to count).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::client::ProbeRequest;
use crate::load::RequestMix;
use crate::record::Api;
use crate::trace::{TracePrompts, TraceRequest};

/// Shapes taken in turn: request `i` has `shapes[i % len]`.
#[derive(Debug)]
pub struct ShapeMix {
    /// (input, output) tokens.
    pub shapes: Vec<(u32, u32)>,
    pub prompts: TracePrompts,
    /// Numbers every prompt of the mix, so no two share a block (request
    /// numbers restart with each run of a sweep).
    sent: AtomicU64,
}

impl ShapeMix {
    pub fn new(shapes: Vec<(u32, u32)>, prompts: TracePrompts) -> ShapeMix {
        ShapeMix {
            shapes,
            prompts,
            sent: AtomicU64::new(0),
        }
    }
}

impl RequestMix for ShapeMix {
    fn request(&self, model: &str, i: u64) -> Option<ProbeRequest> {
        let len = u64::try_from(self.shapes.len()).ok().filter(|n| *n > 0)?;
        let (input, output) = self.shapes[usize::try_from(i % len).ok()?];
        let line = TraceRequest {
            timestamp: 0,
            input_length: input,
            output_length: output,
            hash_ids: Vec::new(),
            session_id: None,
        };
        let unique = self.sent.fetch_add(1, Ordering::Relaxed);
        Some(ProbeRequest::fixed(
            Api::Completions,
            model,
            self.prompts.prompt(&line, unique),
            output,
        ))
    }
}
