//! The OpenAPI 3.1 document, generated from [`super::routes`]: every route
//! the router serves is described, because both come from the same list.
//! Its component schemas are derived from the answer types (`schemars`,
//! JSON Schema 2020-12, OpenAPI 3.1's dialect); operations `$ref` them.

use axum::extract::State;
use axum::routing::get;
use axum::Json;
use llmwatch_core::catalog::CatalogMetric;
use llmwatch_core::signals::Signal;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use super::error::ErrorAnswer;
use super::route_doc::{answer_settings, In, Route, RouteDoc, METRIC_NAME, SIGNAL_LIST};
use crate::AppState;

/// A parameter's schema: a bare type name, or a schema object as JSON text.
fn param_schema(schema: &str) -> Value {
    if schema == SIGNAL_LIST {
        let names: Vec<&str> = Signal::all().iter().map(Signal::as_str).collect();
        return json!({ "type": "array", "items": { "type": "string", "enum": names }, "minItems": 1 });
    }
    if schema == METRIC_NAME {
        let names: Vec<&str> = CatalogMetric::all()
            .iter()
            .map(CatalogMetric::name)
            .collect();
        return json!({ "type": "string", "enum": names });
    }
    if schema.starts_with('{') {
        // The texts are constants of this crate; the API test parses them all.
        serde_json::from_str(schema).unwrap_or_else(|_| json!({ "type": "string" }))
    } else {
        json!({ "type": schema })
    }
}

/// One route's operation object: parameters, answers, request body.
fn operation(
    doc: &RouteDoc,
    limits: &llmwatch_config::SweepLimits,
    generator: &mut SchemaGenerator,
) -> Value {
    let parameters: Vec<Value> = doc
        .params
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "in": match p.location { In::Path => "path", In::Query => "query" },
                "required": p.required,
                "description": p.description,
                "schema": param_schema(p.schema),
                // A list parameter is one comma-separated value.
                "style": "form",
                "explode": false,
            })
        })
        .collect();
    let mut responses = Map::new();
    responses.insert(
        doc.success.to_string(),
        json!({
            "description": if doc.success == 202 { "Accepted." } else { "OK." },
            "content": { "application/json": { "schema": (doc.response_ref)(generator) } },
        }),
    );
    for (status, why) in doc.errors {
        responses.insert(
            status.to_string(),
            json!({
                "description": why,
                "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } },
            }),
        );
    }
    responses.insert(
        "401".to_string(),
        json!({ "description": "A bearer token is configured and the request lacks it." }),
    );
    let mut operation = json!({
        "operationId": doc.operation_id,
        "summary": doc.summary,
        "parameters": parameters,
        "responses": responses,
    });
    if let Some(body) = doc.request_body {
        operation["requestBody"] = json!({
            "required": true,
            "description": body.example,
            "content": { "application/json": { "schema": (body.schema)(limits) } },
        });
    }
    operation
}

/// The document served at `/api/v1/openapi.json`.
pub fn document(limits: &llmwatch_config::SweepLimits) -> Value {
    let mut generator = answer_settings().into_generator();
    let mut paths: Map<String, Value> = Map::new();
    for (doc, _) in super::routes() {
        let operation = operation(&doc, limits, &mut generator);
        let entry = paths
            .entry(doc.path.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(methods) = entry {
            methods.insert(doc.method.to_string(), operation);
        }
    }
    // The Prometheus-compatible API, described by its own module.
    let prometheus: Vec<_> = crate::prometheus::routes::<crate::AppState>()
        .into_iter()
        .map(|(route, _)| route)
        .collect();
    paths.extend(crate::prometheus::openapi::paths(&prometheus));
    generator.subschema_for::<ErrorAnswer>();
    let mut schemas = crate::prometheus::openapi::component_schemas();
    schemas.extend(generator.take_definitions(true));
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "llmwatch",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Targets, signals, probes, sweeps and alerts of an llmwatch daemon. \
                Times in requests: RFC 3339 or Unix seconds. Errors: {\"error\": {\"status\", \"message\"}}. \
                Lists take limit and cursor and answer next_cursor (null on the last page). \
                Under /prometheus/api/v1: Prometheus' HTTP query API (version 2.42), with its parameters, \
                answers and errors ({\"status\": \"error\", \"errorType\", \"error\"}).",
        },
        "servers": [{ "url": "/" }],
        "security": [{ "bearer": [] }, {}],
        "paths": paths,
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": schemas,
        },
    })
}

/// The OpenAPI document itself, described loosely: it is its own schema.
pub struct OpenApiDocument;

impl JsonSchema for OpenApiDocument {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "OpenApiDocument".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "required": ["openapi", "info", "paths", "components"],
            "properties": {
                "openapi": { "type": "string" },
                "info": { "type": "object" },
                "paths": { "type": "object" },
                "components": { "type": "object" },
            },
        })
    }
}

async fn openapi_json(State(state): State<AppState>) -> Json<Value> {
    Json(document(&state.api.config.server.sweep_limits))
}

pub(super) fn routes() -> Vec<Route> {
    vec![(
        RouteDoc::get::<OpenApiDocument>("/api/v1/openapi.json", "openapi", "This document.")
            .errors(&[]),
        get(openapi_json),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` in `value`.
    fn refs<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get("$ref") {
                    out.push(target);
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_names_a_component() {
        let doc = document(&Default::default());
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(found.len() > 20, "{found:?}");
        for target in found {
            let name = target
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("{target} outside the components"));
            assert!(
                doc["components"]["schemas"].get(name).is_some(),
                "{target} is not a component"
            );
        }
    }

    #[test]
    fn answers_are_closed_objects_with_every_field_required() {
        for (doc, _) in super::super::routes() {
            if doc.path == "/api/v1/openapi.json" {
                continue;
            }
            let schema = (doc.response)();
            let route = format!("{} {}", doc.method, doc.path);
            assert_eq!(schema["additionalProperties"], false, "{route}");
            let properties = schema["properties"].as_object().expect("properties");
            let required: Vec<&str> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            // An answer's `Option` field is there as `null`, never left out.
            for name in properties.keys() {
                assert!(
                    required.contains(&name.as_str()),
                    "{route}: {name} optional"
                );
            }
        }
    }

    #[test]
    fn a_float_that_is_not_finite_is_null_as_its_schema_says() {
        let point = crate::api::fields::Point(1.5, f64::NAN);
        assert_eq!(serde_json::to_string(&point).unwrap(), "[1.5,null]");
        let doc = document(&Default::default());
        let value = &doc["components"]["schemas"]["Point"]["prefixItems"][1]["type"];
        assert_eq!(value, &json!(["number", "null"]));
    }

    #[test]
    fn the_sweep_body_is_bounded_by_the_daemons_limits() {
        let limits = llmwatch_config::SweepLimits {
            max_steps: 3,
            ..Default::default()
        };
        let doc = document(&limits);
        let body = &doc["paths"]["/api/v1/sweeps"]["post"]["requestBody"]["content"]
            ["application/json"]["schema"];
        let fields = body["properties"].as_object().expect("properties");
        // `model` and `reuse_prompts` are taken but not offered (see StartSweep).
        for field in [
            "target",
            "shape",
            "concurrency",
            "rate",
            "min_step_duration",
        ] {
            assert!(fields.contains_key(field), "{field}");
        }
        for field in ["model", "reuse_prompts"] {
            assert!(!fields.contains_key(field), "{field}");
        }
        assert_eq!(body["required"], json!(["target"]));
        assert_eq!(body["additionalProperties"], false);
        assert_eq!(body["properties"]["concurrency"]["maxItems"], 3);
        assert_eq!(body["properties"]["rate"]["maxItems"], 3);
        assert_eq!(
            body["properties"]["requests_per_step"]["maximum"],
            json!(limits.max_requests_per_step)
        );
        // Rust's integer formats are no part of what a client sends.
        assert!(body["properties"]["concurrency"]["items"]
            .get("format")
            .is_none());
        assert!(body["properties"]["shape"].get("default").is_none());
    }
}
