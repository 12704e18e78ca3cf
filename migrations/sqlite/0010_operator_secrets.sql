-- PRODUCT.md §8: the operator secrets a build's effect reads, pinned at its
-- submit: {"set": [{"application", "field", "version"}], "clear":
-- [{"application", "field"}]} as JSON. Names and OpenBao KV version numbers
-- only, never a value. NULL: the build has no operator secrets.
ALTER TABLE builds ADD COLUMN operator_secrets TEXT;
