-- remote_write (issue 14): per [[remote_write]] endpoint, how far its
-- samples have been sent. Scrapes are sent in (ts_ms, target_id) order, so
-- everything at or before (scrape_ts_ms, scrape_target_id) is sent;
-- canary probes by id. Saved after each request the receiver accepted (or
-- refused for good), so a restart resumes where it stopped.
CREATE TABLE remote_write_cursors (
    endpoint         TEXT    PRIMARY KEY,
    scrape_ts_ms     INTEGER NOT NULL,
    scrape_target_id INTEGER NOT NULL,
    probe_id         INTEGER NOT NULL,
    updated_ms       INTEGER NOT NULL
);
