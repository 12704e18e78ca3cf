-- Safe change (plans, apply, rollback, health gates, run history).
-- `trigger_kind`: why the build exists (`submit`, `delete`, `dry_run`,
-- `apply`, `rollback`, `auto_rollback`); NULL on builds made before this
-- migration, read as `delete` for a destroy, `dry_run` for a dry run and
-- `submit` otherwise. `provenance`: JSON of who asked (`requested_by`:
-- the token's `sub` and `iss`, the browser's `Origin`), what the build
-- was made from (`based_on`: the plan an apply activates or the build a
-- rollback returns to; `expected_systems`: node → system store path an
-- apply or rollback must activate), a plan's inputs (`plan`), the health
-- gate it waits for (`health_gate`), and the names eval and domain its
-- deployment's snapshot takes when a rollback returns to it. Never a
-- secret value. NULL on older builds. `phase`: where a running build
-- is beyond running its effect (`verifying`: its health gate waits for
-- its instances to be ready); NULL otherwise.
ALTER TABLE builds ADD COLUMN trigger_kind TEXT;
ALTER TABLE builds ADD COLUMN provenance TEXT;
ALTER TABLE builds ADD COLUMN phase TEXT;
