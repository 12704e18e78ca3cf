-- SBOM reads without the pieces' rows (issue 12, item 5; docs/SBOM.md "How
-- a document is stored").
--
-- A node's row names, beside its lists of piece ids, the chunks that hold
-- those pieces (ascending chunk ids, written as sboms.components is: comma-
-- separated, a run of three or more as `first-last`), so reading a document
-- fetches its chunks by their primary key instead of going through one
-- `sbom_components` / `sbom_dependencies` row per piece. A piece never
-- moves to another chunk, and a chunk is deleted only when none of its
-- pieces is left, so the names stay true as pieces come and go. Rows written
-- before this migration have NULL here and are read as before, through the
-- pieces' rows; a node's next deploy writes its chunks.
--
-- The writer now closes a chunk before 8 KiB of lines (about 4 KB once
-- compressed), which fits a 4 KiB page's cell without overflow pages on
-- SQLite. Existing chunks are not rewritten.

ALTER TABLE sboms ADD COLUMN component_chunks TEXT;     -- chunk ids holding the pieces of `components`
ALTER TABLE sboms ADD COLUMN dependency_chunks TEXT;    -- chunk ids holding the pieces of `dependencies`
