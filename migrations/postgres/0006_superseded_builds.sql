-- Q-7: a queued deploy that a newer submit makes pointless ends `superseded`.
-- The columns nothing reads any more go (`log`: logs are chunks since 0005;
-- `job_id`: the apalis task id was never read).
ALTER TABLE builds DROP CONSTRAINT builds_status_check;
ALTER TABLE builds ADD CONSTRAINT builds_status_check
    CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'superseded'));
ALTER TABLE builds DROP COLUMN log;
ALTER TABLE builds DROP COLUMN job_id;
