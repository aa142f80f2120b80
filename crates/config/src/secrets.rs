//! The daemon's own secret: where it comes from, and the refusal to start
//! without it when it is needed.

use crate::{Config, ConfigError};

impl Config {
    /// The bearer token, from the config or the environment variable it
    /// names. A named variable that is unset or empty is an error, never
    /// "no token": the daemon fails closed.
    pub fn bearer_token(&self) -> Result<Option<String>, ConfigError> {
        if let Some(token) = &self.server.token {
            return Ok(Some(token.clone()));
        }
        let Some(var) = &self.server.token_env else {
            return Ok(None);
        };
        match std::env::var(var) {
            Ok(token) if !token.trim().is_empty() => Ok(Some(token)),
            _ => Err(ConfigError::AtStart {
                field: "server.token_env".to_string(),
                message: format!(
                    "the environment variable {var} is unset or empty; refusing to start \
                     without the token it should hold"
                ),
            }),
        }
    }

    /// The token the daemon serves with, after checking that a listen
    /// address reachable from the network has one (or explicitly needs none).
    pub fn access_token(&self) -> Result<Option<String>, ConfigError> {
        let token = self.bearer_token()?;
        let exposed = !self.server.listen.ip().is_loopback();
        if token.is_none() && exposed && !self.server.allow_unauthenticated {
            return Err(ConfigError::AtStart {
                field: "server.listen".to_string(),
                message: format!(
                    "{} is reachable from the network and no token is set; set \
                     server.token_env (or allow_unauthenticated = true to serve without one)",
                    self.server.listen
                ),
            });
        }
        Ok(token)
    }
}

/// The environment variable `name`, if set and valid Unicode: the one read
/// of the environment outside secrets (e.g. Kubernetes' in-cluster
/// settings).
pub fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The value of the environment variable `var` holding a secret for
/// `field`: unset or empty is an error (fail closed), never "none".
pub fn secret_from_env(var: &str, field: String) -> Result<String, ConfigError> {
    match std::env::var(var) {
        Ok(value) if !value.trim().is_empty() => Ok(value),
        _ => Err(ConfigError::AtStart {
            field,
            message: format!(
                "the environment variable {var} is unset or empty; refusing to go on \
                 without the secret it should hold"
            ),
        }),
    }
}

impl crate::TargetConfig {
    /// The API key probes and sweeps of this target send, from the variable
    /// `api_key_env` names. A named variable that is unset or empty is an
    /// error naming the field: such a target is never probed without its
    /// key.
    pub fn api_key(&self) -> Result<Option<String>, ConfigError> {
        let Some(var) = &self.api_key_env else {
            return Ok(None);
        };
        secret_from_env(var, format!("targets[{}].api_key_env", self.name)).map(Some)
    }
}

impl Config {
    /// Every configured target's API key can be read: the daemon refuses to
    /// start otherwise, naming the target (discovered targets are checked
    /// when their canary or sweep starts).
    pub fn check_target_secrets(&self) -> Result<(), ConfigError> {
        self.targets.iter().try_for_each(|t| t.api_key().map(drop))
    }
}

impl crate::DiscoveryConfig {
    /// The bearer token for `http_url`, from the variable `http_token_env`
    /// names; unset or empty is an error (fail closed), never "no token".
    /// `index` is the section's place in the config, for the field name.
    pub fn http_token(&self, index: usize) -> Result<Option<String>, ConfigError> {
        let Some(var) = &self.http_token_env else {
            return Ok(None);
        };
        match std::env::var(var) {
            Ok(token) if !token.trim().is_empty() => Ok(Some(token)),
            _ => Err(ConfigError::AtStart {
                field: format!("discovery[{index}].http_token_env"),
                message: format!(
                    "the environment variable {var} is unset or empty; refusing to start \
                     without the token it should hold"
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::Config;

    fn with_key_env(var: &str) -> Config {
        let text = format!(
            "[[targets]]\nname = \"vllm-a\"\nurl = \"http://127.0.0.1:8000\"\napi_key_env = \"{var}\"\n"
        );
        Config::parse(&text, Path::new("t.toml")).expect("valid config")
    }

    #[test]
    fn a_named_api_key_variable_that_is_unset_fails_closed_naming_the_target() {
        let config = with_key_env("LLMWATCH_TEST_VARIABLE_THAT_IS_NEVER_SET");
        let err = config.check_target_secrets().unwrap_err().to_string();
        assert!(
            err.contains("targets[vllm-a].api_key_env")
                && err.contains("LLMWATCH_TEST_VARIABLE_THAT_IS_NEVER_SET"),
            "{err}"
        );
        assert!(config.targets[0].api_key().is_err());
        // A set variable gives its value; none named gives none.
        let set = with_key_env("PATH");
        assert_eq!(
            set.targets[0].api_key().expect("PATH is set"),
            std::env::var("PATH").ok()
        );
        let text = "[[targets]]\nname = \"a\"\nurl = \"http://127.0.0.1:8000\"\n";
        let none = Config::parse(text, Path::new("t.toml")).expect("valid");
        assert_eq!(none.targets[0].api_key().expect("no key named"), None);
        none.check_target_secrets().expect("nothing to check");
    }
}
