//! Why a sweep could not run.

use llmwatch_probe::{ClientError, RunError};
use llmwatch_store::StoreError;

use super::card::CardFieldError;

/// Why a sweep could not run (a sweep that *stops early* is not an error:
/// its report says why it stopped).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("invalid ladder: {0}")]
    Ladder(String),
    #[error(
        "concurrency {load} is above the sweep cap of {cap}: a sweep loads the server hard, so \
         raise the cap on purpose (--max-concurrency {load}) if you mean it"
    )]
    AboveCap { load: u32, cap: u32 },
    #[error("invalid settings: {0}")]
    Settings(String),
    #[error(transparent)]
    Card(#[from] CardFieldError),
    #[error("probe client: {0}")]
    Client(#[from] ClientError),
    #[error("cannot start the measuring thread: {0}")]
    MeasuringThread(#[from] std::io::Error),
    #[error("cannot build the scrape client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("no model given and none discovered: {0}")]
    Model(#[from] crate::sources::server_facts::FactError),
    #[error("a step could not run: {0}")]
    Run(#[from] RunError),
    #[error("storage: {0}")]
    Store(#[from] StoreError),
    #[error("sweep {0} not found")]
    NotFound(i64),
    #[error("stored sweep {id} is unreadable: {why}")]
    Corrupt { id: i64, why: String },
}
