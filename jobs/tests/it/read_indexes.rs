//! The indexes the reads at scale need (docs/BENCHMARKS.md "Reads at
//! scale"): migration 0016 keeps the builds stored before it and lets a
//! deployment's latest succeeded build be found among its own builds.

use slipway_jobs::store::builds;
use slipway_jobs::store::{Db, Engine, Q};
use slipway_jobs::test_support::TestDatabase;

/// `store::builds::latest_succeeded`'s statement (its columns left out:
/// they do not change the plan).
const LATEST_SUCCEEDED: &str =
    "SELECT id FROM builds b WHERE b.deployment_id = $1 AND b.dry_run = 0 AND b.status = 'succeeded' ORDER BY b.seq DESC LIMIT 1";

/// A database at migration 0015 with builds of two deployments, then
/// migrated: the builds are all there, the latest succeeded one of each is
/// found, and the index that finds it is `(deployment_id, status, seq)`,
/// which SQLite uses (it scanned every succeeded build through
/// `builds_by_status` before) and which replaced `builds_waiting`.
async fn builds_stored_before_migration_0016_are_read_by_deployment_and_status_after_it(engine: Engine) {
    let test_db = TestDatabase::new(engine).await;
    {
        let db = slipway_jobs::test_support::migrated_before(engine, &test_db, 16).await;
        let mut conn = db.acquire().await.unwrap();
        for d in ["a", "b"] {
            Q::new(
                "INSERT INTO deployments (id, configuration, instances, version, created_at, updated_at)
                 VALUES ($1, '{}', '[]', 1, 0, 0)",
            )
            .text(d)
            .execute(&mut conn)
            .await
            .unwrap();
        }
        // Interleaved as submits are; a's last succeeded build is a-2, b's b-3.
        for (id, deployment, status) in [
            ("a-1", "a", "succeeded"),
            ("b-1", "b", "failed"),
            ("a-2", "a", "succeeded"),
            ("b-2", "b", "failed"),
            ("a-3", "a", "failed"),
            ("b-3", "b", "succeeded"),
            ("a-4", "a", "queued"),
        ] {
            Q::new(
                "INSERT INTO builds (id, deployment_id, kind, status, configuration, instances, queued_at)
                 VALUES ($1, $2, 'deploy', $3, '{}', '[]', 0)",
            )
            .text(id)
            .text(deployment)
            .text(status)
            .execute(&mut conn)
            .await
            .unwrap();
        }
        drop(conn);
        db.close().await;
    }

    let db = match engine {
        Engine::Sqlite => slipway_jobs::store::open_sqlite(&test_db.dir.path().join("slipway.db")).await.unwrap(),
        Engine::Postgres => slipway_jobs::store::open_postgres(&test_db.url).await.unwrap(),
    };
    let mut conn = db.acquire().await.unwrap();
    let n = Q::new("SELECT COUNT(*) AS n FROM builds").fetch_one(&mut conn).await.unwrap().int("n").unwrap();
    assert_eq!(n, 7);
    for (deployment, latest) in [("a", "a-2"), ("b", "b-3")] {
        let found = builds::latest_succeeded(&mut conn, deployment).await.unwrap().map(|b| b.id);
        assert_eq!(found.as_deref(), Some(latest), "{deployment}");
    }
    let indexes: Vec<String> = match engine {
        Engine::Sqlite => Q::new("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'builds'"),
        Engine::Postgres => Q::new("SELECT indexname AS name FROM pg_indexes WHERE tablename = 'builds'"),
    }
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|r| r.text("name").unwrap())
    .collect();
    assert!(indexes.iter().any(|i| i == "builds_by_deployment_status"), "{indexes:?}");
    assert!(!indexes.iter().any(|i| i == "builds_waiting"), "{indexes:?}");
    if let Db::Sqlite(pool) = &db {
        assert_eq!(
            explain(pool).await,
            ["SEARCH b USING INDEX builds_by_deployment_status (deployment_id=? AND status=?)"]
        );
    }
}

/// SQLite's `EXPLAIN QUERY PLAN` rows' details.
async fn explain(pool: &sqlx::SqlitePool) -> Vec<String> {
    use sqlx::Row as _;
    sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {LATEST_SUCCEEDED}")))
        .bind("a")
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<String, _>(3))
        .collect()
}

slipway_jobs::on_both_engines!(builds_stored_before_migration_0016_are_read_by_deployment_and_status_after_it);

/// The names of the indexes of `db`'s tables (PostgreSQL: Slipway's and
/// apalis's schemas).
async fn index_names(db: &Db) -> Vec<String> {
    let sql = match db.engine() {
        Engine::Sqlite => "SELECT name FROM sqlite_master WHERE type = 'index' AND name IS NOT NULL",
        Engine::Postgres => "SELECT indexname AS name FROM pg_indexes WHERE schemaname IN ('public', 'apalis')",
    };
    let mut conn = db.acquire().await.unwrap();
    Q::new(sql).fetch_all(&mut conn).await.unwrap().iter().map(|r| r.text("name").unwrap()).collect()
}

/// Migration 0025 drops the indexes no statement needs: apalis's second
/// unique index on the job id and its second index on `lock_by`
/// (PostgreSQL), and `builds_by_status`, the leading column of two other
/// indexes (both engines); the indexes those statements read stay, and so
/// does SQLite's `LIdx`, which apalis-sqlite's acknowledgement reads.
async fn migration_0025_drops_the_indexes_nothing_needs_and_keeps_those_read(engine: Engine) {
    let test_db = TestDatabase::new(engine).await;
    let db = match engine {
        Engine::Sqlite => slipway_jobs::store::open_sqlite(&test_db.dir.path().join("slipway.db")).await.unwrap(),
        Engine::Postgres => slipway_jobs::store::open_postgres(&test_db.url).await.unwrap(),
    };
    let names = index_names(&db).await;
    let has = |name: &str| names.iter().any(|n| n == name);
    let (gone, kept): (&[&str], &[&str]) = match engine {
        Engine::Postgres => (
            &["builds_by_status", "unique_job_id", "lidx"],
            &["builds_queued_by_seq", "builds_waiting_by_tag", "jobs_pkey", "idx_apalis_jobs_lock_by"],
        ),
        Engine::Sqlite => (&["builds_by_status"], &["builds_queued_by_seq", "builds_waiting_by_tag", "LIdx"]),
    };
    for name in gone {
        assert!(!has(name), "{name} is still there: {names:?}");
    }
    for name in kept {
        assert!(has(name), "{name} is gone: {names:?}");
    }
}

slipway_jobs::on_both_engines!(migration_0025_drops_the_indexes_nothing_needs_and_keeps_those_read);

/// The plan of `sql`, one line per node (PostgreSQL's `EXPLAIN`, SQLite's
/// `EXPLAIN QUERY PLAN` details).
async fn plan_of(db: &Db, sql: &str) -> Vec<String> {
    let mut conn = db.acquire().await.unwrap();
    let (explain, column) = match db.engine() {
        Engine::Sqlite => ("EXPLAIN QUERY PLAN", "detail"),
        Engine::Postgres => ("EXPLAIN", "QUERY PLAN"),
    };
    Q::new(format!("{explain} {sql}"))
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.text(column).unwrap())
        .collect()
}

/// A pushed build's fair tag (`store::fair::tag_sql`, migration 0026) is
/// read by probes of indexes whose order is the answer, on a database the
/// planner has no statistics of (fresh, 2,000 builds of one tenant queued
/// and dispatched, none analysed), for that tenant and for a newcomer: no
/// scan of the table, no sort, no bitmap of the queue (each of which read
/// the whole queue for every submit before).
async fn a_pushed_build_s_fair_tag_is_read_in_probes_whatever_the_queue(engine: Engine) {
    let test_db = TestDatabase::new(engine).await;
    let db = match engine {
        Engine::Sqlite => slipway_jobs::store::open_sqlite(&test_db.dir.path().join("slipway.db")).await.unwrap(),
        Engine::Postgres => slipway_jobs::store::open_postgres(&test_db.url).await.unwrap(),
    };
    let mut conn = db.acquire().await.unwrap();
    Q::new(
        "INSERT INTO deployments (id, configuration, instances, version, created_at, updated_at)
         VALUES ('d', '{}', '[]', 1, 0, 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let rows: Vec<String> =
        (1..=2000).map(|i| format!("('b{i}', 'd', 'deploy', 'queued', '{{}}', '[]', 0, 1, 'busy', {i})")).collect();
    Q::new(format!(
        "INSERT INTO builds (id, deployment_id, kind, status, configuration, instances, queued_at, dispatched, tenant,
                             fair_tag) VALUES {}",
        rows.join(", ")
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    drop(conn);
    for tenant in ["'busy'", "'newcomer'"] {
        let sql = format!("SELECT {} AS tag", slipway_jobs::store::fair::tag_sql(engine, tenant));
        let plan = plan_of(&db, &sql).await;
        let whole = plan.join("\n");
        for refused in ["Seq Scan", "Sort", "Bitmap", "SCAN builds", "TEMP B-TREE"] {
            assert!(!whole.contains(refused), "{tenant}: the tag's plan reads the queue ({refused}):\n{whole}");
        }
        for index in ["builds_by_tenant", "builds_waiting_by_tag", "builds_running_by_tag"] {
            assert!(whole.contains(index), "{tenant}: the tag's plan does not probe {index}:\n{whole}");
        }
    }
}

slipway_jobs::on_both_engines!(a_pushed_build_s_fair_tag_is_read_in_probes_whatever_the_queue);
