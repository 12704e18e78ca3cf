-- Q-3 admission bounds the queued builds from above by the span of their
-- submit numbers (the newest build's `seq` minus the oldest queued one's),
-- two index lookups, and counts them only when that span comes near
-- QUEUE_SIZE (jobs/src/store/submit.rs).
CREATE INDEX builds_queued_by_seq ON builds (status, seq);
