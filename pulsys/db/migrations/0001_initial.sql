-- The admin plane's first schema: API keys, the audit log, pre-warm jobs.
-- Times are unix seconds (DOUBLE PRECISION); JSON is stored as TEXT.

-- Only the sha256 digest of a key is kept (pulsys/auth/keys.py says why that suffices).
CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    digest      TEXT NOT NULL,
    scope       TEXT NOT NULL CHECK (scope IN ('read', 'admin')),
    name        TEXT NOT NULL DEFAULT '',
    created_at  DOUBLE PRECISION NOT NULL,
    created_by  TEXT NOT NULL,
    revoked_at  DOUBLE PRECISION,
    revoked_by  TEXT
);

-- Generation numbers that change in the same transaction as what they count; every
-- pulsys process polls `keys` to learn of key changes made elsewhere (ADR 0009).
CREATE TABLE counters (
    name   TEXT PRIMARY KEY,
    value  BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('keys', 0);

-- Who did what on the admin plane. actor: key:<id>, cli:<user>, pulsys (first start).
CREATE TABLE audit_log (
    id      {serial_pk},
    at      DOUBLE PRECISION NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    target  TEXT NOT NULL DEFAULT '',
    detail  TEXT NOT NULL DEFAULT '{}'
);

-- Pre-warm jobs: queued durably, claimed by a worker, progress written as it runs.
CREATE TABLE prewarm_jobs (
    id             {serial_pk},
    repo_type      TEXT NOT NULL CHECK (repo_type IN ('model', 'dataset', 'space')),
    repo           TEXT NOT NULL,
    revision       TEXT NOT NULL DEFAULT 'main',
    include_globs  TEXT NOT NULL DEFAULT '[]',
    exclude_globs  TEXT NOT NULL DEFAULT '[]',
    state          TEXT NOT NULL DEFAULT 'queued'
                   CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    phase          TEXT NOT NULL DEFAULT '',
    commit_sha     TEXT,
    files_done     BIGINT NOT NULL DEFAULT 0,
    files_total    BIGINT NOT NULL DEFAULT 0,
    bytes_done     BIGINT NOT NULL DEFAULT 0,
    bytes_total    BIGINT NOT NULL DEFAULT 0,
    bytes_per_s    DOUBLE PRECISION NOT NULL DEFAULT 0,
    current_file   TEXT NOT NULL DEFAULT '',
    error          TEXT NOT NULL DEFAULT '',
    claimed_by     TEXT,
    created_at     DOUBLE PRECISION NOT NULL,
    created_by     TEXT NOT NULL,
    started_at     DOUBLE PRECISION,
    finished_at    DOUBLE PRECISION,
    updated_at     DOUBLE PRECISION NOT NULL
);
CREATE INDEX prewarm_jobs_state ON prewarm_jobs (state, id);
