-- SBOM chunk bodies as bytes with a codec (issue 12, item 5; docs/SBOM.md
-- "How a document is stored"). The writer (jobs/src/store/sboms.rs) now
-- compresses each chunk's body itself, LZ4 block format, and stores the
-- bytes; `codec` says how a body is written:
--   0  the "<id> <canonical text>" lines as UTF-8, as before this migration
--   1  those lines compressed as one LZ4 block, its uncompressed length in
--      front as 4 bytes, little-endian
-- The reader handles both. Existing chunks are kept as they are, codec 0
-- (their text as UTF-8 bytes); a chunk is written as codec 1 when the
-- writer next writes it (a new chunk, or one a deleted piece leaves).

CREATE TABLE sbom_component_chunks_0017 (
    id    INTEGER PRIMARY KEY,
    codec INTEGER NOT NULL,               -- 0: UTF-8 text; 1: LZ4 block, length-prefixed
    body  BLOB NOT NULL                   -- "<id> <canonical text>" lines, newline-separated, as `codec` says
);
INSERT INTO sbom_component_chunks_0017 (id, codec, body) SELECT id, 0, CAST(body AS BLOB) FROM sbom_component_chunks;
DROP TABLE sbom_component_chunks;
ALTER TABLE sbom_component_chunks_0017 RENAME TO sbom_component_chunks;

CREATE TABLE sbom_dependency_chunks_0017 (
    id    INTEGER PRIMARY KEY,
    codec INTEGER NOT NULL,               -- 0: UTF-8 text; 1: LZ4 block, length-prefixed
    body  BLOB NOT NULL                   -- "<id> <canonical text>" lines, newline-separated, as `codec` says
);
INSERT INTO sbom_dependency_chunks_0017 (id, codec, body) SELECT id, 0, CAST(body AS BLOB) FROM sbom_dependency_chunks;
DROP TABLE sbom_dependency_chunks;
ALTER TABLE sbom_dependency_chunks_0017 RENAME TO sbom_dependency_chunks;
