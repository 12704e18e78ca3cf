-- apalis's unique index on a job's idempotency key holds only the jobs that
-- have one (issue 32; docs/DECISIONS.md, "What one submit writes").
--
-- apalis's `idx_jobs_idempotency_key (job_type, idempotency_key)` took an
-- entry for every job, the key NULL in each: Slipway pushes no job with an
-- idempotency key (its requests' keys are IK-1's `idempotency_keys`), so
-- every submit, every webhook delivery and every nix job wrote an entry
-- that no statement reads. A unique index never compares NULL keys, so the
-- partial index refuses exactly the duplicates the whole one refused, and
-- apalis's PostgreSQL push inserts without `ON CONFLICT` (nothing names the
-- index). Same name, so apalis's own migrations still find it.
--
-- PostgreSQL only: apalis-sqlite's push says `ON CONFLICT (job_type,
-- idempotency_key)`, which SQLite matches only to a whole index, so the
-- SQLite table keeps its own.
DROP INDEX IF EXISTS apalis.idx_jobs_idempotency_key;
CREATE UNIQUE INDEX idx_jobs_idempotency_key ON apalis.jobs (job_type, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
