//! Who may use the daemon's HTTP surface, and from where.
//!
//! - With a token configured, every route but `/healthz`, `/static` and the
//!   login page needs either `Authorization: Bearer <token>` (scripts, the
//!   API, Prometheus) or a session cookie that `/login` hands out in
//!   exchange for the token (browsers cannot send a header on navigation or
//!   `EventSource`). A page request without either is sent to `/login`.
//! - Whatever the mode, a state-changing request from another site is
//!   refused (`Sec-Fetch-Site`, `Origin`), and every form carries a CSRF
//!   token: the session's, or the server's own when no token is configured.
//!
//! Secrets are compared in constant time (`subtle`).

use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;

use crate::AppState;

use crate::state::session::{cookie, random_token, LOGIN_COOKIE, SESSION_TTL};
pub use crate::state::session::{secrets_equal, Auth, CsrfToken, SESSION_COOKIE};

/// Lets a request through with a valid bearer token or session cookie (or
/// when no token is configured); otherwise sends pages to `/login` and
/// answers everything else 401.
pub async fn require_login(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let auth = &state.auth;
    if !auth.token_required() {
        request
            .extensions_mut()
            .insert(CsrfToken(auth.open_csrf.clone()));
        return next.run(request).await;
    }
    if auth.bearer_ok(request.headers()) {
        // Scripts with the token need no CSRF token: no browser sends it by itself.
        return next.run(request).await;
    }
    if let Some(csrf) = auth.session_csrf(request.headers()) {
        request.extensions_mut().insert(CsrfToken(csrf));
        return next.run(request).await;
    }
    let path = request.uri().path();
    let is_page = request.method() == Method::GET
        && !path.starts_with("/api/")
        && !path.starts_with("/prometheus/")
        && path != "/metrics"
        && path != "/events";
    if is_page {
        let target = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let query = format!("next={}", crate::urls::query_path(&target));
        return Redirect::to(&format!("/login?{query}")).into_response();
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        axum::Json(serde_json::json!({"error": {"status": 401,
            "message": "missing or wrong bearer token (or log in at /login)"}})),
    )
        .into_response()
}

/// Refuses a state-changing request that a browser marks as coming from
/// another site: `Sec-Fetch-Site` other than same-origin/none, or an
/// `Origin` whose host is not this server's.
pub async fn reject_cross_site(request: Request, next: Next) -> Response {
    let safe = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if safe {
        return next.run(request).await;
    }
    match cross_site_reason(request.headers()) {
        None => next.run(request).await,
        Some(reason) => (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({"error": {"status": 403,
                "message": format!("cross-site request refused: {reason}")}})),
        )
            .into_response(),
    }
}

/// Why the request's own headers say it came from another site, if they do.
pub fn cross_site_reason(headers: &HeaderMap) -> Option<String> {
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("?");
        if !matches!(site, "same-origin" | "none") {
            return Some(format!("Sec-Fetch-Site is {site:?}"));
        }
    }
    let origin = headers.get(header::ORIGIN)?.to_str().unwrap_or("null");
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match origin_host {
        Some(origin_host) if !host.is_empty() && origin_host.eq_ignore_ascii_case(host) => None,
        _ => Some(format!("Origin {origin:?} is not this server ({host:?})")),
    }
}

/// The token a page's forms carry (empty for a bearer-token request, whose
/// forms nobody submits).
pub fn form_token(csrf: Option<Extension<CsrfToken>>) -> String {
    csrf.map(|Extension(CsrfToken(token))| token.to_string())
        .unwrap_or_default()
}

/// Whether a form's CSRF field matches the request's token.
pub fn csrf_ok(expected: Option<&Extension<CsrfToken>>, presented: &str) -> bool {
    match expected {
        Some(Extension(CsrfToken(token))) => secrets_equal(presented, token),
        // Authenticated by bearer token: no browser attached it on its own.
        None => true,
    }
}

/// The login page.
#[derive(askama::Template, askama_web::WebTemplate)]
#[template(path = "login.html")]
pub struct LoginPage {
    pub next: String,
    pub csrf: String,
    pub message: Option<String>,
}

#[derive(Deserialize)]
pub struct NextQuery {
    #[serde(default)]
    next: Option<String>,
}

/// Only a path on this server: never another host (`//evil`, `https://…`).
fn local_path(next: Option<&str>) -> String {
    match next {
        Some(p) if p.starts_with('/') && !p.starts_with("//") && !p.contains('\\') => p.to_string(),
        _ => "/".to_string(),
    }
}

fn login_form(next: String, message: Option<String>, status: StatusCode) -> Response {
    let csrf = random_token();
    let cookie = format!("{LOGIN_COOKIE}={csrf}; HttpOnly; SameSite=Strict; Path=/login");
    let mut response = (
        status,
        LoginPage {
            next,
            csrf,
            message,
        },
    )
        .into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

pub async fn login_page(State(state): State<AppState>, Query(query): Query<NextQuery>) -> Response {
    let next = local_path(query.next.as_deref());
    if !state.auth.token_required() {
        return Redirect::to(&next).into_response();
    }
    login_form(next, None, StatusCode::OK)
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    csrf: String,
    #[serde(default)]
    next: Option<String>,
}

pub async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let next = local_path(form.next.as_deref());
    let auth = &state.auth;
    let Some(expected) = &auth.token else {
        return Redirect::to(&next).into_response();
    };
    let form_cookie = cookie(&headers, LOGIN_COOKIE).unwrap_or_default();
    if form_cookie.is_empty() || !secrets_equal(&form.csrf, &form_cookie) {
        let message = "the login form expired; try again".to_string();
        return login_form(next, Some(message), StatusCode::FORBIDDEN);
    }
    if !secrets_equal(form.token.trim(), expected) {
        tracing::warn!("login with a wrong token refused");
        let message = "wrong token".to_string();
        return login_form(next, Some(message), StatusCode::UNAUTHORIZED);
    }
    let Some(session) = auth.start_session() else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "session store unavailable\n",
        )
            .into_response();
    };
    let mut response = Redirect::to(&next).into_response();
    let max_age = SESSION_TTL.as_secs();
    for cookie in [
        format!("{SESSION_COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}"),
        format!("{LOGIN_COOKIE}=; HttpOnly; SameSite=Strict; Path=/login; Max-Age=0"),
    ] {
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

#[derive(Deserialize)]
pub struct LogoutForm {
    csrf: String,
}

pub async fn logout(
    State(state): State<AppState>,
    headers: HeaderMap,
    csrf: Option<Extension<CsrfToken>>,
    Form(form): Form<LogoutForm>,
) -> Response {
    if !csrf_ok(csrf.as_ref(), &form.csrf) {
        return (StatusCode::FORBIDDEN, "wrong or missing CSRF token\n").into_response();
    }
    state.auth.end_session(&headers);
    let mut response = Redirect::to("/login").into_response();
    let clear = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&clear) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

#[derive(askama::Template, askama_web::WebTemplate)]
#[template(path = "logout.html")]
struct LogoutPage {
    csrf: String,
}

pub async fn logout_page(
    State(state): State<AppState>,
    csrf: Option<Extension<CsrfToken>>,
) -> Response {
    match csrf {
        Some(Extension(CsrfToken(csrf))) if state.auth.token_required() => LogoutPage {
            csrf: csrf.to_string(),
        }
        .into_response(),
        _ => Redirect::to("/").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).expect("header value"));
        }
        map
    }

    #[test]
    fn same_origin_passes_and_other_sites_do_not() {
        let ok = headers(&[
            ("host", "127.0.0.1:9477"),
            ("origin", "http://127.0.0.1:9477"),
        ]);
        assert_eq!(cross_site_reason(&ok), None);
        assert_eq!(
            cross_site_reason(&headers(&[("host", "h:1")])),
            None,
            "no Origin: curl"
        );
        let evil = headers(&[
            ("host", "127.0.0.1:9477"),
            ("origin", "https://evil.example"),
        ]);
        assert!(cross_site_reason(&evil).unwrap().contains("evil.example"));
        let null = headers(&[("host", "127.0.0.1:9477"), ("origin", "null")]);
        assert!(cross_site_reason(&null).is_some());
        let fetch = headers(&[("host", "h:1"), ("sec-fetch-site", "cross-site")]);
        assert!(cross_site_reason(&fetch).unwrap().contains("cross-site"));
        let same = headers(&[("host", "h:1"), ("sec-fetch-site", "same-origin")]);
        assert_eq!(cross_site_reason(&same), None);
    }

    #[test]
    fn next_stays_on_this_server() {
        assert_eq!(local_path(Some("/targets/a?x=1")), "/targets/a?x=1");
        assert_eq!(local_path(Some("//evil.example/")), "/");
        assert_eq!(local_path(Some("https://evil.example/")), "/");
        assert_eq!(local_path(Some("/\\evil")), "/");
        assert_eq!(local_path(None), "/");
    }

    #[test]
    fn cookies_are_found_by_name() {
        let map = headers(&[("cookie", "a=1; llmwatch_session=abc; b=2")]);
        assert_eq!(cookie(&map, SESSION_COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie(&map, "c"), None);
    }

    #[test]
    fn sessions_start_and_end() {
        let auth = Auth::new(Some("t".into()));
        let id = auth.start_session().unwrap();
        let map = headers(&[("cookie", &format!("{SESSION_COOKIE}={id}"))]);
        assert!(auth.session_csrf(&map).is_some());
        auth.end_session(&map);
        assert!(auth.session_csrf(&map).is_none());
        let forged = headers(&[("cookie", "llmwatch_session=0000")]);
        assert!(auth.session_csrf(&forged).is_none());
    }

    #[test]
    fn secrets_compare() {
        assert!(secrets_equal("secret", "secret"));
        assert!(!secrets_equal("secret", "secreT"));
        assert!(!secrets_equal("secret", "secret2"));
    }
}
