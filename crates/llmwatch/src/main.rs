//! `llmwatch`: one binary for the daemon, the simulator, the demo and the
//! one-shot tools. See ARCHITECTURE.md for the map of the code.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use llmwatch_config::Config;
/// A scrape parses and drops megabytes per round; mimalloc keeps that memory
/// warm instead of trimming it back to the OS each time (glibc's default),
/// which measured ~1.5x faster parsing here (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use llmwatch::cli::{bench as bench_cmd, db as db_cmd, inspect, sim as sim_cmd};
use llmwatch::{daemon, demo};

#[derive(Parser)]
#[command(
    name = "llmwatch",
    version,
    about = "Watch LLM inference servers and their GPUs: what is slow, and why."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulated targets + GPU page + the daemon; prints the dashboard URL.
    Demo {
        /// Where the dashboard listens.
        #[arg(long, default_value = "127.0.0.1:9477")]
        listen: SocketAddr,
        /// Database file (default: a fresh one in a temporary directory).
        #[arg(long)]
        database: Option<PathBuf>,
    },
    /// The daemon.
    Serve {
        #[arg(long, default_value = "llmwatch.toml")]
        config: PathBuf,
    },
    /// One simulated inference engine (vLLM flags via --vllm-args or after
    /// `--`), or `--fit SWEEP --out FILE` to fit it to a real server.
    Sim(Box<sim_cmd::SimCli>),
    /// What a sweep would show after a change of vLLM flags, predicted by
    /// the fitted simulator.
    Predict(Box<llmwatch::cli::predict::PredictArgs>),
    /// What llmwatch understands of one metrics page (URL or file).
    Inspect {
        source: String,
        #[arg(long)]
        json: bool,
    },
    /// Validate a config file; errors name the field.
    CheckConfig { file: PathBuf },
    /// One run against one target, printed like `vllm bench serve`, or
    /// `bench merge PARTS…` (the parts of a shared schedule as one run).
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Bench(Box<bench_cmd::BenchArgs>),
    /// One sweep at rising load with verdicts and diagnosis, or `--compare A B`.
    Sweep(Box<llmwatch::cli::sweep::SweepArgs>),
    /// An experiment plan: each variant's server started, swept and graded;
    /// intervals, a ranking and the answer (`--report ID` rewrites a report).
    Experiment(Box<llmwatch::cli::experiment::ExperimentArgs>),
    /// The database: `llmwatch db stats`.
    #[command(subcommand)]
    Db(db_cmd::DbCommand),
}

fn main() -> std::process::ExitCode {
    init_tracing();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // The error may quote a URL with its credentials.
            let message = llmwatch_core::redact::redact_urls_in(&format!("{err:#}"));
            eprintln!("error: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    llmwatch::logging::init();
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo { listen, database } => demo::run(listen, database).await,
        Command::Serve { config } => {
            let config = Config::load(&config)?;
            let daemon = daemon::start(config).await?;
            println!("llmwatch listening on http://{}", daemon.listen_addr);
            daemon::run_until_stopped(daemon).await
        }
        Command::Sim(args) => sim_cmd::run_cli(*args).await,
        Command::Predict(args) => llmwatch::cli::predict::run(*args).await,
        Command::Inspect { source, json } => {
            let inspection = inspect::inspect(&source, 64 * 1024 * 1024).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&inspection)?);
            } else {
                print!("{}", inspect::render(&inspection));
            }
            Ok(())
        }
        Command::Bench(args) => bench_cmd::run_cli(*args).await,
        Command::Sweep(args) => llmwatch::cli::sweep::run(*args).await,
        Command::Experiment(args) => llmwatch::cli::experiment::run(*args).await,
        Command::Db(command) => db_cmd::run(command).await,
        Command::CheckConfig { file } => {
            let config = Config::load(&file)?;
            println!(
                "{}: ok ({} targets, {} GPU sources)",
                file.display(),
                config.targets.len(),
                config.gpus.len()
            );
            Ok(())
        }
    }
}
