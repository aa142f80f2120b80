//! The Prometheus API's part of the daemon's OpenAPI document: each route of
//! [`super::routes`] with its parameters (query string for GET, form body
//! for POST) and the shapes of its answers and errors.
//!
//! Parameter schemas say what the parameter is, not everything Prometheus
//! checks: PromQL's grammar, the range checks and the per-query limits are
//! not JSON Schema, so a well-typed request may still get `bad_data` (400)
//! or `execution` (422), as from Prometheus itself.

use serde_json::{json, Map, Value};

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamIn {
    Path,
    /// The query string of a GET, the form body of a POST.
    Form,
}

/// One documented parameter.
#[derive(Debug, Clone, Copy)]
pub struct PromParam {
    pub name: &'static str,
    pub location: ParamIn,
    pub required: bool,
    /// Given any number of times (`match[]`).
    pub repeated: bool,
    /// The JSON schema of one value, as JSON text.
    pub schema: &'static str,
    pub description: &'static str,
}

/// One route's documentation.
#[derive(Debug, Clone, Copy)]
pub struct PromRoute {
    /// In axum and OpenAPI syntax alike.
    pub path: &'static str,
    /// The GET operation's id; the POST one adds `Post`.
    pub operation_id: &'static str,
    pub summary: &'static str,
    /// Also served as POST with an `application/x-www-form-urlencoded` body.
    pub post: bool,
    pub params: &'static [PromParam],
    /// The JSON schema of the success answer's `data`, as JSON text.
    pub data: &'static str,
}

const fn form(name: &'static str, schema: &'static str, description: &'static str) -> PromParam {
    PromParam {
        name,
        location: ParamIn::Form,
        required: false,
        repeated: false,
        schema,
        description,
    }
}

const fn required(
    name: &'static str,
    schema: &'static str,
    description: &'static str,
) -> PromParam {
    PromParam {
        required: true,
        ..form(name, schema, description)
    }
}

/// The routes' documentation, one constant per route.
pub mod docs {
    use super::{form, required, ParamIn, PromParam, PromRoute};

    /// What `parse_time` takes: Unix seconds (a float) or RFC 3339.
    const TIME: &str = r#"{"type": "string", "examples": ["1767225600", "1767225600.25", "2026-01-01T00:00:00Z"]}"#;
    /// What `parse_step` takes: seconds (a float) or a Prometheus duration.
    const DURATION: &str = r#"{"type": "string", "examples": ["15", "15s", "1m30s"]}"#;
    const PROMQL: &str = r#"{"type": "string", "minLength": 1, "examples": ["up", "sum by (job) (rate(vllm:generation_tokens_total[5m]))"]}"#;
    const SELECTOR: &str = r#"{"type": "string", "minLength": 1, "examples": ["up", "{__name__=~\"vllm:.*\", job=\"engine\"}"]}"#;
    // Digits, or empty: Prometheus reads an empty `limit=` as absent.
    const LIMIT_SCHEMA: &str = r#"{"type": "string", "pattern": "^[0-9]*$"}"#;

    const QUERY_TEXT: PromParam = required("query", PROMQL, "The PromQL expression.");
    const TIMEOUT: PromParam = form(
        "timeout",
        DURATION,
        "Evaluation timeout, at most (and by default) 2 min.",
    );
    const START: PromParam = form(
        "start",
        TIME,
        "Start of the window (default: a day before `end`).",
    );
    const END: PromParam = form("end", TIME, "End of the window (default: now).");
    const LIMIT: PromParam = form(
        "limit",
        LIMIT_SCHEMA,
        "At most this many entries (0: all); a cut answer carries a warning.",
    );
    const MATCH: PromParam = PromParam {
        repeated: true,
        ..form(
            "match[]",
            SELECTOR,
            "Series selectors; a series is listed when it matches any.",
        )
    };

    pub const QUERY: PromRoute = PromRoute {
        path: "/prometheus/api/v1/query",
        operation_id: "promQuery",
        summary: "Prometheus: evaluate a PromQL expression at one instant.",
        post: true,
        params: &[
            QUERY_TEXT,
            form("time", TIME, "Evaluation time (default: now)."),
            TIMEOUT,
        ],
        data: r##"{"$ref": "#/components/schemas/PromQueryData"}"##,
    };

    pub const QUERY_RANGE: PromRoute = PromRoute {
        path: "/prometheus/api/v1/query_range",
        operation_id: "promQueryRange",
        summary: "Prometheus: evaluate a PromQL expression at every step of a range.",
        post: true,
        params: &[
            QUERY_TEXT,
            required("start", TIME, "First evaluation time."),
            required("end", TIME, "Last evaluation time, not before `start`."),
            required(
                "step",
                DURATION,
                "Step between evaluations; at most 11 000 steps.",
            ),
            TIMEOUT,
        ],
        data: r##"{"$ref": "#/components/schemas/PromQueryData"}"##,
    };

    pub const SERIES: PromRoute = PromRoute {
        path: "/prometheus/api/v1/series",
        operation_id: "promSeries",
        summary: "Prometheus: the label sets of the series matching selectors in a window.",
        post: true,
        params: &[
            PromParam {
                required: true,
                ..MATCH
            },
            START,
            END,
            LIMIT,
        ],
        data: r#"{"type": "array", "items": {"type": "object", "additionalProperties": {"type": "string"}}}"#,
    };

    pub const LABELS: PromRoute = PromRoute {
        path: "/prometheus/api/v1/labels",
        operation_id: "promLabels",
        summary: "Prometheus: label names of the series in a window.",
        post: true,
        params: &[MATCH, START, END, LIMIT],
        data: r#"{"type": "array", "items": {"type": "string"}}"#,
    };

    pub const LABEL_VALUES: PromRoute = PromRoute {
        path: "/prometheus/api/v1/label/{name}/values",
        operation_id: "promLabelValues",
        summary: "Prometheus: the values a label takes in the series of a window.",
        post: false,
        params: &[
            PromParam {
                location: ParamIn::Path,
                ..required(
                    "name",
                    r#"{"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}"#,
                    "Label name (`__name__` for metric names).",
                )
            },
            MATCH,
            START,
            END,
            LIMIT,
        ],
        data: r#"{"type": "array", "items": {"type": "string"}}"#,
    };

    pub const METADATA: PromRoute = PromRoute {
        path: "/prometheus/api/v1/metadata",
        operation_id: "promMetadata",
        summary: "Prometheus: metric families with their type (from sample names) and help.",
        post: false,
        params: &[
            form(
                "metric",
                r#"{"type": "string"}"#,
                "Only this family (default: all).",
            ),
            LIMIT,
        ],
        data: r#"{"type": "object", "additionalProperties": {"type": "array", "items": {
            "type": "object", "required": ["type", "help", "unit"],
            "properties": {"type": {"type": "string"}, "help": {"type": "string"}, "unit": {"type": "string"}}}}}"#,
    };

    pub const BUILDINFO: PromRoute = PromRoute {
        path: "/prometheus/api/v1/status/buildinfo",
        operation_id: "promBuildinfo",
        summary: "Prometheus: the Prometheus version whose API and semantics this answers as.",
        post: false,
        params: &[],
        data: r#"{"type": "object", "required": ["version", "revision"], "properties": {
            "version": {"type": "string"}, "revision": {"type": "string"}, "branch": {"type": "string"},
            "buildUser": {"type": "string"}, "buildDate": {"type": "string"}, "goVersion": {"type": "string"}}}"#,
    };

    pub const QUERY_EXEMPLARS: PromRoute = PromRoute {
        path: "/prometheus/api/v1/query_exemplars",
        operation_id: "promQueryExemplars",
        summary: "Prometheus: exemplars (llmwatch keeps none: always empty; Grafana asks).",
        post: true,
        params: &[],
        data: r#"{"type": "array", "maxItems": 0}"#,
    };

    pub const RULES: PromRoute = PromRoute {
        path: "/prometheus/api/v1/rules",
        operation_id: "promRules",
        summary: "Prometheus: recording and alerting rule groups (none; Grafana asks).",
        post: false,
        params: &[],
        data: r#"{"type": "object", "required": ["groups"], "properties": {"groups": {"type": "array", "maxItems": 0}}}"#,
    };
}

/// Statuses of Prometheus' error answers, with why.
const ERRORS: &[(u16, &str)] = &[
    (
        400,
        "bad_data: a parameter is missing or invalid, or the expression does not parse.",
    ),
    (
        422,
        "execution: the expression failed to evaluate, or passed a per-query limit.",
    ),
    (503, "timeout: the query ran past its timeout."),
];

/// A schema given as JSON text; the texts are constants of this module,
/// and a test parses them all.
fn schema(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| json!({}))
}

fn one_value(p: &PromParam) -> Value {
    if p.repeated {
        json!({ "type": "array", "items": schema(p.schema) })
    } else {
        schema(p.schema)
    }
}

/// A form field's schema: in a form body one `match[]=…` is the same bytes
/// as a list of one, so a repeated field is one value or several.
fn form_value(p: &PromParam) -> Value {
    if p.repeated {
        json!({ "anyOf": [schema(p.schema), one_value(p)] })
    } else {
        schema(p.schema)
    }
}

/// The operation for one method of a route.
fn operation(route: &PromRoute, post: bool) -> Value {
    let mut responses = Map::new();
    responses.insert(
        "200".to_string(),
        json!({
            "description": "OK.",
            "content": { "application/json": { "schema": {
                "type": "object",
                "required": ["status", "data"],
                "properties": {
                    "status": { "const": "success" },
                    "data": schema(route.data),
                    "warnings": { "type": "array", "items": { "type": "string" } },
                },
            } } },
        }),
    );
    for (status, why) in ERRORS {
        responses.insert(
            status.to_string(),
            json!({
                "description": why,
                "content": { "application/json": { "schema": { "$ref": "#/components/schemas/PromError" } } },
            }),
        );
    }
    responses.insert(
        "401".to_string(),
        json!({ "description": "A bearer token is configured and the request lacks it." }),
    );
    let in_path = |p: &&PromParam| p.location == ParamIn::Path;
    let as_parameter = |p: &PromParam, location: &str| {
        json!({
            "name": p.name,
            "in": location,
            "required": p.required,
            "description": p.description,
            "schema": one_value(p),
            // `match[]=a&match[]=b`, as Prometheus takes them.
            "style": "form",
            "explode": true,
        })
    };
    let mut parameters: Vec<Value> = route
        .params
        .iter()
        .filter(in_path)
        .map(|p| as_parameter(p, "path"))
        .collect();
    let mut op = json!({
        "operationId": if post { format!("{}Post", route.operation_id) } else { route.operation_id.to_string() },
        "summary": route.summary,
        "tags": ["prometheus"],
        "responses": responses,
    });
    let fields = route.params.iter().filter(|p| !in_path(p));
    if post {
        let properties: Map<String, Value> = fields
            .clone()
            .map(|p| (p.name.to_string(), form_value(p)))
            .collect();
        let required: Vec<&str> = fields
            .clone()
            .filter(|p| p.required)
            .map(|p| p.name)
            .collect();
        let encoding: Map<String, Value> = fields
            .filter(|p| p.repeated)
            .map(|p| {
                (
                    p.name.to_string(),
                    json!({ "style": "form", "explode": true }),
                )
            })
            .collect();
        op["requestBody"] = json!({
            "required": !required.is_empty(),
            "description": "The parameters as a form, as Prometheus takes them (for long expressions).",
            "content": { "application/x-www-form-urlencoded": {
                "schema": { "type": "object", "required": required, "properties": properties },
                "encoding": encoding,
            } },
        });
    } else {
        parameters.extend(fields.map(|p| as_parameter(p, "query")));
    }
    op["parameters"] = Value::Array(parameters);
    op
}

/// The Prometheus routes as OpenAPI path items, by path.
pub fn paths(routes: &[PromRoute]) -> Map<String, Value> {
    let mut out = Map::new();
    for route in routes {
        let mut methods = Map::new();
        methods.insert("get".to_string(), operation(route, false));
        if route.post {
            methods.insert("post".to_string(), operation(route, true));
        }
        out.insert(route.path.to_string(), Value::Object(methods));
    }
    out
}

/// The schemas the Prometheus paths refer to, for `components.schemas`.
pub fn component_schemas() -> Map<String, Value> {
    let point = json!({
        "type": "array", "prefixItems": [{ "type": "number" }, { "type": "string" }],
        "minItems": 2, "maxItems": 2,
        "description": "[Unix seconds, value as text (Prometheus' float format: NaN, +Inf, -Inf)]",
    });
    let metric = json!({ "type": "object", "additionalProperties": { "type": "string" } });
    let sample = json!({
        "type": "object", "required": ["metric", "value"],
        "properties": { "metric": metric, "value": point },
    });
    let series = json!({
        "type": "object", "required": ["metric", "values"],
        "properties": { "metric": metric, "values": { "type": "array", "items": point } },
    });
    let query_data = json!({
        "type": "object",
        "required": ["resultType", "result"],
        "properties": {
            "resultType": { "enum": ["vector", "matrix", "scalar", "string"] },
            // An empty list is both an empty vector and an empty matrix.
            "result": { "anyOf": [
                { "type": "array", "items": sample },
                { "type": "array", "items": series },
                point,
            ] },
        },
    });
    let error = json!({
        "type": "object",
        "required": ["status", "errorType", "error"],
        "properties": {
            "status": { "const": "error" },
            "errorType": { "type": "string", "examples": ["bad_data", "execution", "timeout", "internal"] },
            "error": { "type": "string" },
        },
    });
    Map::from_iter([
        ("PromQueryData".to_string(), query_data),
        ("PromError".to_string(), error),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_text_parses() {
        let routes = crate::prometheus::routes::<llmwatch_store::Store>();
        assert_eq!(routes.len(), 9);
        for (route, _) in routes {
            serde_json::from_str::<Value>(route.data)
                .unwrap_or_else(|e| panic!("{}: data schema: {e}", route.path));
            for p in route.params {
                serde_json::from_str::<Value>(p.schema)
                    .unwrap_or_else(|e| panic!("{} {}: {e}", route.path, p.name));
            }
        }
    }

    #[test]
    fn post_takes_the_parameters_as_a_form_body() {
        let paths = paths(&[docs::QUERY_RANGE, docs::LABEL_VALUES]);
        let post = &paths["/prometheus/api/v1/query_range"]["post"];
        assert_eq!(post["operationId"], "promQueryRangePost");
        assert_eq!(post["parameters"], json!([]));
        let body = &post["requestBody"]["content"]["application/x-www-form-urlencoded"]["schema"];
        assert_eq!(body["required"], json!(["query", "start", "end", "step"]));
        let get = &paths["/prometheus/api/v1/query_range"]["get"];
        assert_eq!(get["parameters"].as_array().map(Vec::len), Some(5));
        let values = &paths["/prometheus/api/v1/label/{name}/values"];
        assert!(values.get("post").is_none(), "label values is GET only");
        assert_eq!(values["get"]["parameters"][0]["in"], "path");
        assert_eq!(values["get"]["parameters"][1]["schema"]["type"], "array");
    }
}
