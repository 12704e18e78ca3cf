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
