//! GPU power during a run: a dcgm-exporter page polled in the background
//! while the sweep runs, `DCGM_FI_DEV_POWER_USAGE` summed over its GPUs,
//! for the energy per token of each step.

use std::time::Duration;

use llmwatch_core::exposition::{parse_lenient, Format};
use tokio::task::JoinHandle;

use crate::sources::scrape::{fetch_page, now_ms};

/// Largest GPU page read.
const MAX_PAGE_BYTES: u64 = 4 * 1024 * 1024;
const FETCH_TIMEOUT: Duration = Duration::from_secs(2);

/// A running sampler; [`PowerSampler::stop`] hands back its samples.
pub struct PowerSampler {
    task: JoinHandle<()>,
    samples: std::sync::Arc<std::sync::Mutex<Vec<(i64, f64)>>>,
}

/// Watts on a dcgm-exporter page, summed over its GPUs (`None` without the
/// metric).
pub fn page_watts(body: &[u8]) -> Option<f64> {
    let (page, _) = parse_lenient(body, Format::PrometheusText);
    let watts: Vec<f64> = page
        .families
        .iter()
        .filter(|f| f.name == "DCGM_FI_DEV_POWER_USAGE")
        .flat_map(|f| f.samples.iter().map(|s| s.value))
        .filter(|w| w.is_finite() && *w >= 0.0)
        .collect();
    (!watts.is_empty()).then(|| watts.iter().sum())
}

impl PowerSampler {
    /// Polls `url` every `interval` until stopped.
    pub fn start(http: reqwest::Client, url: String, interval: Duration) -> PowerSampler {
        let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = samples.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(page) = fetch_page(&http, &url, FETCH_TIMEOUT, MAX_PAGE_BYTES).await {
                    if let Some(w) = page_watts(&page.body) {
                        sink.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((now_ms(), w));
                    }
                }
                tokio::time::sleep(interval).await;
            }
        });
        PowerSampler { task, samples }
    }

    /// Stops polling; the `(unix ms, watts)` samples taken.
    pub fn stop(self) -> Vec<(i64, f64)> {
        self.task.abort();
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watts_are_summed_over_the_gpus_of_a_page() {
        let page = b"# TYPE DCGM_FI_DEV_POWER_USAGE gauge\nDCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 250.5\nDCGM_FI_DEV_POWER_USAGE{gpu=\"1\"} 100\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 90\n";
        assert_eq!(page_watts(page), Some(350.5));
        assert_eq!(page_watts(b"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 90\n"), None);
    }
}
