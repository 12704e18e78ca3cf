//! How SBOM pieces are written into rows: a chunk's body ([`CODEC_TEXT`],
//! [`CODEC_LZ4`]), a node's lists of piece ids ([`encode_ids`]) and a
//! piece's canonical JSON text ([`canonical_text`]). docs/SBOM.md states
//! the formats.

use super::StoreError;
use serde_json::Value;

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
pub(super) fn compress_body(lines: &str) -> Vec<u8> {
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
pub(super) fn chunk_lines<'a>(codec: i64, body: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<&'a str, StoreError> {
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

pub(super) fn write_canonical(value: &Value, out: &mut String) {
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
