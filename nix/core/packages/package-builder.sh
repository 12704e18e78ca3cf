# Builder of a stand-in package (see default.nix): a few small files, and the
# store paths of its runtime dependencies so that they are in its closure.
# shellcheck disable=SC2154  # $out, $pname, $version, $deps and $program come from the derivation
set -eu
mkdir -p "$out/share/$pname"
printf '%s\n' "$version" > "$out/share/$pname/VERSION"
: > "$out/share/$pname/runtime-dependencies"
for dep in $deps; do
  printf '%s\n' "$dep" >> "$out/share/$pname/runtime-dependencies"
done
if [ -n "$program" ]; then
  mkdir -p "$out/bin"
  printf '#!/bin/sh\necho "%s %s"\n' "$pname" "$version" > "$out/bin/$pname"
  chmod 0555 "$out/bin/$pname"
else
  mkdir -p "$out/lib"
  printf '%s %s (stand-in shared library)\n' "$pname" "$version" > "$out/lib/lib$pname.so"
fi
