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

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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

/// One step of a concrete path: an object key or a list index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Step {
    Key(String),
    Index(usize),
}

impl Step {
    fn segment(&self) -> String {
        match self {
            Step::Key(key) => key.clone(),
            Step::Index(index) => index.to_string(),
        }
    }
}

/// The state of one pass of [`migrate`] over the table.
struct Pass<'t> {
    renames: &'t [Rename],
    /// What the table says in one place, for every pass.
    index: &'t TableIndex<'t>,
    /// For each literal segment of a `from` ([`TableIndex::literals`]),
    /// whether it is an object key in the value as the pass started or a
    /// literal segment of a `to` (the only keys a move can create). An entry
    /// whose `from` has a literal segment that is neither names nothing, and
    /// the pass does not look for it: a table of a thousand entries, most
    /// naming nothing, then costs one walk of the value per pass, not one
    /// per entry.
    present: Vec<bool>,
    /// Where this pass put values. A value at or below one of these is as
    /// old as the entry that moved it, whatever its path suggests.
    moved: PathSet,
    /// Values that a skip pinned in place for the rest of the pass: the
    /// skipped value and the one that blocked it. No later move takes a value
    /// at, above or below them, or puts one into them.
    pinned: PathSet,
    skipped: Vec<Skipped>,
    /// The moves of this pass, in order.
    applied: Vec<Applied>,
    /// Whether this pass moved anything.
    changed: bool,
}

/// A [`Hasher`] for the maps keyed by the table's own segments (a
/// multiply-rotate hash over eight bytes at a time, as rustc's FxHash):
/// several times cheaper than the default, and safe there because the keys
/// of a configuration are only looked up in those maps, never inserted, so
/// keys chosen to collide cannot make one degrade. Maps keyed by the
/// configuration's keys ([`PathSet`]) keep the default hasher.
#[derive(Default)]
struct Fast(u64);

impl Fast {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for Fast {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("a chunk of eight bytes")));
        }
        let mut rest = [0u8; 8];
        rest[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.add(u64::from_le_bytes(rest));
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fast>>;

/// What a pass needs to know of the table beyond its entries, built once
/// per [`migrate`].
struct TableIndex<'t> {
    /// Where the entries write, for [`Pass::is_old`].
    writes: Writes,
    /// Every distinct literal segment of a `from`, with its number.
    literals: FastMap<&'t str, usize>,
    /// For each entry, the numbers of the literal segments of its `from`.
    from_literals: Vec<Vec<usize>>,
    /// For each literal segment of a `from`, whether it is also a literal
    /// segment of a `to`, a key a move can create.
    written: Vec<bool>,
}

impl<'t> TableIndex<'t> {
    fn of(renames: &'t [Rename]) -> Self {
        let mut literals = FastMap::default();
        let from_literals = renames
            .iter()
            .map(|rename| {
                rename
                    .from
                    .iter()
                    .filter(|segment| *segment != WILDCARD)
                    .map(|segment| {
                        let next = literals.len();
                        *literals.entry(segment.as_str()).or_insert(next)
                    })
                    .collect()
            })
            .collect();
        let mut written = vec![false; literals.len()];
        for segment in renames.iter().flat_map(|rename| &rename.to) {
            if let Some(&number) = literals.get(segment.as_str()) {
                written[number] = true;
            }
        }
        TableIndex { writes: Writes::of(renames), literals, from_literals, written }
    }

    /// Marks in `present` the literal segments that are keys in `value`.
    fn mark_keys(&self, value: &Value, present: &mut [bool]) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    if let Some(&number) = self.literals.get(key.as_str()) {
                        present[number] = true;
                    }
                    self.mark_keys(child, present);
                }
            }
            Value::Array(items) => items.iter().for_each(|child| self.mark_keys(child, present)),
            _ => {}
        }
    }
}

/// A set of concrete paths as a tree of steps, so that the questions a pass
/// asks ("is one of them above this path?", "below it?") cost the length of
/// the path, not the number of paths: a pass over a list of thousands of
/// items moves and pins thousands of values.
#[derive(Default)]
struct PathSet {
    /// Whether the path that leads here is in the set.
    here: bool,
    children: HashMap<Step, PathSet>,
}

impl PathSet {
    fn insert(&mut self, path: &[Step]) {
        let mut node = self;
        for step in path {
            if !node.children.contains_key(step) {
                node.children.insert(step.clone(), PathSet::default());
            }
            node = node.children.get_mut(step).expect("inserted above");
        }
        node.here = true;
    }

    /// Removes every path at or below `path`.
    fn remove_below(&mut self, path: &[Step]) {
        let Some((first, rest)) = path.split_first() else {
            *self = PathSet::default();
            return;
        };
        if let Some(child) = self.children.get_mut(first) {
            child.remove_below(rest);
            if !child.here && child.children.is_empty() {
                self.children.remove(first);
            }
        }
    }

    /// The node at `path`; `Err(true)` when a path of the set lies above it
    /// on the way, `Err(false)` when the way leaves the set's tree.
    fn walk(&self, path: &[Step]) -> Result<&PathSet, bool> {
        let mut node = self;
        for step in path {
            if node.here {
                return Err(true);
            }
            node = node.children.get(step).ok_or(false)?;
        }
        Ok(node)
    }

    /// Whether a path of the set is `path` or lies above it.
    fn holds_at_or_above(&self, path: &[Step]) -> bool {
        self.walk(path).map_or_else(|above| above, |node| node.here)
    }

    /// Whether a path of the set is `path`, lies above it or below it. (A
    /// node exists only on the way to a path of the set.)
    fn holds_on_the_line_of(&self, path: &[Step]) -> bool {
        self.walk(path).map_or_else(|above| above, |node| node.here || !node.children.is_empty())
    }
}

/// The `to` patterns of a table as a tree whose edges are literal keys or
/// [`WILDCARD`], each node knowing the last entry whose `to` ends there and
/// the last one whose `to` passes through it. Answers "does the `to` of
/// entry `k` or a later one name this path?" in the length of the path.
#[derive(Default)]
struct Writes {
    /// The last entry whose `to` is the pattern that leads here.
    ends: Option<usize>,
    /// The last entry whose `to` is this pattern or one below it.
    last: Option<usize>,
    literal: FastMap<String, Writes>,
    wildcard: Option<Box<Writes>>,
}

impl Writes {
    fn of(renames: &[Rename]) -> Self {
        let mut root = Writes::default();
        for (entry, rename) in renames.iter().enumerate() {
            let mut node = &mut root;
            node.last = Some(entry);
            for segment in &rename.to {
                node = if segment == WILDCARD {
                    node.wildcard.get_or_insert_with(Default::default)
                } else {
                    node.literal.entry(segment.clone()).or_default()
                };
                node.last = Some(entry);
            }
            node.ends = Some(entry);
        }
        root
    }

    /// The nodes under `self` that `step` leads to (a literal key matches
    /// only an object key; `*` matches any step), keeping only those where
    /// entry `entry` or a later one still writes.
    fn step<'w>(&'w self, step: &Step, entry: usize, out: &mut Vec<&'w Writes>) {
        let literal = match step {
            Step::Key(key) => self.literal.get(key),
            Step::Index(_) => None,
        };
        for next in literal.into_iter().chain(self.wildcard.as_deref()) {
            if next.last.is_some_and(|last| last >= entry) {
                out.push(next);
            }
        }
    }

    fn ends_at_or_after(nodes: &[&Writes], entry: usize) -> bool {
        nodes.iter().any(|node| node.ends.is_some_and(|last| last >= entry))
    }
}

/// What a concrete `to` path finds in the value.
enum Target {
    /// Nothing there; missing objects on the way can be created.
    Free,
    /// The value at this path (the target itself, or a list or scalar on the
    /// way to it) is in the way.
    Occupied(Vec<Step>),
    /// A list index on the way names no existing list item.
    NoListItem,
}

impl<'t> Pass<'t> {
    /// One pass of the whole table over `root`.
    fn run(root: &mut Value, renames: &'t [Rename], index: &'t TableIndex<'t>) -> Self {
        let mut present = index.written.clone();
        index.mark_keys(root, &mut present);
        let mut pass = Pass {
            renames,
            index,
            present,
            moved: PathSet::default(),
            pinned: PathSet::default(),
            skipped: Vec::new(),
            applied: Vec::new(),
            changed: false,
        };
        for entry in 0..renames.len() {
            pass.apply(root, entry);
        }
        pass
    }

    /// Whether the `from` of entry `entry` can name a value: each of its
    /// literal segments is a key somewhere in the value (or one a move of
    /// this pass may create).
    fn may_match(&self, entry: usize) -> bool {
        self.index.from_literals[entry].iter().all(|&number| self.present[number])
    }

    fn apply(&mut self, root: &mut Value, entry: usize) {
        let rename = &self.renames[entry];
        if rename.from.is_empty() || !self.may_match(entry) {
            return;
        }
        let matches = find_matches(root, &rename.from);
        if !rename.wildcards_align() {
            let applies = matches.iter().any(|(path, _)| !self.is_pinned(path) && self.is_old(root, path, entry));
            if applies {
                self.skipped.push(Skipped { entry, reason: SkipReason::WildcardsMisaligned, path: None });
            }
            return;
        }
        for (from, bindings) in matches {
            let to = substitute(&rename.to, &bindings);
            if to == from || get(root, &from).is_none() || self.is_pinned(&from) {
                continue;
            }
            // Every skip below pins the skipped value (see `Pass::pinned`).
            if is_prefix(&to, &from) {
                // `a.b → a`: the value sits below its own target, so it would
                // always count as current; say so instead of staying silent.
                self.skip(entry, SkipReason::TargetOccupied, &from);
                self.pinned.insert(&from);
                continue;
            }
            if !self.is_old(root, &from, entry) {
                continue;
            }
            if is_prefix(&from, &to) {
                // `a → a.b` on a value that does not hold `b` yet.
                self.skip(entry, SkipReason::TargetOccupied, &from);
                self.pinned.insert(&from);
                continue;
            }
            if self.is_pinned(&to) {
                // The target lies in a value that an earlier skip holds in
                // place; writing into it could undo that skip on a later pass.
                self.skip(entry, SkipReason::TargetOccupied, &from);
                self.pinned.insert(&from);
                continue;
            }
            match check_target(root, &to) {
                Target::Free => self.move_value(root, entry, from, to),
                Target::Occupied(blocker) => {
                    self.skip(entry, SkipReason::TargetOccupied, &from);
                    self.pinned.insert(&from);
                    self.pinned.insert(&blocker);
                }
                Target::NoListItem => {
                    self.skip(entry, SkipReason::WildcardsMisaligned, &from);
                    self.pinned.insert(&from);
                }
            }
        }
    }

    fn skip(&mut self, entry: usize, reason: SkipReason, from: &[Step]) {
        self.skipped.push(Skipped { entry, reason, path: Some(from.iter().map(Step::segment).collect()) });
    }

    fn is_pinned(&self, path: &[Step]) -> bool {
        self.pinned.holds_on_the_line_of(path)
    }

    /// Whether the value at `path` is in a shape that entry `entry` should
    /// migrate: this pass moved it (or a value above it) there, or no `to` of
    /// this entry or a later one names its path, a path above it, or a path
    /// inside it that holds a value not moved by this pass.
    fn is_old(&self, root: &Value, path: &[Step], entry: usize) -> bool {
        if self.was_moved(path) {
            return true;
        }
        // The `to` patterns of this entry and the later ones, followed
        // along the path: one that ends on the way names a place above the
        // value or the value's own.
        let (mut nodes, mut next) = (vec![&self.index.writes], Vec::new());
        for step in path {
            next.clear();
            for node in &nodes {
                node.step(step, entry, &mut next);
            }
            if Writes::ends_at_or_after(&next, entry) {
                return false;
            }
            if next.is_empty() {
                return get(root, path).is_some();
            }
            std::mem::swap(&mut nodes, &mut next);
        }
        get(root, path).is_some_and(|value| !self.holds_written_later(value, &mut path.to_vec(), &nodes, entry))
    }

    fn was_moved(&self, path: &[Step]) -> bool {
        self.moved.holds_at_or_above(path)
    }

    /// Whether a value inside `value` (at `path`, which leads to `nodes` of
    /// [`TableIndex::writes`]), not moved by this pass, sits where entry `entry`
    /// or a later one writes. Only the children that some `to` pattern
    /// still leads to are looked at.
    fn holds_written_later(&self, value: &Value, path: &mut Vec<Step>, nodes: &[&Writes], entry: usize) -> bool {
        let mut next = Vec::new();
        let mut visit = |path: &mut Vec<Step>, step: Step, child: &Value| {
            next.clear();
            for node in nodes {
                node.step(&step, entry, &mut next);
            }
            if next.is_empty() {
                return false;
            }
            path.push(step);
            let found = !self.was_moved(path)
                && (Writes::ends_at_or_after(&next, entry) || self.holds_written_later(child, path, &next, entry));
            path.pop();
            found
        };
        match value {
            Value::Object(map) => map.iter().any(|(key, child)| visit(path, Step::Key(key.clone()), child)),
            Value::Array(items) => {
                items.iter().enumerate().any(|(index, child)| visit(path, Step::Index(index), child))
            }
            _ => false,
        }
    }

    /// Moves the value at `from` to the free `to`, then removes the objects
    /// that the move left empty above `from`, below the paths' common part.
    fn move_value(&mut self, root: &mut Value, entry: usize, from: Vec<Step>, to: Vec<Step>) {
        let Some(value) = take(root, &from) else {
            return;
        };
        let shared = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        prune_emptied(root, &from, shared);
        if let Err(value) = insert(root, &to, value) {
            // check_target said `to` is free and removing `from` cannot
            // change the way to it; put the value back rather than lose it.
            debug_assert!(false, "target became unreachable during a move");
            let _ = insert(root, &from, value);
            return;
        }
        self.moved.remove_below(&from);
        self.moved.insert(&to);
        self.applied.push(Applied {
            entry,
            from: from.iter().map(Step::segment).collect(),
            to: to.iter().map(Step::segment).collect(),
        });
        self.changed = true;
    }
}

fn wildcard_count(path: &[String]) -> usize {
    path.iter().filter(|segment| *segment == WILDCARD).count()
}

fn is_prefix(prefix: &[Step], path: &[Step]) -> bool {
    prefix.len() <= path.len() && prefix == &path[..prefix.len()]
}

/// Every concrete path that `pattern` names in `value`, with the steps its
/// wildcards bound, in the order of the value's keys and items.
fn find_matches(value: &Value, pattern: &[String]) -> Vec<(Vec<Step>, Vec<Step>)> {
    fn walk(
        node: &Value,
        pattern: &[String],
        path: &mut Vec<Step>,
        bindings: &mut Vec<Step>,
        out: &mut Vec<(Vec<Step>, Vec<Step>)>,
    ) {
        let Some((segment, rest)) = pattern.split_first() else {
            out.push((path.clone(), bindings.clone()));
            return;
        };
        let wildcard = segment == WILDCARD;
        let mut visit = |step: Step, child: &Value, bound: bool| {
            path.push(step.clone());
            if bound {
                bindings.push(step);
            }
            walk(child, rest, path, bindings, out);
            if bound {
                bindings.pop();
            }
            path.pop();
        };
        match node {
            Value::Object(map) if wildcard => {
                for (key, child) in map {
                    visit(Step::Key(key.clone()), child, true);
                }
            }
            Value::Object(map) => {
                if let Some(child) = map.get(segment) {
                    visit(Step::Key(segment.clone()), child, false);
                }
            }
            // A list item is never the last step: it cannot leave its list.
            Value::Array(items) if wildcard && !rest.is_empty() => {
                for (index, child) in items.iter().enumerate() {
                    visit(Step::Index(index), child, true);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, pattern, &mut Vec::new(), &mut Vec::new(), &mut out);
    out
}

/// The concrete `to`: literals as keys, the k-th `*` as the k-th binding.
fn substitute(pattern: &[String], bindings: &[Step]) -> Vec<Step> {
    let mut bound = bindings.iter();
    pattern
        .iter()
        .map(|segment| match segment.as_str() {
            WILDCARD => bound.next().cloned().unwrap_or_else(|| Step::Key(segment.clone())),
            _ => Step::Key(segment.clone()),
        })
        .collect()
}

/// The concrete `to` of a skipped match, as segments, for messages.
fn concrete_to(rename: &Rename, from: &[String]) -> Vec<String> {
    let mut bound = rename.from.iter().zip(from).filter(|(segment, _)| *segment == WILDCARD).map(|(_, key)| key);
    rename
        .to
        .iter()
        .map(|segment| match segment.as_str() {
            WILDCARD => bound.next().unwrap_or(segment).clone(),
            _ => segment.clone(),
        })
        .collect()
}

fn is_prefix_str(prefix: &[String], path: &[String]) -> bool {
    prefix.len() <= path.len() && prefix == &path[..prefix.len()]
}

/// A path for people: `applications.mastodon.enable`; a segment that is
/// empty or holds a dot, quote or space is quoted as JSON.
fn show_path(path: &[String]) -> String {
    if path.is_empty() {
        return "(the whole configuration)".to_owned();
    }
    path.iter()
        .map(|segment| {
            let plain = !segment.is_empty() && !segment.contains(|c: char| c == '.' || c == '"' || c.is_whitespace());
            if plain {
                segment.clone()
            } else {
                Value::String(segment.clone()).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn get<'v>(root: &'v Value, path: &[Step]) -> Option<&'v Value> {
    path.iter().try_fold(root, |node, step| match (node, step) {
        (Value::Object(map), Step::Key(key)) => map.get(key),
        (Value::Array(items), Step::Index(index)) => items.get(*index),
        _ => None,
    })
}

fn get_mut<'v>(root: &'v mut Value, path: &[Step]) -> Option<&'v mut Value> {
    path.iter().try_fold(root, |node, step| match (node, step) {
        (Value::Object(map), Step::Key(key)) => map.get_mut(key),
        (Value::Array(items), Step::Index(index)) => items.get_mut(*index),
        _ => None,
    })
}

fn check_target(root: &Value, to: &[Step]) -> Target {
    let mut node = Some(root);
    for (depth, step) in to.iter().enumerate() {
        node = match (node, step) {
            (None, Step::Key(_)) => None,
            (None, Step::Index(_)) | (Some(Value::Object(_)), Step::Index(_)) => return Target::NoListItem,
            (Some(Value::Object(map)), Step::Key(key)) => map.get(key),
            (Some(Value::Array(items)), Step::Index(index)) => match items.get(*index) {
                Some(item) => Some(item),
                None => return Target::NoListItem,
            },
            // A scalar, or a list where a key is needed.
            (Some(_), _) => return Target::Occupied(to[..depth].to_vec()),
        };
    }
    match node {
        Some(_) => Target::Occupied(to.to_vec()),
        None => Target::Free,
    }
}

/// Removes and returns the object member at `path`.
fn take(root: &mut Value, path: &[Step]) -> Option<Value> {
    let (Step::Key(key), parent) = path.split_last()? else {
        return None;
    };
    get_mut(root, parent)?.as_object_mut()?.remove(key)
}

/// Removes the objects above `from` that are now empty, deepest first,
/// keeping the first `keep` steps (the part shared with `to`), the root, and
/// list items.
fn prune_emptied(root: &mut Value, from: &[Step], keep: usize) {
    for len in (keep.max(1)..from.len()).rev() {
        let Step::Key(key) = &from[len - 1] else {
            return;
        };
        let Some(Value::Object(parent)) = get_mut(root, &from[..len - 1]) else {
            return;
        };
        match parent.get(key) {
            Some(Value::Object(node)) if node.is_empty() => {
                parent.remove(key);
            }
            _ => return,
        }
    }
}

/// Puts `value` at `path`, creating missing objects for key steps. Gives the
/// value back if the way is blocked.
fn insert(root: &mut Value, path: &[Step], value: Value) -> Result<(), Value> {
    let Some((Step::Key(last), parents)) = path.split_last() else {
        return Err(value);
    };
    let mut node = root;
    for step in parents {
        node = match (node, step) {
            (Value::Object(map), Step::Key(key)) => {
                if !map.contains_key(key) {
                    map.insert(key.clone(), Value::Object(Map::new()));
                }
                map.get_mut(key).expect("inserted above")
            }
            (Value::Array(items), Step::Index(index)) if *index < items.len() => &mut items[*index],
            _ => return Err(value),
        };
    }
    match node {
        Value::Object(map) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        _ => Err(value),
    }
}

#[cfg(test)]
mod tests;
