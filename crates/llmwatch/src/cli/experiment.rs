//! `llmwatch experiment PLAN.toml [--out DIR]`: runs an experiment plan
//! (each variant's server started, measured, stopped; intervals, ranking and
//! the answer) and writes `report.html`, `report.md` and `report.json`;
//! `--report ID` rewrites them from the database.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use llmwatch_config::experiment::{ExperimentPlan, PlanTarget};
use llmwatch_core::analysis::experiment::{ExperimentResult, VariantStatus};
use llmwatch_engine::runners::experiment::render::write_report;
use llmwatch_engine::runners::experiment::{
    decide_again, run_experiment, ExperimentOptions, Operator,
};
use llmwatch_store::Store;

/// Flags of `llmwatch experiment`.
#[derive(Debug, clap::Args)]
pub struct ExperimentArgs {
    /// The plan (TOML).
    #[arg(required_unless_present = "report")]
    pub plan: Option<PathBuf>,
    /// Where the report and the servers' logs go (default: experiment-NAME).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Rewrite the report of a stored experiment instead of running one.
    #[arg(long, conflicts_with = "plan")]
    pub report: Option<i64>,
    /// Database file.
    #[arg(long, default_value = "llmwatch.db")]
    pub database: PathBuf,
    /// Do not store the experiment (nor its sweeps).
    #[arg(long, conflicts_with = "report")]
    pub no_store: bool,
}

async fn open_store(path: &Path) -> anyhow::Result<Store> {
    Store::open(path)
        .await
        .with_context(|| format!("opening {}", path.display()))
}

/// Asks on the terminal: the user restarts the server, then presses Enter
/// (or types `skip`).
fn terminal_operator() -> Operator {
    Arc::new(|message: String| {
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                print!("{message} (or type skip): ");
                let _ = std::io::stdout().flush();
                let mut line = String::new();
                match std::io::stdin().lock().read_line(&mut line) {
                    Ok(0) | Err(_) => false,
                    Ok(_) => line.trim() != "skip",
                }
            })
            .await
            .unwrap_or(false)
        })
    })
}

fn progress_line(result: &ExperimentResult) -> Option<String> {
    let running = result
        .variants
        .iter()
        .find(|v| v.status == VariantStatus::Running);
    Some(format!(
        "[{}/{} runs] {}",
        result.runs_done,
        result.runs_planned,
        running.map_or_else(|| result.status.clone(), |v| format!("{} running", v.name))
    ))
}

/// Runs `llmwatch experiment`.
pub async fn run(args: ExperimentArgs) -> anyhow::Result<()> {
    if let Some(id) = args.report {
        let store = open_store(&args.database).await?;
        let Some(row) = store.experiment(id).await? else {
            bail!("no experiment #{id} in {}", args.database.display());
        };
        let mut result: ExperimentResult = serde_json::from_str(&row.result_json)
            .with_context(|| format!("experiment #{id}: the stored result does not parse"))?;
        if result.status == "completed" {
            decide_again(&mut result);
        }
        let out = args
            .out
            .unwrap_or_else(|| PathBuf::from(format!("experiment-{id}")));
        write_report(&result, &out).with_context(|| format!("writing {}", out.display()))?;
        println!("report of experiment #{id} written to {}", out.display());
        return Ok(());
    }
    let Some(plan_path) = &args.plan else {
        bail!("give a plan file, or --report ID");
    };
    let plan = ExperimentPlan::load(plan_path)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("experiment-{}", plan.name)));
    let plan_dir = plan_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut options = ExperimentOptions::new(out.join("logs"), plan_dir);
    if matches!(plan.target, PlanTarget::Url(_)) {
        options.operator = Some(terminal_operator());
    }
    let store = if args.no_store {
        None
    } else {
        Some(open_store(&args.database).await?)
    };
    let mut last = String::new();
    let result = run_experiment(&plan, &options, store.as_ref(), |r| {
        if let Some(line) = progress_line(r).filter(|l| *l != last) {
            println!("{line}");
            last = line;
        }
    })
    .await?;
    write_report(&result, &out).with_context(|| format!("writing {}", out.display()))?;
    println!();
    for line in &result.answer {
        println!("{line}");
    }
    match result.id {
        Some(id) => println!(
            "\nexperiment #{id}: report in {} (report.html, report.md, report.json)",
            out.display()
        ),
        None => println!("\nreport in {}", out.display()),
    }
    Ok(())
}
