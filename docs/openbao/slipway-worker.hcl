# The policy of Slipway's workers (docs/OPENBAO.md), for OPENBAO_MOUNT=secret
# and OPENBAO_ROOT=deployments: change `secret` and `deployments` in both
# paths when yours differ. The tests load this file as it is, with their own
# root.
#
# For a deploy, the worker (never its effect) reads the secret values the
# nodes need (read) and, once the nodes run a configuration that no longer
# names a cleared field, deletes that entry with every version (delete on
# its metadata); list (names only, never values) is its readiness check.
# It writes nothing.
#
# The worker looks its own token up and renews it (lookup-self, renew-self),
# so that a token with a short TTL outlives the process, and looks it up
# before a deploy reads or clears anything.

path "secret/data/deployments/*" {
  capabilities = ["read"]
}

path "secret/metadata/deployments/*" {
  capabilities = ["list", "delete"]
}

path "auth/token/lookup-self" {
  capabilities = ["read"]
}

path "auth/token/renew-self" {
  capabilities = ["update"]
}
