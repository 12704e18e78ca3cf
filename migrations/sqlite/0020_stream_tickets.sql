-- Stream tickets (docs/SECURITY.md): a browser's EventSource cannot send an
-- Authorization header, so the dashboard mints a short-lived, single-use
-- ticket with its bearer token (POST /deployments/{id}/events/ticket,
-- POST /builds/{id}/log/ticket) and opens the stream with `?ticket=`
-- instead of putting the token in the URL. Only the ticket's SHA-256 is
-- kept (`hash`, 32 bytes); a ticket opens exactly one stream: `kind`
-- (`deployment_events` or `build_log`) and `stream_id` (the deployment or
-- build id), as the token's subject `subject`; `deployment_id` is the
-- deployment that stream belongs to, the scope the stream is opened with;
-- `token_exp` is the minting token's expiry (Unix ms, the
-- stream ends then as it would with the token); times are Unix ms. Using
-- a ticket deletes its row; rows past `expires_at` are deleted when the
-- next ticket is minted.
CREATE TABLE stream_tickets (
    hash          BLOB PRIMARY KEY,
    kind          TEXT NOT NULL,
    stream_id     TEXT NOT NULL,
    subject       TEXT NOT NULL,
    deployment_id TEXT NOT NULL,
    token_exp     BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL
);
CREATE INDEX stream_tickets_by_expiry ON stream_tickets (expires_at);
