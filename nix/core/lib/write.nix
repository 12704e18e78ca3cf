# Plain derivations (no stdenv): every builder is the host's /bin/sh with the
# host's tools on PATH (Debian's Nix builds with sandbox = false).
let
  common = {
    system = builtins.currentSystem;
    builder = "/bin/sh";
    PATH = "/usr/bin:/bin";
    preferLocalBuild = true;
    allowSubstitutes = false;
  };
in
rec {
  # A derivation from `attrs` (name, args and environment) with the common settings.
  mkDerivation = attrs: derivation (common // attrs);

  # A derivation whose output is a folder holding one file, `file`, with `text`
  # (the shape of every module-source output, MODULE-SOURCE.md "Outputs").
  writeFileDir = name: file: text: mkDerivation {
    inherit name file text;
    passAsFile = [ "text" ];
    args = [ "-c" ''mkdir "$out" && cp "$textPath" "$out/$file"'' ];
  };
}
