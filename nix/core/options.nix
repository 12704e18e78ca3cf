# The options of a whole configuration: the deployment's domain and its
# applications (each under applications.<name>, schema in $defs/<name>).
{ lib, applications }:
let
  inherit (lib) mkOption types;
in
types.object {
  options = {
    domain = mkOption {
      type = types.named "domainName"
        (types.strMatching "^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$");
      required = true;
      title = "Domain";
      description = "The deployment's DNS domain; every instance gets a name under it.";
      example = "demo.example.org";
    };
    applications = mkOption {
      type = types.object {
        options = builtins.mapAttrs
          (_: app: mkOption { type = app.type; default = { }; title = app.title; })
          applications;
      };
      default = { };
      title = "Applications";
      description = "The applications the deployment may run.";
    };
  };
}
