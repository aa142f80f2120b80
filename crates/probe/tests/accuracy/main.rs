//! Timing-accuracy tests of the probe client, in a test binary of their
//! own: cargo runs test binaries one after another, so no other test of the
//! suite competes for the two cores while these measure to the millisecond
//! (the tests inside also run one at a time).

mod accuracy;
#[path = "../probe/helpers.rs"]
mod helpers;
