//! `[[remote_write]]` through the public API: defaults, secrets from the
//! environment, and errors that name the field.

use llmwatch_config::{Config, ConfigError, RemoteWriteAuth};
use std::path::Path;
use std::time::Duration;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("test.toml"))
}

fn error_of(text: &str) -> String {
    parse(text).expect_err("invalid").to_string()
}

const BASE: &str =
    "[[remote_write]]\nname = \"prom\"\nurl = \"http://127.0.0.1:9090/api/v1/write\"\n";

#[test]
fn defaults_and_a_full_block_parse() {
    let config = parse(BASE).expect("valid");
    let endpoint = &config.remote_write[0];
    assert_eq!(endpoint.timeout, Duration::from_secs(30));
    assert_eq!(endpoint.queue.max_samples_per_send, 2000);
    assert_eq!(endpoint.auth(), Ok(None));
    let config = parse(&format!(
        "{BASE}timeout = \"5s\"\n[remote_write.headers]\nX-Scope-OrgID = \"team-a\"\n\
         [remote_write.queue]\nmax_samples_per_send = 500\nmin_backoff = \"100ms\"\nmax_backoff = \"10s\"\nbackfill = \"1h\"\n"
    ))
    .expect("valid");
    let endpoint = &config.remote_write[0];
    assert_eq!(endpoint.headers["X-Scope-OrgID"], "team-a");
    assert_eq!(endpoint.queue.max_backoff, Duration::from_secs(10));
    assert_eq!(endpoint.queue.backfill, Some(Duration::from_secs(3600)));
}

#[test]
fn secrets_come_from_the_environment_and_fail_closed() {
    // A variable name no other test sets.
    let var = "LLMWATCH_TEST_RW_TOKEN_UNSET_7f3a";
    let err = error_of(&format!("{BASE}bearer_token_env = \"{var}\"\n"));
    assert!(
        err.contains("remote_write[0].bearer_token_env") && err.contains(var),
        "{err}"
    );
    let var = "LLMWATCH_TEST_RW_PASSWORD_9c1e";
    std::env::set_var(var, "s3cret-value");
    let config = parse(&format!(
        "{BASE}basic_auth_username = \"u\"\nbasic_auth_password_env = \"{var}\"\n"
    ))
    .expect("valid");
    let auth = config.remote_write[0].auth().expect("resolved");
    assert_eq!(
        auth,
        Some(RemoteWriteAuth::Basic {
            username: "u".into(),
            password: "s3cret-value".into()
        })
    );
    // Neither the config nor the resolved auth prints the secret.
    assert!(!format!("{config:?} {auth:?}").contains("s3cret-value"));
}

#[test]
fn errors_name_the_field() {
    let err = error_of(&format!(
        "{BASE}[[remote_write]]\nname = \"prom\"\nurl = \"http://x/w\"\n"
    ));
    assert!(
        err.contains("remote_write[1].name") && err.contains("duplicate"),
        "{err}"
    );
    let err = error_of("[[remote_write]]\nname = \"p\"\nurl = \"http://user:hunter2@x/w\"\n");
    assert!(
        err.contains("remote_write[0].url") && !err.contains("hunter2"),
        "{err}"
    );
    let err = error_of("[[remote_write]]\nname = \"p\"\nurl = \"ftp://x/w\"\n");
    assert!(err.contains("remote_write[0].url"), "{err}");
    let err = error_of(&format!(
        "{BASE}[remote_write.headers]\nContent-Encoding = \"gzip\"\n"
    ));
    assert!(
        err.contains("remote_write[0].headers.Content-Encoding"),
        "{err}"
    );
    let err = error_of(&format!(
        "{BASE}[remote_write.queue]\nmax_samples_per_send = 0\n"
    ));
    assert!(
        err.contains("remote_write[0].queue.max_samples_per_send"),
        "{err}"
    );
    let err = error_of(&format!(
        "{BASE}[remote_write.queue]\nmin_backoff = \"2s\"\nmax_backoff = \"1s\"\n"
    ));
    assert!(err.contains("remote_write[0].queue.max_backoff"), "{err}");
    let err = error_of(&format!("{BASE}basic_auth_username = \"u\"\n"));
    assert!(
        err.contains("remote_write[0].basic_auth_password_env"),
        "{err}"
    );
    let err = error_of(&format!("{BASE}timeout = \"0s\"\n"));
    assert!(err.contains("remote_write[0].timeout"), "{err}");
}
