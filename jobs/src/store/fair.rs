//! Fair shares per tenant (FS-1): whose a build is (`builds.tenant`), its
//! place in the fair order (`builds.fair_tag`, the negated `priority` of its
//! job, which apalis's fetch orders by first), and the per-tenant counts of
//! `TENANT_QUEUE_SIZE` and `TENANT_BUILD_SLOTS`.
//!
//! Start-time fair queuing over the pushed build jobs: a build's tag, set
//! when its job is pushed, is the tenant's latest outstanding tag + 1, but
//! never below the queue's "virtual time": one less than the earliest tag
//! still waiting (or, with none waiting, the latest tag running). A tenant
//! with a backlog of N jobs holds tags t..t+N; a newcomer's first build
//! gets t - 1, so it is the next to start, and its later ones interleave
//! with the backlog. One tenant alone gets rising
//! tags: today's first-in, first-out order. ST-2 is untouched: a
//! deployment still has at most one job pushed at a time, in submit order.

use super::{builds::NewBuild, Conn, Engine, StoreError, Q};

/// The tenant of a new build: its requester's ([`crate::provenance::RequestedBy::tenant`]),
/// or `""` for a build no token asked for (a local run, an automatic rollback).
pub fn tenant_of(b: &NewBuild<'_>) -> String {
    b.provenance.and_then(|p| p.requested_by.as_ref()).map(|r| r.tenant()).unwrap_or_default()
}

/// The tag a build of tenant `tenant` (an SQL expression: a placeholder)
/// gets when its job is pushed now (never below 0), as an SQL expression
/// for either engine. Reads only outstanding builds (dispatched and queued, or
/// running), each read one probe of an index whose order is its answer,
/// whatever statistics the planner has (migration 0026): the tenant's
/// newest tag per status from the top of `builds_by_tenant (tenant, status,
/// fair_tag)`, the earliest waiting tag from `builds_waiting_by_tag`, the
/// latest running one from `builds_running_by_tag`. Only a dispatched build
/// has a tag, so the tenant's probes need not ask `dispatched = 1` (which
/// would let the planner walk `builds_waiting_by_tag` through every other
/// tenant's builds instead).
pub fn tag_sql(engine: Engine, tenant: &str) -> String {
    let greatest = match engine {
        Engine::Postgres => "GREATEST",
        Engine::Sqlite => "MAX",
    };
    // SQLite, with no statistics, would rather search `builds_queued_by_seq`
    // and sort; it is told which index each read walks.
    let by = |index: &str| match engine {
        Engine::Postgres => String::new(),
        Engine::Sqlite => format!(" INDEXED BY {index}"),
    };
    let (tenants, waiting, running) =
        (by("builds_by_tenant"), by("builds_waiting_by_tag"), by("builds_running_by_tag"));
    let newest = |status: &str| {
        format!(
            "COALESCE((SELECT fair_tag + 1 FROM builds{tenants} WHERE tenant = {tenant} AND status = '{status}'
                         AND fair_tag IS NOT NULL ORDER BY fair_tag DESC LIMIT 1), 0)"
        )
    };
    format!(
        "{greatest}(
            {queued},
            {tenant_running},
            COALESCE((SELECT fair_tag - 1 FROM builds{waiting} WHERE status = 'queued' AND dispatched = 1
                        AND fair_tag IS NOT NULL ORDER BY fair_tag LIMIT 1),
                     (SELECT fair_tag FROM builds{running} WHERE status = 'running' AND fair_tag IS NOT NULL
                        ORDER BY fair_tag DESC LIMIT 1), 0),
            0)",
        queued = newest("queued"),
        tenant_running = newest("running"),
    )
}

/// The apalis `priority` of a job whose build has tag `tag`: `-tag`, as
/// apalis's `TaskBuilder` takes it (a `usize` its sinks cast to the
/// column's signed integer, so the two's-complement bits of `-tag` come
/// out as `-tag` on a 64-bit target). Jobs pushed without a tag (the
/// rechecks of running builds, jobs from before FS-1) keep priority 0,
/// ahead of every tagged one.
pub fn task_priority(tag: i64) -> usize {
    (-tag.clamp(0, i64::from(i32::MAX))) as isize as usize
}

/// The builds of `tenant` waiting for a worker, counted up to `limit`
/// (TENANT_QUEUE_SIZE's check; one statement).
pub async fn queued(conn: &mut Conn, tenant: &str, limit: i64) -> Result<i64, StoreError> {
    Q::new("SELECT COUNT(*) AS n FROM (SELECT 1 FROM builds WHERE tenant = $1 AND status = 'queued' LIMIT $2) AS q")
        .text(tenant)
        .int(limit)
        .fetch_one(conn)
        .await?
        .int("n")
}

/// The builds of `tenant` running now, counted up to `limit`
/// (TENANT_BUILD_SLOTS's check).
pub async fn running(conn: &mut Conn, tenant: &str, limit: i64) -> Result<i64, StoreError> {
    Q::new("SELECT COUNT(*) AS n FROM (SELECT 1 FROM builds WHERE tenant = $1 AND status = 'running' LIMIT $2) AS q")
        .text(tenant)
        .int(limit)
        .fetch_one(conn)
        .await?
        .int("n")
}

/// The tenant and tag of build `id` (`None` for a build from before FS-1).
pub async fn of_build(conn: &mut Conn, id: &str) -> Result<Option<(String, i64)>, StoreError> {
    let row = Q::new("SELECT tenant, fair_tag FROM builds WHERE id = $1").text(id).fetch_optional(conn).await?;
    let Some(row) = row else { return Ok(None) };
    Ok(row.opt_text("tenant")?.map(|t| (t, row.opt_int("fair_tag").ok().flatten().unwrap_or(0))))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tag_becomes_the_negated_priority_apalis_stores() {
        for tag in [0_i64, 1, 499, i64::from(i32::MAX)] {
            assert_eq!(super::task_priority(tag) as i32, -(tag as i32), "postgres: {tag}");
            assert_eq!(super::task_priority(tag) as i64, -tag, "sqlite: {tag}");
        }
    }
}
