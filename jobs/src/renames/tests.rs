//! The migration engine's own tests; `jobs/tests/it/migration_cases.rs` runs
//! the shared case tables through it too.

use super::*;
use serde_json::{json, Map};

/// An entry from dotted paths: `r("a.*.b", "a.*.c")`.
fn r(from: &str, to: &str) -> Rename {
    let split = |path: &str| -> Vec<String> {
        if path.is_empty() {
            Vec::new()
        } else {
            path.split('.').map(str::to_owned).collect()
        }
    };
    Rename::new(split(from), split(to))
}

/// Migrates `input`, checks that a second pass changes nothing, and
/// returns the output with the first pass's skipped entries as JSON.
fn run(table: &[Rename], input: Value) -> (Value, Value) {
    let mut value = input;
    let skipped = migrate(&mut value, table);
    let mut again = value.clone();
    migrate(&mut again, table);
    assert_eq!(again, value, "a second pass changed the output");
    (value, serde_json::to_value(skipped).unwrap())
}

fn skip(entry: usize, reason: &str, path: &str) -> Value {
    json!({"entry": entry, "reason": reason, "path": path.split('.').collect::<Vec<_>>()})
}

#[test]
fn a_list_wildcard_renames_keys_of_object_items_and_leaves_other_items_alone() {
    let table = [r("admins.*.mail", "admins.*.email")];
    let input = json!({"admins": ["root", {"mail": "a@x"}, 3, null, [1], {"name": "B"}]});
    let (output, skipped) = run(&table, input);
    assert_eq!(output, json!({"admins": ["root", {"email": "a@x"}, 3, null, [1], {"name": "B"}]}));
    assert_eq!(skipped, json!([]));
}

#[test]
fn a_literal_segment_does_not_index_a_list() {
    let table = [r("admins.0.mail", "admins.0.email")];
    let input = json!({"admins": [{"mail": "a@x"}]});
    assert_eq!(run(&table, input.clone()), (input, json!([])));
}

#[test]
fn a_wildcard_as_the_last_from_segment_moves_map_entries_but_not_list_items() {
    let table = [r("old.*", "new.*")];
    let (output, _) = run(&table, json!({"old": {"x": 1, "y": 2}, "new": {"z": 3}}));
    assert_eq!(output, json!({"new": {"x": 1, "y": 2, "z": 3}}));

    let list = json!({"old": [1, 2]});
    assert_eq!(run(&table, list.clone()), (list, json!([])));
}

#[test]
fn a_list_item_that_would_have_to_be_created_skips_as_misaligned() {
    let table = [r("admins.*.mail", "people.*.email")];
    let input = json!({"admins": [{"mail": "a@x"}]});
    let (output, skipped) = run(&table, input.clone());
    assert_eq!(output, input);
    assert_eq!(skipped, json!([skip(0, "wildcards_misaligned", "admins.0.mail")]));
}

#[test]
fn a_list_item_that_exists_in_another_list_receives_the_value() {
    let table = [r("admins.*.mail", "people.*.email")];
    let input = json!({"admins": [{"mail": "a@x"}], "people": [{"name": "A"}]});
    let (output, _) = run(&table, input);
    assert_eq!(output, json!({"admins": [{}], "people": [{"name": "A", "email": "a@x"}]}));
}

#[test]
fn moving_a_value_under_itself_skips_as_target_occupied_and_keeps_the_value() {
    let table = [r("smtp", "smtp.host")];
    for input in [json!({"smtp": "mail.example.org"}), json!({"smtp": {"port": 25}})] {
        let (output, skipped) = run(&table, input.clone());
        assert_eq!(output, input);
        assert_eq!(skipped, json!([skip(0, "target_occupied", "smtp")]));
    }
    // A value that already holds the `to` is in the new shape: no skip.
    let current = json!({"smtp": {"host": "mail.example.org", "port": 25}});
    assert_eq!(run(&table, current.clone()), (current, json!([])));
}

#[test]
fn moving_a_value_onto_its_own_container_skips_as_target_occupied() {
    let table = [r("smtp.host", "smtp")];
    let input = json!({"smtp": {"host": "mail.example.org"}});
    let (output, skipped) = run(&table, input.clone());
    assert_eq!(output, input);
    assert_eq!(skipped, json!([skip(0, "target_occupied", "smtp.host")]));
}

#[test]
fn a_from_that_is_a_prefix_of_a_deeper_to_in_another_branch_moves_normally() {
    let table = [r("a", "b.a")];
    let (output, _) = run(&table, json!({"a": {"x": 1}}));
    assert_eq!(output, json!({"b": {"a": {"x": 1}}}));
}

#[test]
fn renaming_a_path_to_itself_changes_nothing_and_skips_nothing() {
    let table = [r("a.*", "a.*")];
    let input = json!({"a": {"x": 1}});
    assert_eq!(run(&table, input.clone()), (input, json!([])));
}

#[test]
fn a_scalar_on_the_way_to_the_target_occupies_it() {
    let table = [r("host", "mail.host")];
    let input = json!({"host": "h", "mail": "legacy"});
    let (output, skipped) = run(&table, input.clone());
    assert_eq!(output, input);
    assert_eq!(skipped, json!([skip(0, "target_occupied", "host")]));
}

#[test]
fn a_list_on_the_way_to_a_key_occupies_it() {
    let table = [r("host", "mail.host")];
    let input = json!({"host": "h", "mail": ["x"]});
    assert_eq!(run(&table, input.clone()).0, input);
}

#[test]
fn a_null_target_counts_as_a_value() {
    let table = [r("a", "b")];
    let input = json!({"a": 1, "b": null});
    let (output, skipped) = run(&table, input.clone());
    assert_eq!(output, input);
    assert_eq!(skipped, json!([skip(0, "target_occupied", "a")]));
}

#[test]
fn objects_emptied_by_a_move_are_removed_all_the_way_up() {
    let table = [r("x.y.z", "w")];
    let (output, _) = run(&table, json!({"x": {"y": {"z": 1}}, "keep": {}}));
    assert_eq!(output, json!({"w": 1, "keep": {}}));
}

#[test]
fn an_emptied_list_item_stays_in_its_list() {
    let table = [r("l.*.a", "l.*.b.c")];
    let (output, _) = run(&table, json!({"l": [{"a": 1}, {}]}));
    assert_eq!(output, json!({"l": [{"b": {"c": 1}}, {}]}));
}

#[test]
fn the_configuration_itself_is_never_removed() {
    let table = [r("a", "a2")];
    let (output, _) = run(&table, json!({"a": 1}));
    assert_eq!(output, json!({"a2": 1}));
}

#[test]
fn a_misaligned_entry_that_matches_nothing_is_not_reported() {
    let table = [r("applications.*.port", "network.port")];
    let input = json!({"applications": {"mastodon": {}}});
    assert_eq!(run(&table, input.clone()), (input, json!([])));
}

#[test]
fn a_name_restored_for_another_option_keeps_its_current_value() {
    let table = [r("a", "b"), r("c", "a")];
    assert_eq!(run(&table, json!({"a": 2})).0, json!({"a": 2}));
    assert_eq!(run(&table, json!({"c": 2})).0, json!({"a": 2}));
    assert_eq!(run(&table, json!({"b": 1, "c": 2})).0, json!({"b": 1, "a": 2}));
}

#[test]
fn a_value_moved_onto_a_name_restored_later_still_follows_its_chain() {
    let table = [r("x", "a"), r("a", "b"), r("c", "a")];
    assert_eq!(run(&table, json!({"x": 1})).0, json!({"b": 1}));
    assert_eq!(run(&table, json!({"x": 1, "c": 2})).0, json!({"b": 1, "a": 2}));
}

#[test]
fn an_object_holding_a_path_that_a_later_entry_writes_is_current() {
    let table = [r("a.x", "a.w"), r("d", "a.x.z")];
    assert_eq!(run(&table, json!({"d": 1})).0, json!({"a": {"x": {"z": 1}}}));
    assert_eq!(run(&table, json!({"a": {"x": {"z": 1}}})).0, json!({"a": {"x": {"z": 1}}}));
    assert_eq!(run(&table, json!({"a": {"x": {"q": 1}}})).0, json!({"a": {"w": {"q": 1}}}));
}

#[test]
fn a_blocked_chain_keeps_both_values_where_they_are() {
    let table = [r("a", "b"), r("b", "c")];
    let (output, skipped) = run(&table, json!({"a": 1, "b": 2}));
    assert_eq!(output, json!({"a": 1, "b": 2}));
    assert_eq!(skipped, json!([skip(0, "target_occupied", "a")]));
}

#[test]
fn a_skipped_value_is_not_moved_by_a_later_entry() {
    let table = [r("a", "b"), r("b", "c"), r("a", "d")];
    let (output, skipped) = run(&table, json!({"a": 1, "b": 2}));
    assert_eq!(output, json!({"a": 1, "b": 2}));
    assert_eq!(skipped, json!([skip(0, "target_occupied", "a")]));
}

#[test]
fn the_container_of_a_blocking_value_is_not_moved_by_a_later_entry() {
    let table = [r("smtp.host", "mail.host"), r("mail", "email")];
    let input = json!({"smtp": {"host": "old"}, "mail": {"host": "new"}});
    let (output, _) = run(&table, input.clone());
    assert_eq!(output, input);
}

#[test]
fn a_table_whose_paths_overlap_oddly_still_reaches_a_fixed_point() {
    // One pass of this table is not idempotent on this input; a second
    // pass settles it (found by the randomized test below).
    let table = [r("b", "c.a.c"), r("c", "d"), r("c.c.a", "c.a.a"), r("d.b", "c.a.c"), r("d", "c.b.b")];
    let (output, _) = run(&table, json!({"b": {"d": {"a": {}}}, "d": {"a": 33}}));
    assert_eq!(output, json!({"c": {"a": {"c": {"d": {"a": {}}}}, "b": {"b": {"a": 33}}}}));
}

#[test]
fn an_empty_from_or_to_never_moves_anything() {
    let input = json!({"a": 1});
    assert_eq!(run(&[r("", "a")], input.clone()), (input.clone(), json!([])));
    let (output, skipped) = run(&[r("a", "")], input.clone());
    assert_eq!(output, input);
    assert_eq!(skipped, json!([skip(0, "target_occupied", "a")]));
}

#[test]
fn a_renames_document_without_kind_reads_as_option_entries() {
    let document = br#"[{"from": ["a"], "to": ["b"]}, {"from": ["c"], "to": ["d"], "kind": "value"}]"#;
    let table: Vec<Rename> = serde_json::from_slice(document).unwrap();
    assert_eq!(table[0].kind, RenameKind::Option);
    assert_eq!(table[1].kind, RenameKind::Value);
    assert!(serde_json::from_slice::<Vec<Rename>>(b"{}").is_err());
}

#[test]
fn a_skip_without_a_path_serializes_without_the_path_field() {
    let skipped = Skipped { entry: 3, reason: SkipReason::WildcardsMisaligned, path: None };
    assert_eq!(serde_json::to_value(skipped).unwrap(), json!({"entry": 3, "reason": "wildcards_misaligned"}));
}

#[test]
fn messages_name_the_entry_its_paths_and_the_reason() {
    let table = [r("smtp.host", "mail.host"), r("applications.*.port", "network.port")];
    let occupied =
        Skipped { entry: 0, reason: SkipReason::TargetOccupied, path: Some(vec!["smtp".into(), "host".into()]) };
    let message = occupied.message(&table);
    assert!(message.contains("renames entry 0 (smtp.host → mail.host)"), "{message}");
    assert!(message.contains("mail.host already holds a value"), "{message}");

    let misaligned = Skipped { entry: 1, reason: SkipReason::WildcardsMisaligned, path: None };
    let message = misaligned.message(&table);
    assert!(message.contains("renames entry 1 (applications.*.port → network.port)"));
    assert!(message.contains("1 `*` in from, 0 in to"), "{message}");

    let wildcard =
        Skipped { entry: 0, reason: SkipReason::TargetOccupied, path: Some(vec!["a".into(), "my.app".into()]) };
    let table = [r("a.*", "b.*")];
    assert!(wildcard.message(&table).contains(r#"b."my.app" already holds a value"#));
    assert!(wildcard.message(&[]).contains("only 0 entries"));
}

#[test]
fn section_renames_bind_a_wildcard_on_the_section_key_into_the_to_path() {
    let section = ["applications".to_owned(), "mastodon".to_owned()];
    let table = [
        r("applications.*.enabled", "applications.mastodon.flags.*"),
        r("applications.*.users.*.mail", "applications.*.users.*.email"),
        r("applications.mastodon", "apps.mastodon"),
        r("legacy.smtp", "applications.mastodon.smtp"),
        r("applications.*.x", "applications.peertube.x"),
    ];
    assert_eq!(
        section_renames(&table, &section),
        vec![r("enabled", "flags.mastodon"), r("users.*.mail", "users.*.email")]
    );
    let aligned_in_section = [r("applications.*.enabled", "applications.*.enable")];
    assert_eq!(section_renames(&aligned_in_section, &section), vec![r("enabled", "enable")]);
}

#[test]
fn section_renames_keep_a_misaligned_entry_only_while_it_stays_misaligned() {
    let section = ["applications".to_owned(), "mastodon".to_owned()];
    let table = [
        r("applications.mastodon.users.*.port", "applications.mastodon.port"),
        r("applications.*.port", "applications.mastodon.net.port"),
    ];
    assert_eq!(section_renames(&table, &section), vec![r("users.*.port", "port")]);
}

#[test]
fn section_renames_keep_the_kind_and_an_empty_section_keeps_the_table() {
    let mut entry = r("applications.mastodon.a", "applications.mastodon.b");
    entry.kind = RenameKind::Value;
    let table = vec![entry, r("x.*", "y")];
    let section = ["applications".to_owned(), "mastodon".to_owned()];
    assert_eq!(section_renames(&table, &section)[0].kind, RenameKind::Value);
    assert_eq!(section_renames(&table, &[]), table);
}

/// A small deterministic generator, so the property tests need no crate.
struct XorShift(u64);
impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const KEYS: [&str; 4] = ["a", "b", "c", "d"];

fn random_path(rng: &mut XorShift, wildcards: bool) -> Vec<String> {
    let len = 1 + rng.below(3) as usize;
    (0..len)
        .map(|_| {
            if wildcards && rng.below(5) == 0 {
                WILDCARD.to_owned()
            } else {
                KEYS[rng.below(KEYS.len() as u64) as usize].to_owned()
            }
        })
        .collect()
}

fn random_value(rng: &mut XorShift, depth: u32) -> Value {
    match rng.below(if depth == 0 { 2 } else { 5 }) {
        0 => json!(rng.below(100)),
        1 => Value::Null,
        2 => Value::Array((0..rng.below(3)).map(|_| random_value(rng, depth - 1)).collect()),
        _ => {
            let mut map = Map::new();
            for key in KEYS {
                if rng.below(2) == 0 {
                    map.insert(key.to_owned(), random_value(rng, depth - 1));
                }
            }
            Value::Object(map)
        }
    }
}

/// Every scalar in the value; a move must neither lose nor copy one.
fn leaves(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => map.values().for_each(|child| leaves(child, out)),
        Value::Array(items) => items.iter().for_each(|child| leaves(child, out)),
        other => out.push(other.to_string()),
    }
}

#[test]
fn any_table_applied_to_its_own_output_changes_nothing_and_loses_no_value() {
    let mut rng = XorShift(0x5EED_1234_ABCD_0001);
    for round in 0..20_000 {
        let table: Vec<Rename> = (0..1 + rng.below(6))
            .map(|_| {
                let wildcards = rng.below(3) == 0;
                Rename::new(random_path(&mut rng, wildcards), random_path(&mut rng, wildcards))
            })
            .collect();
        let mut input = Value::Object(Map::new());
        for key in KEYS {
            if rng.below(2) == 0 {
                input[key] = random_value(&mut rng, 3);
            }
        }
        let mut output = input.clone();
        migrate(&mut output, &table);
        let mut again = output.clone();
        migrate(&mut again, &table);
        assert_eq!(again, output, "round {round}: not idempotent\ntable: {table:?}\ninput: {input}\noutput: {output}");
        let (mut before, mut after) = (Vec::new(), Vec::new());
        leaves(&input, &mut before);
        leaves(&output, &mut after);
        before.sort();
        after.sort();
        assert_eq!(before, after, "round {round}: values lost\ntable: {table:?}\ninput: {input}");
    }
}

#[test]
fn a_chain_over_every_item_of_a_long_list_resolves_in_one_pass() {
    // Thousands of moved and pinned values in one pass (the benchmark's shape).
    let table = [r("l.*.a", "l.*.b"), r("l.*.b", "l.*.c"), r("l.*.c", "l.*.d.e")];
    // Every seventh item already holds a scalar `d`, which blocks the last entry.
    let items: Vec<Value> =
        (0..5_000).map(|i| if i % 7 == 0 { json!({"a": i, "d": 0}) } else { json!({"a": i}) }).collect();
    let (output, skipped) = run(&table, json!({ "l": items }));
    let expected: Vec<Value> =
        (0..5_000).map(|i| if i % 7 == 0 { json!({"c": i, "d": 0}) } else { json!({"d": {"e": i}}) }).collect();
    assert_eq!(output, json!({ "l": expected }));
    let blocked: Vec<Value> = (0..5_000).step_by(7).map(|i| skip(2, "target_occupied", &format!("l.{i}.c"))).collect();
    assert_eq!(skipped, Value::Array(blocked));
}

#[test]
fn an_entry_whose_from_names_a_key_that_an_earlier_move_creates_applies_in_the_same_pass() {
    let table = [r("x", "y.k"), r("y.k", "z")];
    assert_eq!(run(&table, json!({"x": 1})), (json!({"z": 1}), json!([])));
    // The key may also arrive inside a moved value.
    let table = [r("x", "y"), r("y.k", "z")];
    assert_eq!(run(&table, json!({"x": {"k": 1}})), (json!({"z": 1}), json!([])));
}
