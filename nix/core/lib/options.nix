# Options: the leaves of a configuration, as in the NixOS module system, and
# alias markers that record where an option moved (the harvested renames).
{ util }:
let
  inherit (builtins) attrNames concatStringsSep filter isAttrs;
  inherit (util) optionalAttrs;

  # Keys mkOption accepts; a misspelt key is an error, not a silent no-op.
  knownKeys = [ "type" "default" "description" "title" "example" "secret" "readOnly" "required" ];
in
rec {
  # mkOption { type; default?; description?; title?; example?; secret?; readOnly?; required? }
  #
  # - An option without `default` is absent from a configuration that does not
  #   set it; `required = true` makes the schema demand it.
  # - `secret = true` marks an operator secret (PRODUCT.md §8): a string the
  #   schema makes writeOnly, that never reaches a node's configuration.nix.
  mkOption = args@{ type, ... }:
    let unknown = filter (k: !(builtins.elem k knownKeys)) (attrNames args); in
    if unknown != [ ] then throw "slipway: mkOption does not know ${concatStringsSep ", " unknown}"
    else if (args.secret or false) && type.schema.type or null != "string"
    then throw "slipway: a secret option must be a string"
    else { _type = "option"; secret = false; readOnly = false; required = false; } // args;

  # An alias marker: "this option moved to `to`" (a path relative to the object
  # that holds the marker). The schema leaves it out; the renames output
  # harvests it (see ../renames.nix), like NixOS' mkRenamedOptionModule.
  mkRenamedOption = to: { _type = "alias"; inherit to; };

  isOption = x: isAttrs x && x._type or null == "option";
  isAlias = x: isAttrs x && x._type or null == "alias";

  # The JSON Schema of one option: its type's schema plus the annotations a
  # form shows. Defaults of objects are left out (their fields carry their own).
  optionSchema = opt:
    (if opt.secret
     then { type = "string"; writeOnly = true; format = "password"; }
     else opt.type.schema)
    // optionalAttrs (opt ? title) { inherit (opt) title; }
    // optionalAttrs (opt ? description) { inherit (opt) description; }
    // optionalAttrs (opt ? example) { examples = [ opt.example ]; }
    // optionalAttrs opt.readOnly { readOnly = true; }
    // optionalAttrs (opt ? default && !opt.secret && !isAttrs opt.default) { inherit (opt) default; };
}
