-- Reads at scale (issue 14, item 3; docs/BENCHMARKS.md "Reads at scale"):
-- a deployment's latest build of one status (`store::builds::latest_succeeded`,
-- read by every GET /deployments/{id}) is found in the deployment's own
-- builds, newest first, whatever the table holds. Without statistics SQLite
-- read it through `builds_by_status`, every succeeded build of every
-- deployment, then sorted them. The same index serves `dispatch_next`'s
-- two lookups (deployment, status, then `dispatched` on a row or two), so
-- it replaces `builds_waiting` (deployment, status, dispatched) rather than
-- adding a sixth index to every build's writes.
DROP INDEX builds_waiting;
CREATE INDEX builds_by_deployment_status ON builds (deployment_id, status, seq);
