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

/// … or when the next piece would take its body past this many bytes (a
/// larger piece gets a chunk of its own). Bounds what a reader fetches for
/// a piece it needs beside pieces it does not.
const CHUNK_BYTES: usize = 32 * 1024;

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
    let bytes = match codec {
        CODEC_TEXT => body,
        CODEC_LZ4 => lz4_flex::block::decompress_size_prepended(&body)
            .map_err(|e| StoreError::Corrupt(format!("an SBOM chunk does not decompress: {e}")))?,
        other => return Err(StoreError::Corrupt(format!("an SBOM chunk has codec {other}, which is not 0 or 1"))),
    };
    String::from_utf8(bytes).map_err(|_| StoreError::Corrupt("an SBOM chunk's lines are not UTF-8".into()))
}

/// A fetched chunk row's id and lines (its columns `id`, `codec`, `body`).
fn chunk_row(pieces: Pieces, row: &super::Row) -> Result<(i64, String), StoreError> {
    let chunk = row.int("id")?;
    let text = chunk_text(row.int("codec")?, row.bytes("body")?).map_err(|e| match e {
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
                    Some(c) => Some(encode_ids(&store_pieces(conn, COMPONENTS, &c).await?)),
                    None => None,
                };
                let dependencies = match dependencies {
                    Some(d) => Some(encode_ids(&store_pieces(conn, DEPENDENCIES, &d).await?)),
                    None => None,
                };
                ("ready", None, Some(canonical_text(&rest)), components, dependencies)
            }
        };
        Q::new(
            "INSERT INTO sboms (deployment_id, node, build_id, status, reason, document, components, dependencies,
                                created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .text(deployment)
        .text(node)
        .text(build_id)
        .text(status)
        .opt_text(reason)
        .opt_text(document)
        .opt_text(components)
        .opt_text(dependencies)
        .int(now)
        .execute(conn)
        .await?;
    }
    collect_garbage(conn, &released).await
}

/// Stores `items`, each once by the hash of its canonical text, and
/// returns their ids in order. A piece already stored is only looked up:
/// nothing stored is updated, so PostgreSQL leaves no dead row versions
/// behind. New pieces get consecutive ids in document order (the node's
/// list is written as runs) and are packed, in that order, into new chunks
/// of at most [`CHUNK_PIECES`] pieces and about [`CHUNK_BYTES`] bytes.
async fn store_pieces(conn: &mut Conn, pieces: Pieces, items: &[Value]) -> Result<Vec<i64>, StoreError> {
    let hashed: Vec<(String, String)> = items
        .iter()
        .map(|item| {
            let text = canonical_text(item);
            (hex::encode(Sha256::digest(text.as_bytes())), text)
        })
        .collect();
    let mut ids: std::collections::HashMap<String, i64> = std::collections::HashMap::with_capacity(hashed.len());
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
        let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
        let mut q = Q::new(format!("SELECT id, hash FROM {} WHERE hash IN ({})", pieces.table, marks.join(", ")));
        for (hash, _) in chunk {
            q = q.text(*hash);
        }
        for row in q.fetch_all(conn).await? {
            ids.insert(row.text("hash")?, row.int("id")?);
        }
    }
    let missing: Vec<(&str, &str)> = distinct.into_iter().filter(|(h, _)| !ids.contains_key(*h)).collect();
    if !missing.is_empty() {
        // Writers hold WRITE_LOCK: nobody else takes the next ids meanwhile.
        let next = |table: &str| Q::new(format!("SELECT COALESCE(MAX(id), 0) + 1 AS n FROM {table}"));
        let first_id = next(pieces.table).fetch_one(conn).await?.int("n")?;
        let first_chunk = next(pieces.chunks).fetch_one(conn).await?.int("n")?;
        let mut bodies: Vec<String> = Vec::new();
        let mut rows: Vec<(i64, &str, i64)> = Vec::with_capacity(missing.len());
        let (mut body, mut in_body) = (String::new(), 0);
        for (k, (hash, text)) in missing.iter().enumerate() {
            if in_body > 0 && (in_body >= CHUNK_PIECES || body.len() + 22 + text.len() > CHUNK_BYTES) {
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
            rows.push((id, *hash, first_chunk + bodies.len() as i64));
            ids.insert((*hash).to_owned(), id);
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
        for row in rows {
            let (chunk, body) = chunk_row(pieces, &row)?;
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
/// SBOM row): the node's row, then each list's stored texts read from their
/// chunks (one query each) and joined in the list's order, spliced into the rest of
/// the document at their keys' places. Only the rest is parsed. The text is
/// the accepted document's JSON value written compactly with every object's
/// keys in ascending byte order (docs/SBOM.md).
pub async fn document_text(conn: &mut Conn, deployment: &str, node: &str) -> Result<Option<SbomText>, StoreError> {
    let row = Q::new(
        "SELECT status, reason, document, components, dependencies FROM sboms WHERE deployment_id = $1 AND node = $2",
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
    let mut spliced: Vec<(&str, Pieces, String)> = Vec::new();
    for (key, pieces, list) in [
        ("components", COMPONENTS, row.opt_text("components")?),
        ("dependencies", DEPENDENCIES, row.opt_text("dependencies")?),
    ] {
        if let Some(list) = list {
            spliced.push((key, pieces, list));
        }
    }
    let Value::Object(rest) = rest else {
        return Ok(Some(SbomText::Ready(canonical_text(&rest))));
    };
    let mut keys: Vec<&str> = rest.keys().map(String::as_str).chain(spliced.iter().map(|(k, _, _)| *k)).collect();
    keys.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let mut out = String::with_capacity(1024);
    out.push('{');
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(key.to_owned()).to_string());
        out.push(':');
        match spliced.iter().find(|(k, _, _)| *k == key) {
            Some((_, pieces, list)) => {
                out.push('[');
                append_texts(conn, *pieces, list, &mut out).await?;
                out.push(']');
            }
            None => write_canonical(&rest[key], &mut out),
        }
    }
    out.push('}');
    Ok(Some(SbomText::Ready(out)))
}

/// Appends to `out` the stored texts of the pieces a list names, in its
/// order, joined by commas: the chunks holding them, found by the pieces'
/// ids (a run of ids read as a range of the primary key, the other ids by
/// their ids) in one query (chunked for very long lists), decompressed,
/// then their lines put in the list's order here.
async fn append_texts(conn: &mut Conn, pieces: Pieces, list: &str, out: &mut String) -> Result<(), StoreError> {
    let ids = decode_ids(list)?;
    if ids.is_empty() {
        return Ok(());
    }
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let mut conditions = Vec::new();
    let mut singles = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        if j > i {
            // The ids are integers read back from our own list: safe to inline.
            conditions.push(format!("id BETWEEN {} AND {}", sorted[i], sorted[j]));
        } else {
            singles.push(sorted[i]);
        }
        i = j + 1;
    }
    for chunk in singles.chunks(BATCH * 2) {
        conditions.push(format!("id IN ({})", id_list(chunk)));
    }
    let mut bodies: Vec<(i64, String)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for batch in conditions.chunks(BATCH) {
        let rows = Q::new(format!(
            "SELECT {CHUNK_COLUMNS} FROM {} WHERE id IN (SELECT chunk FROM {} WHERE {})",
            pieces.chunks,
            pieces.table,
            batch.join(" OR ")
        ))
        .fetch_all(conn)
        .await?;
        for row in rows {
            // Another batch of conditions may have fetched it already.
            if seen.insert(row.int("id")?) {
                bodies.push(chunk_row(pieces, &row)?);
            }
        }
    }
    // Each wanted piece's text by its place in `sorted`: its offset from
    // the first id when the ids are one run (the usual case), else found by
    // binary search. Lines of pieces the list does not name are left out.
    let one_run = sorted[sorted.len() - 1] - sorted[0] + 1 == sorted.len() as i64;
    let place = |id: i64| -> Option<usize> {
        if one_run {
            usize::try_from(id - sorted[0]).ok().filter(|&i| i < sorted.len())
        } else {
            sorted.binary_search(&id).ok()
        }
    };
    let mut texts: Vec<Option<&str>> = vec![None; sorted.len()];
    let mut size = 0;
    for (chunk, body) in &bodies {
        for line in body.split('\n') {
            let (id, text) = line_id(pieces, *chunk, line)?;
            if let Some(i) = place(id) {
                texts[i] = Some(text);
                size += text.len() + 1;
            }
        }
    }
    out.reserve(size);
    for (k, id) in ids.iter().enumerate() {
        let Some(text) = place(*id).and_then(|i| texts[i]) else {
            return Err(StoreError::Corrupt(format!(
                "{}: an SBOM names piece {id}, which is not there",
                pieces.chunks
            )));
        };
        if k > 0 {
            out.push(',');
        }
        out.push_str(text);
    }
    Ok(())
}

/// How many distinct components are stored (for tests and metrics).
pub async fn component_count(conn: &mut Conn) -> Result<i64, StoreError> {
    Q::new("SELECT COUNT(*) AS n FROM sbom_components").fetch_one(conn).await?.int("n")
}
