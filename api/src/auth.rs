//! Bearer-token authentication (SEC-1, SEC-4; PRODUCT.md §9 and §12).
//!
//! Tokens are JWTs from configured front-ends: HS256 with
//! `SLIPWAY_JWT_SECRET`, EdDSA with `SLIPWAY_JWT_PUBLIC_KEY`, or either with
//! the several keys of `SLIPWAY_JWT_KEYS_FILE` ([`crate::keys`]), which the
//! api reloads without a restart ([`crate::rotation`]). With a keys file, a
//! token whose header names a `kid` is checked against that key only (an
//! unknown kid is refused); a token without one against each key of its
//! `alg`. A token must carry `exp`, the configured `aud` (and `iss` when one
//! is configured), and a `deployments` claim: the ids it may touch, or
//! `["*"]`. An operator's token also carries `"operator": true`, which
//! opens the fleet routes (`GET /queues`, `GET /workers`); a front-end's
//! token never does. A header with `crit` (an extension this service would
//! have to understand, RFC 7515 §4.1.11) and a request with two
//! `Authorization` headers are refused.
//!
//! jsonwebtoken checks the signature (`jsonwebtoken::crypto::verify`); the
//! algorithm and the claims are checked here, so each refusal says which
//! claim is missing or wrong. (`jsonwebtoken::decode` reads the claims before
//! it validates them, so a missing `exp` would be a "malformed" token, and
//! it reads `exp` and `nbf` as whole seconds, while RFC 7519 NumericDates
//! may be fractional.)

use crate::error::ApiError;
use crate::keys::{Key, KeySet, KeysError, KeysFile};
use crate::state::AppState;
use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use slipway_jobs::config::Config;
use slipway_jobs::id::quoted;
use std::sync::{Arc, PoisonError, RwLock};

/// The `aud` claim: a string or a list of strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    /// One audience.
    One(String),
    /// Several audiences.
    Many(Vec<String>),
}

impl Audience {
    /// True when `audience` is the one, or one of the list.
    pub fn contains(&self, audience: &str) -> bool {
        match self {
            Self::One(a) => a == audience,
            Self::Many(list) => list.iter().any(|a| a == audience),
        }
    }
}

/// The shortest HS256 secret accepted, in bytes (RFC 7518 §3.2: at least the hash size).
pub const MIN_SECRET_BYTES: usize = 32;

/// The claims Slipway reads from a verified token.
#[derive(Debug, Clone, PartialEq)]
pub struct Claims {
    /// Who the token is for (the front-end user or service); empty when absent.
    pub sub: String,
    /// Expiry: a NumericDate, seconds since 1970-01-01 UTC, possibly fractional.
    pub exp: f64,
    /// Audience: one, or a list (RFC 7519 allows both).
    pub aud: Audience,
    /// Issuer, when the token names one.
    pub iss: Option<String>,
    /// The deployment ids the token may touch, or `["*"]` for all.
    pub deployments: Vec<String>,
    /// The `operator` claim: `true` lets the token read the fleet (`GET
    /// /queues`, `GET /workers`); absent means `false`.
    pub operator: bool,
    /// FS-1: the value of the claim `SLIPWAY_TENANT_CLAIM` names, when it is
    /// set and the token carries it as a string of 1 to [`REQUESTER_LIMIT`]
    /// visible ASCII bytes; otherwise `None` (the tenant is then `iss` +
    /// `sub`).
    pub tenant: Option<String>,
}

impl Claims {
    /// True when the token may touch deployment `id`.
    pub fn allows(&self, id: &str) -> bool {
        self.deployments.iter().any(|d| d == "*" || d == id)
    }
}

/// Why a token is refused (every case answers `401 unauthorized` with this
/// sentence). No message repeats the token or a claim's value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TokenError {
    /// No `Authorization` header.
    #[error("send a bearer token: Authorization: Bearer <token>")]
    Missing,
    /// An `Authorization` header holding bytes other than visible ASCII
    /// (a token is base64url and dots).
    #[error("the Authorization header holds characters other than visible ASCII; a bearer token has none")]
    NotAscii,
    /// An `Authorization` header of another scheme.
    #[error("the Authorization header is not a bearer token")]
    NotBearer,
    /// More than one `Authorization` header: which one counts would be a guess.
    #[error("send one Authorization header, not several")]
    SeveralHeaders,
    /// A stream's token both in the `Authorization` header and as `?access_token=`.
    #[error("send the token once: in the Authorization header or as access_token, not both")]
    TwoCarriers,
    /// A stream's `?ticket=` with the token as well (header or `?access_token=`).
    #[error("send one credential: a ticket, or the token (in the Authorization header or as access_token), not both")]
    TicketAndToken,
    /// A `?ticket=` that opens nothing: unknown, used, expired, or minted for another stream.
    #[error(
        "the ticket is unknown, was used, has expired or is for another stream; mint a new one with the bearer token \
         (POST /deployments/{{id}}/events/ticket or POST /builds/{{id}}/log/ticket)"
    )]
    BadTicket,
    /// Not three base64url parts with a JSON header and a JSON object of claims.
    #[error("the token is malformed")]
    Malformed,
    /// The header has `crit`: extensions a verifier must understand, and this one understands none.
    #[error("the token's header has a crit parameter; this service understands no header extension")]
    CriticalHeader,
    /// With a keys file, a `kid` header that is not a string.
    #[error("the token's kid header is not a string")]
    MalformedKid,
    /// With a keys file, a `kid` that names no key (quoted escaped and cut to 48 characters).
    #[error("the token's kid {0} names no key of this service")]
    UnknownKid(String),
    /// Signed (or claiming to be signed) with an algorithm no configured key has.
    #[error("algorithm not accepted: this service accepts {accepted} tokens only")]
    AlgorithmNotAccepted {
        /// The algorithms of the configured keys (`HS256`, `EdDSA`, or `HS256 and EdDSA`).
        accepted: &'static str,
    },
    /// The `kid` names a key of another algorithm than the token's `alg`.
    #[error("algorithm not accepted: the key {kid} verifies {accepted} tokens only")]
    AlgorithmNotOfKey {
        /// The kid, quoted.
        kid: String,
        /// The key's algorithm.
        accepted: &'static str,
    },
    /// The signature does not verify with the key (the kid's, or any of its algorithm).
    #[error("the token's signature does not verify")]
    BadSignature,
    /// A required claim is absent.
    #[error("the token has no {0} claim")]
    MissingClaim(&'static str),
    /// A claim has the wrong shape.
    #[error("the token's {claim} claim is not {expected}")]
    MalformedClaim {
        /// The claim.
        claim: &'static str,
        /// The shape it must have.
        expected: &'static str,
    },
    /// `exp` is not after now.
    #[error("the token has expired")]
    Expired,
    /// `nbf` is after now.
    #[error("the token is not valid yet (nbf is in the future)")]
    NotYetValid,
    /// `aud` does not name this service's audience.
    #[error("the token is for another audience")]
    WrongAudience,
    /// `iss` is not the configured issuer.
    #[error("the token is from an issuer this service does not trust")]
    UntrustedIssuer,
}

impl From<TokenError> for ApiError {
    fn from(e: TokenError) -> Self {
        ApiError::unauthorized(e.to_string())
    }
}

/// The shape a NumericDate claim must have.
const NUMERIC_DATE: &str = "a number (a NumericDate: seconds since 1970-01-01 UTC)";

/// The `Authorization` header of a request: `None` without one, and
/// [`TokenError::SeveralHeaders`] with more than one. A value that is not
/// visible ASCII counts as none, as before.
pub fn authorization(headers: &HeaderMap) -> Result<Option<&str>, TokenError> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    match (values.next(), values.next()) {
        (_, Some(_)) => Err(TokenError::SeveralHeaders),
        (None, None) => Ok(None),
        (Some(value), None) => value.to_str().map(Some).map_err(|_| TokenError::NotAscii),
    }
}

/// Verifies tokens with the keys live now. Those of a keys file are
/// swapped whole by [`Verifier::reload`]: each check reads one set, never
/// a mix of two.
pub struct Verifier {
    keys: RwLock<Arc<KeySet>>,
    file: Option<KeysFile>,
    audience: String,
    issuer: Option<String>,
    tenant_claim: Option<String>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier").field("kids", &self.keys().kids()).finish_non_exhaustive()
    }
}

impl Verifier {
    /// Builds the verifier from §12 ([`KeySet::from_config`]): without a
    /// key the api refuses to start, and so it does with a keys file that
    /// is not a key set (the error names each fault).
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        let (keys, file) = KeySet::from_config(config)?;
        Ok(Self {
            keys: RwLock::new(Arc::new(keys)),
            file,
            audience: config.api.jwt_audience.clone(),
            issuer: config.api.jwt_issuer.clone(),
            tenant_claim: config.tenancy.tenant_claim.clone(),
        })
    }

    /// The keys live now.
    pub fn keys(&self) -> Arc<KeySet> {
        self.keys.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// `SLIPWAY_JWT_KEYS_FILE`, when the keys come from one.
    pub fn keys_file(&self) -> Option<&std::path::Path> {
        self.file.as_ref().map(KeysFile::path)
    }

    /// Reads the keys file again and makes its keys the live ones, all at
    /// once. On an error the keys live before stay live;
    /// [`KeysError::NoFile`] without a keys file.
    pub fn reload(&self) -> Result<Arc<KeySet>, KeysError> {
        let file = self.file.as_ref().ok_or(KeysError::NoFile)?;
        self.swap(file.read())
    }

    /// As [`Verifier::reload`], when the keys file's
    /// [`crate::keys::Stamp`] changed since it was last read; `None` when
    /// it did not (or there is no keys file).
    pub fn reload_if_changed(&self) -> Option<Result<Arc<KeySet>, KeysError>> {
        self.file.as_ref()?.read_if_changed().map(|read| self.swap(read))
    }

    fn swap(&self, read: Result<KeySet, KeysError>) -> Result<Arc<KeySet>, KeysError> {
        let keys = Arc::new(read?);
        *self.keys.write().unwrap_or_else(PoisonError::into_inner) = keys.clone();
        Ok(keys)
    }

    /// Checks a request's `Authorization` header ([`authorization`]).
    pub fn verify_headers(&self, headers: &HeaderMap) -> Result<Claims, ApiError> {
        self.verify(authorization(headers)?)
    }

    /// Checks an `Authorization` header value. Every failure is `401` with a
    /// reason ([`TokenError`]) that never repeats the token.
    pub fn verify(&self, header: Option<&str>) -> Result<Claims, ApiError> {
        let header = header.ok_or(TokenError::Missing)?;
        // The scheme name is case-insensitive (RFC 9110 §11.1).
        let token = match header.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token,
            _ => return Err(TokenError::NotBearer.into()),
        };
        // The fleet's clock: every api of a fleet takes a token's time
        // claims at the same moment, whatever its host's clock says.
        let now = slipway_jobs::clock::now_us() as f64 / 1e6;
        Ok(self.check(token.trim(), now)?)
    }

    /// Checks a token at `now` (Unix seconds): the header (no `crit`), the
    /// key (the kid's, or those of the token's `alg`), the signature, then
    /// the claims. A token is valid from `nbf` (inclusive, when given)
    /// until `exp` (exclusive), with no leeway; `aud` must name the
    /// configured audience; `iss`, when an issuer is configured, must be it.
    pub fn check(&self, token: &str, now: f64) -> Result<Claims, TokenError> {
        let keys = self.keys();
        // header.payload.signature, each base64url (RFC 7515 compact form).
        let (message, signature) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
        let (header, payload) = message.split_once('.').ok_or(TokenError::Malformed)?;
        let header = json_part(header).ok_or(TokenError::Malformed)?;
        if header.get("crit").is_some() {
            return Err(TokenError::CriticalHeader);
        }
        let alg = header.get("alg").and_then(Value::as_str).ok_or(TokenError::Malformed)?;
        let candidates: Vec<&Key> = match header.get("kid") {
            Some(kid) if keys.named() => {
                let kid = kid.as_str().ok_or(TokenError::MalformedKid)?;
                let key = keys.by_kid(kid).ok_or_else(|| TokenError::UnknownKid(quoted(kid)))?;
                if key.algorithm_name() != alg {
                    return Err(TokenError::AlgorithmNotOfKey { kid: quoted(kid), accepted: key.algorithm_name() });
                }
                vec![key]
            }
            _ => keys.keys().iter().filter(|k| k.algorithm_name() == alg).collect(),
        };
        if candidates.is_empty() {
            return Err(TokenError::AlgorithmNotAccepted { accepted: keys.accepted() });
        }
        let mut verified = false;
        for key in candidates {
            match key.verifies(message.as_bytes(), signature) {
                Ok(true) => {
                    verified = true;
                    break;
                }
                Err(e) if matches!(e.kind(), ErrorKind::Base64(_)) => return Err(TokenError::Malformed),
                Ok(false) | Err(_) => {}
            }
        }
        if !verified {
            return Err(TokenError::BadSignature);
        }
        let Some(Value::Object(claims)) = json_part(payload) else { return Err(TokenError::Malformed) };

        let exp = numeric_date(&claims, "exp")?.ok_or(TokenError::MissingClaim("exp"))?;
        if now >= exp {
            return Err(TokenError::Expired);
        }
        if numeric_date(&claims, "nbf")?.is_some_and(|nbf| now < nbf) {
            return Err(TokenError::NotYetValid);
        }
        let aud = match claims.get("aud") {
            None => return Err(TokenError::MissingClaim("aud")),
            Some(v) => serde_json::from_value::<Audience>(v.clone())
                .map_err(|_| TokenError::MalformedClaim { claim: "aud", expected: "a string or a list of strings" })?,
        };
        if !aud.contains(&self.audience) {
            return Err(TokenError::WrongAudience);
        }
        let iss = string(&claims, "iss")?;
        if let Some(trusted) = &self.issuer {
            match &iss {
                None => return Err(TokenError::MissingClaim("iss")),
                Some(iss) if iss != trusted => return Err(TokenError::UntrustedIssuer),
                Some(_) => {}
            }
        }
        let deployments = match claims.get("deployments") {
            None => return Err(TokenError::MissingClaim("deployments")),
            Some(v) => serde_json::from_value::<Vec<String>>(v.clone()).map_err(|_| TokenError::MalformedClaim {
                claim: "deployments",
                expected: "a list of deployment ids (or [\"*\"] for all)",
            })?,
        };
        let operator = match claims.get("operator") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(TokenError::MalformedClaim { claim: "operator", expected: "true or false" }),
        };
        let tenant = self.tenant_claim.as_ref().and_then(|name| match claims.get(name) {
            Some(Value::String(t))
                if !t.is_empty() && t.len() <= REQUESTER_LIMIT && t.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Some(t.clone())
            }
            _ => None,
        });
        Ok(Claims { sub: string(&claims, "sub")?.unwrap_or_default(), exp, aud, iss, deployments, operator, tenant })
    }
}

/// One base64url part of a token, read as JSON; `None` when it is not.
fn json_part(part: &str) -> Option<Value> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A NumericDate claim (RFC 7519 §2: a JSON number of seconds, possibly
/// fractional); `None` when absent.
fn numeric_date(claims: &Map<String, Value>, claim: &'static str) -> Result<Option<f64>, TokenError> {
    match claims.get(claim) {
        None => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or(TokenError::MalformedClaim { claim, expected: NUMERIC_DATE }),
    }
}

/// A string claim; `None` when absent.
fn string(claims: &Map<String, Value>, claim: &'static str) -> Result<Option<String>, TokenError> {
    match claims.get(claim) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(TokenError::MalformedClaim { claim, expected: "a string" }),
    }
}

/// A token for `slipway-api token` to mint (development and tests).
#[derive(Debug, Clone)]
pub struct Mint {
    /// The `sub` claim.
    pub subject: String,
    /// The `deployments` claim: ids, or `["*"]` for all.
    pub deployments: Vec<String>,
    /// Lifetime, in whole seconds: `exp` is now plus this.
    pub ttl_secs: u64,
    /// Adds `"operator": true` (`--operator`).
    pub operator: bool,
    /// With `SLIPWAY_JWT_KEYS_FILE`: the HS256 key to sign with, named in
    /// the header's `kid` (`--kid`); `None`: the file's first HS256 key.
    pub kid: Option<String>,
}

impl Mint {
    /// A front-end's token for `deployments`, lasting `ttl_secs`.
    pub fn new(subject: &str, deployments: Vec<String>, ttl_secs: u64) -> Self {
        Self { subject: subject.to_owned(), deployments, ttl_secs, operator: false, kid: None }
    }

    /// Signs the token with the configured HS256 secret: `SLIPWAY_JWT_SECRET`,
    /// or the keys file's key named by [`Mint::kid`] (else its first HS256
    /// key), whose kid the header then carries. The keys are checked as the
    /// api checks them at start; an Ed25519 public key cannot sign.
    pub fn sign(&self, config: &Config) -> anyhow::Result<String> {
        let (keys, file) = KeySet::from_config(config)?;
        if file.is_none() && self.kid.is_some() {
            anyhow::bail!("--kid picks a key of SLIPWAY_JWT_KEYS_FILE, which is not set")
        }
        let key = match &self.kid {
            Some(kid) => keys
                .by_kid(kid)
                .ok_or_else(|| anyhow::anyhow!("the token keys file has no key with the kid {}", quoted(kid)))?,
            None => match keys.keys().iter().find(|k| k.hmac_secret().is_some()) {
                Some(key) => key,
                None if file.is_some() => {
                    anyhow::bail!("the token keys file holds no HS256 key; an Ed25519 public key cannot sign")
                }
                None => anyhow::bail!("minting needs SLIPWAY_JWT_SECRET (an Ed25519 public key cannot sign)"),
            },
        };
        let secret = key.hmac_secret().ok_or_else(|| {
            let kid = quoted(key.kid().unwrap_or_default());
            anyhow::anyhow!("the key {kid} is an Ed25519 public key, which cannot sign; name an HS256 key with --kid")
        })?;
        let now = time::OffsetDateTime::now_utc().unix_timestamp() as u64;
        let mut claims = json!({
            "sub": self.subject,
            "exp": now + self.ttl_secs,
            "aud": config.api.jwt_audience,
            "deployments": self.deployments,
        });
        if let Some(iss) = &config.api.jwt_issuer {
            claims["iss"] = json!(iss);
        }
        if self.operator {
            claims["operator"] = json!(true);
        }
        let mut header = Header::new(Algorithm::HS256);
        header.kid = key.kid().map(str::to_owned);
        Ok(jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(secret))?)
    }
}

/// A verified bearer token (SEC-1). Extracting it answers `401` on any problem.
#[derive(Debug, Clone)]
pub struct Auth(pub Claims);

/// The longest `sub`, `iss` or `Origin` a build's `requested_by` keeps
/// ([`Auth::requested_by`]), in bytes.
pub const REQUESTER_LIMIT: usize = 256;

impl<S> FromRequestParts<S> for Auth
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        AppState::from_ref(state).verifier.verify_headers(&parts.headers).map(Auth)
    }
}

impl Auth {
    /// `403` unless the token may touch deployment `id`.
    pub fn require(&self, id: &str) -> Result<(), ApiError> {
        if self.0.allows(id) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!("this token may not touch deployment {id}")))
        }
    }

    /// Who asks, as the run history records it: the token's `sub` and
    /// `iss`, and the request's `Origin` when a browser sent one. Each is
    /// kept only when it is visible ASCII of at most [`REQUESTER_LIMIT`]
    /// bytes (an `Origin` also only as `http://…` or `https://…`), so a
    /// history never carries a terminal escape or a megabyte.
    pub fn requested_by(&self, headers: &HeaderMap) -> slipway_jobs::provenance::RequestedBy {
        let keep = |s: &str| {
            (!s.is_empty() && s.len() <= REQUESTER_LIMIT && s.bytes().all(|b| b.is_ascii_graphic() || b == b' '))
                .then(|| s.to_owned())
        };
        let origin = headers
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok())
            .filter(|o| o.starts_with("https://") || o.starts_with("http://"))
            .and_then(keep);
        slipway_jobs::provenance::RequestedBy {
            sub: keep(&self.0.sub),
            iss: self.0.iss.as_deref().and_then(keep),
            origin,
            tenant: self.0.tenant.clone(),
        }
    }

    /// FS-1: the tenant this token's builds are queued for: its tenant
    /// claim (`SLIPWAY_TENANT_CLAIM`), else its `iss` and `sub`
    /// ([`slipway_jobs::provenance::RequestedBy::tenant`]).
    pub fn tenant(&self) -> String {
        self.requested_by(&HeaderMap::new()).tenant()
    }

    /// `403` unless the token carries the operator claim (the fleet routes:
    /// `GET /queues`, `GET /workers`).
    pub fn require_operator(&self) -> Result<(), ApiError> {
        if self.0.operator {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                "this route is for operators: it needs a token with the operator claim (slipway-api token --operator)",
            ))
        }
    }
}

#[cfg(test)]
mod tests;
