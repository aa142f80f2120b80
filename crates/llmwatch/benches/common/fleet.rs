//! Shared by the fleet benches (`scrape_fleet`, `remote_write_peer`): the
//! loopback fleet serving the real vLLM capture, and reading a process's
//! CPU time and an exposition page's counters.
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock
// Each bench uses only some of these.
#![allow(dead_code)]

use std::net::SocketAddr;

use anyhow::{Context, Result};
use axum::http::header;
use axum::routing::get;
use axum::Router;

pub const CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/vllm-live/metrics_vllm_idle.txt"
);
/// The same server before and after a burst of load: the series whose
/// values differ advance by that difference every scrape (`PAGE=load`).
pub const LOAD_BEFORE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/vllm-live/metrics_vllm_load_before.txt"
);
pub const LOAD_AFTER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/vllm-live/metrics_vllm_load_after.txt"
);

/// Kernel clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
pub const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

pub fn env_number(name: &str, default: u64) -> Result<u64> {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .with_context(|| format!("{name}: expected a whole number, found {value:?}")),
        Err(_) => Ok(default),
    }
}

pub fn read_text(path: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {path}"))
}

/// One line of a served page.
pub enum PageLine {
    Fixed(String),
    /// `series value`: the value is `base + step × n` at the n-th scrape.
    Advancing {
        series: String,
        base: f64,
        step: f64,
    },
}

/// The page a fleet target serves: fixed, or advancing as a server under
/// steady load would (its counters and histogram buckets grow every scrape).
pub struct LivePage {
    lines: Vec<PageLine>,
}

impl LivePage {
    pub fn fixed(text: &str) -> LivePage {
        LivePage {
            lines: text
                .lines()
                .map(|line| PageLine::Fixed(line.into()))
                .collect(),
        }
    }

    /// `after`'s lines; a series whose value differs from `before`'s
    /// advances by that difference per scrape (new series stay as written).
    pub fn under_load(before: &str, after: &str) -> LivePage {
        let split = |line: &str| -> Option<(String, f64)> {
            if line.starts_with('#') {
                return None;
            }
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        };
        let before: std::collections::HashMap<String, f64> =
            before.lines().filter_map(split).collect();
        let lines = after
            .lines()
            .map(|line| match split(line) {
                Some((series, value)) => match before.get(&series) {
                    Some(&base) if base != value && value.is_finite() && base.is_finite() => {
                        PageLine::Advancing {
                            series,
                            base,
                            step: value - base,
                        }
                    }
                    _ => PageLine::Fixed(line.into()),
                },
                None => PageLine::Fixed(line.into()),
            })
            .collect();
        LivePage { lines }
    }

    pub fn describe(&self) -> String {
        let advancing = self
            .lines
            .iter()
            .filter(|line| matches!(line, PageLine::Advancing { .. }))
            .count();
        let bytes = self.render(1).len();
        if advancing == 0 {
            format!("the vLLM 0.32 capture ({bytes} bytes, unchanging)")
        } else {
            format!("the vLLM 0.32 capture under load ({bytes} bytes, {advancing} series advancing every scrape)")
        }
    }

    pub fn render(&self, scrape: u64) -> Vec<u8> {
        let mut out = String::with_capacity(64 * 1024);
        for line in &self.lines {
            match line {
                PageLine::Fixed(text) => out.push_str(text),
                PageLine::Advancing { series, base, step } => {
                    out.push_str(series);
                    out.push(' ');
                    out.push_str(&(base + step * scrape as f64).to_string());
                }
            }
            out.push('\n');
        }
        out.into_bytes()
    }
}

/// Binds `count` loopback ports serving `page` at `/metrics`, each with its
/// own scrape count.
pub async fn serve_fleet(count: usize, page: LivePage) -> Result<Vec<SocketAddr>> {
    let page = std::sync::Arc::new(page);
    let mut addrs = Vec::with_capacity(count);
    for _ in 0..count {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        addrs.push(listener.local_addr()?);
        let page = page.clone();
        let scrapes = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let app = Router::new().route(
            "/metrics",
            get(move || {
                let n = scrapes.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                let body = page.render(n);
                async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body) }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
    Ok(addrs)
}

pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// utime and stime of every thread of `pid`, in seconds.
pub fn cpu_seconds(pid: u32) -> Result<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("/proc/PID/stat without a command name")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `rest` starts at field 3.
    let ticks = |index: usize| -> Result<f64> {
        fields
            .get(index)
            .context("/proc/PID/stat too short")?
            .parse::<f64>()
            .context("/proc/PID/stat: a field that is not a number")
    };
    Ok((
        ticks(11)? / CLOCK_TICKS_PER_SECOND,
        ticks(12)? / CLOCK_TICKS_PER_SECOND,
    ))
}

/// The sum of every sample of the family `name` on an exposition page.
pub fn sum_of(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with([' ', '{']))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The config of an `llmwatch serve` scraping every port of `fleet` each
/// second on `listen_port`, its database in `dir`, with the live diagnosis
/// and alert rounds an hour apart (the scrape path alone is measured).
pub fn llmwatch_fleet_config(
    listen_port: u16,
    dir: &std::path::Path,
    fleet: &[std::net::SocketAddr],
) -> String {
    let mut config = format!(
        "[server]\nlisten = \"127.0.0.1:{listen_port}\"\ndatabase = {:?}\n\
         live_interval = \"1h\"\nalert_interval = \"1h\"\n",
        dir.join("llmwatch.db").display().to_string()
    );
    for (i, addr) in fleet.iter().enumerate() {
        config.push_str(&format!(
            "[[targets]]\nname = \"t{i:04}\"\nurl = \"http://{addr}\"\nscrape_interval = \"1s\"\n"
        ));
    }
    config
}
