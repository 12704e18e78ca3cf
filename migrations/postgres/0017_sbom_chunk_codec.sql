-- SBOM chunk bodies as bytes with a codec (issue 12, item 5; docs/SBOM.md
-- "How a document is stored"). A chunk's body was TEXT, which PostgreSQL
-- compresses with pglz and keeps out of line: reading a 5,000-component
-- document spent its time detoasting and moving 4 MB. The writer
-- (jobs/src/store/sboms.rs) now compresses each body itself, LZ4 block
-- format, and stores the bytes; `codec` says how a body is written:
--   0  the "<id> <canonical text>" lines as UTF-8, as before this migration
--   1  those lines compressed as one LZ4 block, its uncompressed length in
--      front as 4 bytes, little-endian
-- The reader handles both. Existing chunks are kept as they are, codec 0
-- (their text as UTF-8 bytes); a chunk is written as codec 1 when the
-- writer next writes it (a new chunk, or one a deleted piece leaves).
--
-- STORAGE EXTERNAL: PostgreSQL keeps a large body out of line but does not
-- try to compress it again (LZ4 output does not compress).

ALTER TABLE sbom_component_chunks ALTER COLUMN body TYPE BYTEA USING convert_to(body, 'UTF8');
ALTER TABLE sbom_component_chunks ALTER COLUMN body SET STORAGE EXTERNAL;
ALTER TABLE sbom_component_chunks ADD COLUMN codec SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE sbom_component_chunks ALTER COLUMN codec DROP DEFAULT;

ALTER TABLE sbom_dependency_chunks ALTER COLUMN body TYPE BYTEA USING convert_to(body, 'UTF8');
ALTER TABLE sbom_dependency_chunks ALTER COLUMN body SET STORAGE EXTERNAL;
ALTER TABLE sbom_dependency_chunks ADD COLUMN codec SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE sbom_dependency_chunks ALTER COLUMN codec DROP DEFAULT;
