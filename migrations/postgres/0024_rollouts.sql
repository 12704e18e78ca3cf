-- Rollouts (RO-1): one module source revision rolled out to many
-- deployments in waves. `rollouts`: the rollout (`state`: running, paused,
-- halted, cancelled, completed; `module_source`: the target, pinned to one
-- revision when the rollout started; `requested_source`: as it was asked
-- for; `waves`: JSON array of each wave's number of deployments;
-- `max_failures_per_wave` / `max_failures`: the failure budgets; `pause_ms`:
-- the pause between waves; `health_gate`: JSON of the gate each build waits
-- for, NULL for readiness; `wave`: the wave under way, 0-based; `next_at`:
-- Unix ms before which the next wave does not start; `tick`: the driver's
-- generation, only the `rollouts` job carrying it acts; `reason`: why it
-- halted or was cancelled; `requested_by`: JSON of who started it; times
-- Unix ms). `rollout_deployments`: each deployment's place (`position`, its
-- `wave`) and progress (`status`: pending, queued, succeeded, failed,
-- overridden, skipped, cancelled; `build_id` once queued; `reason`), the
-- deployment's `version` when the preflight checked it, and `prepared`: the
-- JSON the preflight made (the migrated configuration, instances,
-- readiness, domain, names eval; never a secret value). `rollout_events`:
-- the rollout's event stream, ids increasing, `body` self-describing JSON.
CREATE TABLE rollouts (
    id                    TEXT PRIMARY KEY,
    state                 TEXT NOT NULL,
    module_source         TEXT NOT NULL,
    requested_source      TEXT NOT NULL,
    waves                 TEXT NOT NULL,
    max_failures_per_wave BIGINT NOT NULL,
    max_failures          BIGINT NOT NULL,
    pause_ms              BIGINT NOT NULL,
    health_gate           TEXT,
    wave                  BIGINT NOT NULL,
    next_at               BIGINT NOT NULL,
    tick                  BIGINT NOT NULL,
    reason                TEXT,
    requested_by          TEXT,
    created_at            BIGINT NOT NULL,
    updated_at            BIGINT NOT NULL
);
CREATE INDEX rollouts_by_created ON rollouts (created_at, id);
CREATE TABLE rollout_deployments (
    rollout_id    TEXT NOT NULL,
    position      BIGINT NOT NULL,
    deployment_id TEXT NOT NULL,
    wave          BIGINT NOT NULL,
    status        TEXT NOT NULL,
    build_id      TEXT,
    reason        TEXT,
    version       BIGINT NOT NULL,
    prepared      TEXT,
    PRIMARY KEY (rollout_id, position)
);
CREATE TABLE rollout_events (
    id         BIGSERIAL PRIMARY KEY,
    rollout_id TEXT NOT NULL,
    type       TEXT NOT NULL,
    body       TEXT NOT NULL,
    at         BIGINT NOT NULL
);
CREATE INDEX rollout_events_by_rollout ON rollout_events (rollout_id, id);
