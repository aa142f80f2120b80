-- Alerts: the current state of every (rule, target) alert that is not
-- inactive, so a restart neither loses a firing alert nor fires it again as
-- new; and the history of every state change.
CREATE TABLE alert_states (
    rule                  TEXT    NOT NULL,
    target                TEXT    NOT NULL,
    state                 TEXT    NOT NULL CHECK (state IN ('pending', 'firing', 'resolved')),
    active_at_ms          INTEGER,
    fired_at_ms           INTEGER,
    resolved_at_ms        INTEGER,
    keep_firing_since_ms  INTEGER,
    value                 REAL,
    last_sent_ms          INTEGER,
    last_eval_ms          INTEGER NOT NULL,
    -- Rendered labels and annotations, as JSON objects.
    labels                TEXT    NOT NULL,
    annotations           TEXT    NOT NULL,
    PRIMARY KEY (rule, target)
);

-- One row per transition (pending, firing, resolved, inactive).
CREATE TABLE alert_events (
    id           INTEGER PRIMARY KEY,
    ts_ms        INTEGER NOT NULL,
    rule         TEXT    NOT NULL,
    target       TEXT    NOT NULL,
    state        TEXT    NOT NULL CHECK (state IN ('inactive', 'pending', 'firing', 'resolved')),
    value        REAL,
    labels       TEXT    NOT NULL,
    annotations  TEXT    NOT NULL
);
CREATE INDEX alert_events_by_time ON alert_events (ts_ms);
