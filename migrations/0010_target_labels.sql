-- Target labels (issue 14): from service discovery or `labels = {…}` in
-- `[[targets]]`, as a JSON object of strings. They label every series of
-- the target in the Prometheus API and in remote_write, as Prometheus
-- attaches a target's labels to what it scrapes.
ALTER TABLE targets ADD COLUMN labels_json TEXT NOT NULL DEFAULT '{}';
