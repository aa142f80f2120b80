-- Sweeps: runs at rising load against one target, each step with its client
-- measurements and the server evidence of its window. A sweep row is written
-- when the sweep starts (status 'running') and each step as soon as it is
-- measured, so a sweep that stops early or dies keeps what it measured.
CREATE TABLE sweeps (
    id           INTEGER PRIMARY KEY,
    target_name  TEXT,
    target_url   TEXT    NOT NULL,
    started_ms   INTEGER NOT NULL,
    ended_ms     INTEGER,
    -- The sweep's settings (ladder, shape, objectives, limits) as JSON.
    settings     TEXT    NOT NULL,
    -- The experiment card (field name -> value) as JSON.
    card         TEXT    NOT NULL,
    -- The analysis (saturation, sustainable load, findings, summary lines)
    -- as JSON; NULL until the sweep ends. It can always be recomputed from
    -- the steps.
    verdict      TEXT,
    -- Why the sweep stopped before its last step (error rate, TTFT limit,
    -- a failed step), NULL when it ran every step.
    stop_reason  TEXT,
    status       TEXT    NOT NULL CHECK (status IN ('running', 'completed', 'stopped', 'failed'))
);
CREATE INDEX sweeps_by_start ON sweeps (started_ms);

-- One row per measured step. `id` is also the `run_id` of the step's probes
-- in `probes`.
CREATE TABLE sweep_steps (
    id           INTEGER PRIMARY KEY,
    sweep_id     INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
    step_index   INTEGER NOT NULL,
    -- 'concurrency' or 'rate', and its value (clients, or requests/s).
    load_kind    TEXT    NOT NULL CHECK (load_kind IN ('concurrency', 'rate')),
    load_value   REAL    NOT NULL,
    start_ms     INTEGER NOT NULL,
    end_ms       INTEGER NOT NULL,
    -- The probe run's result without its per-request records, as JSON.
    run          TEXT    NOT NULL,
    -- The server evidence of the step's window, as JSON.
    evidence     TEXT    NOT NULL,
    UNIQUE (sweep_id, step_index)
);
