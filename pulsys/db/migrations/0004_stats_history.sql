-- Throughput over time for the console's charts (docs/admin.md, "Charts over time"):
-- rings of fixed-width buckets, written by admin/history.py. One row per (resolution,
-- slot), slot = (bucket_start / resolution) mod the ring's capacity (db/history.py), so
-- a ring never holds more rows than its capacity: a new bucket takes over the row of
-- the bucket `capacity` widths older. Pulsys instances sharing one database add into
-- the same buckets (the fleet's totals, as the per-repo counters are).
CREATE TABLE stats_history (
    resolution           INTEGER NOT NULL,
    slot                 INTEGER NOT NULL,
    bucket_start         BIGINT NOT NULL,
    bytes_served         BIGINT NOT NULL DEFAULT 0,
    upstream_body_bytes  BIGINT NOT NULL DEFAULT 0,
    hits                 BIGINT NOT NULL DEFAULT 0,
    misses               BIGINT NOT NULL DEFAULT 0,
    fills_started        BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (resolution, slot)
);
