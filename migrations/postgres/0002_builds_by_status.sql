-- Q-3 admission counts queued builds on every submit.
CREATE INDEX builds_by_status ON builds (status);
