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
        Ok(Claims { sub: string(&claims, "sub")?.unwrap_or_default(), exp, aud, iss, deployments, operator })
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
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";
    /// A test-only Ed25519 key pair (`openssl genpkey -algorithm ed25519`).
    const ED_PRIVATE: &str =
        "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIFBwXap2SOpEqhaZitV8G0+M9XQW8E7sD4gjq/wrIKWz\n-----END PRIVATE KEY-----\n";
    const ED_PUBLIC: &str =
        "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEANwkzUfGZvjQxb2NNA0kHyUDDHZpDNmy8nau/3jIZqBU=\n-----END PUBLIC KEY-----\n";

    fn config(secret: &str) -> Config {
        Config::from_keys(&BTreeMap::from([("SLIPWAY_JWT_SECRET".to_owned(), secret.to_owned())])).unwrap()
    }

    fn config_with(pairs: &[(&str, &str)]) -> Config {
        Config::from_keys(&pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()).unwrap()
    }

    fn now() -> f64 {
        time::OffsetDateTime::now_utc().unix_timestamp() as f64
    }

    fn sign(alg: Algorithm, claims: &Value) -> String {
        let key = match alg {
            Algorithm::EdDSA => EncodingKey::from_ed_pem(ED_PRIVATE.as_bytes()).unwrap(),
            _ => EncodingKey::from_secret(SECRET.as_bytes()),
        };
        jsonwebtoken::encode(&Header::new(alg), claims, &key).unwrap()
    }

    /// Valid claims for the default configuration, with `changes` applied
    /// (a `null` removes the claim).
    fn claims(changes: Value) -> Value {
        let mut c = json!({ "sub": "t", "aud": "slipway", "exp": now() + 3600.0, "deployments": ["*"] });
        for (k, v) in changes.as_object().unwrap() {
            match v {
                Value::Null => c.as_object_mut().unwrap().remove(k),
                v => c.as_object_mut().unwrap().insert(k.clone(), v.clone()),
            };
        }
        c
    }

    /// The 401 message for `token` under `verifier`, checking it never repeats any part of the token.
    fn refusal(verifier: &Verifier, token: &str) -> String {
        let e = verifier.verify(Some(&format!("Bearer {token}"))).expect_err("the token is refused");
        assert_eq!(e.status, axum::http::StatusCode::UNAUTHORIZED);
        for part in token.split('.').filter(|p| p.len() > 3) {
            assert!(!e.message.contains(part), "the message repeats the token: {}", e.message);
        }
        e.message
    }

    #[test]
    fn a_short_secret_mints_no_token() {
        let err = Mint::new("dev", vec!["demo".into()], 60).sign(&config("short")).unwrap_err().to_string();
        assert!(err.contains("at least"), "{err}");
    }

    #[test]
    fn a_short_secret_is_refused_at_start() {
        let err = Verifier::from_config(&config("short")).unwrap_err().to_string();
        assert!(err.contains("at least"), "{err}");
        assert!(!err.contains("short\""), "the secret is echoed: {err}");
    }

    #[test]
    fn a_minted_token_verifies_and_carries_its_scope() {
        let c = config(SECRET);
        let token = Mint::new("dev", vec!["demo".into()], 60).sign(&c).unwrap();
        let claims = Verifier::from_config(&c).unwrap().verify(Some(&format!("Bearer {token}"))).unwrap();
        assert!(claims.allows("demo") && !claims.allows("other"));
    }

    #[test]
    fn only_a_token_minted_for_an_operator_carries_the_operator_claim() {
        let c = config(SECRET);
        let v = Verifier::from_config(&c).unwrap();
        let operator = Mint { operator: true, ..Mint::new("ops", vec!["*".into()], 60) }.sign(&c).unwrap();
        assert!(v.verify(Some(&format!("Bearer {operator}"))).unwrap().operator);
        let front_end = Mint::new("dev", vec!["*".into()], 60).sign(&c).unwrap();
        assert!(!v.verify(Some(&format!("Bearer {front_end}"))).unwrap().operator);
        let message = refusal(&v, &sign(Algorithm::HS256, &claims(json!({ "operator": "yes" }))));
        assert_eq!(message, "the token's operator claim is not true or false");
    }

    #[test]
    fn a_token_without_exp_says_so() {
        let v = Verifier::from_config(&config(SECRET)).unwrap();
        assert_eq!(refusal(&v, &sign(Algorithm::HS256, &claims(json!({ "exp": null })))), "the token has no exp claim");
    }

    #[test]
    fn a_token_without_aud_says_so() {
        let v = Verifier::from_config(&config(SECRET)).unwrap();
        assert_eq!(refusal(&v, &sign(Algorithm::HS256, &claims(json!({ "aud": null })))), "the token has no aud claim");
    }

    #[test]
    fn a_token_without_exp_and_aud_names_exp_first() {
        let v = Verifier::from_config(&config(SECRET)).unwrap();
        let token = sign(Algorithm::HS256, &claims(json!({ "exp": null, "aud": null })));
        assert_eq!(refusal(&v, &token), "the token has no exp claim");
    }

    #[test]
    fn a_missing_or_malformed_deployments_claim_says_so() {
        let v = Verifier::from_config(&config(SECRET)).unwrap();
        let missing = sign(Algorithm::HS256, &claims(json!({ "deployments": null })));
        assert_eq!(refusal(&v, &missing), "the token has no deployments claim");
        for bad in [json!("demo,other"), json!([1, 2]), json!({ "demo": true })] {
            let message = refusal(&v, &sign(Algorithm::HS256, &claims(json!({ "deployments": bad }))));
            assert!(message.starts_with("the token's deployments claim is not a list"), "{bad}: {message}");
        }
    }

    #[test]
    fn malformed_time_audience_issuer_and_subject_claims_name_the_claim() {
        let v = Verifier::from_config(&config_with(&[
            ("SLIPWAY_JWT_SECRET", SECRET),
            ("SLIPWAY_JWT_ISSUER", "https://panel.example"),
        ]))
        .unwrap();
        let iss = json!("https://panel.example");
        for (changes, claim) in [
            (json!({ "exp": "tomorrow", "iss": iss }), "exp"),
            (json!({ "nbf": [1], "iss": iss }), "nbf"),
            (json!({ "aud": 7, "iss": iss }), "aud"),
            (json!({ "aud": ["slipway", 7], "iss": iss }), "aud"),
            (json!({ "iss": 7 }), "iss"),
            (json!({ "sub": 7, "iss": iss }), "sub"),
        ] {
            let message = refusal(&v, &sign(Algorithm::HS256, &claims(changes.clone())));
            assert!(message.starts_with(&format!("the token's {claim} claim is not ")), "{changes}: {message}");
        }
    }

    #[test]
    fn a_configured_issuer_is_required_and_must_match() {
        let v = Verifier::from_config(&config_with(&[
            ("SLIPWAY_JWT_SECRET", SECRET),
            ("SLIPWAY_JWT_ISSUER", "https://panel.example"),
        ]))
        .unwrap();
        assert_eq!(refusal(&v, &sign(Algorithm::HS256, &claims(json!({})))), "the token has no iss claim");
        let foreign = sign(Algorithm::HS256, &claims(json!({ "iss": "https://other.example" })));
        assert_eq!(refusal(&v, &foreign), "the token is from an issuer this service does not trust");
        let ours = sign(Algorithm::HS256, &claims(json!({ "iss": "https://panel.example" })));
        let read = v.verify(Some(&format!("Bearer {ours}"))).unwrap();
        assert_eq!(read.iss.as_deref(), Some("https://panel.example"));
    }

    #[test]
    fn a_correctly_signed_token_with_another_algorithm_is_not_accepted() {
        let hs256 = Verifier::from_config(&config(SECRET)).unwrap();
        for alg in [Algorithm::HS384, Algorithm::HS512, Algorithm::EdDSA] {
            let message = refusal(&hs256, &sign(alg, &claims(json!({}))));
            assert_eq!(message, "algorithm not accepted: this service accepts HS256 tokens only", "{alg:?}");
        }
        let eddsa = Verifier::from_config(&config_with(&[("SLIPWAY_JWT_PUBLIC_KEY", ED_PUBLIC)])).unwrap();
        assert!(eddsa.verify(Some(&format!("Bearer {}", sign(Algorithm::EdDSA, &claims(json!({})))))).is_ok());
        let message = refusal(&eddsa, &sign(Algorithm::HS256, &claims(json!({}))));
        assert_eq!(message, "algorithm not accepted: this service accepts EdDSA tokens only");
    }

    #[test]
    fn an_unsigned_token_is_not_accepted() {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let v = Verifier::from_config(&config(SECRET)).unwrap();
        let head = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
        let body = URL_SAFE_NO_PAD.encode(claims(json!({})).to_string());
        let message = refusal(&v, &format!("{head}.{body}."));
        assert!(message.starts_with("algorithm not accepted"), "{message}");
    }

    #[test]
    fn a_forged_or_malformed_token_says_which() {
        let v = Verifier::from_config(&config(SECRET)).unwrap();
        let forged = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims(json!({})),
            &EncodingKey::from_secret(b"another-secret-of-at-least-32-bytes!"),
        )
        .unwrap();
        assert_eq!(refusal(&v, &forged), "the token's signature does not verify");
        assert_eq!(refusal(&v, "not.a.jwt"), "the token is malformed");
        // A signed payload that is not a JSON object of claims.
        let array = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &json!([1, 2]),
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap();
        assert_eq!(refusal(&v, &array), "the token is malformed");
    }

    #[test]
    fn a_fractional_exp_or_nbf_is_read_as_a_numeric_date() {
        let v = Verifier::from_config(&config(SECRET)).unwrap();
        let later = sign(Algorithm::HS256, &claims(json!({ "exp": now() + 3600.25, "nbf": now() - 0.5 })));
        let read = v.verify(Some(&format!("Bearer {later}"))).unwrap();
        assert_eq!(read.exp.fract(), 0.25);
        let t = now();
        let token = sign(Algorithm::HS256, &claims(json!({ "exp": t + 0.5, "nbf": t + 0.25 })));
        // Checked at given instants: before nbf, between nbf and exp, at exp.
        assert_eq!(v.check(&token, t + 0.1), Err(TokenError::NotYetValid));
        assert!(v.check(&token, t + 0.3).is_ok());
        assert_eq!(v.check(&token, t + 0.5), Err(TokenError::Expired));
    }

    #[test]
    fn expired_and_foreign_audience_tokens_keep_their_messages() {
        let v = Verifier::from_config(&config(SECRET)).unwrap();
        let expired = sign(Algorithm::HS256, &claims(json!({ "exp": now() - 5.0 })));
        assert_eq!(refusal(&v, &expired), "the token has expired");
        let foreign = sign(Algorithm::HS256, &claims(json!({ "aud": ["other", "another"] })));
        assert_eq!(refusal(&v, &foreign), "the token is for another audience");
        let listed = sign(Algorithm::HS256, &claims(json!({ "aud": ["other", "slipway"] })));
        assert!(v.verify(Some(&format!("Bearer {listed}"))).is_ok());
        assert_eq!(v.verify(None).unwrap_err().message, "send a bearer token: Authorization: Bearer <token>");
        assert_eq!(v.verify(Some("Basic abc")).unwrap_err().message, "the Authorization header is not a bearer token");
        let token = sign(Algorithm::HS256, &claims(json!({})));
        for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
            assert!(v.verify(Some(&format!("{scheme} {token}"))).is_ok(), "{scheme}");
        }
    }

    /// A 32-byte secret of `byte`s, and the same as a JWK's `k`.
    fn secret(byte: u8) -> ([u8; 32], String) {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        ([byte; 32], URL_SAFE_NO_PAD.encode([byte; 32]))
    }

    /// The test Ed25519 key pair's public key as a JWK's `x`.
    const ED_X: &str = "NwkzUfGZvjQxb2NNA0kHyUDDHZpDNmy8nau_3jIZqBU";

    /// A keys file in a folder of its own holding `keys`, and a configuration naming it.
    fn keys_file(keys: Value) -> (tempfile::TempDir, std::path::PathBuf, Config) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        std::fs::write(&path, json!({ "keys": keys }).to_string()).unwrap();
        let config = config_with(&[("SLIPWAY_JWT_KEYS_FILE", path.to_str().unwrap())]);
        (dir, path, config)
    }

    /// The JWKs of HS256 keys `a` (secret 1) and `b` (secret 2) and of the Ed25519 key `e`.
    fn jwk(kid: &str) -> Value {
        match kid {
            "e" => json!({ "kty": "OKP", "crv": "Ed25519", "kid": "e", "x": ED_X }),
            "a" => json!({ "kty": "oct", "kid": "a", "k": secret(1).1 }),
            "b" => json!({ "kty": "oct", "kid": "b", "k": secret(2).1 }),
            _ => unreachable!(),
        }
    }

    /// Valid claims signed with HS256 secret `byte`, the header naming `kid` when given.
    fn hs256(byte: u8, kid: Option<&str>) -> String {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, &claims(json!({})), &EncodingKey::from_secret(&secret(byte).0)).unwrap()
    }

    /// Valid claims signed with the test Ed25519 key, the header naming `kid` when given.
    fn eddsa(kid: Option<&str>) -> String {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, &claims(json!({})), &EncodingKey::from_ed_pem(ED_PRIVATE.as_bytes()).unwrap())
            .unwrap()
    }

    fn accepted(v: &Verifier, token: &str) -> bool {
        v.verify(Some(&format!("Bearer {token}"))).is_ok()
    }

    #[test]
    fn a_token_naming_a_kid_is_checked_against_that_key_only() {
        let (_dir, _, c) = keys_file(json!([jwk("a"), jwk("b"), jwk("e")]));
        let v = Verifier::from_config(&c).unwrap();
        assert!(accepted(&v, &hs256(1, Some("a"))) && accepted(&v, &hs256(2, Some("b"))));
        assert!(accepted(&v, &eddsa(Some("e"))));
        // Signed with a's secret, naming b: b alone is tried.
        assert_eq!(refusal(&v, &hs256(1, Some("b"))), "the token's signature does not verify");
        assert_eq!(
            refusal(&v, &hs256(1, Some("e"))),
            "algorithm not accepted: the key \"e\" verifies EdDSA tokens only"
        );
    }

    #[test]
    fn an_unknown_or_malformed_kid_is_refused_quoted_and_cut_short() {
        let (_dir, _, c) = keys_file(json!([jwk("a")]));
        let v = Verifier::from_config(&c).unwrap();
        assert_eq!(refusal(&v, &hs256(1, Some("z\"q"))), "the token's kid \"z\\\"q\" names no key of this service");
        let long = refusal(&v, &hs256(1, Some(&"k".repeat(4000))));
        assert_eq!(long, format!("the token's kid \"{}\"… names no key of this service", "k".repeat(48)));
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let head = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","kid":7}"#);
        let body = URL_SAFE_NO_PAD.encode(claims(json!({})).to_string());
        let message = format!("{head}.{body}");
        let sig =
            jsonwebtoken::crypto::sign(message.as_bytes(), &EncodingKey::from_secret(&secret(1).0), Algorithm::HS256);
        assert_eq!(refusal(&v, &format!("{message}.{}", sig.unwrap())), "the token's kid header is not a string");
        // The one key of SLIPWAY_JWT_SECRET has no kid: a token's kid is not read, as before.
        let single = Verifier::from_config(&config(SECRET)).unwrap();
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("anything".into());
        let named = jsonwebtoken::encode(&header, &claims(json!({})), &EncodingKey::from_secret(SECRET.as_bytes()));
        assert!(accepted(&single, &named.unwrap()));
    }

    #[test]
    fn a_token_without_a_kid_verifies_with_any_configured_key_of_its_algorithm() {
        let (_dir, _, c) = keys_file(json!([jwk("a"), jwk("b"), jwk("e")]));
        let v = Verifier::from_config(&c).unwrap();
        assert!(accepted(&v, &hs256(1, None)) && accepted(&v, &hs256(2, None)) && accepted(&v, &eddsa(None)));
        assert_eq!(refusal(&v, &hs256(3, None)), "the token's signature does not verify");
        let message = refusal(&v, &sign(Algorithm::HS512, &claims(json!({}))));
        assert_eq!(message, "algorithm not accepted: this service accepts HS256 and EdDSA tokens only");
        let (_dir, _, c) = keys_file(json!([jwk("a"), jwk("b")]));
        let message = refusal(&Verifier::from_config(&c).unwrap(), &eddsa(None));
        assert_eq!(message, "algorithm not accepted: this service accepts HS256 tokens only");
    }

    #[test]
    fn a_token_whose_header_has_crit_is_refused() {
        let (_dir, _, c) = keys_file(json!([jwk("a")]));
        for v in [Verifier::from_config(&config(SECRET)).unwrap(), Verifier::from_config(&c).unwrap()] {
            let secret = v.keys().keys()[0].hmac_secret().unwrap().to_vec();
            let mut header = Header::new(Algorithm::HS256);
            header.crit = Some(vec!["exp".into()]);
            header.kid = v.keys().keys()[0].kid().map(str::to_owned);
            let token = jsonwebtoken::encode(&header, &claims(json!({})), &EncodingKey::from_secret(&secret)).unwrap();
            let message = refusal(&v, &token);
            assert_eq!(
                message,
                "the token's header has a crit parameter; this service understands no header extension"
            );
        }
    }

    #[test]
    fn two_authorization_headers_are_refused() {
        use axum::http::HeaderValue;
        let v = Verifier::from_config(&config(SECRET)).unwrap();
        let token = HeaderValue::from_str(&format!("Bearer {}", sign(Algorithm::HS256, &claims(json!({}))))).unwrap();
        let mut headers = HeaderMap::new();
        headers.append(header::AUTHORIZATION, token.clone());
        assert!(v.verify_headers(&headers).is_ok());
        headers.append(header::AUTHORIZATION, token);
        let e = v.verify_headers(&headers).unwrap_err();
        assert_eq!((e.status.as_u16(), e.message.as_str()), (401, "send one Authorization header, not several"));
        assert_eq!(v.verify_headers(&HeaderMap::new()).unwrap_err().message, TokenError::Missing.to_string());
        let mut headers = HeaderMap::new();
        let token = sign(Algorithm::HS256, &claims(json!({})));
        let mut value = format!("Bearer {token}").into_bytes();
        value.extend_from_slice("\u{202e}".as_bytes());
        headers.insert(header::AUTHORIZATION, axum::http::HeaderValue::from_bytes(&value).unwrap());
        assert_eq!(v.verify_headers(&headers).unwrap_err().message, TokenError::NotAscii.to_string());
    }

    #[test]
    fn a_failed_reload_keeps_the_keys_live_before_and_a_good_one_swaps_them_whole() {
        let (_dir, path, c) = keys_file(json!([jwk("a")]));
        let v = Verifier::from_config(&c).unwrap();
        let (a, b) = (hs256(1, Some("a")), hs256(2, Some("b")));
        assert!(accepted(&v, &a) && !accepted(&v, &b));
        let mut short = jwk("b");
        short["k"] = json!("c2hvcnQ");
        std::fs::write(&path, json!({ "keys": [jwk("a"), short] }).to_string()).unwrap();
        let error = v.reload().unwrap_err().to_string();
        assert!(error.contains("key 1 (kid \"b\"): its k holds 5 bytes"), "{error}");
        assert!(accepted(&v, &a) && !accepted(&v, &b), "the keys before the failed reload stay live");
        std::fs::write(&path, json!({ "keys": [jwk("a"), jwk("b")] }).to_string()).unwrap();
        assert_eq!(v.reload_if_changed().unwrap().unwrap().kids(), ["a", "b"]);
        assert!(accepted(&v, &a) && accepted(&v, &b));
        assert!(v.reload_if_changed().is_none(), "the file did not change");
        std::fs::write(&path, json!({ "keys": [jwk("b")] }).to_string()).unwrap();
        v.reload().unwrap();
        assert_eq!(refusal(&v, &a), "the token's kid \"a\" names no key of this service");
        assert!(accepted(&v, &b));
        let single = Verifier::from_config(&config(SECRET)).unwrap();
        assert!(matches!(single.reload(), Err(KeysError::NoFile)) && single.reload_if_changed().is_none());
    }

    #[test]
    fn a_keys_file_that_is_not_a_key_set_or_comes_with_another_key_stops_the_start() {
        let (_dir, path, c) = keys_file(json!([jwk("a"), { "kty": "oct", "kid": "b", "k": "c2hvcnQ" }]));
        let error = Verifier::from_config(&c).unwrap_err().to_string();
        assert!(
            error.contains(&path.display().to_string()) && error.contains("key 1 (kid \"b\"): its k holds 5 bytes")
        );
        let both = config_with(&[("SLIPWAY_JWT_KEYS_FILE", path.to_str().unwrap()), ("SLIPWAY_JWT_SECRET", SECRET)]);
        let error = Verifier::from_config(&both).unwrap_err().to_string();
        assert!(error.starts_with("set SLIPWAY_JWT_KEYS_FILE alone"), "{error}");
        let missing = config_with(&[("SLIPWAY_JWT_KEYS_FILE", "/nonexistent/keys.json")]);
        let error = Verifier::from_config(&missing).unwrap_err().to_string();
        assert!(error.starts_with("cannot read the token keys file /nonexistent/keys.json: "), "{error}");
    }

    #[test]
    fn a_token_minted_with_a_keys_file_names_its_key_and_verifies_with_it() {
        let (_dir, _, c) = keys_file(json!([jwk("e"), jwk("a"), jwk("b")]));
        let v = Verifier::from_config(&c).unwrap();
        let kid_of = |token: &str| jsonwebtoken::decode_header(token).unwrap().kid;
        let first = Mint::new("dev", vec!["*".into()], 60).sign(&c).unwrap();
        assert_eq!(kid_of(&first).as_deref(), Some("a"), "the first HS256 key signs by default");
        let b = Mint { kid: Some("b".into()), ..Mint::new("dev", vec!["*".into()], 60) }.sign(&c).unwrap();
        assert_eq!(kid_of(&b).as_deref(), Some("b"));
        assert!(accepted(&v, &first) && accepted(&v, &b));
        for (kid, config, want) in [
            ("e", &c, "the key \"e\" is an Ed25519 public key, which cannot sign"),
            ("z", &c, "the token keys file has no key with the kid \"z\""),
            ("a", &config(SECRET), "--kid picks a key of SLIPWAY_JWT_KEYS_FILE, which is not set"),
        ] {
            let error = Mint { kid: Some(kid.into()), ..Mint::new("dev", vec![], 60) }.sign(config).unwrap_err();
            assert!(error.to_string().starts_with(want), "{kid}: {error}");
        }
        let (_dir, _, ed_only) = keys_file(json!([jwk("e")]));
        let error = Mint::new("dev", vec![], 60).sign(&ed_only).unwrap_err().to_string();
        assert!(error.starts_with("the token keys file holds no HS256 key"), "{error}");
    }
}
