-- PRODUCT.md §10: readiness. A deploy build keeps how its instances are
-- probed, from its module source's meta ({"path", "header", "connect"}, JSON).
ALTER TABLE builds ADD COLUMN readiness TEXT;
-- Each deployed instance's readiness, from the last successful deploy
-- (`build_id`): `pending`, `ready`, `wrong_host`, `not_found` or
-- `not_ready` (the deadline `deadline_at` passed); `reason` says why it is
-- not ready (the last one seen); times are Unix ms. A destroy removes them.
CREATE TABLE instance_readiness (
    deployment_id TEXT NOT NULL,
    instance      TEXT NOT NULL,
    build_id      TEXT NOT NULL,
    url           TEXT NOT NULL,
    state         TEXT NOT NULL,
    reason        TEXT,
    probes        BIGINT NOT NULL DEFAULT 0,
    since         BIGINT NOT NULL,
    checked_at    BIGINT,
    deadline_at   BIGINT NOT NULL,
    PRIMARY KEY (deployment_id, instance)
);
