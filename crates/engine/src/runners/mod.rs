//! Tasks that act on the servers or on stored data: canary probes, load
//! sweeps (run now or on a schedule) and the live diagnosis.

pub mod canary;
pub mod live_diagnosis;
pub mod sweep;
