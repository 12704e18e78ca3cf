-- Cancellation: a running build's worker sees the request and kills its effect.
ALTER TABLE builds ADD COLUMN cancel_requested BIGINT NOT NULL DEFAULT 0;
