//! The shipped deployment files are safe as shipped: every config parses,
//! one that listens beyond loopback names a token (so the daemon refuses to
//! start without it), the image runs as an unprivileged user and its build
//! context leaves the build tree and databases out.

use std::path::{Path, PathBuf};

use llmwatch_config::Config;

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn shipped_configs_parse_and_a_network_listener_needs_a_token() {
    let mut checked = 0;
    for entry in std::fs::read_dir(repo().join("deploy")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let config = Config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if !config.server.listen.ip().is_loopback() {
            assert!(
                config.server.token.is_some() || config.server.token_env.is_some(),
                "{} listens on {} without a token",
                path.display(),
                config.server.listen
            );
            assert!(!config.server.allow_unauthenticated, "{}", path.display());
            // Without the variable it names, the daemon would not start.
            let err = config.access_token().expect_err("fails closed");
            assert!(err.to_string().contains("token"), "{err}");
        }
        checked += 1;
    }
    assert!(checked >= 2, "deploy/ has its configs");
}

#[test]
fn the_image_runs_unprivileged_from_a_clean_context() {
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).unwrap();
    let user = dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("USER "))
        .next_back()
        .expect("a USER line");
    let uid = user.split(':').next().unwrap_or("");
    assert!(uid != "0" && uid != "root", "runs as {user}");
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap();
    for entry in ["target/", "*.db", ".git/"] {
        assert!(
            ignore.lines().any(|l| l.trim().ends_with(entry)),
            ".dockerignore lacks {entry}"
        );
    }
    let compose = std::fs::read_to_string(repo().join("docker-compose.yml")).unwrap();
    assert!(
        compose.contains("LLMWATCH_TOKEN"),
        "compose passes the token"
    );
    assert!(Path::new(&repo().join("deploy/compose.toml")).exists());
}
