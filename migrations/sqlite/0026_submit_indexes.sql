-- The indexes a pushed build's fair tag reads (issue 32; docs/DECISIONS.md,
-- "What one submit writes"), as PostgreSQL's 0026 changes them: each read
-- of jobs/src/store/fair.rs's `tag_sql` is one probe of an index whose
-- order is the answer, whatever the planner knows of the table.
-- `builds_by_tenant` gains `fair_tag`; `builds_by_fair_tag` gives way to
-- the waiting dispatched builds' tags and the running builds' tags.
-- (PostgreSQL's 0026 also narrows apalis's idempotency-key index; SQLite's
-- apalis push names that index in its `ON CONFLICT`, so it stays whole here.)
DROP INDEX builds_by_tenant;
CREATE INDEX builds_by_tenant ON builds (tenant, status, fair_tag);
DROP INDEX builds_by_fair_tag;
CREATE INDEX builds_waiting_by_tag ON builds (fair_tag) WHERE status = 'queued' AND dispatched = 1;
CREATE INDEX builds_running_by_tag ON builds (fair_tag) WHERE status = 'running';
