-- Compressed storage (issue 13). `scrapes` becomes the head: the newest
-- scrapes of each target, samples packed raw, durable the moment their batch
-- commits. Once a target's head holds a block's worth (see
-- crates/store/src/block.rs) those rows move into one `blocks` row (the
-- scrapes' health) and one `block_groups` row per sample name (each series'
-- values, compressed), in the same transaction that deletes them from the
-- head. Existing scrapes are sealed the same way when the store opens.
--
-- `series.part` is 'raw' for a sample line kept as the server wrote it
-- (`metric` is then the sample name), else a catalog part as before.
CREATE TABLE blocks (
    id           INTEGER PRIMARY KEY,
    target_id    INTEGER NOT NULL REFERENCES targets(id),
    first_ms     INTEGER NOT NULL,
    last_ms      INTEGER NOT NULL,
    last_up_ms   INTEGER,
    scrape_count INTEGER NOT NULL,
    up_count     INTEGER NOT NULL,
    sample_count INTEGER NOT NULL,
    health       BLOB    NOT NULL
);
CREATE INDEX blocks_by_target_time ON blocks (target_id, last_ms);
CREATE INDEX blocks_up_by_target ON blocks (target_id, last_up_ms)
    WHERE last_up_ms IS NOT NULL;

CREATE TABLE block_groups (
    id       INTEGER PRIMARY KEY,
    block_id INTEGER NOT NULL REFERENCES blocks(id) ON DELETE CASCADE,
    name     TEXT    NOT NULL,
    data     BLOB    NOT NULL,
    UNIQUE (block_id, name)
);
