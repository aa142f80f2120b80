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
