//! "Predict a change" of a stored sweep: the simulator fitted to that sweep
//! (the twin), with a change of vLLM flags applied, runs the same sweep in
//! this process and is judged as the real one was. The runner is given by
//! the binary, which owns the simulator; this book keeps the last
//! [`KEPT`] predictions in memory (a prediction is re-made in minutes, so
//! it is not stored) and runs one at a time.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use serde_json::Value;

use llmwatch_engine::clock::now_ms;

/// Predictions kept in memory, newest last.
const KEPT: usize = 16;

/// What a prediction's run gives: the predicted sweep as JSON (a sweep's
/// JSON with a `prediction` object), or why it failed.
pub type PredictFuture = Pin<Box<dyn Future<Output = Result<Value, String>> + Send>>;

/// Runs predictions; the binary implements it with the simulator.
pub trait PredictRunner: Send + Sync {
    /// The change as vLLM flags, split and checked, or why it is refused
    /// (an unknown flag, a bad value), naming the flag.
    fn parse_flags(&self, text: &str) -> Result<Vec<String>, String>;
    /// Fits the twin to stored sweep `sweep_id` (its server started with
    /// `served`), applies `change` and runs the sweep on it.
    fn run(&self, sweep_id: i64, served: Vec<String>, change: Vec<String>) -> PredictFuture;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PredictionStatus {
    Running,
    Done,
    Failed,
}

impl PredictionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PredictionStatus::Running => "running",
            PredictionStatus::Done => "done",
            PredictionStatus::Failed => "failed",
        }
    }
}

/// One prediction, as the API answers it.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    pub id: u64,
    pub sweep_id: i64,
    /// The flags the server ran with, where the page does not show them.
    pub served_args: Vec<String>,
    /// The change predicted.
    pub vllm_args: Vec<String>,
    pub status: PredictionStatus,
    pub error: Option<String>,
    pub started_ms: i64,
    pub ended_ms: Option<i64>,
    /// The predicted sweep (real time), once done.
    pub result: Option<Value>,
}

/// Why a prediction was not started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PredictRefusal {
    #[error("predictions are not available in this process (no simulator)")]
    Unavailable,
    #[error("prediction {0} is still running; one runs at a time")]
    Busy(u64),
    #[error("{0}")]
    BadFlags(String),
}

impl PredictRefusal {
    /// The HTTP status the API and the page answer it with.
    pub fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            PredictRefusal::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            PredictRefusal::Busy(_) => StatusCode::CONFLICT,
            PredictRefusal::BadFlags(_) => StatusCode::BAD_REQUEST,
        }
    }
}

#[derive(Default)]
struct Book {
    next_id: u64,
    items: VecDeque<Prediction>,
}

/// The predictions of this process; cheap to clone.
#[derive(Clone, Default)]
pub struct Predictions {
    book: Arc<Mutex<Book>>,
    runner: Option<Arc<dyn PredictRunner>>,
}

impl Predictions {
    pub fn with_runner(runner: Arc<dyn PredictRunner>) -> Predictions {
        Predictions {
            book: Arc::default(),
            runner: Some(runner),
        }
    }

    /// Whether predictions can run here.
    pub fn available(&self) -> bool {
        self.runner.is_some()
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        // A panic while holding the lock leaves the book as it was; go on.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts predicting `change` (vLLM flags in one string) for sweep
    /// `sweep_id`, whose existence the caller checked; `served` are the
    /// flags the server was started with, where its page does not show
    /// them. Returns the new prediction (running).
    pub fn start(
        &self,
        sweep_id: i64,
        served: &str,
        change: &str,
    ) -> Result<Prediction, PredictRefusal> {
        let runner = self.runner.clone().ok_or(PredictRefusal::Unavailable)?;
        let served = runner
            .parse_flags(served)
            .map_err(|why| PredictRefusal::BadFlags(format!("served_args: {why}")))?;
        let change = runner
            .parse_flags(change)
            .map_err(|why| PredictRefusal::BadFlags(format!("vllm_args: {why}")))?;
        let prediction = {
            let mut book = self.book();
            if let Some(running) = book
                .items
                .iter()
                .find(|p| p.status == PredictionStatus::Running)
            {
                return Err(PredictRefusal::Busy(running.id));
            }
            book.next_id += 1;
            let prediction = Prediction {
                id: book.next_id,
                sweep_id,
                served_args: served.clone(),
                vllm_args: change.clone(),
                status: PredictionStatus::Running,
                error: None,
                started_ms: now_ms(),
                ended_ms: None,
                result: None,
            };
            book.items.push_back(prediction.clone());
            while book.items.len() > KEPT {
                book.items.pop_front();
            }
            prediction
        };
        let id = prediction.id;
        let this = self.clone();
        let run = runner.run(sweep_id, served, change);
        tokio::spawn(async move {
            let outcome = run.await;
            this.finish(id, outcome);
        });
        Ok(prediction)
    }

    fn finish(&self, id: u64, outcome: Result<Value, String>) {
        let mut book = self.book();
        if let Some(p) = book.items.iter_mut().find(|p| p.id == id) {
            p.ended_ms = Some(now_ms());
            match outcome {
                Ok(result) => {
                    p.status = PredictionStatus::Done;
                    p.result = Some(result);
                }
                Err(why) => {
                    p.status = PredictionStatus::Failed;
                    p.error = Some(why);
                }
            }
        }
    }

    pub fn get(&self, id: u64) -> Option<Prediction> {
        self.book().items.iter().find(|p| p.id == id).cloned()
    }

    /// The kept predictions of one sweep, newest first.
    pub fn of_sweep(&self, sweep_id: i64) -> Vec<Prediction> {
        self.book()
            .items
            .iter()
            .rev()
            .filter(|p| p.sweep_id == sweep_id)
            .cloned()
            .collect()
    }
}
