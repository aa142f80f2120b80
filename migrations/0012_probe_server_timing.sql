-- The server's own timing of each probe (vLLM `--enable-per-request-metrics`,
-- llama.cpp `timings`), seconds in the server's clock; NULL where the server
-- sent none. Kept as columns (the whole record also holds it) so the exact
-- per-request breakdown of a run is one query.
ALTER TABLE probes ADD COLUMN server_queue_s REAL;
ALTER TABLE probes ADD COLUMN server_prefill_s REAL;
ALTER TABLE probes ADD COLUMN server_decode_s REAL;
