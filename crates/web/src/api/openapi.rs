//! The OpenAPI 3.1 document, generated from [`super::routes`]: every route
//! the router serves is described, because both come from the same list.

use llmwatch_core::catalog::CatalogMetric;
use llmwatch_core::signals::Signal;
use serde_json::{json, Map, Value};

use super::{routes, In};

/// A parameter's schema: a bare type name, or a schema object as JSON text.
fn param_schema(schema: &str) -> Value {
    if schema == super::SIGNAL_LIST {
        let names: Vec<&str> = Signal::all().iter().map(Signal::as_str).collect();
        return json!({ "type": "array", "items": { "type": "string", "enum": names }, "minItems": 1 });
    }
    if schema == super::METRIC_NAME {
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
fn operation(doc: &super::RouteDoc, limits: &llmwatch_config::SweepLimits) -> Value {
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
            "content": { "application/json": { "schema": (doc.response)() } },
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
            "description": body,
            "content": { "application/json": { "schema": doc
                .request_schema
                .map_or_else(|| json!({ "type": "object" }), |schema| schema(limits)) } },
        });
    }
    operation
}

/// `{"error": {"status", "message"}}`, every `/api/v1` error answer.
fn error_schema() -> Value {
    json!({
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["status", "message"],
                "properties": {
                    "status": { "type": "integer" },
                    "message": { "type": "string" },
                },
            },
        },
    })
}

/// The document served at `/api/v1/openapi.json`.
pub fn document(limits: &llmwatch_config::SweepLimits) -> Value {
    let mut paths: Map<String, Value> = Map::new();
    for (doc, _) in routes() {
        let operation = operation(&doc, limits);
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
    let mut schemas = crate::prometheus::openapi::component_schemas();
    schemas.insert("Error".to_string(), error_schema());
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
