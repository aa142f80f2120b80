//! `llmwatch sim`: one simulated engine (and optionally its GPU page) on
//! the given address, until Ctrl-C.

use std::net::SocketAddr;

use anyhow::Context;
use llmwatch_sim::{Flavor, Profile, Sim, SimConfig};

pub struct SimArgs {
    pub addr: SocketAddr,
    pub profile: String,
    pub flavor: String,
    pub gpu_addr: Option<SocketAddr>,
    pub time_scale: f64,
    pub model: String,
}

impl SimArgs {
    /// A vLLM-flavoured simulator on a free loopback port, without a GPU page.
    pub fn loopback(profile: &str, model: &str, time_scale: f64) -> SimArgs {
        SimArgs {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            profile: profile.to_string(),
            flavor: "vllm".to_string(),
            gpu_addr: None,
            time_scale,
            model: model.to_string(),
        }
    }

    /// Also serve a dcgm-exporter page, on a free loopback port.
    pub fn with_gpu_page(mut self) -> SimArgs {
        self.gpu_addr = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        self
    }
}

/// Starts a simulator from CLI-style arguments and returns it with the
/// addresses it listens on (engine, GPU page).
pub async fn start(args: &SimArgs) -> anyhow::Result<(Sim, SocketAddr, Option<SocketAddr>)> {
    let profile = Profile::named(&args.profile)?;
    let flavor: Flavor = args.flavor.parse()?;
    if !(args.time_scale.is_finite() && args.time_scale > 0.0) {
        anyhow::bail!(
            "--time-scale must be a positive number, got {}",
            args.time_scale
        );
    }
    let config = SimConfig {
        model: args.model.clone(),
        flavor,
        time_scale: args.time_scale,
        ..SimConfig::new(profile)
    };
    let sim = Sim::start(config)?;
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("binding {}", args.addr))?;
    let engine_addr = listener.local_addr()?;
    let engine = sim.clone();
    tokio::spawn(async move {
        if let Err(err) = engine.serve(listener).await {
            tracing::error!(error = %err, "simulated engine stopped");
        }
    });
    let gpu_addr = match args.gpu_addr {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?;
            let bound = listener.local_addr()?;
            let router = sim.gpu_router();
            tokio::spawn(async move {
                if let Err(err) = llmwatch_sim::serve(listener, router).await {
                    tracing::error!(error = %err, "simulated GPU page stopped");
                }
            });
            Some(bound)
        }
        None => None,
    };
    Ok((sim, engine_addr, gpu_addr))
}

pub async fn run(args: SimArgs) -> anyhow::Result<()> {
    let (_sim, engine_addr, gpu_addr) = start(&args).await?;
    println!(
        "simulated engine ({} profile) on http://{engine_addr}",
        args.profile
    );
    if let Some(gpu_addr) = gpu_addr {
        println!("simulated dcgm-exporter page on http://{gpu_addr}/metrics");
    }
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    Ok(())
}
