-- Index entries no statement needs (issue 32; docs/DECISIONS.md "Three
-- indexes dropped, one kept"). Each index is one more entry written by every
-- insert and by every update of its columns.
--
-- apalis-postgres's first migration made `unique_job_id` (a second unique
-- index on apalis.jobs (id), beside the primary key `jobs_pkey`) and `LIdx`
-- (apalis.jobs (lock_by)), and a later one `idx_apalis_jobs_lock_by`, the
-- same as `LIdx`. No plan of a statement apalis-postgres 1.0 or Slipway runs
-- reads `unique_job_id` or `lidx`: they read `jobs_pkey` and
-- `idx_apalis_jobs_lock_by`, which stay.
DROP INDEX IF EXISTS apalis.unique_job_id;
DROP INDEX IF EXISTS apalis.lidx;
-- `builds_by_status (status)` is the leading column of
-- `builds_queued_by_seq (status, seq)` and `builds_by_fair_tag (status,
-- fair_tag)`: every statement the planner read through it reads one of those
-- instead, with the same index condition.
DROP INDEX IF EXISTS builds_by_status;
