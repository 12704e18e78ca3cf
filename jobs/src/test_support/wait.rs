//! Waiting on a condition with a deadline, instead of sleeping.

/// Polls `check` until it yields, backing off from 20 ms to 250 ms; `None`
/// past `deadline`.
pub async fn poll<F, Fut, T>(deadline: std::time::Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = std::time::Instant::now();
    let mut every = std::time::Duration::from_millis(20);
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if start.elapsed() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
        every = (every * 2).min(std::time::Duration::from_millis(250));
    }
}

/// [`poll`]s `check` until it yields; panics naming `what` past `deadline`.
/// What tests wait with instead of sleeping.
pub async fn wait_for<F, Fut, T>(what: &str, deadline: std::time::Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    poll(deadline, check).await.unwrap_or_else(|| panic!("timed out after {deadline:?} waiting for {what}"))
}
