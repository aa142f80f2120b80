//! Integration tests of the probe against loopback servers. Every server
//! binds 127.0.0.1:0. The timing-accuracy tests live in `tests/accuracy/`,
//! a binary of their own, so nothing else runs beside them.

mod bpe;
mod faults;
mod fixtures;
mod helpers;
mod llamacpp;
mod load;
mod sim;
mod sse_prop;
