//! Where stored data comes from: the engines' and exporters' `/metrics`
//! pages, NVML on the local host, and which targets there are (service
//! discovery).

pub mod discovery;
pub mod gpu_nvml;
pub mod kubernetes;
pub mod scrape;
pub mod server_facts;
