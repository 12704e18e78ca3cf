# Builder of a node's CycloneDX 1.5 SBOM (see default.nix).
#
# `closure` (written by exportReferencesGraph) lists the runtime closure of the
# node's system as blocks of: store path, deriver, reference count, references.
# Every store path becomes one component, written on one line by a function of
# the store path alone, so the same path gives the same component text in
# every node's SBOM. Its hash is the SHA-256 of the path's NAR serialisation
# (`nix-store --dump`, which reads the file system and needs no daemon).
# shellcheck disable=SC2154  # $out, $node and $nodeSystem come from the derivation
set -eu
store=${NIX_STORE:-/nix/store}

# 1. The closure as "<name without hash> TAB <path> TAB <sorted references>" lines.
: > paths.tsv
while read -r path; do
  read -r _deriver
  read -r count
  refs=""
  while [ "$count" -gt 0 ]; do
    read -r ref
    [ "$ref" = "$path" ] || refs="$refs $ref"
    count=$((count - 1))
  done
  # shellcheck disable=SC2086  # one reference per word
  refs=$(printf '%s\n' $refs | LC_ALL=C sort | tr '\n' ' ')
  printf '%s\t%s\t%s\n' "${path#"$store"/*-}" "$path" "$refs" >> paths.tsv
done < closure
LC_ALL=C sort paths.tsv > sorted.tsv

# purl segments: percent-encode the characters a store name may hold that a
# purl reserves.
purl_encode() { printf '%s' "$1" | sed 's/+/%2B/g; s/?/%3F/g; s/=/%3D/g'; }

# 2. One component per store path (a JSON object on one line).
component() {
  path=$1 base=$2
  # name and version as Nix's parseDrvName splits them: the version starts
  # at the first "-" that is not followed by a letter.
  name=$(printf '%s\n' "$base" | sed -E 's/^([^-]*(-[A-Za-z][^-]*)*)-([^A-Za-z].*)$/\1/')
  version=$(printf '%s\n' "$base" | sed -nE 's/^([^-]*(-[A-Za-z][^-]*)*)-([^A-Za-z].*)$/\3/p')
  # Paths with programs (a package's bin/, a system's sw/bin/) are applications.
  if [ -d "$path/bin" ] || [ -d "$path/sw/bin" ]; then type=application; else type=library; fi
  rm -f dump-failed
  hash=$({ nix-store --dump "$path" || : > dump-failed; } | sha256sum | cut -c1-64)
  if [ -e dump-failed ]; then echo "cannot serialise $path" >&2; exit 1; fi
  purl="pkg:nix/$(purl_encode "$name")"
  if [ -n "$version" ]; then
    purl="$purl@$(purl_encode "$version")"
    version_field=",\"version\":\"$version\""
  else
    version_field=""
  fi
  printf '{"type":"%s","bom-ref":"%s","name":"%s"%s,"purl":"%s","hashes":[{"alg":"SHA-256","content":"%s"}],"properties":[{"name":"nix:store_path","value":"%s"}]}' \
    "$type" "$path" "$name" "$version_field" "$purl" "$hash" "$path"
}

# 3. The document. Items are joined with ",\n" so the JSON never has a
# trailing comma.
tab=$(printf '\t')
node_ref="slipway-node:$node"
{
  printf '{\n  "bomFormat": "CycloneDX",\n  "specVersion": "1.5",\n  "version": 1,\n'
  printf '  "metadata": {\n    "component": {"type":"operating-system","bom-ref":"%s","name":"%s","properties":[{"name":"nix:store_path","value":"%s"}]}\n  },\n' \
    "$node_ref" "$node" "$nodeSystem"
  printf '  "components": [\n'
  first=1
  while IFS="$tab" read -r base path refs; do
    if [ "$first" = 1 ]; then first=0; else printf ',\n'; fi
    line=$(component "$path" "$base")
    printf '    %s' "$line"
  done < sorted.tsv
  printf '\n  ],\n  "dependencies": [\n'
  printf '    {"ref":"%s","dependsOn":["%s"]}' "$node_ref" "$nodeSystem"
  while IFS="$tab" read -r base path refs; do
    printf ',\n    {"ref":"%s","dependsOn":[' "$path"
    first=1
    for ref in $refs; do
      if [ "$first" = 1 ]; then first=0; else printf ','; fi
      printf '"%s"' "$ref"
    done
    printf ']}'
  done < sorted.tsv
  printf '\n  ]\n}\n'
} > "$out"
