//! Where stored data comes from: the engines' and exporters' `/metrics`
//! pages, and NVML on the local host.

pub mod gpu_nvml;
pub mod scrape;
