# The applications of the reference source. Each file is a function of
# { lib, pkgs, shared } returning:
#   title, defaultSubdomain, webUi   what meta.json says of it
#   requiredWhenEnabled              options the form hint requires when enabled
#   options                          its own options and alias markers
#   hints ? [ ]                      further form hints on its object
#   valueRenames ? [ ]               declared renames inside JSON-valued options
#   packages                         what its node runs (beside the base set)
# `mkApplication` adds what every application has (enable, subdomain,
# secretsSet, secretsClear and their history) and its type ($defs/<name>).
{ lib, pkgs }:
let
  inherit (lib) mkOption mkRenamedOption types;

  # Named types several applications use (published once under $defs).
  shared = {
    subdomain = types.named "subdomain" (types.strMatching "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$");
    emailAddress = types.named "emailAddress" (types.strMatching "^[^@ ]+@[^@ ]+\\.[^@ ]+$");
  };

  # Form hint: when the application is enabled, these options are required.
  requiredWhenEnabled = names: {
    "if" = { properties.enable.const = true; required = [ "enable" ]; };
    "then" = { required = names; };
  };

  # The options every application has, beside its own.
  commonOptions = app: {
    enable = mkOption {
      type = types.bool;
      default = false;
      title = "Enable ${app.title}";
      description = "Whether the deployment runs ${app.title} (on a node of its own).";
    };
    subdomain = mkOption {
      type = shared.subdomain;
      default = app.defaultSubdomain;
      description = "The DNS label of ${app.title} under the deployment's domain.";
    };
    # History: `domainName` became `domain`, which became `subdomain`.
    domainName = mkRenamedOption [ "domain" ];
    domain = mkRenamedOption [ "subdomain" ];
  } // lib.secretsOptions;

  mkApplication = name: file:
    let
      app = import file { inherit lib pkgs shared; };
      options = commonOptions app // app.options;
    in
    app // {
      inherit name options;
      # Kept apart for the renames harvester: markers among the common
      # options are the same in every application (one wildcard entry).
      commonOptions = commonOptions app;
      ownOptions = app.options;
      valueRenames = app.valueRenames or [ ];
      secrets = lib.secretNames options;
      type = types.named name (types.object {
        inherit options;
        hints = [ (requiredWhenEnabled app.requiredWhenEnabled) ] ++ app.hints or [ ];
      });
    };
in
builtins.mapAttrs mkApplication {
  mastodon = ./mastodon.nix;
  peertube = ./peertube.nix;
  pixelfed = ./pixelfed.nix;
}
