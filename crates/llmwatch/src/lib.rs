//! The llmwatch binary's library half: the command line (`cli`), the wiring
//! of the engine and the web layer into a daemon (`daemon`), the demo, and
//! logging. Kept as a library so integration tests drive the same code the
//! binary runs.
//!
//! It holds no domain logic (that is `llmwatch-core`), no SQL
//! (`llmwatch-store`), no scrape, probe or alert loop (`llmwatch-engine`)
//! and no page or route (`llmwatch-web`): only wiring and commands.

pub mod cli;
pub mod daemon;
pub mod demo;
pub mod logging;
pub mod twin;
