//! Loopback tests of the simulator: wire shapes against the real vLLM
//! captures, error answers, metrics pages through llmwatch's own parser and
//! catalog, and the queueing behaviour its parameters predict.

mod behaviour;
mod helpers;
mod llamacpp;
mod metrics;
mod wire;
