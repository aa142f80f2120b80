//! A dcgm-exporter page (default counters, 4.x layout) for the simulated
//! GPUs. Label set and order follow dcgm-exporter up to 4.5.3-4.8.2:
//! `gpu, UUID, pci_bus_id, device, modelName, Hostname,
//! DCGM_FI_DRIVER_VERSION`; ints print as `%d`, doubles as `%f`; HELP texts
//! are those of `etc/default-counters.csv`.
//!
//! Memory used = weights + KV blocks in use × bytes per block, split evenly
//! across the GPUs (tensor-parallel ranks). (A real vLLM preallocates its
//! whole KV pool, so its FB_USED is flat; the simulator lets memory follow
//! the cache so that GPU memory and KV usage can be seen to move together.)
//! Utilisation follows the recent step mix: prefill drives the tensor pipe,
//! decode drives DRAM; idle decays to zero within a few seconds and then
//! reads exactly idle (every value constant).

use std::fmt::Write as _;
use std::sync::Mutex;

use tokio::time::Instant;

use crate::tokenizer::mix;
use crate::{SimConfig, SimInner};

const MIB: f64 = 1024.0 * 1024.0;
const FB_RESERVED_MIB: u64 = 591;
const DRIVER_VERSION: &str = "570.124.06";

pub(crate) struct GpuState {
    labels: Vec<String>,
    /// (last read, energy in mJ) per GPU.
    energy: Mutex<(Instant, Vec<f64>)>,
}

impl GpuState {
    pub(crate) fn new(config: &SimConfig) -> GpuState {
        let labels = (0..config.gpus)
            .map(|i| {
                let h = mix(config.seed ^ 0x6770_7500 ^ i as u64);
                let h2 = mix(h);
                let uuid = format!(
                    "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                    h >> 32,
                    (h >> 16) & 0xffff,
                    h & 0xffff,
                    h2 >> 48,
                    h2 & 0xffff_ffff_ffff
                );
                format!(
                    "gpu=\"{i}\",UUID=\"{uuid}\",pci_bus_id=\"00000000:{:02X}:00.0\",device=\"nvidia{i}\",modelName=\"{}\",Hostname=\"{}\",DCGM_FI_DRIVER_VERSION=\"{DRIVER_VERSION}\"",
                    0x18 + 0x12 * i,
                    config.profile.gpu_model_name.replace('"', ""),
                    config.hostname.replace('"', ""),
                )
            })
            .collect();
        GpuState {
            labels,
            energy: Mutex::new((Instant::now(), vec![0.0; config.gpus])),
        }
    }
}

enum V {
    Int(i64),
    Float(f64),
}

struct Gpu {
    sm_clock: i64,
    mem_clock: i64,
    mem_temp: i64,
    gpu_temp: i64,
    power_w: f64,
    energy_mj: i64,
    util: i64,
    mem_copy_util: i64,
    fb_free: i64,
    fb_used: i64,
    gr_active: f64,
    tensor_active: f64,
    dram_active: f64,
    pcie_tx: i64,
    pcie_rx: i64,
}

pub(crate) fn render(inner: &SimInner) -> String {
    let cfg = &inner.config;
    let p = &cfg.profile;
    let n = cfg.gpus.max(1);
    let (busy, prefill) = inner.shared.activity();
    let decode = (busy - prefill).max(0.0);
    let kv_blocks = inner.shared.lock_stats().kv_blocks_used as f64;
    let total_mib = (p.gpu_memory_bytes as f64 / MIB).floor();
    let used_mib =
        ((p.weights_bytes as f64 + kv_blocks * p.kv_bytes_per_block as f64) / n as f64 / MIB)
            .round();
    let used_mib = used_mib.min(total_mib - FB_RESERVED_MIB as f64).max(0.0);
    let free_mib = (total_mib - FB_RESERVED_MIB as f64 - used_mib).max(0.0);
    let tensor = (0.03 * busy + 0.8 * prefill).min(1.0);
    let dram = (0.1 * busy + 0.75 * decode).min(1.0);
    let power = 70.0 + 630.0 * (0.35 * busy + 0.35 * tensor + 0.3 * dram);

    let energies = {
        let mut e = inner.gpu.energy.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let dt = (now - e.0).as_secs_f64();
        e.0 = now;
        for v in e.1.iter_mut() {
            *v += power * dt * 1000.0;
        }
        e.1.clone()
    };

    let gpus: Vec<Gpu> = (0..n)
        .map(|i| Gpu {
            sm_clock: if busy > 0.02 { 1980 } else { 345 },
            mem_clock: 2619,
            mem_temp: (34.0 + 30.0 * dram).round() as i64,
            gpu_temp: (31.0 + 40.0 * busy).round() as i64,
            power_w: power,
            energy_mj: energies.get(i).copied().unwrap_or(0.0) as i64,
            util: (100.0 * busy).round() as i64,
            mem_copy_util: (100.0 * dram).round() as i64,
            fb_free: free_mib as i64,
            fb_used: used_mib as i64,
            gr_active: (0.95 * busy).min(1.0),
            tensor_active: tensor,
            dram_active: dram,
            pcie_tx: 118_000 + (2_000_000.0 * busy) as i64,
            pcie_rx: 120_000 + (2_000_000.0 * busy) as i64,
        })
        .collect();

    type Field = (&'static str, &'static str, &'static str, fn(&Gpu) -> V);
    let fields: [Field; 25] = [
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", |g| V::Int(g.sm_clock)),
        ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", |g| V::Int(g.mem_clock)),
        ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", |g| V::Int(g.mem_temp)),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", |g| V::Int(g.gpu_temp)),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", |g| V::Float(g.power_w)),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", |g| V::Int(g.energy_mj)),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", |_| V::Int(0)),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", |g| V::Int(g.util)),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", |g| V::Int(g.mem_copy_util)),
        ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", |_| V::Int(0)),
        ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", |_| V::Int(0)),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", |_| V::Int(0)),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", |g| V::Int(g.fb_free)),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", |g| V::Int(g.fb_used)),
        ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", |_| V::Int(FB_RESERVED_MIB as i64)),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes.", |_| V::Int(0)),
        ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", |_| V::Int(0)),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors", |_| V::Int(0)),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors", |_| V::Int(0)),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", |_| V::Int(0)),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", |g| V::Float(g.gr_active)),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", |g| V::Float(g.tensor_active)),
        ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active sending or receiving data.", |g| V::Float(g.dram_active)),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", |g| V::Int(g.pcie_tx)),
        ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", |g| V::Int(g.pcie_rx)),
    ];

    let mut out = String::with_capacity(16 * 1024);
    for (name, kind, help, get) in fields {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (i, g) in gpus.iter().enumerate() {
            let labels = inner.gpu.labels.get(i).map(String::as_str).unwrap_or("");
            match get(g) {
                V::Int(v) => {
                    let _ = writeln!(out, "{name}{{{labels}}} {v}");
                }
                V::Float(v) => {
                    let _ = writeln!(out, "{name}{{{labels}}} {v:.6}");
                }
            }
        }
    }
    out
}
