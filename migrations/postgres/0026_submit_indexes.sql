-- The indexes a submit writes and reads (issue 32; docs/DECISIONS.md, "What
-- one submit writes").
--
-- 1. A pushed build's fair tag (jobs/src/store/fair.rs, `tag_sql`) reads its
-- tenant's newest tag among the builds queued or running, and the queue's
-- earliest tag still waiting. Both read every outstanding build when the
-- planner has no statistics yet (a fresh database, a burst before
-- autovacuum analyses): `builds_by_tenant (tenant, status)` gave no order,
-- and `builds_by_fair_tag (status, fair_tag)` lost to a bitmap scan of
-- `builds_queued_by_seq` and a sort. A submit's cost then grew with the
-- queue: about 100 ms at 20,000 queued builds. Each read is now one probe
-- of an index whose order is the answer: `builds_by_tenant` gains
-- `fair_tag`, and `builds_by_fair_tag` gives way to two partial indexes,
-- the waiting dispatched builds' tags and the running builds' tags. A
-- submit writes as many entries as before (its build is waiting and
-- dispatched: one in `builds_waiting_by_tag`); a build starting and ending
-- writes one fewer each time (nothing outside the two states).
DROP INDEX builds_by_tenant;
CREATE INDEX builds_by_tenant ON builds (tenant, status, fair_tag);
DROP INDEX builds_by_fair_tag;
CREATE INDEX builds_waiting_by_tag ON builds (fair_tag) WHERE status = 'queued' AND dispatched = 1;
CREATE INDEX builds_running_by_tag ON builds (fair_tag) WHERE status = 'running';

-- 2. apalis's unique index on a job's idempotency key holds only the jobs
-- that have one.
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
