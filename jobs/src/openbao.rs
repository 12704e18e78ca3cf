//! Operator secrets in OpenBao KV version 2 (PRODUCT.md §8; seed 000
//! "Secrets of the operator"; `docs/OPENBAO.md`).
//!
//! One entry per secret field of an application of a deployment, at
//! `<mount>/data/<root>/<id>/secret/<instance>/<field>`, where `<instance>`
//! is `<application>-operator-secrets` ([`instance_of`]); the value is kept
//! as `{"value": "<secret>"}` in the entry's `data`.
//!
//! **Paths are data, never syntax.** The deployment id, the instance and
//! the field are each one path segment, whatever they hold. OpenBao decodes
//! percent escapes in a request path once (`a%2Fb` is the two segments `a`
//! and `b` to it) and folds `.` and `..`, so escaping for the URL alone is
//! not enough: each value is first given the *name* OpenBao stores,
//! [`escape_segment`] (RFC 3986 unreserved characters kept, every other
//! byte of its UTF-8 as `%XX`, so a name holds no `/` and is plain ASCII),
//! and that name is then escaped again for the request (`%` as `%25`), which
//! OpenBao's one decoding undoes. `""`, `.` and `..` are refused: they
//! cannot be a segment. [`OpenBao::list`] gives back only names that
//! [`unescape_segment`] reads, so what it lists is what [`OpenBao::read`]
//! addresses.
//!
//! Errors ([`OpenBaoError`]) never hold the token or a secret value.

mod error;
mod segment;
mod wire;

pub use error::{OpenBaoError, Part};
pub use segment::{escape_segment, unescape_segment};

use crate::config::OpenBaoConfig;
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use std::time::Duration;
use wire::{
    Answer, ListAnswer, LookupAnswer, LookupData, MetadataAnswer, ReadAnswer, RenewAnswer, WriteAnswer, WriteBody,
    WriteData,
};

/// The deadline of one request to OpenBao (connection, request and answer):
/// past it the request is [`OpenBaoError::Unavailable`].
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one operation keeps asking OpenBao again while it answers
/// `429` (a rate-limit quota): past it the operation is
/// [`OpenBaoError::Busy`] with OpenBao's `Retry-After`. A `429` is refused
/// before the request is handled, so a write is asked again too.
pub const RATE_LIMIT_BUDGET: Duration = Duration::from_secs(5);

/// The first pause before asking again after a `429`; doubled each time,
/// at most [`RATE_LIMIT_BUDGET`] in all (OpenBao's `Retry-After` is kept
/// when it says longer, within the budget).
const RATE_LIMIT_FIRST_PAUSE: Duration = Duration::from_millis(100);

/// The longest OpenBao message (its `errors`) kept in an error, in bytes.
const MAX_MESSAGE: usize = 300;

/// The vars instance of `application`'s operator secrets:
/// `<application>-operator-secrets`, where `application` is the key of the
/// application in the configuration's `applications`.
pub fn instance_of(application: &str) -> String {
    format!("{application}-operator-secrets")
}

/// What `auth/token/lookup-self` (or `renew-self`) says of a token. Times
/// in whole seconds, as OpenBao gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    /// The time left before it expires (`0`: it never expires, a root token).
    pub ttl: Duration,
    /// Whether `renew-self` can extend it.
    pub renewable: bool,
    /// How long it can live from now at most, renewed or not: the time left
    /// to its explicit max TTL, or `ttl` when it cannot be renewed; `None`
    /// when OpenBao sets no bound this client can see (the mount's or the
    /// system's max TTL shows only when a renewal is capped: see
    /// [`TokenInfo::capped`]).
    pub max_remaining: Option<Duration>,
}

impl TokenInfo {
    /// The same, knowing that a renewal asked for more than OpenBao gave
    /// (it hit a max TTL): the token cannot live past its `ttl`.
    pub fn capped(mut self) -> Self {
        self.max_remaining = Some(self.max_remaining.map_or(self.ttl, |m| m.min(self.ttl)));
        self
    }
}

/// A client of the KV version 2 mount holding operator secrets, with one
/// token (the api's or a worker's: `docs/openbao/`). Cheap to clone.
/// `Debug` never shows the token.
#[derive(Debug, Clone)]
pub struct OpenBao {
    http: reqwest::Client,
    config: OpenBaoConfig,
    timeout: Duration,
}

/// What an operation was, for errors.
mod action {
    pub const WRITE: &str = "write";
    pub const READ: &str = "read";
    pub const LIST: &str = "list the entries of";
    pub const DESTROY: &str = "delete every version of";
    pub const METADATA: &str = "read the versions of";
    pub const UNDO: &str = "destroy a version it wrote of";
    pub const LOOKUP: &str = "look up its token at";
    pub const RENEW: &str = "renew its token at";
}

impl OpenBao {
    /// A client for `config`, with [`REQUEST_TIMEOUT`] per request, through
    /// no proxy and following no redirect. Fails (as
    /// [`OpenBaoError::Unavailable`]) only when no HTTP client can be built
    /// or the token cannot be sent in a header.
    pub fn new(config: &OpenBaoConfig) -> Result<Self, OpenBaoError> {
        let unavailable = |reason: &str| OpenBaoError::Unavailable { addr: config.addr.clone(), reason: reason.into() };
        if reqwest::header::HeaderValue::from_str(config.token.expose_secret()).is_err() {
            return Err(unavailable("OPENBAO_TOKEN holds characters that cannot be sent in a header"));
        }
        crate::callback::install_crypto_provider();
        let http = reqwest::Client::builder()
            .no_proxy()
            .user_agent(concat!("slipway/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|_| unavailable("no HTTP client could be built"))?;
        Ok(Self { http, config: config.clone(), timeout: REQUEST_TIMEOUT })
    }

    /// The same client with another deadline per request (`/readyz` asks
    /// with a shorter one than [`REQUEST_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// `OPENBAO_ADDR`.
    pub fn addr(&self) -> &str {
        &self.config.addr
    }

    /// The entry of `field`, as OpenBao names it:
    /// `<mount>/data/<root>/<id>/secret/<instance>/<field>` with each of the
    /// three values given its [`escape_segment`] name.
    pub fn entry_path(&self, id: &str, instance: &str, field: &str) -> Result<String, OpenBaoError> {
        Ok(format!("{}/data/{}/{}", self.config.mount, self.folder(id, instance)?, segment(Part::Field, field)?))
    }

    /// The entry of `field` relative to the mount, as the `bao kv` commands
    /// take it with `-mount=<mount>`: `<root>/<id>/secret/<instance>/<field>`,
    /// each value given its [`escape_segment`] name.
    pub fn entry_key(&self, id: &str, instance: &str, field: &str) -> Result<String, OpenBaoError> {
        Ok(format!("{}/{}", self.folder(id, instance)?, segment(Part::Field, field)?))
    }

    /// `OPENBAO_MOUNT`.
    pub fn mount(&self) -> &str {
        &self.config.mount
    }

    /// `<root>/<id>/secret/<instance>`, escaped.
    fn folder(&self, id: &str, instance: &str) -> Result<String, OpenBaoError> {
        Ok(format!(
            "{}/{}/secret/{}",
            self.config.root,
            segment(Part::DeploymentId, id)?,
            segment(Part::Instance, instance)?
        ))
    }

    /// Writes `value` as the entry of `field` (a new version when it
    /// exists) and gives the version written (1 for a new entry). Needs
    /// `create` and `update` on `<mount>/data/<root>/*`.
    pub async fn write(
        &self,
        id: &str,
        instance: &str,
        field: &str,
        value: &SecretString,
    ) -> Result<u64, OpenBaoError> {
        let path = self.entry_path(id, instance, field)?;
        let body = WriteBody { data: WriteData { value: value.expose_secret() } };
        let answer = self.send(reqwest::Method::POST, &path, "", Some(&body)).await?;
        match answer.status {
            200..=299 => serde_json::from_slice::<WriteAnswer>(&answer.body).ok().and_then(|a| a.data?.version).ok_or(
                OpenBaoError::Malformed {
                    action: action::WRITE,
                    path,
                    reason: "the answer does not give the version written",
                },
            ),
            _ => Err(self.refused(action::WRITE, &path, &answer, Some(value)).await),
        }
    }

    /// The version a read of the entry of `field` gives now: its latest
    /// version that is not destroyed (a refused submit destroys what it
    /// wrote), from the entry's metadata, never its value; `None` when there
    /// is no entry, no such version, or that version is deleted. Needs
    /// `read` on `<mount>/metadata/<root>/*`.
    pub async fn current_version(&self, id: &str, instance: &str, field: &str) -> Result<Option<u64>, OpenBaoError> {
        let path =
            format!("{}/metadata/{}/{}", self.config.mount, self.folder(id, instance)?, segment(Part::Field, field)?);
        let answer = self.send(reqwest::Method::GET, &path, "", None::<&()>).await?;
        match answer.status {
            200 => {
                let metadata = serde_json::from_slice::<MetadataAnswer>(&answer.body)
                    .ok()
                    .and_then(|a| a.data)
                    .ok_or_else(|| OpenBaoError::Malformed {
                        action: action::METADATA,
                        path: path.clone(),
                        reason: "the body is not KV version 2 metadata",
                    })?;
                // Versions a refused submit wrote are destroyed (take back):
                // the latest version not destroyed is the current one.
                let Some(current) = metadata.current_version.filter(|v| *v > 0) else { return Ok(None) };
                let latest = (1..=current)
                    .rev()
                    .map(|v| (v, metadata.versions.get(&v.to_string())))
                    .find(|(_, m)| m.is_some_and(|m| !m.destroyed));
                let Some((version, Some(meta))) = latest else { return Ok(None) };
                Ok(meta.deletion_time.is_empty().then_some(version))
            }
            404 if answer.errors().is_empty() => Ok(None),
            _ => Err(self.refused(action::METADATA, &path, &answer, None).await),
        }
    }

    /// The value of the entry of `field` at [`OpenBao::current_version`],
    /// `None` when there is none. Needs `read` on `<mount>/data/<root>/*`
    /// (and on its metadata, when the latest version was destroyed).
    pub async fn read(&self, id: &str, instance: &str, field: &str) -> Result<Option<SecretString>, OpenBaoError> {
        match self.read_at(id, instance, field, None).await? {
            (Some(value), _) => Ok(Some(value)),
            // The latest version is one a refused submit destroyed: the
            // one before it that is not (read from the metadata).
            (None, true) => match self.current_version(id, instance, field).await? {
                Some(version) => Ok(self.read_at(id, instance, field, Some(version)).await?.0),
                None => Ok(None),
            },
            (None, false) => Ok(None),
        }
    }

    /// The value of version `version` of the entry of `field` (§8: a deploy
    /// reads the version its build pinned), `None` when that version does
    /// not exist or is deleted or destroyed. Needs `read` on
    /// `<mount>/data/<root>/*`.
    pub async fn read_version(
        &self,
        id: &str,
        instance: &str,
        field: &str,
        version: u64,
    ) -> Result<Option<SecretString>, OpenBaoError> {
        Ok(self.read_at(id, instance, field, Some(version)).await?.0)
    }

    /// The value of `version` of the entry of `field`, or of its latest,
    /// and whether that version is a destroyed one.
    async fn read_at(
        &self,
        id: &str,
        instance: &str,
        field: &str,
        version: Option<u64>,
    ) -> Result<(Option<SecretString>, bool), OpenBaoError> {
        let path = self.entry_path(id, instance, field)?;
        let query = version.map(|v| format!("?version={v}")).unwrap_or_default();
        let answer = self.send(reqwest::Method::GET, &path, &query, None::<&()>).await?;
        match answer.status {
            200 => {
                let malformed = |reason| OpenBaoError::Malformed { action: action::READ, path: path.clone(), reason };
                // serde's messages may quote the value: none is kept.
                let read: ReadAnswer = serde_json::from_slice(&answer.body)
                    .map_err(|_| malformed("the body is not a KV version 2 entry"))?;
                let Some(mut data) = read.data.and_then(|v| v.data) else { return Ok((None, false)) };
                match data.remove("value") {
                    Some(serde_json::Value::String(value)) => Ok((Some(SecretString::from(value)), false)),
                    _ => Err(malformed("the entry has no string `value`")),
                }
            }
            404 if answer.errors().is_empty() => {
                // A deleted or destroyed version answers 404 with its metadata.
                let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
                Ok((None, body["data"]["metadata"]["destroyed"] == serde_json::Value::Bool(true)))
            }
            _ => Err(self.refused(action::READ, &path, &answer, None).await),
        }
    }

    /// The fields of `instance` that have an entry, sorted (names OpenBao
    /// lists that Slipway cannot have written, and sub-folders, are left
    /// out); empty when there is none. Needs `list` on
    /// `<mount>/metadata/<root>/*`.
    pub async fn list(&self, id: &str, instance: &str) -> Result<Vec<String>, OpenBaoError> {
        let path = format!("{}/metadata/{}/", self.config.mount, self.folder(id, instance)?);
        let answer = self.send(reqwest::Method::GET, &path, "?list=true", None::<&()>).await?;
        match answer.status {
            200 => {
                let listed: ListAnswer = serde_json::from_slice(&answer.body).map_err(|_| OpenBaoError::Malformed {
                    action: action::LIST,
                    path: path.clone(),
                    reason: "the body is not a KV version 2 list",
                })?;
                let keys = listed.data.and_then(|d| d.keys).unwrap_or_default();
                let mut fields: Vec<String> =
                    keys.iter().filter(|k| !k.ends_with('/')).filter_map(|k| unescape_segment(k)).collect();
                fields.sort();
                fields.dedup();
                Ok(fields)
            }
            // An empty folder is a 404 without errors; a missing mount is
            // a 404 that says so, and is refused.
            404 if answer.errors().is_empty() => Ok(Vec::new()),
            _ => Err(self.refused(action::LIST, &path, &answer, None).await),
        }
    }

    /// Whether this client can work now: lists the root's folder (`list`
    /// on `<mount>/metadata/<root>/`, names only), which both policies
    /// allow. `Ok` when OpenBao answers and takes the token; otherwise why
    /// not (sealed, unreachable, the token refused, …). For readiness.
    pub async fn check(&self) -> Result<(), OpenBaoError> {
        let path = format!("{}/metadata/{}/", self.config.mount, self.config.root);
        let answer = self.send(reqwest::Method::GET, &path, "?list=true", None::<&()>).await?;
        match answer.status {
            200 => Ok(()),
            404 if answer.errors().is_empty() => Ok(()),
            _ => Err(self.refused(action::LIST, &path, &answer, None).await),
        }
    }

    /// Copies the value of the entry of `from_field` to the entry of
    /// `to_field` (a rename) and gives the version written; `None`,
    /// changing nothing, when `from_field` has no entry. The entry of
    /// `from_field` stays. Needs what [`OpenBao::read`] and
    /// [`OpenBao::write`] need.
    pub async fn copy(
        &self,
        id: &str,
        instance: &str,
        from_field: &str,
        to_field: &str,
    ) -> Result<Option<u64>, OpenBaoError> {
        // Both paths are checked before anything is read.
        self.entry_path(id, instance, to_field)?;
        let Some(value) = self.read(id, instance, from_field).await? else { return Ok(None) };
        Ok(Some(self.write(id, instance, to_field, &value).await?))
    }

    /// Deletes the entry of `field` with every version and its metadata
    /// (clearing a secret: a soft delete would leave older versions
    /// readable); done when there is no entry. Needs `delete` on
    /// `<mount>/metadata/<root>/*`.
    pub async fn destroy_all_versions(&self, id: &str, instance: &str, field: &str) -> Result<(), OpenBaoError> {
        let path =
            format!("{}/metadata/{}/{}", self.config.mount, self.folder(id, instance)?, segment(Part::Field, field)?);
        let answer = self.send(reqwest::Method::DELETE, &path, "", None::<&()>).await?;
        match answer.status {
            200..=299 => Ok(()),
            _ => Err(self.refused(action::DESTROY, &path, &answer, None).await),
        }
    }

    /// Destroys version `version` of the entry of `field` (its value is
    /// gone for good; the entry's version counter stays where it is): how a
    /// refused submit takes back what it wrote (`docs/OPENBAO.md`). Done
    /// when that version is already gone. Needs `update` on
    /// `<mount>/destroy/<root>/*`.
    pub async fn destroy_version(
        &self,
        id: &str,
        instance: &str,
        field: &str,
        version: u64,
    ) -> Result<(), OpenBaoError> {
        let path =
            format!("{}/destroy/{}/{}", self.config.mount, self.folder(id, instance)?, segment(Part::Field, field)?);
        let body = serde_json::json!({ "versions": [version] });
        let answer = self.send(reqwest::Method::PUT, &path, "", Some(&body)).await?;
        match answer.status {
            200..=299 => Ok(()),
            _ => Err(self.refused(action::UNDO, &path, &answer, None).await),
        }
    }

    /// What OpenBao says of this client's token (`auth/token/lookup-self`,
    /// which both policies allow): its time left, whether it renews, how
    /// long it can live at most. [`OpenBaoError::TokenInvalid`] when OpenBao
    /// no longer knows the token (expired, revoked, or an OpenBao rebuilt).
    pub async fn lookup_self(&self) -> Result<TokenInfo, OpenBaoError> {
        let path = "auth/token/lookup-self";
        let answer = self.send(reqwest::Method::GET, path, "", None::<&()>).await?;
        match answer.status {
            200 => {
                let data = serde_json::from_slice::<LookupAnswer>(&answer.body).ok().and_then(|a| a.data).ok_or(
                    OpenBaoError::Malformed {
                        action: action::LOOKUP,
                        path: path.to_owned(),
                        reason: "the body is not a token lookup",
                    },
                )?;
                Ok(token_info(&data))
            }
            403 if unknown_token(&answer) => Err(self.token_invalid(action::LOOKUP, path)),
            _ => Err(self.refusal(action::LOOKUP, path, &answer, None)),
        }
    }

    /// Renews this client's token (`auth/token/renew-self`, by its own TTL)
    /// and gives what OpenBao says of it then, [`TokenInfo::capped`] when
    /// the renewal reached a max TTL. Errors as [`OpenBao::lookup_self`].
    pub async fn renew_self(&self) -> Result<TokenInfo, OpenBaoError> {
        let path = "auth/token/renew-self";
        let answer = self.send(reqwest::Method::PUT, path, "", Some(&serde_json::json!({}))).await?;
        match answer.status {
            200 => {
                let renewed = serde_json::from_slice::<RenewAnswer>(&answer.body)
                    .ok()
                    .filter(|a| a.auth.is_some())
                    .ok_or(OpenBaoError::Malformed {
                        action: action::RENEW,
                        path: path.to_owned(),
                        reason: "the body is not a token renewal",
                    })?;
                let capped = renewed.warnings.unwrap_or_default().iter().any(|w| {
                    let w = w.to_ascii_lowercase();
                    w.contains("capped") || w.contains("max_ttl") || w.contains("max ttl")
                });
                let info = self.lookup_self().await?;
                let auth = renewed.auth.expect("checked above");
                let info = TokenInfo { renewable: auth.renewable && info.renewable, ..info };
                let _ = auth.lease_duration;
                Ok(if capped { info.capped() } else { info })
            }
            403 if unknown_token(&answer) => Err(self.token_invalid(action::RENEW, path)),
            _ => Err(self.refusal(action::RENEW, path, &answer, None)),
        }
    }

    /// [`OpenBaoError::TokenInvalid`] for `action` on `path`.
    fn token_invalid(&self, action: &'static str, path: &str) -> OpenBaoError {
        OpenBaoError::TokenInvalid { addr: self.config.addr.clone(), action, path: path.to_owned() }
    }

    /// The error of an answer the operation did not expect, telling a token
    /// OpenBao no longer knows from a path its policy denies: a `403` is
    /// followed by a lookup of the token, and when that is refused too the
    /// token is not valid ([`OpenBaoError::TokenInvalid`]); otherwise (the
    /// token is valid, or the lookup cannot say) the path is denied.
    async fn refused(
        &self,
        action: &'static str,
        path: &str,
        answer: &Answer,
        secret: Option<&SecretString>,
    ) -> OpenBaoError {
        if matches!(answer.status, 401 | 403) {
            if let Err(OpenBaoError::TokenInvalid { .. }) = self.lookup_self().await {
                return self.token_invalid(action, path);
            }
        }
        self.refusal(action, path, answer, secret)
    }

    /// One request to `<addr>/v1/<path><query>` with the token, within the
    /// deadline. `path` is the stored form; OpenBao decodes the request
    /// path once, so each `%` is sent as `%25`.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &str,
        body: Option<&impl Serialize>,
    ) -> Result<Answer, OpenBaoError> {
        let url = format!("{}/v1/{}{query}", self.config.addr, path.replace('%', "%25"));
        let unavailable = |reason: String| OpenBaoError::Unavailable { addr: self.config.addr.clone(), reason };
        let Ok(mut token) = reqwest::header::HeaderValue::from_str(self.config.token.expose_secret()) else {
            return Err(unavailable("OPENBAO_TOKEN holds characters that cannot be sent in a header".into()));
        };
        token.set_sensitive(true);
        let request = || {
            let mut request =
                self.http.request(method.clone(), &url).header("X-Vault-Token", token.clone()).timeout(self.timeout);
            if let Some(body) = body {
                request = request.json(body);
            }
            request
        };
        let failed = |e: reqwest::Error| {
            if e.is_timeout() {
                unavailable(format!("no answer within {} ms", self.timeout.as_millis()))
            } else {
                unavailable(crate::request_error_line(e))
            }
        };
        let class = |r: &reqwest::Response| crate::outbound::classify(r.status().as_u16(), r.headers());
        // A `429` (a rate-limit quota) is refused before OpenBao handles the
        // request: asked again, any method, with a growing pause, within
        // RATE_LIMIT_BUDGET.
        let started = std::time::Instant::now();
        let mut pause = RATE_LIMIT_FIRST_PAUSE;
        let mut response = request().send().await.map_err(failed)?;
        while response.status().as_u16() == 429 {
            let asked = match class(&response) {
                crate::outbound::Class::RetryLater { after } => after.unwrap_or_default(),
                _ => Duration::ZERO,
            };
            let wait = pause.max(asked);
            if started.elapsed() + wait > RATE_LIMIT_BUDGET {
                break;
            }
            tokio::time::sleep(wait).await;
            pause = pause.saturating_mul(2);
            response = request().send().await.map_err(failed)?;
        }
        // A read or a list answered 500 or 502 is asked once more (seed
        // 004); a write is not (a version may have been written).
        if method == reqwest::Method::GET && class(&response) == crate::outbound::Class::RetryOnce {
            response = request().send().await.map_err(failed)?;
        }
        let status = response.status().as_u16();
        let class = match class(&response) {
            crate::outbound::Class::RetryOnce => crate::outbound::Class::RetryLater { after: None },
            other => other,
        };
        let body = response.bytes().await.map_err(failed)?.to_vec();
        Ok(Answer { status, body, class })
    }

    /// The error of an answer the operation did not expect.
    fn refusal(
        &self,
        action: &'static str,
        path: &str,
        answer: &Answer,
        secret: Option<&SecretString>,
    ) -> OpenBaoError {
        let errors = answer.errors();
        if answer.status == 503 && errors.iter().any(|e| e.to_ascii_lowercase().contains("sealed")) {
            return OpenBaoError::Sealed { addr: self.config.addr.clone() };
        }
        if let crate::outbound::Class::RetryLater { after } = answer.class {
            return OpenBaoError::Busy { addr: self.config.addr.clone(), status: answer.status, retry_after: after };
        }
        let mut said = errors.join("; ");
        if (300..400).contains(&answer.status) {
            said = "a redirect, which Slipway does not follow (point OPENBAO_ADDR at the active node)".into();
        }
        for hidden in std::iter::once(self.config.token.expose_secret()).chain(secret.map(|s| s.expose_secret())) {
            if !hidden.is_empty() {
                said = said.replace(hidden, "[redacted]");
            }
        }
        if said.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !said.is_char_boundary(cut) {
                cut -= 1;
            }
            said.truncate(cut);
            said.push('…');
        }
        OpenBaoError::Refused {
            status: answer.status,
            action,
            path: path.to_owned(),
            message: if said.is_empty() { String::new() } else { format!(": {said}") },
        }
    }
}

/// A [`TokenInfo`] from a lookup's `data`.
fn token_info(data: &LookupData) -> TokenInfo {
    let ttl = Duration::from_secs(data.ttl);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let max_remaining = if data.ttl == 0 && data.creation_ttl == 0 {
        None // never expires (a root token)
    } else if !data.renewable {
        Some(ttl)
    } else if data.explicit_max_ttl > 0 {
        let end = data.creation_time.saturating_add(data.explicit_max_ttl);
        Some(Duration::from_secs(end.saturating_sub(now)).max(ttl).min(Duration::from_secs(data.explicit_max_ttl)))
    } else {
        None
    };
    TokenInfo { ttl, renewable: data.renewable, max_remaining }
}

/// Whether a `403` is OpenBao refusing a token it does not know (expired,
/// revoked, never issued): it then answers exactly `permission denied` (or
/// names the token invalid), where a token whose policy denies the path
/// gets the same words inside a list (`1 error occurred: * permission
/// denied`).
fn unknown_token(answer: &Answer) -> bool {
    let errors = answer.errors();
    errors.iter().any(|e| e.to_ascii_lowercase().contains("invalid token"))
        || (errors.len() == 1 && errors[0].trim() == "permission denied")
}

/// The stored name of `value` as `part`, or [`OpenBaoError::Segment`].
fn segment(part: Part, value: &str) -> Result<String, OpenBaoError> {
    escape_segment(value).ok_or_else(|| OpenBaoError::Segment { part, value: value.to_owned() })
}

#[cfg(test)]
mod tests;
