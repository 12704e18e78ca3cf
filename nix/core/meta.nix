# meta.json: where things sit in a configuration (MODULE-SOURCE.md "meta.json").
{ applications, catalog }:
let
  inherit (builtins) attrNames mapAttrs;
  path = name: [ "applications" name ];
in
{
  domain = [ "domain" ];
  applications = mapAttrs
    (name: app: {
      path = path name;
      enable = [ "enable" ];
      subdomain = [ "subdomain" ];
      inherit (app) defaultSubdomain title webUi secrets;
      section = name;
    })
    applications;
  sections = map (name: { id = name; path = path name; inherit (applications.${name}) title; }) (attrNames applications);
  catalog = map (c: { inherit (c) name title subdomain webUi alwaysOn; }) catalog;
  # How a worker tells that an instance serves (PRODUCT.md §10): it asks
  # `path` under the instance's name and takes only a 200 whose `header`
  # names that host. The local provider's nodes serve nothing themselves:
  # a front door on this machine stands in for them (scripts/quickstart runs
  # one), so the probes connect there, asking for each instance's name.
  readiness = {
    path = "/api/version";
    header = "X-Instance-Host";
    connect = "http://127.0.0.1:8470";
  };
  # What the effects implement beyond the base contract (MODULE-SOURCE.md
  # "Capabilities"): "plan", dry runs that say each node's closure diff and
  # keep the planned systems alive, deploys that activate only the expected
  # systems, and generations kept for rollbacks.
  capabilities = [ "plan" ];
}
