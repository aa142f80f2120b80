//! `TestApp`: a daemon on a loopback port with a fresh SQLite file, and the
//! simulated engines (and their GPU pages) it watches, from one builder:
//!
//! ```ignore
//! let app = TestApp::builder()
//!     .sim("kv-starved")
//!     .target("scrape_interval = \"250ms\"")
//!     .config("[server]\nalert_interval = \"200ms\"")
//!     .spawn()
//!     .await;
//! ```
//!
//! Each simulator becomes a `[[targets]]` entry named after it (and a
//! `[[gpus]]` entry when it serves a GPU page); the TOML given to `config`
//! is written before them, so it may hold `[server]`, `[[alerts]]`,
//! `[[notifiers]]` and targets of its own. `listen` and `database` are
//! always the test's own.

use std::net::SocketAddr;
use std::path::PathBuf;

use llmwatch::cli::sim::{self, SimArgs};
use llmwatch::daemon::{self, Daemon};
use llmwatch_sim::Sim;

use super::test_config;

/// The time scale simulators run at unless a test says otherwise: ten times
/// faster than the profile's real costs, so sweeps and canaries finish soon.
pub const SIM_TIME_SCALE: f64 = 10.0;
/// The model simulators serve unless a test names another.
pub const SIM_MODEL: &str = "sim-model";

/// A running simulator: its engine (and GPU page) on loopback ports.
pub struct TestSim {
    /// The target name the daemon watches it as.
    pub name: String,
    pub sim: Sim,
    pub engine: SocketAddr,
    pub gpu: Option<SocketAddr>,
}

impl TestSim {
    pub fn url(&self) -> String {
        format!("http://{}", self.engine)
    }

    /// The GPU page's `/metrics` URL; panics if none was asked for.
    pub fn gpu_url(&self) -> String {
        let gpu = self.gpu.expect("the simulator was built with .gpu_page()");
        format!("http://{gpu}/metrics")
    }
}

/// A daemon with its database directory and the simulators it watches.
pub struct TestApp {
    pub daemon: Daemon,
    pub dir: tempfile::TempDir,
    pub sims: Vec<TestSim>,
}

impl TestApp {
    pub fn builder() -> TestAppBuilder {
        TestAppBuilder::default()
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.daemon.listen_addr)
    }

    pub fn database(&self) -> PathBuf {
        self.dir.path().join("llmwatch.db")
    }

    /// The simulator watched as `name`.
    pub fn sim(&self, name: &str) -> &TestSim {
        self.sims
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no simulator named {name:?}"))
    }

    /// Stops the daemon (draining its tasks) and hands back its database
    /// directory, so a test can start a second daemon on the same file.
    pub async fn stop(self) -> (tempfile::TempDir, Vec<TestSim>) {
        self.daemon.shutdown().await;
        (self.dir, self.sims)
    }
}

struct PlannedSim {
    name: String,
    args: SimArgs,
    target_toml: String,
}

#[derive(Default)]
pub struct TestAppBuilder {
    config: String,
    sims: Vec<PlannedSim>,
    dir: Option<tempfile::TempDir>,
}

impl TestAppBuilder {
    /// A simulator of the named profile, watched as a target of that name.
    pub fn sim(self, profile: &str) -> Self {
        self.sim_as(
            profile,
            SimArgs::loopback(profile, SIM_MODEL, SIM_TIME_SCALE),
        )
    }

    /// A simulator started from `args`, watched as the target `name`.
    pub fn sim_as(mut self, name: &str, args: SimArgs) -> Self {
        self.sims.push(PlannedSim {
            name: name.to_string(),
            args,
            target_toml: String::new(),
        });
        self
    }

    /// The last simulator also serves a dcgm-exporter GPU page, watched as
    /// `<name>-gpus` and named in its target's `gpus`.
    pub fn gpu_page(mut self) -> Self {
        let last = self.last_sim();
        last.args.gpu_addr = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        self
    }

    /// TOML lines added to the last simulator's `[[targets]]` entry (keys,
    /// then any of its sub-tables such as `[targets.probe]`).
    pub fn target(mut self, toml: &str) -> Self {
        let last = self.last_sim();
        last.target_toml.push_str(toml);
        last.target_toml.push('\n');
        self
    }

    /// TOML written before the simulators' targets.
    pub fn config(mut self, toml: &str) -> Self {
        self.config.push_str(toml);
        self.config.push('\n');
        self
    }

    /// Keeps the database in `dir` (one a stopped app handed back).
    pub fn dir(mut self, dir: tempfile::TempDir) -> Self {
        self.dir = Some(dir);
        self
    }

    fn last_sim(&mut self) -> &mut PlannedSim {
        self.sims
            .last_mut()
            .expect("add a simulator (.sim or .sim_as) first")
    }

    /// Starts the simulators, then the daemon watching them.
    pub async fn spawn(self) -> TestApp {
        let mut toml = self.config;
        let mut sims = Vec::new();
        for planned in self.sims {
            let (sim, engine, gpu) = sim::start(&planned.args)
                .await
                .unwrap_or_else(|e| panic!("simulator {} starts: {e:#}", planned.name));
            let name = &planned.name;
            toml.push_str(&format!(
                "\n[[targets]]\nname = \"{name}\"\nurl = \"http://{engine}\"\n"
            ));
            if gpu.is_some() {
                toml.push_str(&format!("gpus = \"{name}-gpus\"\n"));
            }
            toml.push_str(&planned.target_toml);
            if let Some(gpu) = gpu {
                toml.push_str(&format!(
                    "\n[[gpus]]\nname = \"{name}-gpus\"\ndcgm_url = \"http://{gpu}/metrics\"\n"
                ));
            }
            sims.push(TestSim {
                name: planned.name,
                sim,
                engine,
                gpu,
            });
        }
        let dir = match self.dir {
            Some(dir) => dir,
            None => tempfile::tempdir().expect("temporary directory"),
        };
        let config = test_config(&toml, dir.path());
        let daemon = daemon::start(config).await.expect("daemon starts");
        TestApp { daemon, dir, sims }
    }
}
