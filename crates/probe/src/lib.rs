//! llmwatch's probe: a streaming OpenAI-compatible client that measures what
//! a user feels (TTFT, ITL, TPOT, e2e), the shapes and prompts it sends, the
//! load generators that drive it, and the statistics of a run.
//!
//! Invariants: every timestamp is from the monotonic clock (`Instant`); a
//! probe never panics or returns early without a record — failures are
//! records with an error; the SSE reader ([`sse`]) and the statistics
//! ([`stats`], [`result`]) are pure.
//!
//! It must never touch the store or the config: it depends on core alone,
//! and its callers (the engine, `llmwatch bench`) decide what to keep.
//!
//! Entry points: [`ProbeClient::probe`] (one request), [`run`] (one run
//! under a [`Load`]), [`MeasuringThread`] (runs on a thread of their own,
//! busy-polling where there are cores to spare), [`render_table`] (the report), [`Canary`] (the
//! daemon's always-on probe).

pub mod canary;
pub mod chunk;
pub mod client;
pub mod conversation;
pub mod dataset;
pub mod load;
pub mod measure;
pub mod mix;
pub mod parts;
pub mod record;
pub mod report;
pub mod result;
pub mod selfcheck;
mod settings;
pub mod shape;
pub mod sink;
mod spin;
pub mod sse;
pub mod stats;
pub mod trace;

pub use canary::{Canary, CanaryBusy};
pub use client::{ClientConfig, ClientError, EncodedRequest, ProbeClient, ProbeRequest, Secret};
pub use load::{run, Bound, Load, RecordSink, Records, RunConfig, RunError, RunOptions, Workload};
pub use measure::{default_workers, MeasuringPool, MeasuringThread, Spin, SpinMode};
pub use parts::{merge_parts, MergeError, PartOf};
pub use record::{
    Api, ErrorKind, OutputEvent, ProbeError, ProbeRecord, RequestInfo, ServerTiming,
    ServerTimingSource, TimeoutPhase, Usage,
};
pub use report::render_table;
pub use result::{Objectives, RunResult, RunStats};
pub use selfcheck::{
    CpuMeasure, MeasuredScale, Monitored, SelfCheck, SelfCheckLimits, DEFAULT_MAX_EFFECT,
};
pub use settings::JudgedOn;
pub use settings::{Part, SharedSchedule};
pub use shape::{Calibration, Calibrator, Padding, PromptGenerator, PromptKind, Shape, ShapeError};
pub use sink::{write_result_json, RecordFileError, RecordWriter};
pub use stats::{percentile, Distribution, Summary, EXACT_SAMPLES};
