// Each test binary uses a part of these helpers.
#[allow(dead_code)]
pub mod loaded;
#[allow(dead_code)]
pub mod probes;
