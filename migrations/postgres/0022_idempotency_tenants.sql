-- Safe retries (IK-1, the IETF httpapi Idempotency-Key draft): one row per
-- key a token subject sent on a request that queues work. `iss` and `sub`
-- are the token's claims (`iss` '' when the token has none): keys are
-- scoped to them. `idem_key` is the key as sent (at most 255 visible ASCII
-- characters). `fingerprint` is the SHA-256 of the request (method, path
-- and query, If-Match, If-None-Match, body). `claim` names the request
-- that holds the key: while `status` is NULL it is in flight, until
-- `lease_until`; after that another request with the key may take it
-- over (an api killed mid-request never leaves a key stuck). Once answered,
-- `status`, `headers` (JSON [[name, value], ...]) and `body` are the
-- answer replayed to a retry until `expires_at`; the retention sweep
-- deletes expired rows. Times are Unix ms.
CREATE TABLE idempotency_keys (
    iss          TEXT NOT NULL,
    sub          TEXT NOT NULL,
    idem_key     TEXT NOT NULL,
    fingerprint  BYTEA NOT NULL,
    claim        TEXT NOT NULL,
    status       BIGINT,
    headers      TEXT,
    body         BYTEA,
    created_at   BIGINT NOT NULL,
    lease_until  BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    PRIMARY KEY (iss, sub, idem_key)
);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
-- Fair shares per tenant (FS-1). `tenant`: who the build is queued for,
-- the token's tenant claim (SLIPWAY_TENANT_CLAIM) or else its `iss` and
-- `sub` (newline-joined); '' for a build no token asked for (a local run,
-- an automatic rollback); NULL on builds made before this migration.
-- `fair_tag`: the build's place in the fair order, set when its job is
-- pushed: the tenant's latest outstanding tag + 1, and never below the
-- earliest tag still waiting, so a tenant with a backlog and a newcomer
-- take turns; its job's apalis `priority` is minus the tag.
ALTER TABLE builds ADD COLUMN tenant TEXT;
ALTER TABLE builds ADD COLUMN fair_tag BIGINT;
CREATE INDEX builds_by_tenant ON builds (tenant, status);
CREATE INDEX builds_by_fair_tag ON builds (status, fair_tag);
