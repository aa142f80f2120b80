//! The one URL sanitiser: credentials in URLs (userinfo, secret-looking
//! query parameters) never reach logs, pages, API answers, JSON output or
//! the database. Every place that shows or stores a URL, or an error message
//! that may quote one (HTTP client errors embed the URL), goes through here.

/// What replaces a secret.
pub const REDACTED: &str = "<redacted>";

/// Query parameter names whose values are secrets (compared without case).
const SECRET_PARAMS: &[&str] = &[
    "access_token",
    "api_key",
    "apikey",
    "api-key",
    "auth",
    "authorization",
    "client_secret",
    "code",
    "key",
    "pass",
    "passwd",
    "password",
    "pwd",
    "secret",
    "session",
    "sig",
    "signature",
    "token",
    "x-amz-credential",
    "x-amz-security-token",
    "x-amz-signature",
];

fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PARAMS.contains(&name.as_str())
        || name.ends_with("_token")
        || name.ends_with("_key")
        || name.ends_with("password")
        || name.ends_with("secret")
}

/// `url` with its userinfo and the values of secret-looking query
/// parameters replaced by [`REDACTED`]. Text that is not a URL comes back
/// unchanged.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let (scheme, rest) = url.split_at(scheme_end + 3);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(REDACTED);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let (before_fragment, fragment) = match tail.find('#') {
        Some(i) => tail.split_at(i),
        None => (tail, ""),
    };
    match before_fragment.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            out.push_str(&redact_query(query));
        }
        None => out.push_str(before_fragment),
    }
    out.push_str(fragment);
    out
}

/// Only the scheme, host and port of `url`: for URLs whose path is itself
/// the secret (Slack and other webhook URLs).
pub fn origin_only(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return "(a URL)".to_string();
    };
    let (scheme, rest) = url.split_at(scheme_end + 3);
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host = authority.rsplit('@').next().unwrap_or(authority);
    if host.is_empty() {
        return "(a URL)".to_string();
    }
    format!("{scheme}{host}/…")
}

fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if is_secret_param(name) => format!("{name}={REDACTED}"),
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// `text` with every URL in it (`scheme://…` up to whitespace or a closing
/// bracket or quote) passed through [`redact_url`]: for error messages
/// that quote the URL they failed on.
pub fn redact_urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(found) = rest.find("://") {
        // The scheme: the letters, digits, `+`, `-`, `.` right before `://`.
        let scheme_start = rest[..found]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let url_end = rest[found..]
            .find(|c: char| c.is_whitespace() || matches!(c, ')' | ']' | '>' | '"' | '\'' | ','))
            .map_or(rest.len(), |i| found + i);
        out.push_str(&rest[..scheme_start]);
        out.push_str(&redact_url(&rest[scheme_start..url_end]));
        rest = &rest[url_end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_goes() {
        assert_eq!(
            redact_url("http://user:hunter2@10.0.0.1:8000/metrics"),
            "http://<redacted>@10.0.0.1:8000/metrics"
        );
        assert_eq!(redact_url("https://tok@host"), "https://<redacted>@host");
    }

    #[test]
    fn secret_query_values_go_and_others_stay() {
        assert_eq!(
            redact_url("http://h/metrics?format=prom&api_key=abc&X-Amz-Signature=s#frag"),
            "http://h/metrics?format=prom&api_key=<redacted>&X-Amz-Signature=<redacted>#frag"
        );
        assert_eq!(
            redact_url("http://h/p?access_token=x&name=token"),
            "http://h/p?access_token=<redacted>&name=token"
        );
    }

    #[test]
    fn plain_urls_and_text_are_unchanged() {
        for text in ["http://127.0.0.1:8000/v1", "not a url", "", "nvml://local"] {
            assert_eq!(redact_url(text), text);
            assert_eq!(redact_urls_in(text), text);
        }
    }

    #[test]
    fn urls_inside_messages_are_redacted() {
        let message =
            "error sending request for url (http://u:p@h:1/metrics?token=t): connection refused";
        assert_eq!(
            redact_urls_in(message),
            "error sending request for url (http://<redacted>@h:1/metrics?token=<redacted>): connection refused"
        );
        assert_eq!(
            redact_urls_in("a https://x:y@a/ and http://b/?key=k"),
            "a https://<redacted>@a/ and http://b/?key=<redacted>"
        );
    }

    #[test]
    fn webhook_urls_keep_only_their_origin() {
        assert_eq!(
            origin_only("https://hooks.slack.com/services/T0/B0/SECRET"),
            "https://hooks.slack.com/…"
        );
        assert_eq!(
            origin_only("http://u:p@127.0.0.1:9093"),
            "http://127.0.0.1:9093/…"
        );
        assert_eq!(origin_only("garbage"), "(a URL)");
    }

    #[test]
    fn an_at_sign_in_the_path_is_not_userinfo() {
        assert_eq!(redact_url("http://host/users/a@b"), "http://host/users/a@b");
    }
}
