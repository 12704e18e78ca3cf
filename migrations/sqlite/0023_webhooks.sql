-- WH-1: webhook endpoints and their deliveries.
-- `webhook_endpoints`: one row per endpoint an operator registered.
-- `events`: JSON array of event type names, or ["*"]. `secret`: the
-- signing key as given (`whsec_` + base64); never answered after the
-- 201 of its creation, never logged (docs/DECISIONS.md, "Webhook secrets").
-- `start_seq`: the channel's newest event seq when the endpoint was
-- registered: only later events are delivered. `failing_since`: the first
-- failed attempt since the last success (NULL: not failing). `pump`: the
-- generation of the endpoint's delivery job chain; `pump_at`: when its
-- current job is due (a chain that stopped is started again past it).
CREATE TABLE webhook_endpoints (
    id              TEXT PRIMARY KEY,
    url             TEXT NOT NULL,
    events          TEXT NOT NULL,
    description     TEXT,
    secret          TEXT NOT NULL,
    enabled         INTEGER NOT NULL DEFAULT 1,
    disabled_reason TEXT,
    disabled_at     INTEGER,
    failing_since   INTEGER,
    start_seq       INTEGER NOT NULL,
    pump            INTEGER NOT NULL DEFAULT 0,
    pump_at         INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
-- How far each event source's table was read for an endpoint (the
-- source's own increasing number: `deployment_events.seq`, …).
CREATE TABLE webhook_cursors (
    endpoint_id TEXT NOT NULL,
    source      TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    PRIMARY KEY (endpoint_id, source)
);
-- One row per (endpoint, event): `source` and `subject` (`deployment` and
-- its id, …) with the event's number `n` within its subject, the order of
-- delivery. `id` is the `webhook-id` (stable across attempts); `body` the
-- exact JSON sent. `status`: `pending`, `delivered` or `failed`.
-- `last_error`: the class of the last failure; `last_excerpt`: at most
-- 256 bytes of the last answer's body, the secret taken out. `first_try_at`:
-- the first attempt (since the last redelivery by hand): a delivery failing
-- for WEBHOOK_RETRY_WINDOW from it is given up.
CREATE TABLE webhook_deliveries (
    id           TEXT PRIMARY KEY,
    endpoint_id  TEXT NOT NULL,
    source       TEXT NOT NULL,
    subject      TEXT NOT NULL,
    n            INTEGER NOT NULL,
    event_type   TEXT NOT NULL,
    body         TEXT NOT NULL,
    status       TEXT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    first_try_at INTEGER,
    next_try_at  INTEGER,
    last_error   TEXT,
    last_status  INTEGER,
    last_excerpt TEXT,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    delivered_at INTEGER,
    UNIQUE (endpoint_id, source, subject, n)
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (endpoint_id, status, next_try_at);
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (endpoint_id, created_at);
