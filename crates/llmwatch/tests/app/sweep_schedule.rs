//! Scheduled sweeps: the daemon's schedule loop sweeps a simulated target by
//! itself, with the target's GPU page as evidence, and skips a period while
//! another sweep holds the one sweep slot.

use std::sync::Arc;
use std::time::Duration;

use llmwatch::cli::sim::{self, SimArgs};
use llmwatch_config::Config;
use llmwatch_engine::runners::sweep::schedule::{run_schedule, SweepSlots};
use llmwatch_store::Store;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_runs_sweeps_and_shares_the_slot() {
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
    let config = Config::parse(&toml, std::path::Path::new("t.toml")).unwrap();
    let store = Store::open(&db).await.unwrap();
    let target = config.targets[0].clone();
    let mut schedule = target.sweep.clone().unwrap();
    // The config refuses periods under ten minutes; the loop itself takes any.
    schedule.every = Duration::from_millis(1500);
    let schedule_every = schedule.every;
    let slots = SweepSlots::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    // While another sweep holds the slot, the first period is skipped.
    let held = slots.try_acquire().unwrap();
    let task = tokio::spawn(run_schedule(
        Arc::new(config.clone()),
        target,
        schedule,
        store.clone(),
        slots.clone(),
        stop_rx,
    ));
    // An observation window, not a synchronisation: two whole periods pass
    // with the slot held, and nothing may start in them.
    tokio::time::sleep(schedule_every * 2 + Duration::from_millis(200)).await;
    assert!(
        store.sweeps(10).await.unwrap().is_empty(),
        "ran while the slot was held"
    );
    drop(held);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let sweep = loop {
        let rows = store.sweeps(10).await.unwrap();
        if let Some(row) = rows.iter().find(|r| r.ended_ms.is_some()) {
            break row.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no scheduled sweep finished: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
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
