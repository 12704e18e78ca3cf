-- Slipway's own tables (apalis keeps its jobs and workers in schema apalis).
-- Times are Unix milliseconds (UTC). Forward-only: never edit an applied migration.

-- One row per deployment id ever submitted (ID-1). State is derived from
-- builds (ST-1), never stored. `version` makes every change conditional (ST-3).
CREATE TABLE deployments (
    id            TEXT PRIMARY KEY NOT NULL,
    configuration TEXT NOT NULL,          -- last submit, migrated, secret values removed (JSON)
    module_source TEXT,                   -- MS-1 reference; NULL floats on the built-in source
    domain        TEXT,                   -- TF-1, of the last submit
    instances     TEXT NOT NULL,          -- TF-1 instances of the last submit (JSON array)
    version       BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);

-- One row per build. `seq` is the submit order (ST-2: later builds of a
-- deployment wait in this order). `dispatched` is set when its job is pushed.
CREATE TABLE builds (
    seq           BIGSERIAL PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,   -- ST-4
    deployment_id TEXT NOT NULL REFERENCES deployments(id),
    kind          TEXT NOT NULL CHECK (kind IN ('deploy', 'destroy')),
    status        TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    dispatched    BIGINT NOT NULL DEFAULT 0,
    job_id        TEXT,                   -- the apalis task id, once dispatched
    reason        TEXT,                   -- why it failed: effect_failed, nodes_failed, timeout, source_unavailable, …
    error         TEXT,                   -- one-paragraph error for people
    configuration TEXT NOT NULL,          -- snapshot the effect ran on (JSON, no secret values)
    module_source TEXT,
    instances     TEXT NOT NULL,          -- TF-1 instances of this build's configuration (JSON array)
    report        TEXT,                   -- the run report (JSON), once finished
    log           TEXT NOT NULL DEFAULT '',
    attempts      BIGINT NOT NULL DEFAULT 0,
    worker        TEXT,                   -- the worker running or that ran it
    version       BIGINT NOT NULL DEFAULT 0,
    queued_at     BIGINT NOT NULL,
    started_at    BIGINT,
    finished_at   BIGINT
);
CREATE INDEX builds_by_deployment ON builds (deployment_id, seq);
CREATE INDEX builds_waiting ON builds (deployment_id, status, dispatched);

-- SBOMs (seed 000 "SBOM of the deployed nodes"): each component is kept once,
-- by the SHA-256 of its JSON text; the rest of each document with its node.
CREATE TABLE sbom_components (
    hash      TEXT PRIMARY KEY NOT NULL,  -- hex SHA-256 of `component`
    component TEXT NOT NULL               -- the component's JSON text
);

CREATE TABLE sboms (
    deployment_id TEXT NOT NULL REFERENCES deployments(id),
    node          TEXT NOT NULL,
    build_id      TEXT NOT NULL,          -- the deploy that produced it
    status        TEXT NOT NULL CHECK (status IN ('ready', 'unavailable')),
    reason        TEXT,                   -- why it is unavailable
    document      TEXT,                   -- the document without `components` (JSON)
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (deployment_id, node)
);

CREATE TABLE sbom_node_components (
    deployment_id TEXT NOT NULL,
    node          TEXT NOT NULL,
    position      BIGINT NOT NULL,       -- order in the document
    hash          TEXT NOT NULL REFERENCES sbom_components(hash),
    PRIMARY KEY (deployment_id, node, position),
    FOREIGN KEY (deployment_id, node) REFERENCES sboms(deployment_id, node) ON DELETE CASCADE
);
CREATE INDEX sbom_node_components_by_hash ON sbom_node_components (hash);
