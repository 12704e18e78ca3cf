# The options library of the reference module source (pure Nix, no nixpkgs):
# options and types from which the JSON Schema of a configuration is made,
# operator secrets, text writers and plain-derivation helpers.
let
  util = import ./util.nix;
  options = import ./options.nix { inherit util; };
  types = import ./types.nix { inherit util options; };
  secrets = import ./operator-secrets.nix { inherit options types; };
in
util // options // secrets // {
  inherit types;
  schema = import ./schema.nix { inherit util; };
  json = import ./json.nix;
  write = import ./write.nix;
}
