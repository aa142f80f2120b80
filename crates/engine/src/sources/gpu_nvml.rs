//! Local GPUs through NVML, loaded at run time (`nvml-wrapper` dlopens the
//! driver library). Without a driver, [`NvmlSource::init`] says so once and
//! the daemon carries on without local GPU data.

use llmwatch_core::catalog::{CatalogMetric, NormalizedSample, Part, SampleLabels};
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::Nvml;
use std::sync::Arc;
use std::time::Duration;

use llmwatch_store::ScrapeRecord;
use tokio::sync::{mpsc, watch};

use crate::clock::now_ms;
use crate::ticker::JitteredTicker;

/// One GPU's counters as NVML reports them (NVML units).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReading {
    pub index: u32,
    pub uuid: String,
    pub model_name: String,
    pub util_percent: Option<u32>,
    pub mem_copy_util_percent: Option<u32>,
    pub mem_used_bytes: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    pub power_milliwatts: Option<u32>,
    pub temp_celsius: Option<u32>,
}

/// Normalises NVML readings the way the catalog normalises dcgm-exporter's
/// fields (percent → ratio, milliwatts → watts), with dcgm-exporter's labels.
pub fn readings_to_samples(readings: &[GpuReading]) -> Vec<NormalizedSample> {
    let mut samples = Vec::new();
    for gpu in readings {
        let labels: SampleLabels = vec![
            ("UUID".to_string(), gpu.uuid.clone()),
            ("gpu".to_string(), gpu.index.to_string()),
            ("modelName".to_string(), gpu.model_name.clone()),
        ]
        .into();
        let mut push = |metric, value: Option<f64>| {
            if let Some(value) = value {
                samples.push(NormalizedSample {
                    metric,
                    labels: labels.clone(),
                    part: Part::Value,
                    value,
                });
            }
        };
        push(
            CatalogMetric::GpuUtil,
            gpu.util_percent.map(|p| f64::from(p) / 100.0),
        );
        push(
            CatalogMetric::GpuMemBwUtil,
            gpu.mem_copy_util_percent.map(|p| f64::from(p) / 100.0),
        );
        push(
            CatalogMetric::GpuMemUsedBytes,
            gpu.mem_used_bytes.map(|b| b as f64),
        );
        push(
            CatalogMetric::GpuMemTotalBytes,
            gpu.mem_total_bytes.map(|b| b as f64),
        );
        push(
            CatalogMetric::GpuPowerWatts,
            gpu.power_milliwatts.map(|mw| f64::from(mw) / 1000.0),
        );
        push(
            CatalogMetric::GpuTempCelsius,
            gpu.temp_celsius.map(f64::from),
        );
    }
    samples
}

/// A loaded NVML library.
pub struct NvmlSource {
    nvml: Nvml,
}

impl NvmlSource {
    /// Loads NVML; on failure logs one clear line and returns `None`.
    pub fn init() -> Option<NvmlSource> {
        match Nvml::init() {
            Ok(nvml) => {
                let driver = nvml.sys_driver_version().unwrap_or_else(|_| "?".into());
                let count = nvml.device_count().unwrap_or(0);
                tracing::info!(driver = %driver, gpus = count, "NVML loaded");
                Some(NvmlSource { nvml })
            }
            Err(err) => {
                tracing::warn!(
                    error = %err,
                    "NVML unavailable (no NVIDIA driver here?): local GPU metrics are off; \
                     dcgm-exporter sources still work"
                );
                None
            }
        }
    }

    /// Reads every GPU. Blocking: call from `spawn_blocking`.
    pub fn read(&self) -> Result<Vec<GpuReading>, String> {
        let count = self
            .nvml
            .device_count()
            .map_err(|err| format!("NVML device count: {err}"))?;
        let mut readings = Vec::with_capacity(count as usize);
        for index in 0..count {
            let device = self
                .nvml
                .device_by_index(index)
                .map_err(|err| format!("NVML device {index}: {err}"))?;
            let memory = device.memory_info().ok();
            let utilization = device.utilization_rates().ok();
            readings.push(GpuReading {
                index,
                uuid: device.uuid().unwrap_or_default(),
                model_name: device.name().unwrap_or_default(),
                util_percent: utilization.as_ref().map(|u| u.gpu),
                mem_copy_util_percent: utilization.as_ref().map(|u| u.memory),
                mem_used_bytes: memory.as_ref().map(|m| m.used),
                mem_total_bytes: memory.as_ref().map(|m| m.total),
                power_milliwatts: device.power_usage().ok(),
                temp_celsius: device.temperature(TemperatureSensor::Gpu).ok(),
            });
        }
        Ok(readings)
    }
}

/// Reads the local GPUs through NVML every `interval` and sends each
/// reading as a scrape record of `target_id` (a reading that fails is a
/// record that is down, with its reason).
pub async fn run_nvml_loop(
    source: Arc<NvmlSource>,
    target_id: i64,
    interval: Duration,
    records: mpsc::Sender<ScrapeRecord>,
    mut shutdown: watch::Receiver<bool>,
) {
    // One local source: nothing to spread out, so no phase and no jitter.
    let mut ticker = JitteredTicker::starting_now(interval);
    while ticker.tick(&mut shutdown).await {
        let ts_ms = now_ms();
        let started = std::time::Instant::now();
        let reader = source.clone();
        let read = tokio::task::spawn_blocking(move || reader.read()).await;
        let mut record = ScrapeRecord {
            target_id,
            ts_ms,
            up: false,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            body_bytes: 0,
            error: None,
            engine: Some("nvml".to_string()),
            samples: Vec::new(),
            raw: Vec::new(),
        };
        match read {
            Ok(Ok(readings)) => {
                record.up = true;
                record.samples = readings_to_samples(&readings);
            }
            Ok(Err(err)) => record.error = Some(err),
            Err(err) => record.error = Some(format!("NVML reader task failed: {err}")),
        }
        if records.send(record).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_become_ratio_bytes_and_watts() {
        let samples = readings_to_samples(&[GpuReading {
            index: 1,
            uuid: "GPU-abc".into(),
            model_name: "NVIDIA H200".into(),
            util_percent: Some(75),
            mem_copy_util_percent: Some(40),
            mem_used_bytes: Some(1 << 30),
            mem_total_bytes: Some(4 << 30),
            power_milliwatts: Some(350_500),
            temp_celsius: None,
        }]);
        let value = |metric| samples.iter().find(|s| s.metric == metric).map(|s| s.value);
        assert_eq!(value(CatalogMetric::GpuUtil), Some(0.75));
        assert_eq!(value(CatalogMetric::GpuMemBwUtil), Some(0.40));
        assert_eq!(value(CatalogMetric::GpuMemUsedBytes), Some(1073741824.0));
        assert_eq!(value(CatalogMetric::GpuPowerWatts), Some(350.5));
        assert_eq!(value(CatalogMetric::GpuTempCelsius), None);
        assert!(samples[0]
            .labels
            .contains(&("gpu".to_string(), "1".to_string())));
    }

    #[test]
    fn init_loads_nvml_exactly_where_a_driver_is() {
        // The kernel driver publishes its version here; NVML needs it.
        let driver = std::path::Path::new("/proc/driver/nvidia/version").exists();
        match NvmlSource::init() {
            Some(source) => {
                assert!(driver, "NVML loaded without a kernel driver");
                let readings = source.read().expect("NVML reads the GPUs it found");
                assert!(!readings.is_empty(), "a driver and no GPU");
                assert!(readings.iter().all(|g| !g.uuid.is_empty()));
                assert!(!readings_to_samples(&readings).is_empty());
            }
            None => assert!(!driver, "a driver is loaded but NVML did not start"),
        }
    }
}
