# Small attribute-set and list helpers. The reference source has no nixpkgs,
# so the few functions it needs from nixpkgs' lib are written out here.
let
  inherit (builtins)
    attrNames concatMap concatStringsSep filter foldl' head listToAttrs toJSON;
in
rec {
  # The attributes of `set` for which `pred name value` holds.
  filterAttrs = pred: set:
    listToAttrs (concatMap
      (name: if pred name set.${name} then [ { inherit name; value = set.${name}; } ] else [ ])
      (attrNames set));

  mapAttrsToList = f: set: map (name: f name set.${name}) (attrNames set);

  optionalAttrs = cond: set: if cond then set else { };

  # An option path for messages: [ "applications" "mastodon" "enable" ] -> "applications.mastodon.enable".
  showPath = path: concatStringsSep "." path;

  # Merge named JSON Schema definitions ($defs). Two types may bring the same
  # name only with the same schema; anything else is a bug in the source.
  mergeDefs = foldl'
    (acc: defs: acc // listToAttrs (map
      (name:
        if acc ? ${name} && toJSON acc.${name} != toJSON defs.${name}
        then throw "slipway: two different schemas are both named \$defs/${name}"
        else { inherit name; value = defs.${name}; })
      (attrNames defs)))
    { };

  # Stable de-duplication (first occurrence wins).
  unique = foldl' (acc: x: if builtins.elem x acc then acc else acc ++ [ x ]) [ ];

  # The first element of `list` satisfying `pred`, or `default`.
  findFirst = pred: default: list:
    let found = filter pred list; in if found == [ ] then default else head found;

  # How many elements of `list` equal `x`.
  count = x: list: builtins.length (filter (y: y == x) list);
}
