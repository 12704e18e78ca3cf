//! A deploy's operator secrets (§8), handed over by the worker (SEC-3).
//!
//! The effect never talks to OpenBao and never holds a token: before it
//! starts, the worker reads exactly the versions the build pinned, with its
//! own token, and writes each value to a file of the attempt's work folder
//! that only the sandbox user can read (`hand_over`); once the effect has
//! ended the files go (`take_back`) and the worker deletes the entries the
//! build cleared whose node now runs without them (`Handed::clear`). An
//! effect therefore reaches its own deployment's values of this build and
//! nothing else in OpenBao.

use super::{Ctx, SECRETS_DIR};
use crate::effect::LogSink;
use crate::openbao::{OpenBao, OpenBaoError};
use crate::store::builds::{self, BuildRow};
use secrecy::{ExposeSecret as _, SecretString};
use std::path::{Path, PathBuf};

/// The name of the file, in the attempt's work folder, that lists the
/// operator secrets of a deploy (`OPERATOR_SECRETS_FILE`).
pub const OPERATOR_SECRETS_FILE: &str = "operator-secrets.tsv";

/// How long a deploy waits for an OpenBao that cannot be reached, is sealed
/// or cannot serve now (asking again with a growing pause) before it fails
/// the build (`operator_secrets`): an OpenBao restarted or unsealed within
/// this time costs the build only the wait.
pub const OPENBAO_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// The first pause before asking OpenBao again; doubled each time, at most
/// [`LONGEST_PAUSE`].
const FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// The longest pause between two attempts.
const LONGEST_PAUSE: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs `op` until it succeeds, fails for a reason time does not mend, or
/// `patience` has passed, pausing from [`FIRST_PAUSE`] doubling to
/// [`LONGEST_PAUSE`]; says once in the worker's log that it waits
/// (`waiting <what>`, "for OpenBao to read …"). `mends`
/// tells an error time may mend, with the least pause it asks for (an
/// answer's `Retry-After`), from one it does not (`None`).
async fn retried<T, E, F, Fut>(
    what: &str,
    patience: std::time::Duration,
    mends: impl Fn(&E) -> Option<std::time::Duration>,
    mut op: F,
) -> Result<T, E>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let started = std::time::Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        let e = match op().await {
            Err(e) if started.elapsed() + pause < patience => e,
            done => return done,
        };
        let Some(least) = mends(&e) else { return Err(e) };
        if pause == FIRST_PAUSE {
            tracing::warn!(error = %e, patience_s = patience.as_secs(), "waiting {what}");
        }
        tokio::time::sleep(pause.max(least).min(LONGEST_PAUSE)).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// [`retried`] for OpenBao: waits up to [`OPENBAO_PATIENCE`] for an
/// OpenBao that cannot be reached, is sealed or asks to be asked later.
async fn patiently<T, F, Fut>(what: &str, op: F) -> Result<T, OpenBaoError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, OpenBaoError>>,
{
    let mends = |e: &OpenBaoError| e.passes_with_time().then(|| e.retry_after().unwrap_or_default());
    retried(&format!("for OpenBao to {what}"), OPENBAO_PATIENCE, mends, op).await
}

/// How long a deploy waits for a database that went away (a restart, a
/// failover) while it reads which fields later builds set, before it fails
/// the build (`operator_secrets`).
pub const DATABASE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// The `(application, field)`s that builds after `build` set
/// ([`builds::secrets_set_after`]), asking again as [`retried`] while the
/// database cannot be reached, for up to [`DATABASE_PATIENCE`].
async fn set_later(ctx: &Ctx, build: &BuildRow) -> Result<Vec<(String, String)>, crate::store::StoreError> {
    let mends = |e: &crate::store::StoreError| {
        matches!(e, crate::store::StoreError::Database(_)).then_some(std::time::Duration::ZERO)
    };
    let read =
        || async { builds::secrets_set_after(&mut ctx.db.acquire().await?, &build.deployment_id, build.seq).await };
    retried("for the database to read the deployment's later builds", DATABASE_PATIENCE, mends, read).await
}

/// Checks, before a deploy reads or clears anything, that OpenBao still
/// accepts the worker's token (waiting, as [`patiently`], for an OpenBao
/// away or sealed). The error names the cause (`token_expired`, …).
async fn token_accepted(bao: &OpenBao, before: &str) -> Result<(), String> {
    match patiently("look up the worker's token", || bao.lookup_self()).await {
        Ok(_) => Ok(()),
        // An older policy without lookup-self: the operations say more.
        Err(OpenBaoError::Refused { status: 403, .. }) => Ok(()),
        Err(e) => Err(format!("OpenBao ({}) before {before}: {e}", e.cause())),
    }
}

/// What [`hand_over`] gave the effect.
pub(crate) struct Handed {
    /// `OPERATOR_SECRETS_FILE`, for the effect's environment.
    pub(crate) env: Vec<(String, String)>,
    /// The values handed over, for the log to hide.
    pub(crate) values: Vec<SecretString>,
    /// The client and the fields the build clears.
    clears: Option<(OpenBao, Vec<ClearedField>)>,
}

/// A field a build clears: its application, instance and name.
struct ClearedField {
    application: String,
    instance: String,
    field: String,
}

/// §8: reads the versions `build` pinned and writes the effect's files.
///
/// `OPERATOR_SECRETS_FILE` has one line per field,
/// `<application> TAB <instance> TAB <field> TAB <entry> TAB <version> TAB <file>`:
/// `<entry>` is OpenBao's entry relative to the mount (for messages),
/// `<version>` the KV version read, or `clear` for a field this build clears
/// (then `<file>` is empty: the worker deletes the entry once the node runs
/// without it), and `<file>` the absolute path of the value, mode 0600,
/// owned by the sandbox user. A field that a later build sets is not
/// cleared: its value wins. Nothing is written when the build pinned
/// nothing (empty `env`).
///
/// Errors, as a sentence naming the field, its instance and version and
/// OpenBao's answer, never a value: the worker has no OpenBao
/// (`OPENBAO_ADDR`), OpenBao refused or did not answer, or a pinned
/// version is gone (deleted or destroyed).
pub(crate) async fn hand_over(
    build: &BuildRow,
    ctx: &Ctx,
    work: &Path,
    policy: &crate::sandbox::Policy,
) -> Result<Handed, String> {
    let Some(pins) = build.operator_secrets.as_ref().filter(|p| !p.is_empty()) else { return Ok(Handed::none()) };
    let Some(config) = ctx.config.openbao.as_ref() else {
        return Err("this build's configuration has operator secrets, but this worker has no OpenBao \
                    (OPENBAO_ADDR is not set): give the workers OPENBAO_ADDR and a token with the workers' policy"
            .into());
    };
    let bao = OpenBao::new(config).map_err(|e| format!("OPENBAO_TOKEN: {e}"))?;
    token_accepted(&bao, "reading the operator secrets").await?;
    let set_later =
        set_later(ctx, build).await.map_err(|e| format!("cannot read the deployment's later builds: {e}"))?;
    let id = &build.deployment_id;
    let folder = work.join(SECRETS_DIR);
    let mut lines = String::new();
    let mut values = Vec::new();
    let mut clears = Vec::new();
    let escape = |s: &str| s.replace(['\t', '\n', '\r'], " ");
    for pin in &pins.set {
        let instance = crate::openbao::instance_of(&pin.application);
        let entry = bao.entry_key(id, &instance, &pin.field).map_err(|e| e.to_string())?;
        let named = format!("operator secret {} ({instance}, version {})", pin.field, pin.version);
        let read = patiently("read the operator secrets", || bao.read_version(id, &instance, &pin.field, pin.version));
        let value = match read.await {
            Ok(Some(value)) => value,
            Ok(None) => return Err(format!("{named} is no longer in OpenBao (deleted or destroyed)")),
            Err(e) => return Err(format!("{named} could not be read from OpenBao ({}): {e}", e.cause())),
        };
        let file = value_file(&folder, &pin.application, &instance, &pin.field)?;
        write_private(&folder, &file, value.expose_secret().as_bytes())
            .map_err(|e| format!("cannot write {named} for the effect: {e}"))?;
        lines.push_str(&format!(
            "{}\t{}\t{}\t{entry}\t{}\t{}\n",
            escape(&pin.application),
            escape(&instance),
            escape(&pin.field),
            pin.version,
            file.display()
        ));
        values.push(value);
    }
    for cleared in &pins.clear {
        if set_later.iter().any(|(a, f)| *a == cleared.application && *f == cleared.field) {
            continue;
        }
        let instance = crate::openbao::instance_of(&cleared.application);
        let entry = bao.entry_key(id, &instance, &cleared.field).map_err(|e| e.to_string())?;
        lines.push_str(&format!(
            "{}\t{}\t{}\t{entry}\tclear\t\n",
            escape(&cleared.application),
            escape(&instance),
            escape(&cleared.field)
        ));
        clears.push(ClearedField { application: cleared.application.clone(), instance, field: cleared.field.clone() });
    }
    let list = work.join(OPERATOR_SECRETS_FILE);
    let given = std::fs::write(&list, lines)
        .and_then(|()| if folder.exists() { policy.give(&folder) } else { Ok(()) })
        .and_then(|()| policy.give(&list));
    given.map_err(|e| format!("cannot hand the operator secrets to the effect: {e}"))?;
    Ok(Handed {
        env: vec![("OPERATOR_SECRETS_FILE".to_owned(), list.display().to_string())],
        values,
        clears: Some((bao, clears)),
    })
}

/// `<folder>/<application>/<instance>/<field>`, each named as OpenBao
/// names an entry's parts ([`crate::openbao::escape_segment`]).
fn value_file(folder: &Path, application: &str, instance: &str, field: &str) -> Result<PathBuf, String> {
    let mut file = folder.to_path_buf();
    for part in [application, instance, field] {
        file.push(crate::openbao::escape_segment(part).ok_or_else(|| format!("{part:?} cannot name a file"))?);
    }
    Ok(file)
}

/// Writes `bytes` to a new file `path` under `folder`, mode 0600, and
/// the folders between them 0700, whatever the umask.
fn write_private(folder: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let parent = path.parent().unwrap_or(folder);
    std::fs::create_dir_all(parent)?;
    for dir in parent.ancestors().take_while(|d| d.starts_with(folder)) {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)
}

/// Removes the values handed to an effect that has ended (however it
/// ended); done when there are none. An error is logged: the retention
/// sweep removes what is left.
pub(crate) fn take_back(work: &Path) {
    match std::fs::remove_dir_all(work.join(SECRETS_DIR)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(error = %e, "cannot remove the operator secrets handed to an effect"),
    }
}

impl Handed {
    /// Nothing handed over (a build without operator secrets, a dry run, a destroy).
    pub(crate) fn none() -> Self {
        Self { env: Vec::new(), values: Vec::new(), clears: None }
    }

    /// §8: deletes, with every version, the entry of each field the build
    /// clears whose node runs the configuration that no longer names it,
    /// or is gone: `nodes` is the effect's `nodes.json` (`None` when it
    /// wrote none: nothing is cleared). Says each deletion in the build's
    /// log. Returns the fields it could not delete, with why.
    pub(crate) async fn clear(
        &self,
        nodes: Option<&[super::effect_output::NodeEntry]>,
        id: &str,
        log: &impl LogSink,
    ) -> Vec<String> {
        let Some((bao, clears)) = &self.clears else { return Vec::new() };
        let mut failed = Vec::new();
        if clears.is_empty() {
            return failed;
        }
        // A token that expired during the deploy clears nothing, and says so.
        if let Err(e) = token_accepted(bao, "clearing operator secrets").await {
            log.append(&format!("slipway: error: no operator secret was cleared from OpenBao: {e}\n")).await;
            failed.push(e);
            return failed;
        }
        for ClearedField { application, instance, field } in clears {
            let Some(nodes) = nodes else {
                log.append(&format!(
                    "slipway: operator secret {field} ({instance}) stays in OpenBao: the deploy reported no nodes\n"
                ))
                .await;
                continue;
            };
            let node = nodes.iter().find(|n| n.name == *application);
            if node.is_some_and(|n| n.outcome.as_deref() == Some("failed")) {
                log.append(&format!(
                    "slipway: operator secret {field} ({instance}) stays in OpenBao until {application} deploys without it\n"
                ))
                .await;
                continue;
            }
            match patiently("clear an operator secret", || bao.destroy_all_versions(id, instance, field)).await {
                Ok(()) => {
                    log.append(&format!(
                        "slipway: cleared operator secret {field} ({instance}) from OpenBao, every version\n"
                    ))
                    .await
                }
                Err(e) => {
                    log.append(&format!(
                        "slipway: error: could not clear operator secret {field} ({instance}) from OpenBao: {e}\n"
                    ))
                    .await;
                    failed.push(format!("{field} ({instance}): {e}"));
                }
            }
        }
        failed
    }
}
