-- Every signal query reads the newest successful scrape at or before an
-- instant. A target that has been down for days has thousands of down rows
-- on top; this partial index skips them instead of scanning them.
CREATE INDEX scrapes_up_by_target_time ON scrapes (target_id, ts_ms) WHERE up = 1;
