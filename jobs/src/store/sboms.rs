//! SBOM storage (seed 000 "SBOM of the deployed nodes", FR-017 of 001).
//!
//! Each element of a CycloneDX document's top-level `components` and
//! `dependencies` is kept once, keyed by the SHA-256 of its canonical JSON
//! text ([`canonical_text`]), in `sbom_components` and `sbom_dependencies`,
//! each with a small integer id and the chunk that holds its text. A chunk
//! (`sbom_component_chunks`, `sbom_dependency_chunks`) holds the texts of a
//! few dozen pieces stored together, one `<id> <text>` line each, the lines
//! compressed here as one LZ4 block ([`chunk_text`] reads a body). A node
//! keeps the rest of its document and two compact lists of piece ids, in
//! document order ([`encode_ids`]). A document is put together again as
//! text from the chunks its lists name (a hundred rows or so for 5,000
//! components, not 10,000), the stored texts spliced in, nothing parsed but
//! the small rest. Nodes and deployments that run the same packages share
//! components and their dependency entries; one that no SBOM uses any more
//! is deleted, and taken out of its chunk. docs/SBOM.md states the
//! canonical form, the layout and why.

use super::{json_col, Conn, StoreError, Q};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What a deploy produced for one node.
#[derive(Debug, Clone)]
pub enum NodeSbom {
    /// A CycloneDX document.
    Ready(Value),
    /// Why there is none (the node's `<node>.error`).
    Unavailable(String),
}

/// One node's SBOM state, as `GET /sbom-list/{id}` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SbomEntry {
    /// Node name.
    pub node: String,
    /// `ready` or `unavailable`.
    pub status: String,
    /// Why it is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The deploy that produced it.
    pub build_id: String,
    /// Unix ms.
    pub created_at: i64,
}

/// The shared pieces of a document: its top-level `components` and its
/// top-level `dependencies` entries, each kind in a table of its own (id,
/// hash, chunk) with its texts in a table of chunks (id, body).
#[derive(Debug, Clone, Copy)]
struct Pieces {
    table: &'static str,
    chunks: &'static str,
}

const COMPONENTS: Pieces = Pieces { table: "sbom_components", chunks: "sbom_component_chunks" };
const DEPENDENCIES: Pieces = Pieces { table: "sbom_dependencies", chunks: "sbom_dependency_chunks" };

/// Rows per multi-row statement (at most 3 values each: well under either
/// engine's limit of bound values).
const BATCH: usize = 500;

/// A chunk is closed once it holds this many pieces …
const CHUNK_PIECES: usize = 64;

/// … or when the next piece would take its lines past this many bytes (a
/// larger piece gets a chunk of its own). Bounds what a reader fetches for
/// a piece it needs beside pieces it does not. On PostgreSQL 8 KiB, about
/// 4 KB once compressed: the body stays in its row (migration 0018 lets a
/// row fill a page before TOAST takes it), two rows to a page, read without
/// a TOAST lookup. On SQLite 32 KiB: it reads a body's overflow pages in
/// order, and each row costs its driver more than the bytes do, so fewer,
/// larger chunks read faster (docs/DECISIONS.md has the figures).
fn chunk_bytes(engine: super::Engine) -> usize {
    match engine {
        super::Engine::Postgres => 8 * 1024,
        super::Engine::Sqlite => 32 * 1024,
    }
}

/// Chunks per multi-row insert.
const CHUNK_BATCH: usize = 16;

/// A chunk's `codec`: its body is the lines as UTF-8 text (chunks written
/// before migration 0017).
pub const CODEC_TEXT: i64 = 0;

/// A chunk's `codec`: its body is the lines compressed as one LZ4 block
/// (<https://github.com/lz4/lz4/blob/dev/doc/lz4_Block_format.md>), the
/// uncompressed length in front as 4 bytes, little-endian. What the writer
/// writes.
pub const CODEC_LZ4: i64 = 1;

/// A chunk's body as the writer stores it: `lines` compressed
/// ([`CODEC_LZ4`]).
fn compress_body(lines: &str) -> Vec<u8> {
    lz4_flex::block::compress_prepend_size(lines.as_bytes())
}

/// A chunk's lines (`<id> <canonical text>`, joined by newlines) from its
/// stored `codec` and `body` ([`CODEC_TEXT`] or [`CODEC_LZ4`]).
///
/// # Errors
/// [`StoreError::Corrupt`] for another codec, a body that does not
/// decompress, or lines that are not UTF-8.
pub fn chunk_text(codec: i64, body: Vec<u8>) -> Result<String, StoreError> {
    if codec == CODEC_TEXT {
        return String::from_utf8(body).map_err(|_| StoreError::Corrupt("an SBOM chunk's lines are not UTF-8".into()));
    }
    Ok(chunk_lines(codec, &body, &mut Vec::new())?.to_owned())
}

/// [`chunk_text`] of a body borrowed from its row, without a copy of its
/// own: the lines are the body itself ([`CODEC_TEXT`]) or decompressed into
/// `scratch` ([`CODEC_LZ4`]), a buffer the caller reuses from chunk to chunk.
fn chunk_lines<'a>(codec: i64, body: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<&'a str, StoreError> {
    let bytes: &[u8] = match codec {
        CODEC_TEXT => body,
        CODEC_LZ4 => {
            let corrupt = |e: lz4_flex::block::DecompressError| {
                StoreError::Corrupt(format!("an SBOM chunk does not decompress: {e}"))
            };
            let (size, block) = lz4_flex::block::uncompressed_size(body).map_err(corrupt)?;
            scratch.clear();
            scratch.resize(size, 0);
            let written = lz4_flex::block::decompress_into(block, scratch).map_err(corrupt)?;
            if written != size {
                return Err(StoreError::Corrupt(format!(
                    "an SBOM chunk decompresses to {written} bytes, not the {size} its length says"
                )));
            }
            scratch
        }
        other => return Err(StoreError::Corrupt(format!("an SBOM chunk has codec {other}, which is not 0 or 1"))),
    };
    std::str::from_utf8(bytes).map_err(|_| StoreError::Corrupt("an SBOM chunk's lines are not UTF-8".into()))
}

/// A fetched chunk row's id and lines (its columns `id`, `codec`, `body`),
/// as [`chunk_lines`] gives them.
fn chunk_row<'a>(pieces: Pieces, row: &'a super::Row, scratch: &'a mut Vec<u8>) -> Result<(i64, &'a str), StoreError> {
    let chunk = row.int("id")?;
    let text = chunk_lines(row.int("codec")?, row.byte_slice("body")?, scratch).map_err(|e| match e {
        StoreError::Corrupt(why) => StoreError::Corrupt(format!("{} row {chunk}: {why}", pieces.chunks)),
        other => other,
    })?;
    Ok((chunk, text))
}

/// The columns [`chunk_row`] reads (the codec as a 64-bit integer on both engines).
const CHUNK_COLUMNS: &str = "id, CAST(codec AS BIGINT) AS codec, body";

/// Serialises SBOM writers on PostgreSQL (SQLite's writers are serialised
/// anyway): a writer deletes the pieces no node names, which must not race
/// another writer starting to name one, nor two writers insert one piece.
const WRITE_LOCK: &str = "slipway:sboms";

/// Replaces a deployment's SBOMs with those of a successful deploy: nodes it
/// names get their new SBOM, nodes it no longer has lose theirs.
pub async fn replace(
    conn: &mut Conn,
    deployment: &str,
    build_id: &str,
    nodes: &[(String, NodeSbom)],
    now: i64,
) -> Result<(), StoreError> {
    // The shared pieces are touched only by a ready document, or by a
    // stored one that names pieces and is replaced. Otherwise (nodes
    // without an SBOM replacing nodes without one) the fleet-wide lock is
    // not needed: this transaction neither names nor releases a piece, and
    // the deployment's own rows are its caller's, under the deployment's
    // lock (ST-2).
    let names_pieces = Q::new(
        "SELECT COUNT(*) AS n FROM sboms
         WHERE deployment_id = $1 AND (components IS NOT NULL OR dependencies IS NOT NULL)",
    )
    .text(deployment)
    .fetch_one(conn)
    .await?
    .int("n")?
        > 0;
    if names_pieces || nodes.iter().any(|(_, sbom)| matches!(sbom, NodeSbom::Ready(_))) {
        conn.lock_name(WRITE_LOCK).await?;
    }
    let mut released = Released::default();
    let keep: Vec<&str> = nodes.iter().map(|(n, _)| n.as_str()).collect();
    let existing = Q::new("SELECT node FROM sboms WHERE deployment_id = $1").text(deployment).fetch_all(conn).await?;
    for row in existing {
        let node = row.text("node")?;
        if !keep.contains(&node.as_str()) {
            delete_node(conn, deployment, &node, &mut released).await?;
        }
    }
    for (node, sbom) in nodes {
        delete_node(conn, deployment, node, &mut released).await?;
        let (status, reason, document, components, dependencies) = match sbom {
            NodeSbom::Unavailable(reason) => ("unavailable", Some(reason.as_str()), None, None, None),
            NodeSbom::Ready(doc) => {
                let mut rest = doc.clone();
                let (components, dependencies) = match rest.as_object_mut() {
                    None => (None, None),
                    Some(object) => {
                        let components = match object.remove("components") {
                            Some(Value::Array(c)) => Some(c),
                            Some(_) => {
                                return Err(StoreError::Corrupt(format!(
                                    "SBOM of node {node}: components is not a list"
                                )))
                            }
                            None => None,
                        };
                        // A `dependencies` that is not a list stays with the rest.
                        let dependencies = match object.remove("dependencies") {
                            Some(Value::Array(d)) => Some(d),
                            Some(other) => {
                                object.insert("dependencies".into(), other);
                                None
                            }
                            None => None,
                        };
                        (components, dependencies)
                    }
                };
                let components = match components {
                    Some(c) => Some(NodeList::of(&store_pieces(conn, COMPONENTS, &c).await?)),
                    None => None,
                };
                let dependencies = match dependencies {
                    Some(d) => Some(NodeList::of(&store_pieces(conn, DEPENDENCIES, &d).await?)),
                    None => None,
                };
                ("ready", None, Some(canonical_text(&rest)), components, dependencies)
            }
        };
        let (components, component_chunks) = components.map(NodeList::columns).unzip();
        let (dependencies, dependency_chunks) = dependencies.map(NodeList::columns).unzip();
        Q::new(
            "INSERT INTO sboms (deployment_id, node, build_id, status, reason, document, components, dependencies,
                                component_chunks, dependency_chunks, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .text(deployment)
        .text(node)
        .text(build_id)
        .text(status)
        .opt_text(reason)
        .opt_text(document)
        .opt_text(components)
        .opt_text(dependencies)
        .opt_text(component_chunks)
        .opt_text(dependency_chunks)
        .int(now)
        .execute(conn)
        .await?;
    }
    collect_garbage(conn, &released).await
}

/// A node's list of one kind of piece as its row keeps it: the pieces' ids
/// in document order, and the chunks that hold them.
struct NodeList {
    ids: Vec<i64>,
    chunks: Vec<i64>,
}

impl NodeList {
    /// The list of pieces stored as `pieces` (id, chunk), in order.
    fn of(pieces: &[(i64, i64)]) -> Self {
        let mut chunks: Vec<i64> = pieces.iter().map(|&(_, chunk)| chunk).collect();
        chunks.sort_unstable();
        chunks.dedup();
        Self { ids: pieces.iter().map(|&(id, _)| id).collect(), chunks }
    }

    /// The row's two columns: the ids, and the chunk ids ascending, each
    /// written by [`encode_ids`].
    fn columns(self) -> (String, String) {
        (encode_ids(&self.ids), encode_ids(&self.chunks))
    }
}

/// Stores `items`, each once by the hash of its canonical text, and
/// returns their ids and the chunks holding them, in order. A piece already stored is only looked up:
/// nothing stored is updated, so PostgreSQL leaves no dead row versions
/// behind. New pieces get consecutive ids in document order (the node's
/// list is written as runs) and are packed, in that order, into new chunks
/// of at most [`CHUNK_PIECES`] pieces and about [`chunk_bytes`] bytes.
async fn store_pieces(conn: &mut Conn, pieces: Pieces, items: &[Value]) -> Result<Vec<(i64, i64)>, StoreError> {
    let hashed: Vec<(String, String)> = items
        .iter()
        .map(|item| {
            let text = canonical_text(item);
            (hex::encode(Sha256::digest(text.as_bytes())), text)
        })
        .collect();
    let mut ids: std::collections::HashMap<String, (i64, i64)> = std::collections::HashMap::with_capacity(hashed.len());
    let mut distinct: Vec<(&str, &str)> = Vec::with_capacity(hashed.len());
    {
        let mut seen = std::collections::HashSet::with_capacity(hashed.len());
        for (hash, text) in &hashed {
            if seen.insert(hash.as_str()) {
                distinct.push((hash.as_str(), text.as_str()));
            }
        }
    }
    for chunk in distinct.chunks(BATCH) {
        let q = Q::new(format!(
            "SELECT id, hash, chunk FROM {} WHERE hash IN {}",
            pieces.table,
            super::placeholders(1, chunk.len())
        ))
        .texts(chunk.iter().map(|(hash, _)| *hash));
        for row in q.fetch_all(conn).await? {
            ids.insert(row.text("hash")?, (row.int("id")?, row.int("chunk")?));
        }
    }
    let missing: Vec<(&str, &str)> = distinct.into_iter().filter(|(h, _)| !ids.contains_key(*h)).collect();
    if !missing.is_empty() {
        // Writers hold WRITE_LOCK: nobody else takes the next ids meanwhile.
        let next = |table: &str| Q::new(format!("SELECT COALESCE(MAX(id), 0) + 1 AS n FROM {table}"));
        let first_id = next(pieces.table).fetch_one(conn).await?.int("n")?;
        let first_chunk = next(pieces.chunks).fetch_one(conn).await?.int("n")?;
        let chunk_bytes = chunk_bytes(conn.engine());
        let mut bodies: Vec<String> = Vec::new();
        let mut rows: Vec<(i64, &str, i64)> = Vec::with_capacity(missing.len());
        let (mut body, mut in_body) = (String::new(), 0);
        for (k, (hash, text)) in missing.iter().enumerate() {
            if in_body > 0 && (in_body >= CHUNK_PIECES || body.len() + 22 + text.len() > chunk_bytes) {
                bodies.push(std::mem::take(&mut body));
                in_body = 0;
            }
            let id = first_id + k as i64;
            if in_body > 0 {
                body.push('\n');
            }
            body.push_str(&id.to_string());
            body.push(' ');
            body.push_str(text);
            in_body += 1;
            let chunk = first_chunk + bodies.len() as i64;
            rows.push((id, *hash, chunk));
            ids.insert((*hash).to_owned(), (id, chunk));
        }
        bodies.push(body);
        for (n, batch) in bodies.chunks(CHUNK_BATCH).enumerate() {
            let values: Vec<String> =
                (0..batch.len()).map(|i| format!("(${}, {CODEC_LZ4}, ${})", 2 * i + 1, 2 * i + 2)).collect();
            let mut q = Q::new(format!("INSERT INTO {} (id, codec, body) VALUES {}", pieces.chunks, values.join(", ")));
            for (i, body) in batch.iter().enumerate() {
                q = q.int(first_chunk + (n * CHUNK_BATCH + i) as i64).bytes(compress_body(body));
            }
            q.execute(conn).await?;
        }
        for batch in rows.chunks(BATCH) {
            let values: Vec<String> =
                (0..batch.len()).map(|i| format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3)).collect();
            let mut q = Q::new(format!("INSERT INTO {} (id, hash, chunk) VALUES {}", pieces.table, values.join(", ")));
            for (id, hash, chunk) in batch {
                q = q.int(*id).text(*hash).int(*chunk);
            }
            q.execute(conn).await?;
        }
    }
    hashed
        .iter()
        .map(|(hash, _)| {
            ids.get(hash.as_str())
                .copied()
                .ok_or_else(|| StoreError::Corrupt(format!("{}: no id came back for {hash}", pieces.table)))
        })
        .collect()
}

/// A list of ids as stored in `sboms.components` and `sboms.dependencies`:
/// comma-separated decimal ids in order, a run of three or more consecutive
/// ids written `first-last` (pieces stored together get consecutive ids, so
/// a node's list is mostly runs). The empty list is the empty text.
pub fn encode_ids(ids: &[i64]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if j - i >= 2 {
            out.push_str(&format!("{}-{}", ids[i], ids[j]));
            i = j + 1;
        } else {
            out.push_str(&ids[i].to_string());
            i += 1;
        }
    }
    out
}

/// The ids of a list written by [`encode_ids`] (or plainly comma-separated,
/// as migration 0013 writes them).
pub fn decode_ids(text: &str) -> Result<Vec<i64>, StoreError> {
    Ok(decode_segments(text)?.into_iter().flat_map(|(first, last)| first..=last).collect())
}

/// A list's runs in order, `(first, last)`; a single id is `(id, id)`.
fn decode_segments(text: &str) -> Result<Vec<(i64, i64)>, StoreError> {
    let bad = || StoreError::Corrupt(format!("SBOM id list {:?}", text.chars().take(80).collect::<String>()));
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|token| {
            let (first, last) = token.split_once('-').unwrap_or((token, token));
            let (first, last): (i64, i64) = (first.parse().map_err(|_| bad())?, last.parse().map_err(|_| bad())?);
            if last < first {
                return Err(bad());
            }
            Ok((first, last))
        })
        .collect()
}

/// A component's canonical JSON text, the text stored and hashed: compact (no
/// whitespace), every object's keys in ascending byte order at every depth,
/// strings and numbers as `serde_json` writes them (the shortest escapes,
/// non-ASCII as UTF-8; an integer without a fraction, a float with one).
/// Nothing is left out: `bom-ref` is part of the text (docs/SBOM.md).
///
/// Keys are sorted here, not by `serde_json`'s map, so the text does not
/// change if a dependency turns on its `preserve_order` feature; with the
/// default map it is byte for byte `Value::to_string`, the text stored
/// before this function existed.
pub fn canonical_text(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(object) => {
            let mut entries: Vec<(&String, &Value)> = object.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, child)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(child, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, child) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(child, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Removes every SBOM of a deployment (a destroy succeeded).
pub async fn remove_all(conn: &mut Conn, deployment: &str) -> Result<(), StoreError> {
    conn.lock_name(WRITE_LOCK).await?;
    let mut released = Released::default();
    let nodes = Q::new("SELECT node FROM sboms WHERE deployment_id = $1").text(deployment).fetch_all(conn).await?;
    for row in nodes {
        delete_node(conn, deployment, &row.text("node")?, &mut released).await?;
    }
    collect_garbage(conn, &released).await
}

/// Pieces that a deleted SBOM row named: the only ones that may have become
/// unused.
#[derive(Debug, Default)]
struct Released {
    components: std::collections::BTreeSet<i64>,
    dependencies: std::collections::BTreeSet<i64>,
}

/// Deletes a node's SBOM row, noting the pieces it named.
async fn delete_node(conn: &mut Conn, deployment: &str, node: &str, released: &mut Released) -> Result<(), StoreError> {
    let row = Q::new("SELECT components, dependencies FROM sboms WHERE deployment_id = $1 AND node = $2")
        .text(deployment)
        .text(node)
        .fetch_optional(conn)
        .await?;
    let Some(row) = row else { return Ok(()) };
    if let Some(list) = row.opt_text("components")? {
        released.components.extend(decode_ids(&list)?);
    }
    if let Some(list) = row.opt_text("dependencies")? {
        released.dependencies.extend(decode_ids(&list)?);
    }
    Q::new("DELETE FROM sboms WHERE deployment_id = $1 AND node = $2")
        .text(deployment)
        .text(node)
        .execute(conn)
        .await?;
    Ok(())
}

fn id_list(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// Deletes the released components and dependency entries that no SBOM
/// names any more: every node's lists are read (a few bytes per component,
/// less where ids run) and what none of them names is deleted, its row and
/// its line in its chunk ([`remove_from_chunks`]). Writers hold
/// [`WRITE_LOCK`], so no other transaction starts naming a piece meanwhile.
async fn collect_garbage(conn: &mut Conn, released: &Released) -> Result<(), StoreError> {
    if released.components.is_empty() && released.dependencies.is_empty() {
        return Ok(());
    }
    let rows = Q::new("SELECT components, dependencies FROM sboms WHERE status = 'ready'").fetch_all(conn).await?;
    let (mut components, mut dependencies) = (released.components.clone(), released.dependencies.clone());
    for row in rows {
        if let Some(list) = row.opt_text("components")? {
            for id in decode_ids(&list)? {
                components.remove(&id);
            }
        }
        if let Some(list) = row.opt_text("dependencies")? {
            for id in decode_ids(&list)? {
                dependencies.remove(&id);
            }
        }
    }
    for (pieces, unused) in [(COMPONENTS, components), (DEPENDENCIES, dependencies)] {
        if unused.is_empty() {
            continue;
        }
        let ids: Vec<i64> = unused.iter().copied().collect();
        let mut touched = std::collections::BTreeSet::new();
        for chunk in ids.chunks(BATCH * 2) {
            // The ids are integers read back from our own lists: safe to inline.
            let rows = Q::new(format!("SELECT DISTINCT chunk FROM {} WHERE id IN ({})", pieces.table, id_list(chunk)))
                .fetch_all(conn)
                .await?;
            for row in rows {
                touched.insert(row.int("chunk")?);
            }
            Q::new(format!("DELETE FROM {} WHERE id IN ({})", pieces.table, id_list(chunk))).execute(conn).await?;
        }
        remove_from_chunks(conn, pieces, &touched, &unused).await?;
    }
    Ok(())
}

/// Takes the lines of the `unused` pieces out of the chunks that hold them:
/// a chunk left with no line is deleted, any other is written again with
/// the lines that stay, compressed ([`CODEC_LZ4`], whatever its codec was;
/// the only update of a stored SBOM piece).
async fn remove_from_chunks(
    conn: &mut Conn,
    pieces: Pieces,
    chunks: &std::collections::BTreeSet<i64>,
    unused: &std::collections::BTreeSet<i64>,
) -> Result<(), StoreError> {
    let chunks: Vec<i64> = chunks.iter().copied().collect();
    let mut emptied = Vec::new();
    for batch in chunks.chunks(BATCH * 2) {
        let rows = Q::new(format!("SELECT {CHUNK_COLUMNS} FROM {} WHERE id IN ({})", pieces.chunks, id_list(batch)))
            .fetch_all(conn)
            .await?;
        let mut scratch = Vec::new();
        for row in rows {
            let (chunk, body) = chunk_row(pieces, &row, &mut scratch)?;
            let mut kept = Vec::new();
            for line in body.split('\n') {
                if !unused.contains(&line_id(pieces, chunk, line)?.0) {
                    kept.push(line);
                }
            }
            if kept.is_empty() {
                emptied.push(chunk);
            } else {
                Q::new(format!("UPDATE {} SET codec = {CODEC_LZ4}, body = $1 WHERE id = $2", pieces.chunks))
                    .bytes(compress_body(&kept.join("\n")))
                    .int(chunk)
                    .execute(conn)
                    .await?;
            }
        }
    }
    for batch in emptied.chunks(BATCH * 2) {
        Q::new(format!("DELETE FROM {} WHERE id IN ({})", pieces.chunks, id_list(batch))).execute(conn).await?;
    }
    Ok(())
}

/// A chunk's line split into its piece's id and canonical text.
fn line_id(pieces: Pieces, chunk: i64, line: &str) -> Result<(i64, &str), StoreError> {
    line.split_once(' ')
        .and_then(|(id, text)| Some((id.parse().ok()?, text)))
        .ok_or_else(|| StoreError::Corrupt(format!("{} row {chunk}: a line is not \"<id> <text>\"", pieces.chunks)))
}

/// Every node's SBOM state for a deployment, by node name.
pub async fn list(conn: &mut Conn, deployment: &str) -> Result<Vec<SbomEntry>, StoreError> {
    let rows =
        Q::new("SELECT node, status, reason, build_id, created_at FROM sboms WHERE deployment_id = $1 ORDER BY node")
            .text(deployment)
            .fetch_all(conn)
            .await?;
    rows.iter()
        .map(|r| {
            Ok(SbomEntry {
                node: r.text("node")?,
                status: r.text("status")?,
                reason: r.opt_text("reason")?,
                build_id: r.text("build_id")?,
                created_at: r.int("created_at")?,
            })
        })
        .collect()
}

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

/// How many distinct components are stored (for tests and metrics).
pub async fn component_count(conn: &mut Conn) -> Result<i64, StoreError> {
    Q::new("SELECT COUNT(*) AS n FROM sbom_components").fetch_one(conn).await?.int("n")
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
