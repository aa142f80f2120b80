//! Integration tests of the probe against loopback servers (one binary, as
//! STYLE.md asks). Every server binds 127.0.0.1:0.

mod accuracy;
mod faults;
mod fixtures;
mod helpers;
mod load;
mod sim;
mod sse_prop;
