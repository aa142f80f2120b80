//! The target page's "what it served" section: the prompt and output
//! length deciles of the requests the target finished over the page's
//! range, and their rate, from its own length histograms (the workload
//! `bench --workload observed:TARGET:RANGE` draws again).

use llmwatch_core::observed::DECILE_NAMES;
use llmwatch_engine::observed::{observed_workload, ObservedError};
use llmwatch_store::{Range, Store, StoreError};

/// The section as the page shows it.
pub struct ObservedSection {
    /// The bench flag that replays this range's workload.
    pub workload_flag: String,
    pub served: Option<ServedLengths>,
    /// Why nothing is shown (no histogram, no request in the range).
    pub missing: Option<String>,
}

/// The range's lengths, formatted.
pub struct ServedLengths {
    pub requests: String,
    pub rate: String,
    /// `p10` … `p90`.
    pub quantiles: Vec<&'static str>,
    pub prompt: Vec<String>,
    pub output: Vec<String>,
}

/// Reads the section of `target` over `range`; only a store failure is an
/// error (an engine without length histograms, or a quiet range, says so).
pub async fn observed_section(
    store: &Store,
    target: &str,
    range_label: &str,
    range: Range,
) -> Result<ObservedSection, StoreError> {
    let workload_flag = format!("--workload observed:{target}:{range_label}");
    let (served, missing) = match observed_workload(store, target, range.from_ms, range.to_ms).await
    {
        Ok(w) => {
            let lengths = |d: [f64; 9]| d.iter().map(|v| format!("{:.0}", v.ceil())).collect();
            (
                Some(ServedLengths {
                    requests: format!("{:.0}", w.requests),
                    rate: w
                        .rate_per_second()
                        .map_or_else(|| "–".into(), |r| format!("{r:.3}")),
                    quantiles: DECILE_NAMES.to_vec(),
                    prompt: lengths(w.prompt.deciles()),
                    output: lengths(w.generation.deciles()),
                }),
                None,
            )
        }
        Err(ObservedError::Store(err)) => return Err(err),
        Err(err) => (None, Some(err.to_string())),
    };
    Ok(ObservedSection {
        workload_flag,
        served,
        missing,
    })
}
