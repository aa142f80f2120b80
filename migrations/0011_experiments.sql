-- Experiments (`llmwatch experiment`, `POST /api/v1/experiments`): one row
-- per experiment, its result document (llmwatch_core's ExperimentResult as
-- JSON: variants, curves, intervals, ranking, answer) rewritten as it runs.
-- The plan itself is not kept: its environment may hold secrets.
CREATE TABLE experiments (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    created_ms  INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL,
    result      TEXT    NOT NULL
);
