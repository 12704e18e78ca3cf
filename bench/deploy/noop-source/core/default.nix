# The deploy bench's module source (bench/deploy, `scripts/bench --only deploy`):
# pure Nix, no nixpkgs. Its configuration is a domain and nothing else; its
# deploy effect does no work (one node in nodes.json, exit 0), so what a
# deploy of it costs is Slipway's own overhead. Every output is a derivation
# whose out path is a folder holding one JSON file (docs/MODULE-SOURCE.md).
{ provider ? { }, configFile ? null }:
let
  # One output: a folder holding `file`, the JSON of `value`.
  output = name: file: value: derivation {
    inherit name;
    system = builtins.currentSystem;
    builder = "/bin/sh";
    PATH = "/usr/bin:/bin";
    json = builtins.toJSON value;
    args = [ "-c" "mkdir -p $out && printf '%s\\n' \"$json\" > $out/${file}" ];
  };
  schema = {
    "$schema" = "https://json-schema.org/draft/2020-12/schema";
    type = "object";
    additionalProperties = false;
    required = [ "domain" ];
    properties = {
      domain = { type = "string"; };
      applications = { type = "object"; additionalProperties = false; properties = { }; };
    };
  };
in
{
  schema = output "noop-schema" "schema.json" schema;
  applicationSchemas = output "noop-applications" "applications.json" { };
  renames = output "noop-renames" "renames.json" [ ];
  meta = output "noop-meta" "meta.json" {
    domain = [ "domain" ];
    applications = { };
    sections = [ ];
    catalog = [ ];
  };
  names = output "noop-names" "nodes.json" {
    nodes = [ { name = "noop"; dnsNames = [ ]; configuration = null; } ];
    disabledApplications = [ ];
  };
}
