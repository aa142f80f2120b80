//! How single fields are read and checked: durations, names, label names,
//! HTTP URLs, request shapes. A leaf: the schema, the per-section checks and
//! the `[[remote_write]]` and discovery sections all use it; it imports
//! none of them.

use std::time::Duration;

use llmwatch_core::redact::redact_url;
use llmwatch_probe::conversation::MultiTurn;
use llmwatch_probe::Shape;
use serde::{Deserialize, Deserializer};

pub(crate) fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

pub(crate) fn optional_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    let text = Option::<String>::deserialize(deserializer)?;
    text.map(|t| parse_duration(&t).map_err(serde::de::Error::custom))
        .transpose()
}

/// `"5s"`, `"250ms"`, `"2m"`, `"1h 30m"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|err| {
        format!("invalid duration {text:?}: {err} (examples: \"5s\", \"250ms\", \"2m\")")
    })
}

/// A target or source name: 1-64 letters, digits, `-`, `_` or `.`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid name: use 1-64 letters, digits, '-', '_' or '.'"
        ))
    }
}

/// An `http://` or `https://` URL. The message quotes the URL through
/// core's sanitiser ([`redact_url`]): no userinfo, no secret query value.
pub(crate) fn check_http_url(url: &str) -> Result<(), String> {
    check_http_url_shown(url, &redact_url(url))
}

/// As [`check_http_url`], the message naming the URL as `shown` (for a
/// webhook, whose path is the secret, its [`origin_only`]).
///
/// [`origin_only`]: llmwatch_core::redact::origin_only
pub(crate) fn check_http_url_shown(url: &str, shown: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|err| format!("invalid URL {shown:?}: {err}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "URL {shown:?} must start with http:// or https://, found scheme {:?}",
            parsed.scheme()
        ));
    }
    Ok(())
}

/// Prometheus label names: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub(crate) fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid label name: use letters, digits and '_', not starting with a digit"
        ))
    }
}

pub(crate) fn check_positive(duration: Duration) -> Result<(), String> {
    if duration.is_zero() {
        Err("must be longer than zero".to_string())
    } else {
        Ok(())
    }
}

/// A request shape, `INPUTxOUTPUT` tokens, parsed once here (the probe's
/// own parser): the config hands out a [`Shape`].
pub(crate) fn shape<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Shape, D::Error> {
    let text = String::deserialize(deserializer)?;
    Shape::parse(&text).map_err(serde::de::Error::custom)
}

/// `"multi-turn:TURNS[,think=DUR]"` (a canary's `workload`).
pub(crate) fn conversation<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<MultiTurn>, D::Error> {
    let text = String::deserialize(deserializer)?;
    MultiTurn::parse(&text).map(Some).map_err(|err| {
        serde::de::Error::custom(format!(
            "{} in {:?} (expected multi-turn:TURNS[,think=DUR], e.g. \"multi-turn:5,think=1s\")",
            err.why, err.text
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_messages_quote_the_url_through_the_one_sanitiser() {
        let err = check_http_url("ftp://user:hunter2@host/p?token=t").unwrap_err();
        assert!(
            err.contains("ftp://<redacted>@host/p?token=<redacted>"),
            "{err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
        let webhook = "ftp://hooks.example/T000/SECRET";
        let shown = llmwatch_core::redact::origin_only(webhook);
        let err = check_http_url_shown(webhook, &shown).unwrap_err();
        assert!(
            err.contains("ftp://hooks.example/…") && !err.contains("SECRET"),
            "{err}"
        );
        assert!(check_http_url("https://host:8000/v1").is_ok());
    }
}
