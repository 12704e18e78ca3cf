-- Build logs as appended chunks (Q-4): appending is an insert, not a rewrite
-- of the whole log. builds.log is no longer written.
CREATE TABLE build_log_chunks (
    build_id TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    chunk    TEXT NOT NULL,
    PRIMARY KEY (build_id, seq)
);
