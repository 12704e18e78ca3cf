//! The reads bench's seed: `n` deployments and their builds, inserted in
//! bulk straight into Slipway's tables (not through the api), in the shapes
//! the real code writes.
//!
//! Per 100 deployments (so a database of 100 and one of 100,000 hold the
//! same shapes): 99 with 8 builds and one with 208 (1,000 builds, 10 per
//! deployment on average). Build ids are `<deployment>.<YYYYMMDDThhmmssZ>.<6
//! of [a-z0-9]>` (ST-4) from their `queued_at`; `seq` is the submit order,
//! the deployments' builds interleaved as their submits were, one second
//! apart fleet-wide. A deployment's last build `succeeded`, except 20 in the
//! whole database that are `queued` and 2 `running`; of the earlier builds
//! about 5 % `failed`, 2 % `cancelled` before they ran, 1 % `superseded`
//! 1 % are destroys and 1 % dry runs, the rest `succeeded`, each
//! with its configuration snapshot (the demo's, ~600 bytes), instances and,
//! once it ran, its run report. Each deployment has its readiness rows (2
//! instances, §10), two SBOM rows (`ready`, a document's rest without
//! components) and its last build a log of two 800-byte chunks; older logs
//! were swept. apalis's job rows and `deployment_events` are not
//! seeded: none of the measured reads touches them.
//!
//! PostgreSQL generates the rows with `generate_series` and `md5`, SQLite
//! with a recursive CTE and `randomblob`; either runs as one transaction.

use serde_json::{json, Value};

/// 2026-01-01T00:00:00Z, Unix ms: the first submit.
const BASE_MS: i64 = 1_767_225_600_000;

/// Queued builds in the whole database, whatever its size.
pub const QUEUED: usize = 20;

fn text(value: &Value) -> String {
    let t = value.to_string();
    assert!(!t.contains('\''), "seed texts are SQL literals");
    t
}

/// `replace('<template>', 'DOMAIN', <expr>)`.
fn with_domain(template: &str, expr: &str) -> String {
    format!("replace('{template}', 'DOMAIN', {expr})")
}

/// The statements seeding `n` deployments (a multiple of 100) on
/// PostgreSQL (`postgres`) or SQLite, to run as one batch; the caller runs
/// `VACUUM ANALYZE` on PostgreSQL afterwards (autovacuum's steady state).
pub fn sql(postgres: bool, n: usize) -> String {
    assert!(n >= 100 && n.is_multiple_of(100), "the seed's shapes repeat every 100 deployments");
    let queued_every = n / QUEUED;
    let running_every = n / 2;
    let numbers = |name: &str, hi: usize| {
        if postgres {
            format!("generate_series(1, {hi}) AS {name}(x)")
        } else {
            format!("(WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s WHERE x < {hi}) SELECT x FROM s) AS {name}")
        }
    };
    let (dep_id, suffix, stamp) = if postgres {
        (
            "'d' || substr(md5('dep' || x), 1, 15)",
            "substr(md5(b.deployment_id || b.j), 1, 6)",
            "to_char(to_timestamp(b.q / 1000) AT TIME ZONE 'UTC', 'YYYYMMDD\"T\"HH24MISS\"Z\"')",
        )
    } else {
        (
            "'d' || lower(hex(randomblob(7))) || (x % 10)",
            "lower(hex(randomblob(3)))",
            "strftime('%Y%m%dT%H%M%SZ', b.q / 1000, 'unixepoch')",
        )
    };
    let config = text(&json!({
        "domain": "DOMAIN",
        "applications": {
            "mastodon": {"enable": true, "subdomain": "social", "adminEmail": "admin@DOMAIN",
                         "registrations": "approval", "moderators": [{"username": "alice", "role": "admin"}],
                         "secretsSet": [], "secretsClear": []},
            "peertube": {"enable": true, "subdomain": "tube", "adminEmail": "video@DOMAIN",
                         "transcoding": {"threads": 2, "resolutions": ["480p", "720p"]},
                         "settings": {"instance": {"name": "Demo PeerTube"}, "signup": {"enabled": false}},
                         "secretsSet": [], "secretsClear": []},
            "pixelfed": {"enable": false, "secretsSet": [], "secretsClear": []}
        }
    }));
    let instances = text(&json!([
        {"name": "mastodon", "domain": "social.DOMAIN", "url": "https://social.DOMAIN/", "section": "mastodon"},
        {"name": "peertube", "domain": "tube.DOMAIN", "url": "https://tube.DOMAIN/", "section": "peertube"}
    ]));
    let names = text(&json!({
        "nodes": [
            {"name": "web", "dnsNames": ["social.DOMAIN", "tube.DOMAIN"],
             "configuration": "/nix/store/0000000000000000000000000000000a-web-configuration.nix"},
            {"name": "db", "dnsNames": [],
             "configuration": "/nix/store/0000000000000000000000000000000b-db-configuration.nix"}
        ],
        "disabledApplications": ["pixelfed"]
    }));
    let report = text(&json!({
        "build_id": "BUILD", "deployment_id": "DEPLOYMENT", "kind": "deploy", "status": "STATUS", "attempt": 1,
        "exit_code": 0, "duration_ms": 41250,
        "nodes": [
            {"name": "web", "outcome": "deployed", "dns_names": ["social.DOMAIN", "tube.DOMAIN"],
             "system": "/nix/store/0000000000000000000000000000000c-nixos-system-web", "sbom": "ready"},
            {"name": "db", "outcome": "deployed", "dns_names": [],
             "system": "/nix/store/0000000000000000000000000000000d-nixos-system-db", "sbom": "ready"}
        ],
        "warnings": [], "summary": {"nodes": 2, "failed": 0, "sboms_ready": 2}
    }));
    let sbom = text(&json!({
        "bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1,
        "serialNumber": "urn:uuid:00000000-0000-4000-8000-000000000000",
        "metadata": {"timestamp": "2026-01-01T00:00:00Z",
                     "component": {"type": "operating-system", "name": "NODE", "bom-ref": "NODE"}}
    }));
    let log_chunk: String =
        "building /nix/store/0000000000000000000000000000000e-unit.drv...\n".repeat(13)[..800].to_owned();
    let domain = "d.id || '.example.org'";
    let mut out = vec!["BEGIN;".to_owned()];
    out.push(format!(
        "CREATE TEMP TABLE seed_d AS SELECT x AS i, {dep_id} AS id, CASE WHEN x % 100 = 0 THEN 208 ELSE 8 END AS nb \
         FROM {};",
        numbers("n", n)
    ));
    out.push(format!(
        "INSERT INTO deployments (id, configuration, module_source, domain, instances, names, version, created_at, updated_at) \
         SELECT d.id, {}, NULL, {domain}, {}, {}, d.nb, {BASE_MS} + d.i * 1000, {BASE_MS} + d.i * 1000 \
         FROM seed_d d ORDER BY d.i;",
        with_domain(&config, domain),
        with_domain(&instances, domain),
        with_domain(&names, domain)
    ));
    // Every build with its place in submit order (`q`, its queued_at).
    out.push(format!(
        "CREATE TEMP TABLE seed_b AS SELECT b.*, b.deployment_id || '.' || {stamp} || '.' || {suffix} AS id FROM (\
         SELECT d.id AS deployment_id, d.i AS i, d.nb AS nb, j.x AS j, (j.x = d.nb) AS last, \
         (d.i * 7919 + j.x * 104729) % 1000 AS r, {BASE_MS} + (ROW_NUMBER() OVER (ORDER BY j.x, d.i)) * 1000 AS q \
         FROM seed_d d JOIN {} ON j.x <= d.nb) AS b;",
        numbers("j", 208)
    ));
    let status = format!(
        "CASE WHEN b.last AND b.i % {queued_every} = 1 THEN 'queued' WHEN b.last AND b.i % {running_every} = 2 THEN 'running' \
         WHEN b.last THEN 'succeeded' WHEN b.r < 50 THEN 'failed' WHEN b.r < 60 THEN 'cancelled' \
         WHEN b.r < 80 THEN 'superseded' ELSE 'succeeded' END"
    );
    let ran = "status IN ('succeeded', 'failed', 'running')";
    out.push(format!(
        "INSERT INTO builds (id, deployment_id, kind, status, dispatched, reason, error, configuration, module_source, \
         instances, report, attempts, worker, version, queued_at, started_at, finished_at, dry_run) \
         SELECT id, deployment_id, kind, status, 1, \
         CASE WHEN status = 'failed' THEN 'effect_failed' WHEN status IN ('cancelled', 'superseded') THEN status END, \
         CASE WHEN status = 'failed' THEN 'the effect exited with status 1; see the log' \
              WHEN status = 'cancelled' THEN 'cancelled before it ran' \
              WHEN status = 'superseded' THEN 'superseded by a later submit, submitted before this one ran' END, \
         {}, NULL, {}, \
         CASE WHEN status IN ('succeeded', 'failed') THEN \
           replace(replace(replace({}, 'BUILD', id), 'DEPLOYMENT', deployment_id), 'STATUS', status) END, \
         CASE WHEN {ran} THEN 1 ELSE 0 END, CASE WHEN {ran} THEN 'slipway-worker@host-1-4242-k3j9x' END, \
         3, q, CASE WHEN {ran} THEN q + 2000 END, \
         CASE WHEN status IN ('succeeded', 'failed') THEN q + 45000 \
              WHEN status IN ('cancelled', 'superseded') THEN q + 1000 END, \
         dry_run FROM (\
           SELECT b.id, b.deployment_id, b.deployment_id || '.example.org' AS domain, b.q, {status} AS status, \
           CASE WHEN NOT b.last AND b.r >= 990 THEN 'destroy' ELSE 'deploy' END AS kind, \
           CASE WHEN NOT b.last AND b.r >= 980 AND b.r < 990 THEN 1 ELSE 0 END AS dry_run \
           FROM seed_b b) AS s ORDER BY q;",
        with_domain(&config, "domain"),
        with_domain(&instances, "domain"),
        with_domain(&report, "domain"),
    ));
    out.push(
        "INSERT INTO instance_readiness (deployment_id, instance, build_id, url, state, reason, probes, since, checked_at, deadline_at) \
         SELECT b.deployment_id, i.name, b.id, 'https://' || i.name || '.' || b.deployment_id || '.example.org/', 'ready', NULL, 2, \
         b.q + 45000, b.q + 47000, b.q + 645000 FROM seed_b b CROSS JOIN \
         (SELECT 'mastodon' AS name UNION ALL SELECT 'peertube') AS i WHERE b.last;"
            .to_owned(),
    );
    out.push(format!(
        "INSERT INTO sboms (deployment_id, node, build_id, status, reason, document, created_at) \
         SELECT b.deployment_id, nd.node, b.id, 'ready', NULL, replace('{sbom}', 'NODE', nd.node), b.q + 45000 \
         FROM seed_b b CROSS JOIN (SELECT 'db' AS node UNION ALL SELECT 'web') AS nd WHERE b.last;"
    ));
    out.push(format!(
        "INSERT INTO build_log_chunks (build_id, seq, chunk) \
         SELECT b.id, 4294967296 + k.k, '{log_chunk}' FROM seed_b b CROSS JOIN \
         (SELECT 0 AS k UNION ALL SELECT 1) AS k WHERE b.last;"
    ));
    out.push("DROP TABLE seed_b;".to_owned());
    out.push("DROP TABLE seed_d;".to_owned());
    out.push("COMMIT;".to_owned());
    out.join("\n")
}
