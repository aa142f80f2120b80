-- A sweep can also end 'cancelled' (by a user) or 'interrupted' (the daemon
-- died while it ran; marked at the next start). SQLite cannot change a CHECK
-- in place: both tables are rebuilt, children first, so that dropping the
-- old parent cascades into nothing.
CREATE TABLE sweeps_v2 (
    id           INTEGER PRIMARY KEY,
    target_name  TEXT,
    target_url   TEXT    NOT NULL,
    started_ms   INTEGER NOT NULL,
    ended_ms     INTEGER,
    settings     TEXT    NOT NULL,
    card         TEXT    NOT NULL,
    verdict      TEXT,
    stop_reason  TEXT,
    status       TEXT    NOT NULL CHECK (status IN
        ('running', 'completed', 'stopped', 'failed', 'cancelled', 'interrupted'))
);
INSERT INTO sweeps_v2 SELECT id, target_name, target_url, started_ms, ended_ms,
    settings, card, verdict, stop_reason, status FROM sweeps;

CREATE TABLE sweep_steps_v2 (
    id           INTEGER PRIMARY KEY,
    sweep_id     INTEGER NOT NULL REFERENCES sweeps_v2(id) ON DELETE CASCADE,
    step_index   INTEGER NOT NULL,
    load_kind    TEXT    NOT NULL CHECK (load_kind IN ('concurrency', 'rate')),
    load_value   REAL    NOT NULL,
    start_ms     INTEGER NOT NULL,
    end_ms       INTEGER NOT NULL,
    run          TEXT    NOT NULL,
    evidence     TEXT    NOT NULL,
    UNIQUE (sweep_id, step_index)
);
INSERT INTO sweep_steps_v2 SELECT id, sweep_id, step_index, load_kind, load_value,
    start_ms, end_ms, run, evidence FROM sweep_steps;

DROP TABLE sweep_steps;
DROP TABLE sweeps;
-- Renaming the parent rewrites the child's REFERENCES to the new name.
ALTER TABLE sweeps_v2 RENAME TO sweeps;
ALTER TABLE sweep_steps_v2 RENAME TO sweep_steps;
CREATE INDEX sweeps_by_start ON sweeps (started_ms);
