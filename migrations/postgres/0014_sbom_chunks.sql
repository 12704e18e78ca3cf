-- SBOM pieces read in chunks (issue 12, item 5; docs/SBOM.md "How a
-- document is stored"). The canonical texts of components and of
-- dependencies entries move out of their one-row-per-piece tables into
-- chunks: a chunk's `body` is "<piece id> <canonical text>" lines joined by
-- a newline (a canonical text holds no newline), a few dozen pieces each, so
-- a 5,000-component document is read as a hundred rows or so instead of
-- 10,000. Each piece keeps its id and hash and names its chunk; a node's
-- lists of ids (`sboms.components`, `sboms.dependencies`) do not change. The
-- writer (jobs/src/store/sboms.rs) packs the pieces it adds, in document
-- order, into new chunks and removes a piece no node names from its chunk.
--
-- Existing pieces are moved, not dropped: each keeps its id and hash, and
-- pieces are packed 64 to a chunk in id order, so the runs of ids a node's
-- list names land in few chunks.

CREATE TABLE sbom_component_chunks (
    id   BIGINT PRIMARY KEY,
    body TEXT NOT NULL                    -- "<id> <canonical text>" lines, newline-separated
);
INSERT INTO sbom_component_chunks (id, body)
SELECT (id - 1) / 64 + 1, string_agg(id::text || ' ' || component, E'\n' ORDER BY id)
FROM sbom_components GROUP BY (id - 1) / 64;

CREATE TABLE sbom_components_0014 (
    id    BIGINT PRIMARY KEY,             -- what a node's list names
    hash  TEXT NOT NULL UNIQUE,           -- hex SHA-256 of the canonical text
    chunk BIGINT NOT NULL                 -- the sbom_component_chunks row holding the text
);
INSERT INTO sbom_components_0014 (id, hash, chunk) SELECT id, hash, (id - 1) / 64 + 1 FROM sbom_components;
DROP TABLE sbom_components;
ALTER TABLE sbom_components_0014 RENAME TO sbom_components;

CREATE TABLE sbom_dependency_chunks (
    id   BIGINT PRIMARY KEY,
    body TEXT NOT NULL                    -- "<id> <canonical text>" lines, newline-separated
);
INSERT INTO sbom_dependency_chunks (id, body)
SELECT (id - 1) / 64 + 1, string_agg(id::text || ' ' || entry, E'\n' ORDER BY id)
FROM sbom_dependencies GROUP BY (id - 1) / 64;

CREATE TABLE sbom_dependencies_0014 (
    id    BIGINT PRIMARY KEY,             -- what a node's list names
    hash  TEXT NOT NULL UNIQUE,           -- hex SHA-256 of the canonical text
    chunk BIGINT NOT NULL                 -- the sbom_dependency_chunks row holding the text
);
INSERT INTO sbom_dependencies_0014 (id, hash, chunk) SELECT id, hash, (id - 1) / 64 + 1 FROM sbom_dependencies;
DROP TABLE sbom_dependencies;
ALTER TABLE sbom_dependencies_0014 RENAME TO sbom_dependencies;
