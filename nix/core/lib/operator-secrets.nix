# Operator secrets (PRODUCT.md §8, seed 000 "Secrets of the operator").
#
# A secret is a string option the schema marks writeOnly + format: password.
# Slipway moves each value to OpenBao, under the vars instance
# "<application>-operator-secrets", and keeps only names in the stored
# configuration: `secretsSet` (read-only, the fields that hold a value) and
# `secretsClear` (the fields to clear). A node never sees a secret value: its
# configuration.nix names the file a secret agent would write it to.
{ options, types }:
let
  inherit (options) mkOption isOption;
in
rec {
  mkSecretOption = { description, title ? null }:
    mkOption ({ type = types.str; secret = true; inherit description; }
      // (if title == null then { } else { inherit title; }));

  # The two bookkeeping options every application carries beside its own.
  secretsOptions = {
    secretsSet = mkOption {
      type = types.listOf types.str;
      default = [ ];
      readOnly = true;
      description = "Secret fields that hold a value (kept by Slipway; the value itself is never stored here).";
    };
    secretsClear = mkOption {
      type = types.listOf types.str;
      default = [ ];
      description = "Secret fields to clear on the next deploy.";
    };
  };

  # The names of the secret options among `opts` (top level only), sorted.
  secretNames = opts: builtins.filter (n: isOption opts.${n} && opts.${n}.secret) (builtins.attrNames opts);

  # The vars instance of an application's secrets and where a node reads a field.
  secretsInstance = application: "${application}-operator-secrets";
  secretFile = application: field: "/run/secrets/${secretsInstance application}/${field}";
}
