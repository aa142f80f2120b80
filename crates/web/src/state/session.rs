//! The daemon's secret and its browser sessions: who is logged in, with
//! which CSRF token. In memory: a restart logs browsers out, never in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap};
use rand::RngCore as _;
use subtle::ConstantTimeEq as _;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "llmwatch_session";
/// The cookie of the login form's double-submit CSRF token.
pub(crate) const LOGIN_COOKIE: &str = "llmwatch_login";
/// How long a browser session lasts.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at most; the oldest goes first.
const MAX_SESSIONS: usize = 1000;

/// The CSRF token that forms on this request's pages carry.
#[derive(Debug, Clone)]
pub struct CsrfToken(pub Arc<str>);

/// The daemon's access rules and its browser sessions (in memory: a restart
/// logs browsers out, never in).
pub struct Auth {
    pub(crate) token: Option<String>,
    /// The forms' CSRF token when no token (so no session) is configured.
    pub(crate) open_csrf: Arc<str>,
    sessions: Mutex<HashMap<String, Session>>,
}

struct Session {
    csrf: Arc<str>,
    expires: Instant,
}

/// 32 random bytes from the OS-seeded CSPRNG, hex-encoded.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Equal, without an early exit that would leak where they differ.
pub fn secrets_equal(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

impl Auth {
    pub fn new(token: Option<String>) -> Auth {
        Auth {
            token,
            open_csrf: Arc::from(random_token()),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    pub fn token_required(&self) -> bool {
        self.token.is_some()
    }

    pub(crate) fn bearer_ok(&self, headers: &HeaderMap) -> bool {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match (&self.token, presented) {
            (Some(expected), Some(token)) => secrets_equal(token, expected),
            _ => false,
        }
    }

    /// The CSRF token of the live session named by the request's cookie.
    pub(crate) fn session_csrf(&self, headers: &HeaderMap) -> Option<Arc<str>> {
        let id = cookie(headers, SESSION_COOKIE)?;
        let mut sessions = self.sessions.lock().ok()?;
        let now = Instant::now();
        sessions.retain(|_, s| s.expires > now);
        sessions
            .iter()
            .find(|(key, _)| secrets_equal(key, &id))
            .map(|(_, s)| s.csrf.clone())
    }

    pub(crate) fn start_session(&self) -> Option<String> {
        let id = random_token();
        let mut sessions = self.sessions.lock().ok()?;
        if sessions.len() >= MAX_SESSIONS {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(
            id.clone(),
            Session {
                csrf: Arc::from(random_token()),
                expires: Instant::now() + SESSION_TTL,
            },
        );
        Some(id)
    }

    pub(crate) fn end_session(&self, headers: &HeaderMap) {
        if let (Some(id), Ok(mut sessions)) =
            (cookie(headers, SESSION_COOKIE), self.sessions.lock())
        {
            sessions.retain(|key, _| !secrets_equal(key, &id));
        }
    }
}

/// A cookie's value from the request's `Cookie` headers.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}
