-- SBOM reads without the pieces' rows, and chunk bodies kept in the row
-- (issue 12, item 5; docs/SBOM.md "How a document is stored").
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
-- compressed), and `toast_tuple_target` lets a row up to a page's 8,160
-- bytes stay in the table: a body is read with its row instead of as ~2 KB
-- pieces of the TOAST table. STORAGE EXTERNAL stays (a body that does not
-- fit a page goes out of line, never compressed again). Existing chunks are
-- not rewritten: bodies already out of line stay there and are read as
-- before.

ALTER TABLE sboms ADD COLUMN component_chunks TEXT;     -- chunk ids holding the pieces of `components`
ALTER TABLE sboms ADD COLUMN dependency_chunks TEXT;    -- chunk ids holding the pieces of `dependencies`

ALTER TABLE sbom_component_chunks SET (toast_tuple_target = 8160);
ALTER TABLE sbom_dependency_chunks SET (toast_tuple_target = 8160);
