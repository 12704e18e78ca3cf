# PeerTube: video hosting.
{ lib, pkgs, shared }:
let
  inherit (lib) mkOption mkSecretOption types;
in
{
  title = "PeerTube";
  defaultSubdomain = "tube";
  webUi = true;
  requiredWhenEnabled = [ "adminEmail" ];

  options = {
    adminEmail = mkOption {
      type = shared.emailAddress;
      title = "Administrator e-mail";
      description = "The e-mail address of the root account.";
    };
    transcoding = mkOption {
      type = types.object {
        options = {
          enable = mkOption { type = types.bool; default = true; description = "Transcode uploads."; };
          threads = mkOption { type = types.intBetween 1 16; default = 2; description = "Transcoding threads."; };
          resolutions = mkOption {
            type = types.listOf (types.enum [ "240p" "360p" "480p" "720p" "1080p" ]);
            default = [ "480p" "720p" ];
            description = "Resolutions made for every video.";
          };
        };
      };
      default = { };
      description = "Video transcoding.";
    };
    blockedInstances = mkOption {
      type = types.attrsOf types.str;
      default = { };
      description = "Instances this one does not federate with: domain -> reason.";
    };
    # PeerTube's own settings, as upstream documents them: one option whose
    # value follows upstream's schema. Renames inside it are declared below.
    settings = mkOption {
      type = types.json {
        type = "object";
        additionalProperties = false;
        properties = {
          instance = {
            type = "object";
            additionalProperties = false;
            properties = {
              name = { type = "string"; };
              shortDescription = { type = "string"; };
            };
          };
          signup = {
            type = "object";
            additionalProperties = false;
            properties = {
              enabled = { type = "boolean"; };
              userLimit = { type = "integer"; minimum = -1; };
              requiresApproval = { type = "boolean"; };
            };
          };
        };
      };
      default = { };
      description = "PeerTube settings (its production.yaml) as JSON.";
    };

    smtpPassword = mkSecretOption {
      title = "SMTP password";
      description = "Password of the mail account PeerTube sends from. Leave empty to keep the stored one.";
    };
  };

  # Renames inside `settings` (declared: upstream moves keys without alias
  # markers). An ordered log: entries are only ever added.
  valueRenames = [
    # signup.limit became signup.maxUsers, then signup.userLimit (a chain).
    { from = [ "settings" "signup" "limit" ]; to = [ "settings" "signup" "maxUsers" ]; }
    { from = [ "settings" "signup" "maxUsers" ]; to = [ "settings" "signup" "userLimit" ]; }
    # instance.shortDescription became instance.summary, and upstream later
    # restored the old name: the chain ends where it began.
    { from = [ "settings" "instance" "shortDescription" ]; to = [ "settings" "instance" "summary" ]; }
    { from = [ "settings" "instance" "summary" ]; to = [ "settings" "instance" "shortDescription" ]; }
  ];

  packages = with pkgs; [ peertube postgresql redis ];
}
