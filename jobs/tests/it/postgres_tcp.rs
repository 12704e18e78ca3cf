//! Every PostgreSQL connection Slipway opens over TCP has `TCP_NODELAY`
//! set, so a large statement does not wait ~40 ms for the server's delayed
//! ACK (sqlx 0.9.0 leaves it off: this test sees that first, on a plain
//! connection, so it can tell the difference). One test in this binary:
//! it reads every socket of the process.

use slipway_jobs::store::{nodelay, open_postgres, Db, Engine};
use slipway_jobs::test_support::TestDatabase;
use sqlx::Connection;
use std::str::FromStr;

#[tokio::test]
async fn every_pooled_postgres_connection_over_tcp_sends_without_waiting_for_acks() {
    let db = TestDatabase::new(Engine::Postgres).await;
    let options = sqlx::postgres::PgConnectOptions::from_str(&db.url).unwrap();
    assert!(options.get_socket().is_none(), "SLIPWAY_TEST_POSTGRES must be a TCP address for this test: {}", db.url);
    let port = options.get_port();

    let before = nodelay::tcp_sockets_to(port);
    let plain = sqlx::PgConnection::connect_with(&options).await.unwrap();
    let fresh: Vec<_> = nodelay::tcp_sockets_to(port).into_iter().filter(|fd| !before.contains(fd)).collect();
    assert_eq!(fresh.len(), 1, "one new socket for one plain connection: {fresh:?}");
    assert_eq!(nodelay::nodelay(fresh[0]), Some(false), "sqlx now sets TCP_NODELAY itself: drop store::nodelay");

    let Db::Postgres(pool) = open_postgres(&db.url).await.unwrap() else { unreachable!() };
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(pool.acquire().await.unwrap());
    }
    let sockets = nodelay::tcp_sockets_to(port);
    assert!(sockets.len() >= 5, "the plain connection and 4 pooled ones: {sockets:?}");
    for fd in sockets {
        assert_eq!(nodelay::nodelay(fd), Some(true), "socket {fd} to port {port} waits for ACKs");
    }
    drop(held);
    plain.close().await.unwrap();
}
