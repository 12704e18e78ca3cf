# Pixelfed: photo sharing.
{ lib, pkgs, shared }:
let
  inherit (lib) mkOption mkRenamedOption mkSecretOption types;
in
{
  title = "Pixelfed";
  defaultSubdomain = "pixel";
  webUi = true;
  requiredWhenEnabled = [ "adminEmail" ];

  options = {
    adminEmail = mkOption {
      type = shared.emailAddress;
      title = "Administrator e-mail";
      description = "The e-mail address of the first administrator.";
    };
    maxPhotoSizeKb = mkOption {
      type = types.intBetween 1 100000;
      default = 15000;
      description = "The largest photo an upload may be, in KiB.";
    };
    # History: `maxPhotoSize` became `maxPhotoSizeKb`.
    maxPhotoSize = mkRenamedOption [ "maxPhotoSizeKb" ];
    storage = mkOption {
      type = types.object {
        options = {
          backend = mkOption { type = types.enum [ "local" "s3" ]; default = "local"; description = "Where media is kept."; };
          s3Bucket = mkOption { type = types.str; description = "The S3 bucket (with the s3 backend only)."; };
        };
        # Form hint: the bucket belongs to the s3 backend, and only to it.
        hints = [{
          "if" = { properties.backend.const = "s3"; required = [ "backend" ]; };
          "then" = { required = [ "s3Bucket" ]; };
          "else" = { not.required = [ "s3Bucket" ]; };
        }];
      };
      default = { };
      description = "Media storage.";
    };

    s3SecretKey = mkSecretOption {
      title = "S3 secret key";
      description = "Secret key of the S3 account (with the s3 backend). Leave empty to keep the stored one.";
    };
  };

  packages = with pkgs; [ pixelfed postgresql redis ];
}
