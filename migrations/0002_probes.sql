-- One row per probe llmwatch fired (canary probes and run requests), with the
-- headline timings as columns for queries and the full record (every event
-- timestamp) as JSON in `record`.
CREATE TABLE probes (
    id             INTEGER PRIMARY KEY,
    target_id      INTEGER NOT NULL REFERENCES targets(id),
    run_id         INTEGER,
    ts_ms          INTEGER NOT NULL,
    api            TEXT    NOT NULL,
    model          TEXT    NOT NULL,
    shape          TEXT    NOT NULL,
    ok             INTEGER NOT NULL,
    error_kind     TEXT,
    error          TEXT,
    http_status    INTEGER,
    ttfb_s         REAL,
    ttft_s         REAL,
    tpot_s         REAL,
    e2e_s          REAL    NOT NULL,
    -- per-token inter-token latencies, f64 little-endian seconds
    itl_s          BLOB    NOT NULL,
    prompt_tokens  INTEGER,
    output_tokens  INTEGER NOT NULL,
    cached_tokens  INTEGER,
    finish_reason  TEXT,
    record         TEXT    NOT NULL
);
CREATE INDEX probes_by_target_time ON probes (target_id, ts_ms);
