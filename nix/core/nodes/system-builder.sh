# Builder of a node's system (see default.nix): the node's packages, their
# programs under sw/bin, and its configuration.nix, all referenced from $out
# so that they are the system's runtime closure.
# shellcheck disable=SC2154  # $out, $node, $configuration and $packages come from the derivation
set -eu
mkdir -p "$out/sw/bin"
ln -s "$configuration" "$out/configuration.nix"
printf '%s\n' "$node" > "$out/node"
: > "$out/packages"
for package in $packages; do
  printf '%s\n' "$package" >> "$out/packages"
  if [ -d "$package/bin" ]; then
    for program in "$package"/bin/*; do ln -s "$program" "$out/sw/bin/"; done
  fi
done
printf '#!/bin/sh\necho "node %s: system %s is active"\n' "$node" "$out" > "$out/activate"
chmod 0555 "$out/activate"
