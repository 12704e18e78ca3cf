-- Compact SBOM storage (issue 12, item 5; docs/SBOM.md "How a document is
-- stored"). Components get an integer id; a node keeps its
-- list of component ids in one text column (`sboms.components`) instead of
-- a row per component; each top-level `dependencies` entry is kept once, as
-- components are, in `sbom_dependencies`, and a node keeps the list of their
-- ids (`sboms.dependencies`). What no node's list names is deleted by the
-- writer that stopped naming it (jobs/src/store/sboms.rs).
--
-- Existing SBOMs are moved, not dropped: each component keeps its hash and
-- text and gets an id, and each ready node gets its list in
-- its old order. Their `dependencies` stay inside `sboms.document` (NULL in
-- `sboms.dependencies` says so; the hash of an entry's canonical text cannot
-- be computed in SQL) and are read back from there; the node's next deploy
-- stores them shared.

CREATE TABLE sbom_components_compact (
    id        INTEGER PRIMARY KEY,        -- what a node's list names
    hash      TEXT NOT NULL UNIQUE,       -- hex SHA-256 of `component`
    component TEXT NOT NULL               -- the component's canonical JSON text
);

INSERT INTO sbom_components_compact (hash, component)
SELECT c.hash, c.component FROM sbom_components c
WHERE EXISTS (SELECT 1 FROM sbom_node_components n WHERE n.hash = c.hash)
ORDER BY c.hash;

ALTER TABLE sboms ADD COLUMN components TEXT;    -- ids into sbom_components, in order (NULL: no `components`)
ALTER TABLE sboms ADD COLUMN dependencies TEXT;  -- ids into sbom_dependencies (NULL: in `document`, if any)

UPDATE sboms SET components = COALESCE(
    (SELECT group_concat(c.id, ',' ORDER BY n.position)
     FROM sbom_node_components n JOIN sbom_components_compact c ON c.hash = n.hash
     WHERE n.deployment_id = sboms.deployment_id AND n.node = sboms.node),
    '')
WHERE status = 'ready';

DROP TABLE sbom_node_components;
DROP TABLE sbom_components;
ALTER TABLE sbom_components_compact RENAME TO sbom_components;

CREATE TABLE sbom_dependencies (
    id    INTEGER PRIMARY KEY,            -- what a node's list names
    hash  TEXT NOT NULL UNIQUE,           -- hex SHA-256 of `entry`
    entry TEXT NOT NULL                   -- the dependencies entry's canonical JSON text
);
