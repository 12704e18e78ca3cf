# The policy of Slipway's api (docs/OPENBAO.md), for OPENBAO_MOUNT=secret and
# OPENBAO_ROOT=deployments: change `secret` and `deployments` in both paths
# when yours differ. The tests load this file as it is, with their own root.
#
# A submit writes each secret value to its entry (create, update), reads the
# entry of a renamed field's old name to copy it (read), lists which entries
# of an application exist (list) and reads the current version number of an
# entry it keeps, to pin the build to it (read on metadata: versions and
# times, never a value). A submit refused after it wrote a version (a later
# write failed, the queue was full) destroys the versions it wrote (update on
# destroy: those versions only, never an entry's others). It deletes no entry.
#
# The api looks its own token up and renews it (lookup-self, renew-self),
# so that a token with a short TTL outlives the process and an expired token
# is told from a denied path.

path "secret/data/deployments/*" {
  capabilities = ["create", "update", "read"]
}

path "secret/metadata/deployments/*" {
  capabilities = ["list", "read"]
}

path "secret/destroy/deployments/*" {
  capabilities = ["update"]
}

path "auth/token/lookup-self" {
  capabilities = ["read"]
}

path "auth/token/renew-self" {
  capabilities = ["update"]
}
