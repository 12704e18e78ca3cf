# Stand-in packages for the node systems. Without nixpkgs, each package is a
# tiny derivation named like the real one (pname-version) that writes a few
# files and references its runtime dependencies, so that a node's closure (and
# its SBOM) looks like a real system's: a shared base, plus per-application
# packages that several nodes share.
{ lib }:
let
  # mkPackage { pname; version; deps ? [ ]; program ? false; }
  # `program` packages have bin/<pname> (SBOM type "application"), the others
  # lib/lib<pname>.so (type "library").
  mkPackage = { pname, version, deps ? [ ], program ? false }: lib.write.mkDerivation {
    name = "${pname}-${version}";
    inherit pname version deps program;
    args = [ ./package-builder.sh ];
  };
in
rec {
  # The release of the reference source's systems (the version of every
  # slipway-system-<node> store path).
  release = "0.1.0";

  glibc = mkPackage { pname = "glibc"; version = "2.39-52"; };
  zlib = mkPackage { pname = "zlib"; version = "1.3.1"; deps = [ glibc ]; };
  openssl = mkPackage { pname = "openssl"; version = "3.0.13"; deps = [ glibc zlib ]; };
  cacert = mkPackage { pname = "cacert"; version = "3.101"; };
  bash = mkPackage { pname = "bash"; version = "5.2p26"; deps = [ glibc ]; program = true; };
  coreutils = mkPackage { pname = "coreutils"; version = "9.5"; deps = [ glibc ]; program = true; };
  systemd = mkPackage { pname = "systemd"; version = "255.9"; deps = [ glibc openssl ]; program = true; };
  nginx = mkPackage { pname = "nginx"; version = "1.26.1"; deps = [ glibc openssl zlib ]; program = true; };

  postgresql = mkPackage { pname = "postgresql"; version = "16.3"; deps = [ glibc openssl ]; program = true; };
  redis = mkPackage { pname = "redis"; version = "7.2.5"; deps = [ glibc openssl ]; program = true; };
  nodejs = mkPackage { pname = "nodejs"; version = "20.15.0"; deps = [ glibc openssl zlib ]; program = true; };
  ffmpeg = mkPackage { pname = "ffmpeg"; version = "6.1.1"; deps = [ glibc zlib ]; program = true; };
  imagemagick = mkPackage { pname = "imagemagick"; version = "7.1.1-34"; deps = [ glibc zlib ]; program = true; };
  ruby = mkPackage { pname = "ruby"; version = "3.2.4"; deps = [ glibc openssl zlib ]; program = true; };
  php = mkPackage { pname = "php"; version = "8.3.8"; deps = [ glibc openssl zlib ]; program = true; };
  lego = mkPackage { pname = "lego"; version = "4.17.4"; deps = [ cacert ]; program = true; };

  mastodon = mkPackage { pname = "mastodon"; version = "4.2.10"; deps = [ ruby nodejs imagemagick ffmpeg ]; program = true; };
  peertube = mkPackage { pname = "peertube"; version = "6.1.0"; deps = [ nodejs ffmpeg ]; program = true; };
  pixelfed = mkPackage { pname = "pixelfed"; version = "0.12.3"; deps = [ php imagemagick ]; program = true; };
  slipway-dashboard = mkPackage { pname = "slipway-dashboard"; version = "0.1.0"; deps = [ nodejs ]; program = true; };

  # Every node runs these.
  base = [ glibc bash coreutils openssl cacert systemd nginx ];
}
