-- PRODUCT.md §11: a dry-run build evaluates and builds but changes nothing.
-- It never counts for a deployment's state, its last build, its instances,
-- its SBOMs or its readiness, and it neither supersedes nor is superseded.
ALTER TABLE builds ADD COLUMN dry_run INTEGER NOT NULL DEFAULT 0;
