//! The rename engine: moves a stored configuration to the current shape of a
//! module source before validation (PRODUCT.md §5 MG-1…MG-4; seed 002
//! "Migration semantics"). The shared cases in
//! `testdata/cases/migration` are the executable form of these rules.
//!
//! # The table
//!
//! A module source's `renames.json` is an ordered list of [`Rename`] entries.
//! A path is a list of segments; a segment is a literal key or [`WILDCARD`]
//! (`"*"`), which stands for every key of a map or every item of a list
//! (MG-1). The k-th `*` of `to` takes the key or item that the k-th `*` of
//! `from` matched.
//!
//! # A pass
//!
//! A pass applies the entries in order, once each, in place (MG-2). For each
//! entry it finds every concrete path that `from` names in the value and
//! moves the value there to the concrete `to`, creating missing objects on
//! the way. Because a moved value is visible to the later entries, a chain
//! listed in order (`a → b`, `b → c`) resolves in one pass. Further rules:
//!
//! - A `from` that names nothing is a no-op, not an error; so is an entry
//!   whose concrete `to` equals its concrete `from`.
//! - An object that a move leaves empty on the `from` side is removed, up to
//!   (not including) the part of the path that `from` and `to` share. The
//!   configuration itself, untouched empty objects and list items are never
//!   removed: a move never adds, removes or reorders a list item.
//! - A literal segment names an object key; lists are reached only by `*`.
//!   A `*` as the last segment of `from` matches map keys only, because a
//!   list item cannot leave its list without shifting its neighbours.
//!
//! # Skipped entries (MG-3)
//!
//! An entry that cannot apply is skipped, never guessed; [`Skipped`] says
//! which and why, and [`Skipped::message`] gives the sentence for the
//! validation error:
//!
//! - [`SkipReason::WildcardsMisaligned`] without a path: `from` and `to` hold
//!   a different number of `*`. Reported once, and only when `from` matches a
//!   value in this configuration that the entry would otherwise move.
//! - [`SkipReason::WildcardsMisaligned`] with a path: the counts agree, but a
//!   `*` that matched a list item would land where no such list item exists
//!   (a move never creates list items).
//! - [`SkipReason::TargetOccupied`] with the concrete `from` path: the `to`
//!   already holds a value (`null` included), or a value that is not an
//!   object sits on the way to it, or one of the two paths lies inside the
//!   other, so the value would have to contain itself. `a.b → a` is always
//!   skipped; `a → a.b` is skipped unless the value at `a` already holds `b`,
//!   which makes it a value in the new shape (see below), left alone.
//!
//! A skip pins two values for the rest of the pass: the skipped one and the
//! one in its way. No later entry moves a value at, above or below a pinned
//! one, and a later move into a pinned value is itself skipped as
//! [`SkipReason::TargetOccupied`]. Otherwise a later entry could clear the
//! way after the fact, and the next pass would apply what this one skipped:
//! with `a → b`, `b → c` and both `a` and `b` stored, both stay, and entry 0
//! is reported.
//!
//! # Restored names (MG-2)
//!
//! The seed allows a table to move a key away and later restore the name
//! ("upstream can move a key away and later restore the name"). A plain
//! sequential replay then breaks idempotence: with `a → b` followed later by
//! `c → a`, the output `{"a": …}` of `{"c": …}` would move on to `b` when
//! migrated again. So the engine reads a stored value as being in the newest
//! shape its path can have: a value that sits where entry `k` (or a later
//! one) writes, or below such a place, or that holds a value at such a place,
//! is current for the entries up to `k`, and they leave it alone. A value
//! that this pass moved is exempt: it is exactly as old as the entry that
//! moved it, so chains still resolve. For m08a (`bucket → bucketName`, then
//! back) this means a stored `bucket` is already in the restored shape and
//! stays put, and for m08b a stored `bucketName` moves back to `bucket`.
//!
//! # A fixed point (MG-2)
//!
//! [`migrate`] repeats the pass until one moves nothing, and reports the
//! skipped entries of that last pass, which are the entries that cannot
//! apply to the migrated value. For any ordinary table the second pass is a
//! check that finds nothing to do; only tables whose paths overlap in odd
//! ways (in randomized tests, well under one table in a thousand)
//! need a third. The output is thus a fixed point by construction: applying
//! the table to it changes nothing.
//!
//! # Cost
//!
//! A pass walks the value once to see which keys it holds, then skips every
//! entry whose `from` has a literal segment that is not among them (most
//! entries of a long table name nothing); the others cost the values they
//! match. What a pass has moved and pinned, and where the later entries
//! write, are kept in trees walked in the length of a path, so a pass over
//! a list of thousands of items stays linear in the size of the value
//! (`scripts/bench --only migrate` measures it).
//!
//! # Sections (MG-4)
//!
//! [`section_renames`] gives the table of one section (at present an
//! application), relative to the section's path, so it applies to the
//! section's value alone. Entries whose `from` or `to` lies outside the
//! section are dropped; a `*` of `from` that falls on the section's own key
//! is bound to that key on both sides. An entry that moves a value into the
//! section from outside is dropped too, so when such an entry restores a
//! name inside the section, only the whole-configuration migration knows it.

mod pass;

use pass::{concrete_to, is_prefix_str, show_path, wildcard_count, Pass, TableIndex};
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The segment that matches every key of a map or every item of a list.
pub const WILDCARD: &str = "*";

/// One entry of a renames table (renames.json: {"from": [..], "to": [..], "kind": "option"|"value"}).
///
/// `from` and `to` are paths of segments; a segment is a literal key or
/// [`WILDCARD`] (MG-1). An entry with an empty `from` names nothing and is a
/// no-op; an empty `to` names the whole configuration and is always
/// [`SkipReason::TargetOccupied`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Rename {
    /// Where the value used to be stored.
    pub from: Vec<String>,
    /// Where the value lives now.
    pub to: Vec<String>,
    /// Which source the entry comes from; migration treats both alike.
    #[serde(default)]
    pub kind: RenameKind,
}

impl Rename {
    /// An entry of the default kind ([`RenameKind::Option`]).
    pub fn new<S: Into<String>>(from: impl IntoIterator<Item = S>, to: impl IntoIterator<Item = S>) -> Self {
        Rename {
            from: from.into_iter().map(Into::into).collect(),
            to: to.into_iter().map(Into::into).collect(),
            kind: RenameKind::Option,
        }
    }

    /// Whether `from` and `to` hold the same number of [`WILDCARD`]s, so
    /// that each `*` of `to` has a `*` of `from` to take its key from.
    pub fn wildcards_align(&self) -> bool {
        wildcard_count(&self.from) == wildcard_count(&self.to)
    }
}

/// Where a [`Rename`] comes from (seed 002 "Migration semantics": "The
/// entries have two sources, in one list").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RenameKind {
    /// A module-option rename, harvested from the alias markers of NixOS.
    #[default]
    Option,
    /// A rename inside an option whose value is JSON, declared beside the
    /// component.
    Value,
}

/// An entry of the table that could not apply (MG-3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The index of the entry in the table that [`migrate`] was given.
    pub entry: usize,
    /// Why it could not apply.
    pub reason: SkipReason,
    /// The concrete `from` path (wildcards replaced by the matched keys, list
    /// items by their decimal index) when the reason concerns one match;
    /// `None` when it concerns the entry as a whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<Vec<String>>,
}

/// Why an entry could not apply (MG-3). Serialized in snake case:
/// `"target_occupied"`, `"wildcards_misaligned"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// The `to` already holds a value, a value that is not an object lies on
    /// the way to it, `from` and `to` lie on one path, or the `to` lies in a
    /// value that an earlier skip of the same pass pinned in place.
    TargetOccupied,
    /// The wildcards of `from` and `to` do not align: their counts differ,
    /// or a `*` that matched a list item has no list item to land on.
    WildcardsMisaligned,
}

impl SkipReason {
    /// The reason as it appears in JSON: `target_occupied` or
    /// `wildcards_misaligned`.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::TargetOccupied => "target_occupied",
            SkipReason::WildcardsMisaligned => "wildcards_misaligned",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Skipped {
    /// A sentence for a validation error naming the entry and its reason.
    ///
    /// `renames` must be the table that [`migrate`] was given (for a section,
    /// the output of [`section_renames`]), because [`Skipped::entry`] indexes
    /// it.
    pub fn message(&self, renames: &[Rename]) -> String {
        let Some(rename) = renames.get(self.entry) else {
            return format!(
                "renames entry {} was skipped ({}), but the table has only {} entries",
                self.entry,
                self.reason,
                renames.len()
            );
        };
        let head = format!("renames entry {} ({} → {})", self.entry, show_path(&rename.from), show_path(&rename.to));
        let Some(path) = &self.path else {
            return match self.reason {
                SkipReason::WildcardsMisaligned => format!(
                    "{head} was skipped: its wildcards do not align \
                     ({} `*` in from, {} in to), so it cannot say where each value goes",
                    wildcard_count(&rename.from),
                    wildcard_count(&rename.to)
                ),
                SkipReason::TargetOccupied => {
                    format!("{head} was skipped: its to already holds a value")
                }
            };
        };
        let target = concrete_to(rename, path);
        let (from_shown, to_shown) = (show_path(path), show_path(&target));
        match self.reason {
            SkipReason::TargetOccupied if is_prefix_str(path, &target) || is_prefix_str(&target, path) => {
                format!(
                    "{head} was skipped at {from_shown}: {to_shown} and {from_shown} lie on one \
                     path, so the value would have to contain itself; it stays at {from_shown}"
                )
            }
            SkipReason::TargetOccupied => format!(
                "{head} was skipped at {from_shown}: {to_shown} already holds a value \
                 (or a value that is not an object lies on the way to it); \
                 the value stays at {from_shown}"
            ),
            SkipReason::WildcardsMisaligned => format!(
                "{head} was skipped at {from_shown}: its wildcards do not align, because \
                 {to_shown} needs a list item that does not exist; the value stays at {from_shown}"
            ),
        }
    }
}

/// Applies the table in order, in place; returns the entries that could not apply.
///
/// See the module documentation for the rules (MG-1…MG-3). The value is
/// usually a whole configuration; for a section it is the section's value
/// and the table the output of [`section_renames`]. The pass repeats until
/// it moves nothing (for an ordinary table: once more), so the output is a
/// fixed point; the skipped entries are those of that last pass, in table
/// order and, within an entry, in the order of the value's keys.
pub fn migrate(value: &mut Value, renames: &[Rename]) -> Vec<Skipped> {
    migrate_reporting(value, renames).skipped
}

/// A value moved by [`migrate`]: the table entry that moved it and the
/// concrete paths (wildcards replaced by the matched keys, list items by
/// their decimal index) it moved from and to. A deprecation notice: the
/// sender used the old name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// The index of the entry in the table that [`migrate`] was given.
    pub entry: usize,
    /// Where the value was.
    pub from: Vec<String>,
    /// Where it is now.
    pub to: Vec<String>,
}

impl Applied {
    /// `a.b → a.c`, each path as the renames messages show it.
    pub fn describe(&self) -> String {
        format!("{} → {}", show_path(&self.from), show_path(&self.to))
    }
}

/// What [`migrate_reporting`] did: the moves, in the order made (over every
/// pass), and the entries that could not apply (as [`migrate`] returns them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Migration {
    /// Each value moved.
    pub applied: Vec<Applied>,
    /// The entries that could not apply, of the last pass.
    pub skipped: Vec<Skipped>,
}

/// [`migrate`], also saying which values it moved.
pub fn migrate_reporting(value: &mut Value, renames: &[Rename]) -> Migration {
    let index = TableIndex::of(renames);
    let mut passes = 1;
    let mut applied = Vec::new();
    loop {
        let pass = Pass::run(value, renames, &index);
        applied.extend(pass.applied);
        if !pass.changed || passes == MAX_PASSES {
            debug_assert!(!pass.changed, "no fixed point after {MAX_PASSES} passes");
            return Migration { applied, skipped: pass.skipped };
        }
        passes += 1;
    }
}

/// How many passes [`migrate`] runs at most while looking for a fixed point.
/// A table needs one pass plus one that finds nothing to do; randomized
/// tests over millions of tables with overlapping paths never needed more
/// than three.
const MAX_PASSES: usize = 8;

/// The renames of one section (MG-4): entries inside `section_path`, relative to it; others dropped.
///
/// An entry is kept when both `from` and `to` lie strictly inside the
/// section: their first `section_path.len()` segments each equal the
/// section's key or are `*`. A `*` of `from` that falls on the section's key
/// binds to it, and the `*` of `to` that it pairs with becomes that key; if
/// `to` then does not start with `section_path`, the entry leaves the section
/// and is dropped. An entry whose wildcards do not align is kept (with its
/// prefixes cut) only while the cut entry still does not align, so that the
/// section's migration reports it as the whole configuration's would;
/// otherwise it is dropped. `kind` is kept. An empty `section_path` gives
/// the table unchanged.
pub fn section_renames(renames: &[Rename], section_path: &[String]) -> Vec<Rename> {
    renames.iter().filter_map(|rename| relative_to_section(rename, section_path)).collect()
}

fn relative_to_section(rename: &Rename, section: &[String]) -> Option<Rename> {
    let n = section.len();
    if rename.from.len() <= n || rename.to.len() <= n {
        return None;
    }
    let fits =
        |prefix: &[String]| prefix.iter().zip(section).all(|(segment, key)| segment == WILDCARD || segment == key);
    if !fits(&rename.from[..n]) || !fits(&rename.to[..n]) {
        return None;
    }
    if !rename.wildcards_align() {
        let from = rename.from[n..].to_vec();
        let to = rename.to[n..].to_vec();
        return (wildcard_count(&from) != wildcard_count(&to)).then_some(Rename { from, to, kind: rename.kind });
    }
    // The keys that the wildcards of the from prefix bind, in order.
    let bound: Vec<&String> =
        rename.from[..n].iter().zip(section).filter(|(segment, _)| *segment == WILDCARD).map(|(_, key)| key).collect();
    let mut k = 0;
    let to: Vec<String> = rename
        .to
        .iter()
        .map(|segment| {
            if segment != WILDCARD {
                return segment.clone();
            }
            k += 1;
            bound.get(k - 1).map_or_else(|| segment.clone(), |key| (*key).clone())
        })
        .collect();
    if to[..n] != *section {
        return None;
    }
    Some(Rename { from: rename.from[n..].to_vec(), to: to[n..].to_vec(), kind: rename.kind })
}

#[cfg(test)]
mod tests;
