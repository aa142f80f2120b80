//! How a route is documented: its path, parameters, error statuses, and the
//! types of its answer and request body, whose JSON Schemas are derived
//! (`schemars`) so that a field is written once, in its type. The router
//! and the OpenAPI document ([`super::openapi`]) read the same list.

use axum::routing::MethodRouter;
use llmwatch_config::SweepLimits;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::Value;

use crate::AppState;

/// A route of the API: its documentation and its handler.
pub type Route = (RouteDoc, MethodRouter<AppState>);

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum In {
    Path,
    Query,
}

/// One documented parameter.
#[derive(Debug, Clone, Copy)]
pub struct ParamDoc {
    pub name: &'static str,
    pub location: In,
    pub required: bool,
    /// The parameter's JSON schema: a bare type (`string`, `integer`) or a
    /// whole schema object as JSON text (bounds, enums, patterns).
    pub schema: &'static str,
    pub description: &'static str,
}

/// A request body: an example for people and its schema within the
/// daemon's sweep limits.
#[derive(Debug, Clone, Copy)]
pub struct RequestBody {
    pub example: &'static str,
    pub schema: fn(&SweepLimits) -> Value,
}

/// One route's documentation.
#[derive(Debug, Clone)]
pub struct RouteDoc {
    pub method: &'static str,
    /// In axum and OpenAPI syntax alike: `/api/v1/targets/{name}`.
    pub path: &'static str,
    pub operation_id: &'static str,
    pub summary: &'static str,
    pub params: Vec<ParamDoc>,
    /// Statuses besides the success this route answers, with why.
    pub errors: &'static [(u16, &'static str)],
    /// 200 for a read, 202 for a start or a cancel.
    pub success: u16,
    pub request_body: Option<RequestBody>,
    /// The success answer's whole JSON Schema, derived from its type with
    /// every part inline (the API test checks answers against it).
    pub response: fn() -> Value,
    /// The same type as the OpenAPI document names it: a `$ref` into its
    /// component schemas, which the generator collects.
    pub response_ref: fn(&mut SchemaGenerator) -> Schema,
}

impl RouteDoc {
    /// A `GET` answering `200` with an `Answer`.
    pub fn get<Answer: JsonSchema>(
        path: &'static str,
        operation_id: &'static str,
        summary: &'static str,
    ) -> RouteDoc {
        RouteDoc {
            method: "get",
            path,
            operation_id,
            summary,
            params: Vec::new(),
            errors: &[BAD],
            success: 200,
            request_body: None,
            response: answer_schema::<Answer>,
            response_ref: SchemaGenerator::subschema_for::<Answer>,
        }
    }

    /// A `POST` that starts (or stops) something, answering `202` with an `Answer`.
    pub fn post<Answer: JsonSchema>(
        path: &'static str,
        operation_id: &'static str,
        summary: &'static str,
    ) -> RouteDoc {
        RouteDoc {
            method: "post",
            success: 202,
            ..RouteDoc::get::<Answer>(path, operation_id, summary)
        }
    }

    pub fn params(self, params: Vec<ParamDoc>) -> RouteDoc {
        RouteDoc { params, ..self }
    }

    pub fn errors(self, errors: &'static [(u16, &'static str)]) -> RouteDoc {
        RouteDoc { errors, ..self }
    }

    pub fn body(self, example: &'static str, schema: fn(&SweepLimits) -> Value) -> RouteDoc {
        RouteDoc {
            request_body: Some(RequestBody { example, schema }),
            ..self
        }
    }
}

/// Answers as they are serialized (an `Option` field is required and may
/// be `null`; one skipped when empty is not required), in JSON Schema
/// 2020-12, the dialect of OpenAPI 3.1, named types under
/// `#/components/schemas/`.
pub fn answer_settings() -> SchemaSettings {
    SchemaSettings::draft2020_12().for_serialize().with(|s| {
        s.meta_schema = None;
        s.definitions_path = "/components/schemas".into();
    })
}

/// `Answer`'s schema with every part inline.
pub fn answer_schema<Answer: JsonSchema>() -> Value {
    let mut generator = answer_settings()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    generator.root_schema_for::<Answer>().to_value()
}

/// A request body's schema, as it is deserialized, every part inline.
/// Left out: Rust's integer formats (`uint32`) and a `null` default,
/// which are no part of what a client may send.
pub fn request_schema<Body: JsonSchema>() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .for_deserialize()
        .with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = true;
        })
        .into_generator();
    let mut schema = generator.root_schema_for::<Body>().to_value();
    strip_rust_annotations(&mut schema);
    schema
}

fn strip_rust_annotations(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.get("default") == Some(&Value::Null) {
                map.remove("default");
            }
            let numeric = matches!(
                map.get("type").and_then(Value::as_str),
                Some("integer" | "number")
            );
            if numeric {
                map.remove("format");
            }
            map.values_mut().for_each(strip_rust_annotations);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_rust_annotations),
        _ => {}
    }
}

pub const fn query(
    name: &'static str,
    schema: &'static str,
    description: &'static str,
) -> ParamDoc {
    ParamDoc {
        name,
        location: In::Query,
        required: false,
        schema,
        description,
    }
}

pub const fn required_query(
    name: &'static str,
    schema: &'static str,
    description: &'static str,
) -> ParamDoc {
    ParamDoc {
        required: true,
        ..query(name, schema, description)
    }
}

pub const fn path(name: &'static str, schema: &'static str, description: &'static str) -> ParamDoc {
    ParamDoc {
        name,
        location: In::Path,
        required: true,
        schema,
        description,
    }
}

/// A target's name (as `check_name` allows).
pub const NAME: &str = r#"{"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}"#;
/// Filled by the OpenAPI document from the signal catalog.
pub const SIGNAL_LIST: &str = "signal-list";
/// Filled by the OpenAPI document from the metric catalog.
pub const METRIC_NAME: &str = "metric-name";
/// A sweep or step id.
pub const ID: &str = r#"{"type": "integer", "minimum": 1, "maximum": 9007199254740991}"#;
/// What `parse_time` takes: Unix seconds or an RFC 3339 date-time.
pub const TIME: &str = r#"{"anyOf": [{"type": "string", "pattern": "^[0-9]{1,10}(\\.[0-9]{1,3})?$"}, {"type": "string", "format": "date-time"}]}"#;
/// What `parse_step` takes: seconds or a humantime duration.
pub const DURATION: &str = r#"{"type": "string", "pattern": "^([1-9][0-9]{0,5}(\\.[0-9]{1,3})?|0\\.(00[1-9]|0[1-9][0-9]?|[1-9][0-9]{0,2})|[1-9][0-9]{0,4}(ms|s|m|h))$"}"#;

pub const FROM: ParamDoc = query(
    "from",
    TIME,
    "Start, RFC 3339 or Unix seconds (default: 1 h before `to`).",
);
pub const TO: ParamDoc = query("to", TIME, "End, RFC 3339 or Unix seconds (default: now).");
pub const LIMIT: ParamDoc = query(
    "limit",
    r#"{"type": "integer", "minimum": 1, "maximum": 1000}"#,
    "Page size, 1..1000 (default 100).",
);
pub const CURSOR: ParamDoc = query(
    "cursor",
    r#"{"type": "string", "pattern": "^[0-9]{1,15}$"}"#,
    "`next_cursor` of the previous page.",
);
pub const BAD: (u16, &str) = (
    400,
    "A parameter is missing or invalid; the message names it.",
);
pub const UNKNOWN_TARGET: (u16, &str) = (404, "No such target.");
/// Statuses of a read of one target.
pub const TARGET_ERRORS: &[(u16, &str)] = &[BAD, UNKNOWN_TARGET];
