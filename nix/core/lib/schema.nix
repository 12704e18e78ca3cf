# Whole JSON Schema documents, and questions asked of them.
{ util }:
let
  inherit (builtins)
    attrValues concatMap genericClosure head isAttrs isList isString listToAttrs
    substring stringLength tail;
  inherit (util) optionalAttrs;

  dialect = "https://json-schema.org/draft/2020-12/schema";
  defsPrefix = "#/$defs/";

  # The names of the definitions a schema fragment references directly.
  refsOf = v:
    if isAttrs v then
      (if isString (v."$ref" or null) then [ (refName v."$ref") ] else [ ])
      ++ concatMap refsOf (attrValues v)
    else if isList v then concatMap refsOf v
    else [ ];

  refName = ref:
    let n = stringLength defsPrefix; in
    if substring 0 n ref == defsPrefix then substring n (stringLength ref - n) ref
    else throw "slipway: only local references (${defsPrefix}…) are supported, not ${ref}";
in
rec {
  # A standalone 2020-12 document for `body`, carrying only the definitions
  # (from `defs`) that it references, directly or through other definitions.
  document = { body, defs }:
    let
      used = map (x: x.key) (genericClosure {
        startSet = map (key: { inherit key; }) (refsOf body);
        operator = item: map (key: { inherit key; }) (refsOf defs.${item.key});
      });
    in
    { "$schema" = dialect; } // body
    // optionalAttrs (used != [ ]) {
      "$defs" = listToAttrs (map (name: { inherit name; value = defs.${name}; }) used);
    };

  # Follow a local $ref of `doc` to the schema it names.
  resolve = doc: s: if isAttrs s && s ? "$ref" then resolve doc doc."$defs".${refName s."$ref"} else s;

  # Does `path` lead to a value the schema `doc` offers? A "*" segment stands
  # for every property of an object, every value of a map or every item of a
  # list. `quantifier` is builtins.all (the path exists along every branch a
  # wildcard opens) or builtins.any (along at least one).
  offers = quantifier: doc: path:
    let
      go = schema: path:
        if path == [ ] then true
        else
          let
            s = resolve doc schema;
            seg = head path;
            rest = tail path;
            props = s.properties or { };
            values = s.additionalProperties or false;
          in
          if seg == "*" then
            (if props != { } then quantifier (p: go p rest) (attrValues props)
             else if isAttrs values then go values rest
             else if s ? items then go s.items rest
             else false)
          else if props ? ${seg} then go props.${seg} rest
          else if isAttrs values then go values rest
          else false;
    in
    go doc path;
}
