//! `slipway-sbom-bench`: what Slipway's SBOM store costs (seed 000 "SBOM of
//! the deployed nodes", docs/SBOM.md), measured through the real store
//! functions (`slipway_jobs::store::sboms`) on SQLite and PostgreSQL.
//! `scripts/bench --only sbom` drives it; see `docs/BENCHMARKS.md`.
//!
//! ```text
//! slipway-sbom-bench [--engines sqlite,postgres] [--nodes 100] [--components 1000] [--shared 900]
//!                    [--per-deployment 10] [--big 5000] [--seconds 3] [--server postgres://…]
//! ```
//!
//! Everything is generated in code, deterministically: no input file.
//!
//! - **Documents** have the shape `nix/core/nodes/sbom-builder.sh` writes
//!   (CycloneDX 1.5): a node as `metadata.component`, one component per
//!   store path (`type`, `bom-ref` and a `nix:store_path` property naming the
//!   path, `name`, `version`, `purl`, a SHA-256), and a `dependencies` entry
//!   per component naming 0 to 8 (4 on average) of the document's other
//!   paths, a function of the path alone, as a store path's references are.
//!   Each document passes `slipway_jobs::sbom::check`, which the bench
//!   asserts.
//! - **Storage**: `--nodes` nodes in deployments of `--per-deployment`
//!   nodes, each deployment stored with one `sboms::replace` in one
//!   transaction, as a deploy's success does. Every node has `--components`
//!   components: the same `--shared` ones (the packages every node runs)
//!   and its own for the rest. *Raw* is the documents' compact JSON text,
//!   added up; *stored* is the five SBOM tables (`sboms`,
//!   `sbom_components`, `sbom_dependencies` and their chunks,
//!   `sbom_component_chunks`, `sbom_dependency_chunks`) with their indexes
//!   as the engine counts them (PostgreSQL: `pg_total_relation_size`; SQLite: the
//!   `dbstat` pages), less the same tables empty; *logical* adds up the
//!   bytes of every stored value (text and byte columns' bytes, the chunks'
//!   compressed bodies as stored, 8 per integer), by table, to show where
//!   they go.
//! - **Reassembly**: one node whose document has `--big` components, stored
//!   the same way; `sboms::document_text` (the node's row, then the chunks
//!   its row names for its components and its dependency entries, in one
//!   statement, each decompressed as it arrives and its texts spliced in the
//!   lists' order into the rest: the text `GET /sbom` sends) timed per
//!   call, repeated for `--seconds` (at least 30, at most 1,000 calls) after
//!   3 warm-up calls. Also timed: `sboms::document`, the same parsed into a
//!   JSON value, and `sbom::check` of the same document (what a deploy runs
//!   before it stores it; its first call compiles the schema).
//!
//! The result is one JSON line on stdout; progress goes to stderr.

use anyhow::{bail, ensure, Context as _};
use clap::Parser;
use serde_json::{json, Value};
use slipway_jobs::store::sboms::{self, NodeSbom, SbomText};
use slipway_jobs::store::{self, Db, Engine, Q};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(name = "slipway-sbom-bench", about = "SBOM storage: bytes stored versus raw, and reassembly time")]
struct Cli {
    /// Engines to measure, in this order.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    engines: Vec<String>,
    /// PostgreSQL server (any existing database on it, for the admin
    /// connection); the bench creates and drops `slipway_bench_sbom` there.
    #[arg(long, env = "SLIPWAY_BENCH_SERVER", default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    server: String,
    /// Nodes stored.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Components per node.
    #[arg(long, default_value_t = 1000)]
    components: usize,
    /// Components every node has (the rest are the node's own).
    #[arg(long, default_value_t = 900)]
    shared: usize,
    /// Nodes per deployment (one `sboms::replace` each).
    #[arg(long, default_value_t = 10)]
    per_deployment: usize,
    /// Components of the document whose reassembly is timed.
    #[arg(long, default_value_t = 5000)]
    big: usize,
    /// Seconds of repetitions per timing (at least 30, at most 1,000 calls).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

const PG_DATABASE: &str = "slipway_bench_sbom";
const MIN_REPS: usize = 30;
const MAX_REPS: usize = 1_000;
const WARM_UP: usize = 3;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    ensure!(cli.shared <= cli.components, "--shared is at most --components");
    ensure!(cli.per_deployment > 0 && cli.nodes % cli.per_deployment == 0, "--nodes is a multiple of --per-deployment");

    let fleet: Vec<Value> = (0..cli.nodes).map(|n| node_document(&cli, n)).collect();
    let raw_bytes: usize = fleet.iter().map(|d| d.to_string().len()).sum();
    let big = big_document(cli.big);
    let big_bytes = big.to_string().len();
    for doc in fleet.iter().take(2).chain([&big]) {
        slipway_jobs::sbom::check(doc).map_err(|p| anyhow::anyhow!("a generated document fails its check: {p}"))?;
    }
    let check = check_timings(&big, cli.seconds);

    let mut engines = Vec::new();
    for name in &cli.engines {
        let engine = match name.as_str() {
            "sqlite" => Engine::Sqlite,
            "postgres" => Engine::Postgres,
            other => bail!("--engines takes sqlite and postgres, not {other}"),
        };
        eprintln!("[sbom-bench] {name}: storing {} nodes", cli.nodes);
        let scratch = tempfile::tempdir()?;
        let db = open(engine, &cli.server, scratch.path()).await?;
        let result = measure(&cli, &db, &fleet, raw_bytes, &big).await;
        db_close(db).await;
        if engine == Engine::Postgres {
            drop_pg_database(&cli.server).await?;
        }
        engines.push(result.with_context(|| format!("measuring on {name}"))?);
    }
    let generated = fleet.iter().map(|d| d["components"].as_array().map_or(0, Vec::len)).sum::<usize>();
    println!(
        "{}",
        json!({
            "name": "sbom",
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "nodes": cli.nodes,
            "per_deployment": cli.per_deployment,
            "components_per_node": cli.components,
            "shared_per_node": cli.shared,
            "components_listed": generated,
            "distinct_components": cli.shared + cli.nodes * (cli.components - cli.shared),
            "raw_bytes": raw_bytes,
            "big_components": cli.big,
            "big_bytes": big_bytes,
            "check_ms": check,
            "engines": engines,
        })
    );
    Ok(())
}

/// Opens a fresh, migrated database of `engine` through Slipway's own `open_*`.
async fn open(engine: Engine, server: &str, scratch: &std::path::Path) -> anyhow::Result<Db> {
    Ok(match engine {
        Engine::Sqlite => store::open_sqlite(&scratch.join("slipway.db")).await?,
        Engine::Postgres => {
            drop_pg_database(server).await?;
            let admin: sqlx::postgres::PgConnectOptions = server.parse().context("parsing --server")?;
            let mut conn = admin.connect().await.with_context(|| format!("connecting to {server}"))?;
            sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {PG_DATABASE}"))).execute(&mut conn).await?;
            conn.close().await?;
            let base = server.rsplit_once('/').map_or(server, |(b, _)| b);
            store::open_postgres(&format!("{base}/{PG_DATABASE}")).await?
        }
    })
}

async fn db_close(db: Db) {
    match db {
        Db::Sqlite(p) => p.close().await,
        Db::Postgres(p) => p.close().await,
    }
}

async fn drop_pg_database(server: &str) -> anyhow::Result<()> {
    let admin: sqlx::postgres::PgConnectOptions = server.parse().context("parsing --server")?;
    let mut conn = admin.connect().await.with_context(|| format!("connecting to {server}"))?;
    sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {PG_DATABASE} WITH (FORCE)")))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(())
}

/// Stores the fleet and the big document, and measures one engine.
async fn measure(cli: &Cli, db: &Db, fleet: &[Value], raw_bytes: usize, big: &Value) -> anyhow::Result<Value> {
    let deployments = fleet.len() / cli.per_deployment;
    {
        let mut conn = db.acquire().await?;
        for d in 0..=deployments {
            Q::new(
                "INSERT INTO deployments (id, configuration, instances, version, created_at, updated_at)
                 VALUES ($1, '{}', '[]', 0, 0, 0)",
            )
            .text(deployment_id(d))
            .execute(&mut conn)
            .await?;
        }
    }
    let empty = physical_bytes(db).await?;
    let mut store_ms = Vec::new();
    for (d, chunk) in fleet.chunks(cli.per_deployment).enumerate() {
        let nodes: Vec<(String, NodeSbom)> =
            chunk.iter().map(|doc| (node_name(doc), NodeSbom::Ready(doc.clone()))).collect();
        let t = Instant::now();
        let mut tx = db.begin_write().await?;
        sboms::replace(&mut tx, &deployment_id(d), "bench", &nodes, 1).await?;
        tx.commit().await?;
        store_ms.push(ms(t.elapsed()));
    }
    let physical = physical_bytes(db).await? - empty;
    let logical = logical_bytes(db).await?;
    let logical_total: i64 = logical.iter().map(|(_, v)| v.as_i64().unwrap_or(0)).sum();
    let mut conn = db.acquire().await?;
    let distinct = sboms::component_count(&mut conn).await?;
    drop(conn);

    // Every node comes back as it went in.
    {
        let mut conn = db.acquire().await?;
        for i in [0, fleet.len() - 1] {
            let (doc, deployment) = (&fleet[i], deployment_id(i / cli.per_deployment));
            let back = sboms::document(&mut conn, &deployment, &node_name(doc)).await?;
            ensure!(
                matches!(back, Some(NodeSbom::Ready(ref b)) if b == doc),
                "node {i} did not come back as it went in"
            );
        }
    }

    // The big document: one node of a deployment of its own.
    eprintln!("[sbom-bench] reassembling a {}-component document", cli.big);
    let big_deployment = deployment_id(deployments);
    let t = Instant::now();
    let mut tx = db.begin_write().await?;
    sboms::replace(&mut tx, &big_deployment, "bench", &[("big".into(), NodeSbom::Ready(big.clone()))], 1).await?;
    tx.commit().await?;
    let big_store_ms = ms(t.elapsed());
    let mut conn = db.acquire().await?;
    let mut reassembly = Vec::new();
    let budget = Duration::from_secs_f64(cli.seconds);
    let started = Instant::now();
    for i in 0.. {
        let t = Instant::now();
        let back = sboms::document_text(&mut conn, &big_deployment, "big").await?;
        let took = t.elapsed();
        let Some(SbomText::Ready(text)) = back else { bail!("the big document is missing") };
        ensure!(
            i > 0 || serde_json::from_str::<Value>(&text)? == *big,
            "the big document came back changed ({} bytes)",
            text.len()
        );
        if i >= WARM_UP {
            reassembly.push(ms(took));
        }
        let runs = reassembly.len();
        if runs >= MAX_REPS || (runs >= MIN_REPS && started.elapsed() >= budget) {
            break;
        }
    }
    let phases = reassembly_phases(&mut conn, &big_deployment, budget).await?;
    // For comparison: the same document parsed into a JSON value
    // (`sboms::document`), which `GET /sbom` no longer does.
    let mut as_value = Vec::new();
    let started = Instant::now();
    for i in 0.. {
        let t = Instant::now();
        let back = sboms::document(&mut conn, &big_deployment, "big").await?;
        let took = t.elapsed();
        ensure!(i > 0 || matches!(back, Some(NodeSbom::Ready(ref b)) if b == big), "the parsed document differs");
        if i >= WARM_UP {
            as_value.push(ms(took));
        }
        let runs = as_value.len();
        if runs >= MAX_REPS || (runs >= MIN_REPS && started.elapsed() >= budget) {
            break;
        }
    }
    Ok(json!({
        "engine": db.engine().name(),
        "as_value_ms": summary(as_value),
        "stored_bytes": physical,
        "stored_ratio": physical as f64 / raw_bytes as f64,
        "logical_bytes": logical_total,
        "logical_ratio": logical_total as f64 / raw_bytes as f64,
        "logical_by_table": logical.into_iter().collect::<serde_json::Map<_, _>>(),
        "distinct_components_stored": distinct,
        "replace_ms_per_deployment": summary(store_ms),
        "big_replace_ms": round(big_store_ms),
        "reassembly_ms": summary(reassembly),
        "reassembly_phases": phases,
    }))
}

/// Where reassembly's time goes: the statement `document_text` sends for
/// the big node's chunks (both lists' chunks by the ids its row names, one
/// `UNION ALL`), timed up to the bodies read out of the rows (*fetch*),
/// then their decompression into lines (*decompress*); the rest of a call
/// is the node's row, putting the lines in order and splicing them into the
/// document. `document_text` decompresses each row as it arrives instead,
/// so its fetch and decompression overlap.
async fn reassembly_phases(conn: &mut store::Conn, deployment: &str, budget: Duration) -> anyhow::Result<Value> {
    let row = Q::new("SELECT component_chunks, dependency_chunks FROM sboms WHERE deployment_id = $1 AND node = 'big'")
        .text(deployment)
        .fetch_one(conn)
        .await?;
    let mut selects = Vec::new();
    for (k, (list, chunks)) in
        [("component_chunks", "sbom_component_chunks"), ("dependency_chunks", "sbom_dependency_chunks")]
            .into_iter()
            .enumerate()
    {
        let ids = sboms::decode_ids(&row.text(list)?)?;
        let (first, last) = (ids.iter().min().copied().unwrap_or(0), ids.iter().max().copied().unwrap_or(0));
        ensure!(last - first + 1 == ids.len() as i64, "the big node's {list} are not one run");
        selects.push(format!(
            "SELECT CAST({k} AS BIGINT) AS list, id, CAST(codec AS BIGINT) AS codec, body FROM {chunks}
             WHERE id BETWEEN {first} AND {last}"
        ));
    }
    let queries = [selects.join(" UNION ALL ")];
    let (mut fetch, mut decompress) = (Vec::new(), Vec::new());
    let (mut rows_read, mut stored, mut lines) = (0, 0, 0);
    let started = Instant::now();
    for i in 0.. {
        let t = Instant::now();
        let mut bodies = Vec::new();
        for sql in &queries {
            for row in Q::new(sql.as_str()).fetch_all(conn).await? {
                bodies.push((row.int("codec")?, row.bytes("body")?));
            }
        }
        let fetched = t.elapsed();
        let (n, bytes) = (bodies.len(), bodies.iter().map(|(_, b)| b.len()).sum::<usize>());
        let t = Instant::now();
        let text: usize = bodies
            .into_iter()
            .map(|(codec, body)| sboms::chunk_text(codec, body).map(|t| t.len()))
            .sum::<Result<usize, _>>()?;
        let decompressed = t.elapsed();
        (rows_read, stored, lines) = (n, bytes, text);
        if i >= WARM_UP {
            fetch.push(ms(fetched));
            decompress.push(ms(decompressed));
        }
        if fetch.len() >= MAX_REPS || (fetch.len() >= MIN_REPS && started.elapsed() >= budget) {
            break;
        }
    }
    Ok(json!({
        "chunks": rows_read, "stored_bytes": stored, "text_bytes": lines,
        "fetch_ms": summary(fetch), "decompress_ms": summary(decompress),
    }))
}

/// The SBOM tables and their indexes as the engine stores them, in bytes.
async fn physical_bytes(db: &Db) -> anyhow::Result<i64> {
    let mut conn = db.acquire().await?;
    let sql = match db.engine() {
        Engine::Postgres => {
            "SELECT CAST(pg_total_relation_size('sbom_components') + pg_total_relation_size('sboms')
                      + pg_total_relation_size('sbom_dependencies') + pg_total_relation_size('sbom_component_chunks')
                      + pg_total_relation_size('sbom_dependency_chunks') AS BIGINT) AS n"
        }
        Engine::Sqlite => {
            "SELECT CAST(COALESCE(SUM(pgsize), 0) AS INTEGER) AS n FROM dbstat
             WHERE name IN (SELECT name FROM sqlite_master
                            WHERE tbl_name IN ('sbom_components', 'sboms', 'sbom_dependencies',
                                               'sbom_component_chunks', 'sbom_dependency_chunks'))"
        }
    };
    Ok(Q::new(sql).fetch_one(&mut conn).await?.int("n")?)
}

/// The bytes of every stored value, by table: text columns' bytes, 8 per integer.
async fn logical_bytes(db: &Db) -> anyhow::Result<Vec<(String, Value)>> {
    let len = |col: &str| match db.engine() {
        Engine::Postgres => format!("COALESCE(octet_length({col}), 0)"),
        Engine::Sqlite => format!("COALESCE(length(CAST({col} AS BLOB)), 0)"),
    };
    let queries = [
        ("sbom_components", format!("{} + 16", len("hash"))),
        ("sbom_component_chunks", format!("{} + 16", len("body"))),
        ("sbom_dependencies", format!("{} + 16", len("hash"))),
        ("sbom_dependency_chunks", format!("{} + 16", len("body"))),
        (
            "sboms",
            format!(
                "{} + {} + {} + {} + {} + {} + {} + {} + 8",
                len("deployment_id"),
                len("node"),
                len("build_id"),
                len("status"),
                len("reason"),
                len("document"),
                len("components"),
                len("dependencies")
            ),
        ),
    ];
    let mut conn = db.acquire().await?;
    let mut out = Vec::new();
    for (table, sum) in queries {
        let row = Q::new(format!("SELECT CAST(COALESCE(SUM({sum}), 0) AS BIGINT) AS n FROM {table}"))
            .fetch_one(&mut conn)
            .await?;
        out.push((table.to_owned(), json!(row.int("n")?)));
    }
    Ok(out)
}

fn check_timings(big: &Value, seconds: f64) -> Value {
    let t = Instant::now();
    let first = slipway_jobs::sbom::check(big);
    let first_ms = ms(t.elapsed());
    assert!(first.is_ok());
    let mut runs = Vec::new();
    let started = Instant::now();
    while runs.len() < MAX_REPS && (runs.len() < MIN_REPS || started.elapsed() < Duration::from_secs_f64(seconds)) {
        let t = Instant::now();
        let _ = slipway_jobs::sbom::check(big);
        runs.push(ms(t.elapsed()));
    }
    json!({ "first_call_with_compile": round(first_ms), "repeat": summary(runs) })
}

fn deployment_id(d: usize) -> String {
    format!("bench-{d:03}")
}

fn node_name(doc: &Value) -> String {
    doc["metadata"]["component"]["name"].as_str().unwrap_or("node").to_owned()
}

/// A deterministic 64-bit mix (splitmix64) of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The store path of package `id`: a 32-character hash, a name and a version.
fn store_path(id: u64) -> (String, String, String) {
    const BASE32: &[u8] = b"0123456789abcdfghijklmnpqrsvwxyz";
    let hash: String = (0..32).map(|i| BASE32[(mix(id * 64 + i) % 32) as usize] as char).collect();
    let names = ["lib", "python3", "openssl", "glibc", "perl", "zlib", "curl", "ruby", "nodejs", "systemd"];
    let name = format!("{}-part{}", names[(mix(id) % 10) as usize], id);
    let version = format!("{}.{}.{}", mix(id + 1) % 10, mix(id + 2) % 40, mix(id + 3) % 12);
    (format!("/nix/store/{hash}-{name}-{version}"), name, version)
}

/// Component `id` as `sbom-builder.sh` writes one.
fn component(id: u64) -> Value {
    let (path, name, version) = store_path(id);
    let sha: String = (0..4).map(|i| format!("{:016x}", mix(id * 8 + i + 1_000_000))).collect();
    json!({
        "type": if mix(id).is_multiple_of(3) { "application" } else { "library" },
        "bom-ref": path, "name": name, "version": version,
        "purl": format!("pkg:nix/{name}@{version}"),
        "hashes": [{"alg": "SHA-256", "content": sha}],
        "properties": [{"name": "nix:store_path", "value": path}],
    })
}

/// A document of `ids` (in this order) for node `node`: each path depends
/// on 0 to 8 of the paths listed before it, chosen by the path alone.
fn document(node: &str, ids: &[u64]) -> Value {
    let refs: Vec<String> = ids.iter().map(|&id| store_path(id).0).collect();
    let node_ref = format!("slipway-node:{node}");
    let mut dependencies = vec![json!({"ref": node_ref, "dependsOn": [refs[refs.len() - 1]]})];
    for (i, &id) in ids.iter().enumerate() {
        let wanted = (mix(id ^ 0x5eed) % 9) as usize;
        let mut depends: Vec<&String> = Vec::new();
        for k in 0..wanted.min(i) {
            let pick = &refs[(mix(id * 16 + k as u64) % i as u64) as usize];
            if !depends.contains(&pick) {
                depends.push(pick);
            }
        }
        depends.sort();
        dependencies.push(json!({"ref": refs[i], "dependsOn": depends}));
    }
    json!({
        "bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1,
        "metadata": {"component": {"type": "operating-system", "bom-ref": node_ref, "name": node,
            "properties": [{"name": "nix:store_path", "value": format!("/nix/store/{}-slipway-system-{node}", "0".repeat(32))}]}},
        "components": ids.iter().map(|&id| component(id)).collect::<Vec<_>>(),
        "dependencies": dependencies,
    })
}

/// Node `n` of the fleet: the shared components (ids 0…), then its own.
fn node_document(cli: &Cli, n: usize) -> Value {
    let own = (cli.components - cli.shared) as u64;
    let ids: Vec<u64> = (0..cli.shared as u64).chain((0..own).map(|i| 1_000_000 + n as u64 * own + i)).collect();
    document(&format!("node{n:03}"), &ids)
}

/// The document whose reassembly is timed: `count` components of its own.
fn big_document(count: usize) -> Value {
    let ids: Vec<u64> = (0..count as u64).map(|i| 50_000_000 + i).collect();
    document("big", &ids)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Nearest-rank p50, p99, min and max of `values` (milliseconds).
fn summary(mut values: Vec<f64>) -> Value {
    values.sort_by(f64::total_cmp);
    let pick = |p: f64| {
        let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
        round(values[rank.clamp(1, values.len()) - 1])
    };
    json!({
        "runs": values.len(), "p50": pick(50.0), "p99": pick(99.0),
        "min": round(values[0]), "max": round(values[values.len() - 1]),
    })
}
