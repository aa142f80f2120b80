//! Reading a page through the last page's template gives exactly what the
//! full parser gives, on every fixture page and on the simulator's pages.

use std::path::{Path, PathBuf};

use llmwatch_config::EngineChoice;
use llmwatch_engine::sources::scrape::{page_lines, LastPage, Page};
use llmwatch_store::RawSample;

fn fixture_pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let mut pages = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("metrics") && n.ends_with(".txt"))
            {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

fn page(body: &[u8]) -> Page {
    Page {
        body: body.to_vec(),
        content_type: None,
    }
}

/// The same page with every sample's value replaced (timestamps kept).
fn with_new_values(body: &str) -> String {
    const VALUES: [&str; 9] = [
        "+Inf",
        "-Inf",
        "NaN",
        "-0",
        "1.5e-9",
        "123456789012345678",
        "0.1",
        "7",
        "-2.25",
    ];
    let mut out = String::new();
    let mut n = 0;
    for line in body.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            out.push_str(line);
            continue;
        }
        let series_end = match line.rfind('}') {
            Some(brace) if line.contains('{') => brace + 1,
            _ => line.find(' ').unwrap_or(line.len()),
        };
        let (series, rest) = line.split_at(series_end);
        let rest = rest.trim_start_matches(' ');
        let tail = rest.find([' ', '\n']).map(|i| &rest[i..]).unwrap_or("");
        out.push_str(series);
        out.push(' ');
        out.push_str(VALUES[n % VALUES.len()]);
        out.push_str(tail);
        n += 1;
    }
    out
}

fn assert_same(a: &[RawSample], b: &[RawSample], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: line count");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.name, y.name, "{what}: line {i} name");
        assert_eq!(x.labels, y.labels, "{what}: line {i} labels");
        assert_eq!(
            x.value.to_bits(),
            y.value.to_bits(),
            "{what}: line {i} value {} vs {}",
            x.value,
            y.value
        );
    }
}

/// Reads `first` then `next` as a scrape loop does; returns the second
/// reading and whether it came through the template.
fn second_reading(first: &[u8], next: &[u8]) -> (Vec<RawSample>, bool, usize) {
    let mut last = LastPage::default();
    let lines = page_lines(&page(first), EngineChoice::Auto, &last);
    last.remember(&lines);
    let lines = page_lines(&page(next), EngineChoice::Auto, &last);
    (lines.raw, lines.from_template, lines.families)
}

#[test]
fn every_fixture_page_reads_the_same_through_its_template() {
    let mut templated = Vec::new();
    for path in fixture_pages() {
        let first = std::fs::read(&path).unwrap();
        let Ok(text) = std::str::from_utf8(&first) else {
            continue;
        };
        let next = with_new_values(text);
        let parsed = page_lines(
            &page(next.as_bytes()),
            EngineChoice::Auto,
            &LastPage::default(),
        );
        let (read, from_template, families) = second_reading(&first, next.as_bytes());
        let what = path.display().to_string();
        assert_same(&read, &parsed.raw, &what);
        assert_eq!(families, parsed.families, "{what}: families");
        if from_template {
            templated.push(path.file_name().unwrap().to_string_lossy().to_string());
        }
    }
    // The real servers' pages are written canonically: they must take the
    // fast path, or this test proves nothing about it.
    for name in ["metrics_vllm_idle.txt", "metrics_llamacpp_idle.txt"] {
        assert!(
            templated.iter().any(|t| t == name),
            "{name} not read through a template; templated: {templated:?}"
        );
    }
    assert!(templated.len() >= 10, "templated: {templated:?}");
}

#[test]
fn a_changed_shape_is_parsed_in_full() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/vllm-live");
    let before = std::fs::read(dir.join("metrics_vllm_load_before.txt")).unwrap();
    let after = std::fs::read(dir.join("metrics_vllm_load_after.txt")).unwrap();
    let parsed = page_lines(&page(&after), EngineChoice::Auto, &LastPage::default());
    let (read, _, _) = second_reading(&before, &after);
    assert_same(&read, &parsed.raw, "vLLM before → after load");
    // A line removed from a page of the same shape: not read through it.
    let text = String::from_utf8(after.clone()).unwrap();
    let cut = text
        .lines()
        .filter(|l| !l.starts_with("vllm:num_requests_running"))
        .collect::<Vec<_>>()
        .join("\n");
    let parsed = page_lines(
        &page(cut.as_bytes()),
        EngineChoice::Auto,
        &LastPage::default(),
    );
    let (read, from_template, _) = second_reading(&after, cut.as_bytes());
    assert!(!from_template);
    assert_same(&read, &parsed.raw, "a line fewer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulators_pages_under_load_read_the_same_through_the_template() {
    let config = llmwatch_sim::SimConfig {
        model: "m".to_string(),
        time_scale: 50.0,
        ..llmwatch_sim::SimConfig::new(llmwatch_sim::Profile::named("balanced").unwrap())
    };
    let sim = llmwatch_sim::Sim::start(config).unwrap();
    let engine_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let engine = engine_listener.local_addr().unwrap();
    let gpu_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gpu = gpu_listener.local_addr().unwrap();
    let served = sim.clone();
    tokio::spawn(async move { served.serve(engine_listener).await });
    tokio::spawn(llmwatch_sim::serve(gpu_listener, sim.gpu_router()));
    let client = reqwest::Client::new();
    for addr in [engine, gpu] {
        let url = format!("http://{addr}/metrics");
        let mut last = LastPage::default();
        let mut through_template = 0;
        for _ in 0..5 {
            // Load between scrapes so counters and histograms move.
            let _ = client
                .post(format!("http://{engine}/v1/completions"))
                .json(&serde_json::json!({"model": "m", "prompt": "hello there", "max_tokens": 8}))
                .send()
                .await
                .unwrap()
                .bytes()
                .await;
            let body = client
                .get(&url)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            let parsed = page_lines(&page(&body), EngineChoice::Auto, &LastPage::default());
            let lines = page_lines(&page(&body), EngineChoice::Auto, &last);
            assert_same(&lines.raw, &parsed.raw, &url);
            through_template += usize::from(lines.from_template);
            last.remember(&lines);
        }
        assert!(
            through_template >= 3,
            "{url}: {through_template} of 4 through the template"
        );
    }
}
