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
}
