//! Bearer-token authentication (SEC-1, PRODUCT.md §9 and §12).
//!
//! Tokens are JWTs from configured front-ends: HS256 with
//! `SLIPWAY_JWT_SECRET`, or EdDSA with `SLIPWAY_JWT_PUBLIC_KEY`. A token must
//! carry `exp`, the configured `aud` (and `iss` when one is configured), and a
//! `deployments` claim: the ids it may touch, or `["*"]`.

use crate::error::ApiError;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use slipway_jobs::config::Config;

/// The `aud` claim: a string or a list of strings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    /// One audience.
    One(String),
    /// Several audiences.
    Many(Vec<String>),
}

/// The shortest HS256 secret accepted, in bytes (RFC 7518 §3.2: at least the hash size).
pub const MIN_SECRET_BYTES: usize = 32;

/// The claims Slipway reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// Who the token is for (the front-end user or service).
    #[serde(default)]
    pub sub: String,
    /// Expiry, Unix seconds.
    pub exp: u64,
    /// Audience: one, or a list (RFC 7519 allows both).
    pub aud: Audience,
    /// Issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// The deployment ids the token may touch, or `["*"]` for all.
    pub deployments: Vec<String>,
}

impl Claims {
    /// True when the token may touch deployment `id`.
    pub fn allows(&self, id: &str) -> bool {
        self.deployments.iter().any(|d| d == "*" || d == id)
    }
}

/// Verifies tokens.
pub struct Verifier {
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier").finish_non_exhaustive()
    }
}

impl Verifier {
    /// Builds the verifier from §12; without a secret or public key the api refuses to start.
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        let (key, alg) = match (&config.jwt_secret, &config.jwt_public_key) {
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
        let mut validation = Validation::new(alg);
        validation.set_audience(&[config.jwt_audience.as_str()]);
        validation.set_required_spec_claims(&["exp", "aud"]);
        // An expired or not-yet-valid token is refused outright (SEC-1).
        validation.leeway = 0;
        validation.validate_nbf = true;
        if let Some(iss) = &config.jwt_issuer {
            validation.set_issuer(&[iss.as_str()]);
        }
        Ok(Self { key, validation })
    }

    /// Checks an `Authorization` header value. Every failure is `401` with a
    /// reason that never repeats the token.
    pub fn verify(&self, header: Option<&str>) -> Result<Claims, ApiError> {
        let header =
            header.ok_or_else(|| ApiError::unauthorized("send a bearer token: Authorization: Bearer <token>"))?;
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .ok_or_else(|| ApiError::unauthorized("the Authorization header is not a bearer token"))?;
        jsonwebtoken::decode::<Claims>(token.trim(), &self.key, &self.validation).map(|data| data.claims).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind::*;
            let why = match e.kind() {
                ExpiredSignature => "the token has expired",
                ImmatureSignature => "the token is not valid yet (nbf is in the future)",
                InvalidAudience => "the token is for another audience",
                InvalidIssuer => "the token is from an issuer this service does not trust",
                InvalidSignature | InvalidAlgorithm | InvalidKeyFormat => "the token's signature does not verify",
                MissingRequiredClaim(_) => "the token lacks a required claim (exp, aud)",
                _ => "the token is malformed",
            };
            ApiError::unauthorized(why)
        })
    }
}

/// Mints a token with the configured HS256 secret (`slipway-api token`,
/// development and tests). `ttl_secs` from now.
pub fn mint(config: &Config, subject: &str, deployments: Vec<String>, ttl_secs: u64) -> anyhow::Result<String> {
    let secret = config
        .jwt_secret
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("minting needs SLIPWAY_JWT_SECRET (an Ed25519 public key cannot sign)"))?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp() as u64;
    let claims = Claims {
        sub: subject.to_owned(),
        exp: now + ttl_secs,
        aud: Audience::One(config.jwt_audience.clone()),
        iss: config.jwt_issuer.clone(),
        deployments,
    };
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

    fn config(secret: &str) -> Config {
        Config::from_keys(&BTreeMap::from([("SLIPWAY_JWT_SECRET".to_owned(), secret.to_owned())])).unwrap()
    }

    #[test]
    fn a_short_secret_is_refused_at_start() {
        let err = Verifier::from_config(&config("short")).unwrap_err().to_string();
        assert!(err.contains("at least"), "{err}");
        assert!(!err.contains("short\""), "the secret is echoed: {err}");
    }

    #[test]
    fn a_minted_token_verifies_and_carries_its_scope() {
        let c = config("0123456789abcdef0123456789abcdef");
        let token = mint(&c, "dev", vec!["demo".into()], 60).unwrap();
        let claims = Verifier::from_config(&c).unwrap().verify(Some(&format!("Bearer {token}"))).unwrap();
        assert!(claims.allows("demo") && !claims.allows("other"));
    }
}
