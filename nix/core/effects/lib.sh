# Helpers shared by the deploy and destroy effects (sourced, not run).

effect=$(basename "$0")
gcroots_auto="${NIX_STATE_DIR:-/nix/var/nix}/gcroots/auto"

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
# `find` over gcroots/auto, which a busy store fills with many entries).
drop_roots() {
  roots_of "$1" | while IFS= read -r root; do
    rm -f "$root" && log "removed GC root $root ($1)"
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

# Milliseconds since the epoch (GNU date), for timings in the log.
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
