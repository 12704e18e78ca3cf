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

mod codec;
mod document;

pub use codec::{canonical_text, chunk_text, decode_ids, encode_ids, CODEC_LZ4, CODEC_TEXT};
pub use document::{document, document_text, SbomText};

use super::{json_col, Conn, StoreError, Q};
use codec::{chunk_lines, compress_body};
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

/// How many distinct components are stored (for tests and metrics).
pub async fn component_count(conn: &mut Conn) -> Result<i64, StoreError> {
    Q::new("SELECT COUNT(*) AS n FROM sbom_components").fetch_one(conn).await?.int("n")
}
