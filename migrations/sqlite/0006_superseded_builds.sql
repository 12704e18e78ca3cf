-- Q-7: a queued deploy that a newer submit makes pointless ends `superseded`.
-- SQLite cannot change a CHECK constraint, so `builds` is rebuilt with the
-- new status allowed; the columns nothing reads any more go with it
-- (`log`: logs are chunks since 0005; `job_id`: the apalis task id was never read).
-- The submit order (`seq`) carries on where it was: no number is used twice.
ALTER TABLE builds RENAME TO builds_old;
CREATE TABLE builds (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT NOT NULL UNIQUE,   -- ST-4
    deployment_id    TEXT NOT NULL REFERENCES deployments(id),
    kind             TEXT NOT NULL CHECK (kind IN ('deploy', 'destroy')),
    status           TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'superseded')),
    dispatched       INTEGER NOT NULL DEFAULT 0,
    reason           TEXT,                   -- why it failed or never ran: effect_failed, timeout, cancelled, superseded, …
    error            TEXT,                   -- one-paragraph error for people
    configuration    TEXT NOT NULL,          -- snapshot the effect ran on (JSON, no secret values)
    module_source    TEXT,
    instances        TEXT NOT NULL,          -- TF-1 instances of this build's configuration (JSON array)
    report           TEXT,                   -- the run report (JSON), once finished
    attempts         INTEGER NOT NULL DEFAULT 0,
    worker           TEXT,                   -- the worker running or that ran it
    version          INTEGER NOT NULL DEFAULT 0,
    queued_at        INTEGER NOT NULL,
    started_at       INTEGER,
    finished_at      INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
INSERT INTO builds (seq, id, deployment_id, kind, status, dispatched, reason, error, configuration,
                        module_source, instances, report, attempts, worker, version, queued_at, started_at,
                        finished_at, cancel_requested)
SELECT seq, id, deployment_id, kind, status, dispatched, reason, error, configuration,
       module_source, instances, report, attempts, worker, version, queued_at, started_at,
       finished_at, cancel_requested
FROM builds_old;
DELETE FROM sqlite_sequence WHERE name = 'builds';
INSERT INTO sqlite_sequence (name, seq) SELECT 'builds', seq FROM sqlite_sequence WHERE name = 'builds_old';
DROP TABLE builds_old;
CREATE INDEX builds_by_deployment ON builds (deployment_id, seq);
CREATE INDEX builds_waiting ON builds (deployment_id, status, dispatched);
CREATE INDEX builds_by_status ON builds (status);
