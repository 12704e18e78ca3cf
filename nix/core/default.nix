# The reference module source (MODULE-SOURCE.md; PRODUCT.md §4, MS-1..MS-5).
#
#   nix-build core -A schema               -> $out/schema.json
#   nix-build core -A applicationSchemas   -> $out/applications.json
#   nix-build core -A renames              -> $out/renames.json
#   nix-build core -A meta                 -> $out/meta.json
#   nix-build core -A names --argstr configFile /abs/config.json -> $out/nodes.json
#
# `provider` holds the serving provider's schema-shaping coordinates, never
# credentials: `name` (default "local") and, optionally, `applications`, the
# list of applications it offers (default: all).
{ provider ? { } }:
let
  lib = import ./lib;
  inherit (builtins) elem;

  providerSettings = { name = "local"; applications = null; } // provider;

  pkgs = import ./packages { inherit lib; };
  allApplications = import ./applications { inherit lib pkgs; };
  applications =
    if providerSettings.applications == null then allApplications
    else lib.filterAttrs (name: _: elem name providerSettings.applications) allApplications;
  catalog = import ./catalog.nix { inherit pkgs; };

  configurationType = import ./options.nix { inherit lib applications; };

  schemaDoc = lib.schema.document {
    body = configurationType.schema // { title = "Deployment configuration"; };
    defs = configurationType.defs;
  };
  applicationDocs = builtins.mapAttrs
    (name: app: lib.schema.document { body = configurationType.defs.${name}; defs = configurationType.defs; })
    applications;

  nodeLib = import ./nodes { inherit lib pkgs applications catalog configurationType; };

  writeJSON = name: file: value: lib.write.writeFileDir "slipway-${name}" file (lib.json.toPrettyJSON value);
in
assert !(applications ? gateway) || throw "slipway: `gateway` is the catalog node, not an application name";
{
  schema = writeJSON "schema" "schema.json" schemaDoc;
  applicationSchemas = writeJSON "application-schemas" "applications.json" applicationDocs;
  renames = writeJSON "renames" "renames.json" (import ./renames.nix { inherit lib applications schemaDoc; });
  meta = writeJSON "meta" "meta.json" (import ./meta.nix { inherit applications catalog; });

  # Nodes, DNS names and configuration.nix store paths; builds no system.
  names = { configFile }:
    let plan = nodeLib.fromFile configFile; in
    writeJSON "names" "nodes.json" {
      nodes = map (n: { inherit (n) name dnsNames configuration; }) plan.nodes;
      inherit (plan) disabledApplications;
    };

  # For effects/deploy: one evaluation that writes every node's system and
  # SBOM derivation and returns a plan file (see nodes/default.nix).
  deployPlan = { configFile }: nodeLib.planFile (nodeLib.fromFile configFile);

  # For building by hand: nix-build core -A nodes.mastodon.system --argstr configFile …
  nodes = { configFile }:
    builtins.listToAttrs (map (n: { inherit (n) name; value = n; }) (nodeLib.fromFile configFile).nodes);
}
