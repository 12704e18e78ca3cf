//! Reading a node's SBOM back: the document put together again as text
//! from the chunks its lists name, the stored texts spliced in.

use super::codec::{canonical_text, write_canonical};
use super::{
    chunk_row, decode_ids, id_list, json_col, line_id, Conn, NodeSbom, Pieces, StoreError, BATCH, CHUNK_COLUMNS,
    COMPONENTS, DEPENDENCIES, Q,
};
use serde_json::Value;

/// One node's SBOM as stored: the document's text, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SbomText {
    /// The CycloneDX document as compact JSON text, keys in ascending order.
    Ready(String),
    /// Why there is none.
    Unavailable(String),
}

/// One node's SBOM, put together again as a [`serde_json::Value`] (`None`:
/// the node has no SBOM row). [`document_text`] is the cheaper read.
pub async fn document(conn: &mut Conn, deployment: &str, node: &str) -> Result<Option<NodeSbom>, StoreError> {
    Ok(match document_text(conn, deployment, node).await? {
        None => None,
        Some(SbomText::Unavailable(reason)) => Some(NodeSbom::Unavailable(reason)),
        Some(SbomText::Ready(text)) => Some(NodeSbom::Ready(json_col(&text, "the reassembled SBOM")?)),
    })
}

/// One node's SBOM, put together again as text (`None`: the node has no
/// SBOM row): the node's row, then the chunks holding the pieces of both its
/// lists in one statement (`fetch_chunks`), each chunk's lines put in
/// their list's place as its row arrives (`Splice`), between the rest of
/// the document's keys. Only the rest is parsed. The text is the accepted
/// document's JSON value written compactly with every object's keys in
/// ascending byte order (docs/SBOM.md).
pub async fn document_text(conn: &mut Conn, deployment: &str, node: &str) -> Result<Option<SbomText>, StoreError> {
    let row = Q::new(
        "SELECT status, reason, document, components, dependencies, component_chunks, dependency_chunks
         FROM sboms WHERE deployment_id = $1 AND node = $2",
    )
    .text(deployment)
    .text(node)
    .fetch_optional(conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    if row.text("status")? != "ready" {
        let reason = row.opt_text("reason")?;
        return Ok(Some(SbomText::Unavailable(reason.unwrap_or_else(|| "unavailable".into()))));
    }
    let rest: Value = json_col(&row.opt_text("document")?.unwrap_or_default(), "sboms.document")?;
    // In the order of their keys: `components` sorts before `dependencies`.
    let mut lists: Vec<WantedList> = Vec::new();
    for (key, pieces, list, chunks) in [
        ("components", COMPONENTS, row.opt_text("components")?, row.opt_text("component_chunks")?),
        ("dependencies", DEPENDENCIES, row.opt_text("dependencies")?, row.opt_text("dependency_chunks")?),
    ] {
        if let Some(list) = list {
            let chunks = chunks.as_deref().map(decode_ids).transpose()?;
            lists.push(WantedList { key, pieces, ids: decode_ids(&list)?, chunks });
        }
    }
    let Value::Object(rest) = rest else {
        return Ok(Some(SbomText::Ready(canonical_text(&rest))));
    };
    // The document's text around the lists: `around[k]` comes before list
    // k's items (and after list k-1's), the last one after the last list.
    let mut keys: Vec<&str> = rest.keys().map(String::as_str).chain(lists.iter().map(|l| l.key)).collect();
    keys.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let mut around = vec![String::from("{")];
    for (i, key) in keys.into_iter().enumerate() {
        let text = around.last_mut().expect("one at least");
        if i > 0 {
            text.push(',');
        }
        text.push_str(&Value::String(key.to_owned()).to_string());
        text.push(':');
        if lists.iter().any(|l| l.key == key) {
            text.push('[');
            around.push(String::from("]"));
        } else {
            write_canonical(&rest[key], text);
        }
    }
    around.last_mut().expect("one at least").push('}');
    if lists.is_empty() {
        return Ok(Some(SbomText::Ready(std::mem::take(&mut around[0]))));
    }
    // Items are written straight into the document, list after list as
    // their chunks arrive (in list order, as the statement reads them);
    // items of a later list that come before the current list is complete
    // are written aside and appended when its turn comes.
    let mut splices: Vec<Splice> = lists.iter().map(Splice::new).collect();
    let mut aside: Vec<String> = lists.iter().map(|_| String::new()).collect();
    let mut out = std::mem::take(&mut around[0]);
    let mut current = 0;
    fetch_chunks(conn, &lists, |k, chunk, lines| {
        while current < k && splices[current].complete() {
            current += 1;
            out.push_str(&around[current]);
            out.push_str(&std::mem::take(&mut aside[current]));
        }
        splices[k].take(chunk, lines, if k == current { &mut out } else { &mut aside[k] })
    })
    .await?;
    splices[current].finish(&mut out)?;
    for k in current + 1..lists.len() {
        out.push_str(&around[k]);
        out.push_str(&aside[k]);
        splices[k].finish(&mut out)?;
    }
    out.push_str(&around[lists.len()]);
    Ok(Some(SbomText::Ready(out)))
}

/// One list of a node to put back: its key in the document, its kind of
/// piece, its ids in document order, and the chunks that hold them as the
/// node's row names them (`None` for a row written before migration 0018,
/// whose chunks are found through the pieces' rows).
struct WantedList {
    key: &'static str,
    pieces: Pieces,
    ids: Vec<i64>,
    chunks: Option<Vec<i64>>,
}

/// SQL conditions on `id` matching exactly the ascending, distinct `ids`:
/// a run of consecutive ids as `id BETWEEN first AND last`, the other ids
/// in `id IN (…)` lists of at most 1,000. The ids are integers read back
/// from our own lists: safe to inline.
fn id_conditions(sorted: &[i64]) -> Vec<String> {
    let mut conditions = Vec::new();
    let mut singles = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        if j > i {
            conditions.push(format!("id BETWEEN {} AND {}", sorted[i], sorted[j]));
        } else {
            singles.push(sorted[i]);
        }
        i = j + 1;
    }
    for chunk in singles.chunks(BATCH * 2) {
        conditions.push(format!("id IN ({})", id_list(chunk)));
    }
    conditions
}

/// `SELECT` terms joined into one statement by `UNION ALL`, at most this
/// many (SQLite allows 500).
const SELECTS_PER_QUERY: usize = 16;

/// Reads the chunks holding the pieces of `lists` and hands each to `take`
/// as its row arrives, once per list: the list's index, the chunk's id and
/// its lines (decompressed into a buffer reused from chunk to chunk). The
/// chunks a list's row names are read by their ids (a run as a range of
/// the primary key); those of a row written before migration 0018 through
/// the ids of its pieces. Both lists are read by one statement (a `UNION
/// ALL`, split only for very long lists of scattered ids), in chunk order,
/// and worked on while the engine produces the next rows.
async fn fetch_chunks(
    conn: &mut Conn,
    lists: &[WantedList],
    mut take: impl FnMut(usize, i64, &str) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut selects = Vec::new();
    for (k, list) in lists.iter().enumerate() {
        let (table, sorted) = match &list.chunks {
            Some(chunks) => (None, chunks.clone()),
            None => {
                let mut sorted = list.ids.clone();
                sorted.sort_unstable();
                sorted.dedup();
                (Some(list.pieces.table), sorted)
            }
        };
        for batch in id_conditions(&sorted).chunks(BATCH) {
            let which = match table {
                None => batch.join(" OR "),
                Some(table) => format!("id IN (SELECT chunk FROM {table} WHERE {})", batch.join(" OR ")),
            };
            selects.push(format!(
                "SELECT CAST({k} AS BIGINT) AS list, {CHUNK_COLUMNS} FROM {} WHERE {which}",
                list.pieces.chunks
            ));
        }
    }
    let mut seen: Vec<std::collections::HashSet<i64>> = lists.iter().map(|_| Default::default()).collect();
    let mut scratch = Vec::new();
    for group in selects.chunks(SELECTS_PER_QUERY) {
        Q::new(group.join(" UNION ALL "))
            .for_each_row(conn, |row| {
                let k = usize::try_from(row.int("list")?).ok().filter(|&k| k < lists.len());
                let k = k.ok_or_else(|| StoreError::Corrupt("an SBOM chunk came back for no list".into()))?;
                // Another statement's conditions may have fetched it already.
                if !seen[k].insert(row.int("id")?) {
                    return Ok(());
                }
                let (chunk, lines) = chunk_row(lists[k].pieces, row, &mut scratch)?;
                take(k, chunk, lines)
            })
            .await?;
    }
    Ok(())
}

/// Puts one list's stored texts in its order, joined by commas, as the
/// lines of its chunks arrive in any order. A line that is the list's next
/// piece is written at once (the usual case: a node's pieces stored in its
/// order, their chunks read in id order); one met before its turn, or
/// listed again later, is kept until its place comes. Lines of pieces the
/// list does not name are left out.
struct Splice<'a> {
    list: &'a WantedList,
    /// The list's ids, ascending and distinct.
    sorted: Vec<i64>,
    /// Whether `sorted` is one run of consecutive ids.
    one_run: bool,
    /// Ids the list names more than once.
    repeated: std::collections::HashSet<i64>,
    /// How many of the list's items are written.
    written: usize,
    /// Texts of named pieces met before their turn or named again later.
    kept: std::collections::HashMap<i64, String>,
}

impl<'a> Splice<'a> {
    fn new(list: &'a WantedList) -> Self {
        let mut sorted = list.ids.clone();
        sorted.sort_unstable();
        let mut repeated = std::collections::HashSet::new();
        for pair in sorted.windows(2) {
            if pair[0] == pair[1] {
                repeated.insert(pair[0]);
            }
        }
        sorted.dedup();
        let one_run = sorted.last().zip(sorted.first()).is_none_or(|(l, f)| l - f + 1 == sorted.len() as i64);
        Self { list, sorted, one_run, repeated, written: 0, kept: Default::default() }
    }

    /// Whether the list names piece `id`: its offset from the first id when
    /// the ids are one run (the usual case), else by binary search.
    fn names(&self, id: i64) -> bool {
        if self.one_run {
            self.sorted.first().is_some_and(|&first| id >= first && id - first < self.sorted.len() as i64)
        } else {
            self.sorted.binary_search(&id).is_ok()
        }
    }

    /// Whether every item of the list is written.
    fn complete(&self) -> bool {
        self.written == self.list.ids.len()
    }

    /// Writes `text` as the list's next item.
    fn write(&mut self, text: &str, out: &mut String) {
        if self.written > 0 {
            out.push(',');
        }
        out.push_str(text);
        self.written += 1;
    }

    /// Writes the items kept for the places that come next.
    fn write_kept(&mut self, out: &mut String) {
        while let Some(&id) = self.list.ids.get(self.written) {
            let text = if self.repeated.contains(&id) { self.kept.get(&id).cloned() } else { self.kept.remove(&id) };
            let Some(text) = text else { return };
            self.write(&text, out);
        }
    }

    /// Takes the lines of chunk `chunk`, writing to `out` those whose turn it is.
    fn take(&mut self, chunk: i64, lines: &str, out: &mut String) -> Result<(), StoreError> {
        if self.complete() {
            return Ok(());
        }
        for line in lines.split('\n') {
            let (id, text) = line_id(self.list.pieces, chunk, line)?;
            if !self.names(id) {
                continue;
            }
            if self.list.ids.get(self.written) == Some(&id) {
                self.write(text, out);
                if self.repeated.contains(&id) {
                    self.kept.insert(id, text.to_owned());
                }
                if !self.kept.is_empty() {
                    self.write_kept(out);
                }
            } else {
                self.kept.insert(id, text.to_owned());
            }
        }
        Ok(())
    }

    /// Writes the items still missing once every chunk is read.
    fn finish(&mut self, out: &mut String) -> Result<(), StoreError> {
        self.write_kept(out);
        match self.list.ids.get(self.written) {
            None => Ok(()),
            Some(id) => Err(StoreError::Corrupt(format!(
                "{}: an SBOM names piece {id}, which is not there",
                self.list.pieces.chunks
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(ids: &[i64]) -> WantedList {
        WantedList { key: "components", pieces: COMPONENTS, ids: ids.to_vec(), chunks: None }
    }

    /// The list's items as `Splice` writes them from `chunks` (id, lines)
    /// handed over in that order.
    fn spliced(ids: &[i64], chunks: &[(i64, &str)]) -> Result<String, StoreError> {
        let list = list(ids);
        let mut splice = Splice::new(&list);
        let mut out = String::new();
        for (chunk, lines) in chunks {
            splice.take(*chunk, lines, &mut out)?;
        }
        splice.finish(&mut out)?;
        Ok(out)
    }

    #[test]
    fn pieces_in_list_order_are_written_as_their_chunks_arrive() {
        let chunks = [(1, "1 a\n2 b\n3 c"), (2, "4 d\n5 e")];
        assert_eq!(spliced(&[1, 2, 3, 4, 5], &chunks).unwrap(), "a,b,c,d,e");
        // Pieces of the chunks that the list does not name are left out.
        assert_eq!(spliced(&[2, 4], &chunks).unwrap(), "b,d");
    }

    #[test]
    fn pieces_met_before_their_turn_or_listed_twice_are_kept_for_their_place() {
        let chunks = [(1, "1 a\n2 b\n3 c"), (2, "4 d\n5 e")];
        assert_eq!(spliced(&[5, 3, 1, 4, 2], &chunks).unwrap(), "e,c,a,d,b");
        assert_eq!(spliced(&[2, 2, 5, 2, 1], &chunks).unwrap(), "b,b,e,b,a");
        // Chunks arriving out of order.
        assert_eq!(spliced(&[1, 2, 3, 4, 5], &[chunks[1], chunks[0]]).unwrap(), "a,b,c,d,e");
        assert_eq!(spliced(&[], &chunks).unwrap(), "");
    }

    #[test]
    fn a_piece_no_chunk_holds_is_an_error_naming_it() {
        let err = spliced(&[1, 9], &[(1, "1 a\n2 b")]).unwrap_err();
        assert!(err.to_string().contains("piece 9"), "{err}");
    }
}
