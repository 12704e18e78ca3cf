-- Fleet-wide slots (MS-7): a named pool of N slots shared by every worker.
-- A holder that dies leaves its row until expires_at, then the slot is free.
CREATE TABLE slots (
    pool        TEXT NOT NULL,
    holder      TEXT NOT NULL,
    acquired_at BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    PRIMARY KEY (pool, holder)
);
