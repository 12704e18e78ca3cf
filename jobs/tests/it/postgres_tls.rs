//! `DATABASE_URL`'s `sslmode` decides whether Slipway's PostgreSQL
//! connections use TLS, as it does for libpq: sqlx is built with rustls
//! (apalis's `tokio-comp` feature brings it), so a URL without `sslmode`
//! (`prefer`) encrypts whenever the server offers TLS, and `sslmode=disable`
//! never does (docs/CONFIGURATION.md: on loopback, TLS costs a submit about
//! a quarter of its throughput and most of its p99). Both read the session's
//! own row of `pg_stat_ssl` through the pool the api and the worker use.

use slipway_jobs::store::{open_postgres, Db, Engine};
use slipway_jobs::test_support::TestDatabase;

/// Whether the pooled connections of a Slipway pool opened on `url` use TLS.
async fn pooled_connection_uses_tls(url: &str) -> bool {
    let Db::Postgres(pool) = open_postgres(url).await.unwrap() else { unreachable!() };
    let tls: bool =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetch_one(&pool).await.unwrap();
    pool.close().await;
    tls
}

/// `url` with `key=value` added to its query.
fn with_param(url: &str, param: &str) -> String {
    format!("{url}{}{param}", if url.contains('?') { '&' } else { '?' })
}

#[tokio::test]
async fn a_database_url_with_sslmode_disable_talks_to_postgres_without_tls() {
    let db = TestDatabase::new(Engine::Postgres).await;
    assert!(!pooled_connection_uses_tls(&with_param(&db.url, "sslmode=disable")).await);
}

#[tokio::test]
async fn a_database_url_without_sslmode_uses_tls_when_the_server_offers_it() {
    let db = TestDatabase::new(Engine::Postgres).await;
    let Db::Postgres(pool) = open_postgres(&db.url).await.unwrap() else { unreachable!() };
    let offered: String = sqlx::query_scalar("SHOW ssl").fetch_one(&pool).await.unwrap();
    pool.close().await;
    assert_eq!(offered, "on", "the test server must offer TLS, as Debian's PostgreSQL does out of the box");
    assert!(!db.url.contains("sslmode"), "SLIPWAY_TEST_POSTGRES must not set sslmode for this test: {}", db.url);
    assert!(pooled_connection_uses_tls(&db.url).await);
}
