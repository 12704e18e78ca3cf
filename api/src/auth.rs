//! Bearer-token authentication (SEC-1, PRODUCT.md §9 and §12).
//!
//! Tokens are JWTs from configured front-ends: HS256 with
//! `SLIPWAY_JWT_SECRET`, or EdDSA with `SLIPWAY_JWT_PUBLIC_KEY`. A token must
//! carry `exp`, the configured `aud` (and `iss` when one is configured), and a
//! `deployments` claim: the ids it may touch, or `["*"]`. An operator's
//! token also carries `"operator": true`, which opens the fleet routes
//! (`GET /queues`, `GET /workers`); a front-end's token never does.
//!
//! jsonwebtoken checks the signature (`jsonwebtoken::crypto::verify`); the
//! algorithm and the claims are checked here, so each refusal says which
//! claim is missing or wrong. (`jsonwebtoken::decode` reads the claims before
//! it validates them, so a missing `exp` would be a "malformed" token, and
//! it reads `exp` and `nbf` as whole seconds, while RFC 7519 NumericDates
//! may be fractional.)

use crate::error::ApiError;
use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use slipway_jobs::config::Config;

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
    /// An `Authorization` header of another scheme.
    #[error("the Authorization header is not a bearer token")]
    NotBearer,
    /// Not three base64url parts with a JSON header and a JSON object of claims.
    #[error("the token is malformed")]
    Malformed,
    /// Signed (or claiming to be signed) with an algorithm other than the configured key's.
    #[error("algorithm not accepted: this service accepts {accepted} tokens only")]
    AlgorithmNotAccepted {
        /// The algorithm of the configured key (`HS256` or `EdDSA`).
        accepted: &'static str,
    },
    /// The signature does not verify with the configured key.
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

/// Verifies tokens.
pub struct Verifier {
    key: DecodingKey,
    algorithm: Algorithm,
    audience: String,
    issuer: Option<String>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier").finish_non_exhaustive()
    }
}

impl Verifier {
    /// Builds the verifier from §12; without a secret or public key the api refuses to start.
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        let (key, algorithm) = match (&config.jwt_secret, &config.jwt_public_key) {
            (Some(_), Some(_)) => anyhow::bail!("set one of SLIPWAY_JWT_SECRET and SLIPWAY_JWT_PUBLIC_KEY, not both"),
            (Some(secret), None) => {
                if secret.expose_secret().len() < MIN_SECRET_BYTES {
                    anyhow::bail!("SLIPWAY_JWT_SECRET is shorter than {MIN_SECRET_BYTES} bytes; use a random secret of at least that length")
                }
                (DecodingKey::from_secret(secret.expose_secret().as_bytes()), Algorithm::HS256)
            }
            (None, Some(pem)) => (
                DecodingKey::from_ed_pem(pem.as_bytes())
                    .map_err(|e| anyhow::anyhow!("SLIPWAY_JWT_PUBLIC_KEY is not an Ed25519 public key in PEM: {e}"))?,
                Algorithm::EdDSA,
            ),
            (None, None) => anyhow::bail!(
                "no token key: set SLIPWAY_JWT_SECRET (HS256) or SLIPWAY_JWT_PUBLIC_KEY (Ed25519 PEM); the api refuses to run unauthenticated"
            ),
        };
        Ok(Self { key, algorithm, audience: config.jwt_audience.clone(), issuer: config.jwt_issuer.clone() })
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
        let now = time::OffsetDateTime::now_utc().unix_timestamp_nanos() as f64 / 1e9;
        Ok(self.check(token.trim(), now)?)
    }

    /// Checks a token at `now` (Unix seconds): the algorithm, the signature,
    /// then the claims. A token is valid from `nbf` (inclusive, when given)
    /// until `exp` (exclusive), with no leeway; `aud` must name the
    /// configured audience; `iss`, when an issuer is configured, must be it.
    pub fn check(&self, token: &str, now: f64) -> Result<Claims, TokenError> {
        let accepted = match self.algorithm {
            Algorithm::EdDSA => "EdDSA",
            _ => "HS256",
        };
        // header.payload.signature, each base64url (RFC 7515 compact form).
        let (message, signature) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
        let (header, payload) = message.split_once('.').ok_or(TokenError::Malformed)?;
        let header = json_part(header).ok_or(TokenError::Malformed)?;
        let alg = header.get("alg").and_then(Value::as_str).ok_or(TokenError::Malformed)?;
        if alg != accepted {
            return Err(TokenError::AlgorithmNotAccepted { accepted });
        }
        match jsonwebtoken::crypto::verify(signature, message.as_bytes(), &self.key, self.algorithm) {
            Ok(true) => {}
            Err(e) if matches!(e.kind(), ErrorKind::Base64(_)) => return Err(TokenError::Malformed),
            Ok(false) | Err(_) => return Err(TokenError::BadSignature),
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

/// Mints a token with the configured HS256 secret (`slipway-api token`,
/// development and tests): `exp` is `ttl_secs` from now, in whole seconds.
pub fn mint(config: &Config, subject: &str, deployments: Vec<String>, ttl_secs: u64) -> anyhow::Result<String> {
    mint_as(config, subject, deployments, ttl_secs, false)
}

/// As [`mint`]; with `operator`, the token also carries `"operator": true`
/// (`slipway-api token --operator`).
pub fn mint_as(
    config: &Config,
    subject: &str,
    deployments: Vec<String>,
    ttl_secs: u64,
    operator: bool,
) -> anyhow::Result<String> {
    let secret = config
        .jwt_secret
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("minting needs SLIPWAY_JWT_SECRET (an Ed25519 public key cannot sign)"))?;
    if secret.expose_secret().len() < MIN_SECRET_BYTES {
        anyhow::bail!(
            "SLIPWAY_JWT_SECRET is shorter than {MIN_SECRET_BYTES} bytes, so the api would refuse to start with it; use a random secret of at least that length"
        )
    }
    let now = time::OffsetDateTime::now_utc().unix_timestamp() as u64;
    let mut claims = json!({
        "sub": subject,
        "exp": now + ttl_secs,
        "aud": config.jwt_audience,
        "deployments": deployments,
    });
    if let Some(iss) = &config.jwt_issuer {
        claims["iss"] = json!(iss);
    }
    if operator {
        claims["operator"] = json!(true);
    }
    Ok(jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret.expose_secret().as_bytes()),
    )?)
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
        let err = mint(&config("short"), "dev", vec!["demo".into()], 60).unwrap_err().to_string();
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
        let token = mint(&c, "dev", vec!["demo".into()], 60).unwrap();
        let claims = Verifier::from_config(&c).unwrap().verify(Some(&format!("Bearer {token}"))).unwrap();
        assert!(claims.allows("demo") && !claims.allows("other"));
    }

    #[test]
    fn only_a_token_minted_for_an_operator_carries_the_operator_claim() {
        let c = config(SECRET);
        let v = Verifier::from_config(&c).unwrap();
        let operator = mint_as(&c, "ops", vec!["*".into()], 60, true).unwrap();
        assert!(v.verify(Some(&format!("Bearer {operator}"))).unwrap().operator);
        let front_end = mint(&c, "dev", vec!["*".into()], 60).unwrap();
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
}
