# Mastodon: microblogging.
{ lib, pkgs, shared }:
let
  inherit (lib) mkOption mkRenamedOption mkSecretOption types;
in
{
  title = "Mastodon";
  defaultSubdomain = "social";
  webUi = true;
  requiredWhenEnabled = [ "adminEmail" ];

  options = {
    adminEmail = mkOption {
      type = shared.emailAddress;
      title = "Administrator e-mail";
      description = "The e-mail address of the instance's first administrator.";
    };
    # History: `email` became `contactEmail`, which became `adminEmail`.
    email = mkRenamedOption [ "contactEmail" ];
    contactEmail = mkRenamedOption [ "adminEmail" ];

    registrations = mkOption {
      type = types.enum [ "open" "approval" "closed" ];
      default = "approval";
      description = "Who may sign up: anyone, anyone an administrator approves, or nobody.";
    };
    singleUserMode = mkOption {
      type = types.bool;
      default = false;
      description = "Run the instance for one account only.";
    };
    maxPostLength = mkOption {
      type = types.intBetween 500 10000;
      default = 500;
      description = "The longest post, in characters.";
    };
    moderators = mkOption {
      type = types.listOf (types.object {
        options = {
          username = mkOption { type = types.str; required = true; description = "Local account name."; };
          role = mkOption { type = types.enum [ "moderator" "admin" ]; default = "moderator"; description = "Granted role."; };
          # History: a moderator's `name` became `username`.
          name = mkRenamedOption [ "username" ];
        };
      });
      default = [ ];
      description = "Accounts that get a staff role when the instance starts.";
    };

    translationApiKey = mkSecretOption {
      title = "Translation API key";
      description = "The DeepL API key that translates posts. Leave empty to keep the stored key.";
    };
    # History: `deeplApiKey` became `translationApiKey` (a renamed secret).
    deeplApiKey = mkRenamedOption [ "translationApiKey" ];
  };

  packages = with pkgs; [ mastodon postgresql redis ];
}
