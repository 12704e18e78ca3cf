# renames.json (PRODUCT.md §5, seed 002 "Migration semantics"): an ordered
# list of { from; to; kind; } entries, paths from the configuration's root.
#
# - kind "option": harvested from the alias markers (mkRenamedOption) in the
#   option tree; nothing is declared. A marker among the options every
#   application has becomes one wildcard entry (applications.*.…), and a
#   marker inside a list or map item gets a "*" for the item. Chains are
#   ordered so that they resolve in one pass (a→b before b→c).
# - kind "value": declared by an application (`valueRenames`, an ordered log)
#   for keys inside an option that carries a JSON Schema as it is.
#
# The table is checked against the schema the operator gets: the last `to` of
# every chain must be offered; a `from` must be gone unless its chain brings
# the value back to it; declared entries take no wildcards. A table that
# fails a check fails the build.
{ lib, applications, schemaDoc }:
let
  inherit (builtins)
    all any attrNames concatMap elem filter genList head length sort toJSON;
  inherit (lib) isAlias isOption showPath;

  # Alias markers under `path` in an option set, and inside the options' types.
  harvest = path: options: concatMap
    (name:
      let o = options.${name}; in
      if isAlias o then [ { from = path ++ [ name ]; to = path ++ o.to; } ]
      else if isOption o then harvestType (path ++ [ name ]) o.type
      else [ ])
    (attrNames options);
  harvestType = path: type:
    if type.nested == null then [ ]
    else if type.nested.kind == "object" then harvest path type.nested.options
    else harvestType (path ++ [ "*" ]) type.nested.type;

  # Markers among the options every application has become wildcard
  # entries (applications.*.…); an application's own markers, literal ones.
  names = attrNames applications;
  under = seg: e: { from = [ "applications" seg ] ++ e.from; to = [ "applications" seg ] ++ e.to; };
  harvested =
    map (under "*") (lib.unique (concatMap (n: harvest [ ] applications.${n}.commonOptions) names))
    ++ concatMap (n: map (under n) (harvest [ ] applications.${n}.ownOptions)) names;

  # Chain order: each chain in one piece, from its head (an entry whose
  # `from` no other entry moves to), so a→b comes before b→c.
  isHead = e: !(any (x: x.to == e.from) harvested);
  chain = e: [ e ] ++ concatMap chain (filter (x: x.from == e.to) harvested);
  chains = concatMap chain
    (sort (a: b: toJSON a.from < toJSON b.from) (filter isHead harvested));
  optionEntries =
    if length chains != length harvested
    then throw "slipway: renames: the alias markers form a cycle"
    else map (e: e // { kind = "option"; }) chains;

  valueEntries = concatMap
    (n: map (e: under n e // { kind = "value"; }) applications.${n}.valueRenames)
    names;

  entries = optionEntries ++ valueEntries;

  # Checks (see the header).
  count = length entries;
  at = i: builtins.elemAt entries i;
  # Where the value that entry `i` moves ends up after the later entries.
  chainEnd = i:
    let
      go = j: to:
        if j >= count then to
        else if (at j).from == to then go (j + 1) (at j).to
        else go (j + 1) to;
    in
    go (i + 1) (at i).to;
  offeredEverywhere = lib.schema.offers all schemaDoc;
  offeredSomewhere = lib.schema.offers any schemaDoc;
  problem = i:
    let e = at i; end = chainEnd i; in
    if e.kind == "value" && (elem "*" e.from || elem "*" e.to) then "declared renames take no wildcards"
    else if !(offeredEverywhere end) then "the chain ends at ${showPath end}, which the schema does not offer"
    else if end != e.from && offeredSomewhere e.from then "${showPath e.from} is still in the schema"
    else null;
  problems = filter (p: p != null)
    (genList (i: let p = problem i; in
      if p == null then null else "entry ${toString i} (${showPath (at i).from} -> ${showPath (at i).to}): ${p}") count);
in
if problems != [ ] then throw "slipway: renames: ${head problems}" else entries
