-- DL-3: the deployment channel. One row per change of a deployment's
-- derived state (ST-1) or of the build it comes from, numbered per
-- deployment from 1 (`n`, the server-sent event id), written in the
-- transaction that made the change, under the deployment's lock. `seq`
-- orders rows across deployments so one poll per api process finds what
-- is new.
CREATE TABLE deployment_events (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    deployment_id TEXT NOT NULL,
    n             INTEGER NOT NULL,
    state         TEXT NOT NULL,
    build_id      TEXT,
    at            INTEGER NOT NULL,
    UNIQUE (deployment_id, n)
);
-- DL-2: a destroy's reconcile push. The token is kept only until the push
-- (or until the destroy ends without reaching idle); `callback` is the
-- outcome as JSON ({state, status?, error?, message, at}).
ALTER TABLE builds ADD COLUMN callback_url TEXT;
ALTER TABLE builds ADD COLUMN callback_token TEXT;
ALTER TABLE builds ADD COLUMN callback TEXT;
