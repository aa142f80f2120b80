-- Targets: inference servers (kind = 'engine') and GPU sources (kind = 'gpu').
CREATE TABLE targets (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL UNIQUE,
    kind        TEXT    NOT NULL CHECK (kind IN ('engine', 'gpu')),
    url         TEXT    NOT NULL,
    engine      TEXT,
    created_ms  INTEGER NOT NULL
);

-- One row per stored series of a catalog metric: (target, metric, labels, part).
-- `part` is 'value', 'sum', 'count' or 'bucket:<le>'.
CREATE TABLE series (
    id          INTEGER PRIMARY KEY,
    target_id   INTEGER NOT NULL REFERENCES targets(id),
    metric      TEXT    NOT NULL,
    labels      TEXT    NOT NULL,
    part        TEXT    NOT NULL,
    UNIQUE (target_id, metric, labels, part)
);

-- One row per scrape: its health, and when it succeeded, every normalised
-- sample of that scrape packed into `samples` (see crates/store/src/codec.rs).
-- A row per scrape rather than per sample keeps ingest in the millions of
-- samples per second and makes a signal query read one row per instant.
CREATE TABLE scrapes (
    id           INTEGER PRIMARY KEY,
    target_id    INTEGER NOT NULL REFERENCES targets(id),
    ts_ms        INTEGER NOT NULL,
    up           INTEGER NOT NULL,
    duration_ms  REAL    NOT NULL,
    body_bytes   INTEGER NOT NULL,
    error        TEXT,
    sample_count INTEGER NOT NULL,
    samples      BLOB
);
CREATE INDEX scrapes_by_target_time ON scrapes (target_id, ts_ms);
