//! Tasks that act on the servers or on stored data: canary probes, load
//! sweeps (run now or on a schedule), experiments, the live diagnosis, the
//! store's retention, and the supervisor that keeps each target's tasks
//! running.

pub mod canary;
pub mod experiment;
pub mod live_diagnosis;
pub mod retention;
pub mod supervisor;
pub mod sweep;
