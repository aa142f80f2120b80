//! A request's parameters as Prometheus reads them: the URL's query string
//! and, for POST, an `application/x-www-form-urlencoded` body (body values
//! first, as Go's `Request.Form`). Repeated names (`match[]`) keep every
//! value; a single-valued parameter takes the first.

use axum::http::{header, HeaderMap, Method};

use super::PromError;

pub struct Form {
    pairs: Vec<(String, String)>,
}

impl Form {
    pub fn parse(
        method: &Method,
        headers: &HeaderMap,
        query: Option<&str>,
        body: &[u8],
    ) -> Result<Form, PromError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        if *method == Method::POST && !body.is_empty() {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if !content_type
                .to_ascii_lowercase()
                .starts_with("application/x-www-form-urlencoded")
            {
                return Err(PromError::bad_data(format!(
                    "unsupported Content-Type {content_type:?}: send application/x-www-form-urlencoded"
                )));
            }
            pairs.extend(decode(body)?);
        }
        if let Some(query) = query {
            pairs.extend(decode(query.as_bytes())?);
        }
        Ok(Form { pairs })
    }

    /// The first value of `name`, if given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The first value of `name`; an error naming it when absent.
    pub fn required(&self, name: &str) -> Result<&str, PromError> {
        self.get(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| PromError::bad_data(format!("invalid parameter \"{name}\": missing")))
    }

    /// A time parameter, `default_ms` when absent.
    pub fn time_or(&self, name: &str, default_ms: i64) -> Result<i64, PromError> {
        match self.get(name).filter(|v| !v.is_empty()) {
            None => Ok(default_ms),
            Some(v) => llmwatch_promql::parse_time(v).map_err(|e| {
                PromError::bad_data(format!("invalid parameter \"{name}\": {}", strip(&e)))
            }),
        }
    }

    /// `limit` (0 or absent: none), as Prometheus 2.5x takes it.
    pub fn limit(&self) -> Result<Option<usize>, PromError> {
        match self.get("limit").filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => match v.parse::<usize>() {
                Ok(0) => Ok(None),
                Ok(n) => Ok(Some(n)),
                Err(_) => Err(PromError::bad_data(format!(
                    "invalid parameter \"limit\": cannot parse {v:?} to a non-negative integer"
                ))),
            },
        }
    }
}

/// A `QueryError`'s message without the engine's "invalid parameter: " prefix.
fn strip(err: &llmwatch_promql::QueryError) -> String {
    let text = err.to_string();
    text.strip_prefix("invalid parameter: ")
        .map(str::to_string)
        .unwrap_or(text)
}

fn decode(bytes: &[u8]) -> Result<Vec<(String, String)>, PromError> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(bytes)
        .map_err(|e| PromError::bad_data(format!("malformed form data: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_then_query_and_repeated_names() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            "application/x-www-form-urlencoded".parse().unwrap(),
        );
        let form = Form::parse(
            &Method::POST,
            &headers,
            Some("query=down&match%5B%5D=b"),
            b"query=up%7Bjob%3D%22x%22%7D&match[]=a",
        )
        .unwrap();
        assert_eq!(form.get("query"), Some("up{job=\"x\"}"));
        assert_eq!(form.all("match[]"), vec!["a", "b"]);
        assert!(form.required("time").is_err());
        assert_eq!(form.time_or("time", 7).unwrap(), 7);
    }

    #[test]
    fn a_json_body_is_refused_by_name() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        let err = Form::parse(&Method::POST, &headers, None, b"{}")
            .err()
            .unwrap();
        assert!(err.message.contains("application/json"), "{}", err.message);
    }
}
