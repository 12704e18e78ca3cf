//! One pass of the rename engine over a value ([`super::migrate`] runs
//! passes until one moves nothing), the index of the table it uses, and
//! the path helpers of both.

use super::{Applied, Rename, SkipReason, Skipped, WILDCARD};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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

/// The state of one pass of [`super::migrate`] over the table.
pub(super) struct Pass<'t> {
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
    pub(super) skipped: Vec<Skipped>,
    /// The moves of this pass, in order.
    pub(super) applied: Vec<Applied>,
    /// Whether this pass moved anything.
    pub(super) changed: bool,
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
/// per [`super::migrate`].
pub(super) struct TableIndex<'t> {
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
    pub(super) fn of(renames: &'t [Rename]) -> Self {
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
    pub(super) fn run(root: &mut Value, renames: &'t [Rename], index: &'t TableIndex<'t>) -> Self {
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

pub(super) fn wildcard_count(path: &[String]) -> usize {
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
pub(super) fn concrete_to(rename: &Rename, from: &[String]) -> Vec<String> {
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

pub(super) fn is_prefix_str(prefix: &[String], path: &[String]) -> bool {
    prefix.len() <= path.len() && prefix == &path[..prefix.len()]
}

/// A path for people: `applications.mastodon.enable`; a segment that is
/// empty or holds a dot, quote or space is quoted as JSON.
pub(super) fn show_path(path: &[String]) -> String {
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
