# Helpers shared by the deploy and destroy effects (sourced, not run).

effect=$(basename "$0")
gcroots_auto="${NIX_STATE_DIR:-/nix/var/nix}/gcroots/auto"
tab=$(printf '\t')

log() { printf '[%s] %s\n' "$effect" "$*"; }
fail() { log "error: $*"; exit 1; }

# require VAR…: each variable must be set and not empty.
require() {
  for var in "$@"; do
    eval "[ -n \"\${$var:-}\" ]" || fail "$var is not set"
  done
}

# The absolute path of $1, its parent folder resolved (the folder itself need
# not exist). Deploy and destroy name links the same way, so the indirect GC
# roots that Nix records for them can be found again.
abspath() {
  case $1 in /*) path=$1 ;; *) path=$PWD/$1 ;; esac
  parent=$(dirname "$path")
  if [ -d "$parent" ]; then parent=$(cd "$parent" && pwd -P); fi
  printf '%s/%s\n' "${parent%/}" "$(basename "$path")"
}

# Remove every indirect GC root of Nix that points at $1 or below it (one
# `find` over gcroots/auto, which a busy store fills with many entries),
# where this effect may: in Slipway's sandbox Nix's folders are read-only,
# and the worker removes the roots whose links the effect removed.
drop_roots() {
  roots_of "$1" | while IFS= read -r root; do
    rm -f "$root" 2> /dev/null && log "removed GC root $root ($1)"
  done
}

# The indirect GC roots of Nix that point at $1 or below it, one per line.
roots_of() {
  [ -d "$gcroots_auto" ] || return 0
  find "$gcroots_auto" -maxdepth 1 -type l \( -lname "$1" -o -lname "$1/*" \) -print
}

# $1 as a JSON string (quotes and backslashes escaped, control characters dropped).
json_string() {
  printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\000-\037')"
}

# One line that says why a Nix command failed, from its log $1: the first
# "error:" line (Nix prints the primary message first), else the last line.
reason_from() {
  line=$(sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -m1 'error:' | sed 's/^[[:space:]]*error:[[:space:]]*//')
  [ -n "$line" ] || line=$(sed '/^[[:space:]]*$/d' "$1" | tail -n1)
  printf '%s\n' "${line:-unknown error}"
}

# run_logged <log file> <command…>: run the command, streaming its output
# (indented) into this effect's log as it comes and keeping a copy in the
# file; returns the command's status.
run_logged() {
  logfile=$1
  shift
  { "$@" < /dev/null 2>&1; echo $? > "$logfile.rc"; } | tee "$logfile" | while IFS= read -r line; do
    printf '    %s\n' "$line"
  done
  return "$(cat "$logfile.rc")"
}

# The closure of store path $1 ("" for none) into files named after $2:
# $2.packages, "<name> TAB <version>" of each of its store paths (sorted,
# without repeats), and $2.size, the sum of their NAR sizes in bytes. A
# store path's name (less its hash) splits into name and version at its
# first "-" followed by a digit; a name without one has version "". Store
# names hold only [A-Za-z0-9+._?=-], so neither file needs escaping in JSON.
# One `nix-store -qR`, then `nix-store -q --size` over the paths (xargs
# keeps each command line bounded); each sed works on one short line.
closure_of() {
  : > "$2.paths"
  if [ -n "$1" ]; then
    nix-store -qR "$1" > "$2.paths" 2> "$2.log" || return 1
  fi
  printf '0\n' > "$2.sizes"
  if [ -s "$2.paths" ]; then
    xargs nix-store -q --size < "$2.paths" >> "$2.sizes" 2>> "$2.log" || return 1
  fi
  awk '{ total += $1 } END { printf "%.0f\n", total }' "$2.sizes" > "$2.size"
  sed -e 's|^.*/||' -e 's|^[^-]*-||' -e "s/-\([0-9]\)/$tab\1/" -e "/$tab/!s/\$/$tab/" "$2.paths" \
    | LC_ALL=C sort -u > "$2.packages"
}

# closure_diff <system before or ""> <system after or ""> <scratch prefix>:
# prints the JSON of a node's `closure` (MODULE-SOURCE.md "closure"), the
# diff of the two closures by package name as `nix store diff-closures`
# shows it: a name only after is added, only before removed, in both with
# another set of versions changed (each side's versions sorted and joined
# with ", "); sizeDelta is the after closure's NAR size less the before's.
# Returns 1, printing nothing, when a closure cannot be read (the reason in
# <scratch prefix>.before.log or .after.log).
closure_diff() {
  if [ "$1" = "$2" ]; then
    printf '{"added": [], "removed": [], "changed": [], "sizeDelta": 0}'
    return 0
  fi
  closure_of "$1" "$3.before" && closure_of "$2" "$3.after" || return 1
  { sed "s/^/b$tab/" "$3.before.packages"; sed "s/^/a$tab/" "$3.after.packages"; } | awk -F "$tab" -v OFS="$tab" '
    $1 == "b" { before[$2] = ($2 in before) ? before[$2] ", " $3 : $3; next }
    { after[$2] = ($2 in after) ? after[$2] ", " $3 : $3 }
    END {
      for (n in after) if (!(n in before)) print "added", n, after[n]
      for (n in before) {
        if (!(n in after)) print "removed", n, before[n]
        else if (before[n] != after[n]) print "changed", n, before[n], after[n]
      }
    }' | LC_ALL=C sort > "$3.diff"
  printf '{"added": [%s], "removed": [%s], "changed": [%s], "sizeDelta": %s}' \
    "$(closure_entries added "$3.diff")" "$(closure_entries removed "$3.diff")" \
    "$(closure_entries changed "$3.diff")" "$(( $(cat "$3.after.size") - $(cat "$3.before.size") ))"
}

# The JSON objects of one kind (added, removed, changed) of a closure diff
# file, comma-separated.
closure_entries() {
  grep "^$1$tab" "$2" | awk -F "$tab" '
    { printf "%s{\"name\": \"%s\", ", (NR > 1 ? ", " : ""), $2 }
    $1 == "changed" { printf "\"before\": \"%s\", \"after\": \"%s\"}", $3, $4; next }
    { printf "\"version\": \"%s\"}", $3 }'
}

# Milliseconds since the epoch (GNU date), for timings in the log.
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
