-- The nix queue (MS-6, MS-7, EV-1): one row per schema build of a
-- (source, provider) and per names eval of a configuration. Concurrent
-- misses of one key find the same row and wait for the same job.
CREATE TABLE nix_results (
    key           TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,      -- schema_build | names_eval
    source        TEXT NOT NULL,      -- as requested ('' = the built-in source)
    provider      TEXT NOT NULL,
    input         TEXT,               -- names_eval: the configuration, without secrets
    status        TEXT NOT NULL,      -- computing | done | failed
    result        TEXT,               -- done: the outputs or the names (JSON)
    failure       TEXT,               -- failed: {code, output, message} (JSON)
    log           TEXT,               -- the tools' output, for operators
    worker        TEXT,
    created_at    BIGINT NOT NULL,
    started_at    BIGINT,
    finished_at   BIGINT
);
CREATE INDEX nix_results_by_status ON nix_results (status, created_at);
-- Fleet-wide nix slots (NIX_SLOTS): a slot is held by the key of the job it
-- was reserved for until the job ends or the lease expires.
CREATE TABLE nix_slots (
    slot       BIGINT PRIMARY KEY,
    holder     TEXT,
    expires_at BIGINT NOT NULL DEFAULT 0
);
-- EV-1: the nodes and DNS names of the last submit's names eval (JSON);
-- NULL when the submit stored without the eval.
ALTER TABLE deployments ADD COLUMN names TEXT;
