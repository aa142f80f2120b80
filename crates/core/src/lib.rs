//! llmwatch's pure domain logic. Invariant: nothing in this crate does I/O,
//! spawns, sleeps or reads a clock; every function is a function of its inputs.

pub mod alerts;
pub mod analysis;
pub mod autoscale;
pub mod catalog;
pub mod exposition;
pub mod observed;
pub mod probe_signals;
pub mod redact;
pub mod signals;
pub mod stable_hash;
pub mod staleness;
pub mod stats;
