//! Scheduled sweeps: the daemon's schedule loop skips a period while another
//! sweep holds the one sweep slot (in paused time: the periods pass without
//! waiting for them), and sweeps a simulated target by itself, with the
//! target's GPU page as evidence.

use std::sync::Arc;
use std::time::Duration;

use llmwatch::cli::sim::{self, SimArgs};
use llmwatch_config::Config;
use llmwatch_engine::runners::sweep::schedule::{run_schedule, SweepSlots};
use llmwatch_store::Store;

use crate::common::wait_for;

/// The schedule loop for `target` of `toml`, every `every`, in a task.
fn spawn_schedule(
    toml: &str,
    every: Duration,
    store: &Store,
    slots: &SweepSlots,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::watch::Sender<bool>,
) {
    let config = Config::parse(toml, std::path::Path::new("t.toml")).unwrap();
    let target = config.targets[0].clone();
    let mut schedule = target.sweep.clone().unwrap();
    // The config refuses periods under ten minutes; the loop itself takes any.
    schedule.every = every;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(run_schedule(
        Arc::new(config.clone()),
        target,
        schedule,
        store.clone(),
        slots.clone(),
        stop_rx,
    ));
    (task, stop_tx)
}

// Current-thread: only there can the test pause time.
#[tokio::test]
async fn the_schedule_skips_periods_while_the_slot_is_held_then_sweeps() {
    let (_sim, engine, gpu) =
        sim::start(&SimArgs::loopback("balanced", "sched-model", 20.0).with_gpu_page())
            .await
            .unwrap();
    let gpu = gpu.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("llmwatch.db");
    let toml = format!(
        "[server]\ndatabase = {:?}\n\
         [[targets]]\nname = \"sim\"\nurl = \"http://{engine}\"\ngpus = \"sim-gpus\"\n\
         slo_ttft_p95 = \"2s\"\n\
         [targets.sweep]\nevery = \"24h\"\nshape = \"64x8\"\nconcurrency = [1, 2]\n\
         requests_per_step = 4\nmin_step_duration = \"200ms\"\nspin = \"on\"\nslo_e2e_p95 = \"30s\"\n\
         [[gpus]]\nname = \"sim-gpus\"\ndcgm_url = \"http://{gpu}/metrics\"\n",
        db.display().to_string()
    );
    let store = Store::open(&db).await.unwrap();
    let slots = SweepSlots::default();
    let held = slots.try_acquire().unwrap();
    let every = Duration::from_secs(1);
    // Paused time: the sleep jumps over ten whole periods (the first comes
    // within two), the loop's ticks firing in order on the way, none of them
    // able to start a sweep. The store is read in real time only (its pool's
    // timeouts would fire at once in paused time).
    tokio::time::pause();
    let (task, stop_tx) = spawn_schedule(&toml, every, &store, &slots);
    tokio::time::sleep(every * 10).await;
    tokio::time::resume();
    assert!(
        store.sweeps(10).await.unwrap().is_empty(),
        "ran while the slot was held"
    );
    drop(held);
    let sweep = wait_for(
        "a scheduled sweep to finish",
        Duration::from_secs(30),
        || async {
            let rows = store.sweeps(10).await.unwrap();
            rows.into_iter().find(|r| r.ended_ms.is_some())
        },
    )
    .await;
    let _ = stop_tx.send(true);
    let _ = task.await;
    assert_eq!(sweep.target_name.as_deref(), Some("sim"));
    assert_eq!(sweep.status.as_str(), "completed", "{sweep:?}");
    // The card was filled from the target's GPU page and model list.
    assert!(
        sweep.card_json.contains("sched-model"),
        "{}",
        sweep.card_json
    );
    assert!(sweep.card_json.contains("H100"), "{}", sweep.card_json);
    // The section's settings reached the sweep, `spin` included.
    let settings: serde_json::Value = serde_json::from_str(&sweep.settings_json).unwrap();
    assert_eq!(settings["spin"], "on", "{settings}");
    assert_eq!(settings["objectives"]["e2e_p95_s"], 30.0, "{settings}");
    // The target's own objective, the server's where it sets none.
    assert_eq!(settings["objectives"]["ttft_p95_s"], 2.0, "{settings}");
    assert_eq!(settings["objectives"]["itl_p95_s"], 0.05, "{settings}");
    assert_eq!(settings["shape"], "64x8", "{settings}");
    let steps = store.sweep_steps(sweep.id).await.unwrap();
    assert_eq!(steps.len(), 2);
}
