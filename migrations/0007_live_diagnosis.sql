-- Live diagnosis: each target's standing verdict over the sliding window
-- (rewritten at every evaluation, with its fresh numbers), and the timeline
-- of verdict changes (a row only when the verdict differs from the last).
CREATE TABLE live_verdict_now (
    target_id    INTEGER PRIMARY KEY REFERENCES targets(id) ON DELETE CASCADE,
    ts_ms        INTEGER NOT NULL,
    verdict      TEXT    NOT NULL,
    confidence   TEXT    NOT NULL,
    evidence     TEXT    NOT NULL,
    what_to_try  TEXT    NOT NULL,
    samples      INTEGER NOT NULL
);

CREATE TABLE live_verdict_changes (
    id           INTEGER PRIMARY KEY,
    target_id    INTEGER NOT NULL REFERENCES targets(id) ON DELETE CASCADE,
    ts_ms        INTEGER NOT NULL,
    verdict      TEXT    NOT NULL,
    previous     TEXT,
    confidence   TEXT    NOT NULL,
    evidence     TEXT    NOT NULL
);
CREATE INDEX live_verdict_changes_by_target ON live_verdict_changes (target_id, ts_ms);
