//! The JWT header and claim parsing of the api (`api/src/auth.rs`,
//! [`Verifier::check`]; SEC-1, SEC-4) under a fuzzer.
//!
//! A case is a header and a set of claims, each an arbitrary mix of the
//! names the verifier reads (`alg`, `kid`, `crit`, `typ`; `exp`, `nbf`,
//! `aud`, `iss`, `sub`, `deployments`, `operator`) with values of every
//! JSON kind, signed with HMAC-SHA256 under one of the configured secrets
//! or another one, then possibly damaged (signature dropped or changed,
//! padding, a part swapped for the fuzzer's text), or replaced by the
//! fuzzer's text outright. Two verifiers read it: one with
//! `SLIPWAY_JWT_SECRET` and an issuer, one with a keys file of two HS256
//! keys. It checks that:
//!
//! - [`Verifier::check`] never panics, and a refusal's sentence is one line
//!   that repeats neither the signature nor the token;
//! - an accepted token was signed by an HS256 key of that verifier, with
//!   `alg` exactly `HS256` and no `crit`, its `exp` after now and its `nbf`
//!   (when given) not after now; the claims it answers are those the
//!   token carries (`aud` naming the audience, `iss` the trusted issuer
//!   where one is configured, `deployments` a list of strings, `operator`
//!   true only when the claim is `true`, `sub` or empty);
//! - the same token checked at its `exp` is refused as expired.
//!
//! Run it with `scripts/fuzz` (docs/TESTING.md).

#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Result, Unstructured};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use slipway_api::auth::{TokenError, Verifier};
use slipway_jobs::config::Config;

/// `SLIPWAY_JWT_SECRET` of the first verifier.
const SECRET: &[u8; 32] = b"0123456789abcdef0123456789abcdef";
/// The keys file's HS256 keys `a` and `b`, and a key no verifier has.
const KEY_A: [u8; 32] = [1; 32];
const KEY_B: [u8; 32] = [2; 32];
const STRANGER: [u8; 32] = [3; 32];
const ISSUER: &str = "https://issuer.example";
/// "Now" for every check: 2026-12-06, in Unix seconds.
const NOW: f64 = 1_796_000_000.0;

const HEADER_NAMES: [&str; 5] = ["alg", "kid", "crit", "typ", "jku"];
const CLAIM_NAMES: [&str; 8] = ["exp", "nbf", "aud", "iss", "sub", "deployments", "operator", "jti"];
const WORDS: [&str; 10] = ["HS256", "EdDSA", "none", "hs256", "a", "b", "slipway", ISSUER, "*", "demo"];

fn verifiers() -> &'static [(Verifier, bool); 2] {
    static VERIFIERS: OnceLock<[(Verifier, bool); 2]> = OnceLock::new();
    VERIFIERS.get_or_init(|| {
        let config = |pairs: &[(&str, &str)]| {
            let keys: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            Config::from_keys(&keys).expect("the fuzz configuration is valid")
        };
        let secret = std::str::from_utf8(SECRET).unwrap();
        let with_secret = config(&[("SLIPWAY_JWT_SECRET", secret), ("SLIPWAY_JWT_ISSUER", ISSUER)]);
        let dir = std::env::temp_dir().join(format!("slipway-fuzz-jwt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("keys.json");
        let keys = json!({ "keys": [
            { "kty": "oct", "kid": "a", "k": URL_SAFE_NO_PAD.encode(KEY_A) },
            { "kty": "oct", "kid": "b", "k": URL_SAFE_NO_PAD.encode(KEY_B) },
        ] });
        std::fs::write(&file, keys.to_string()).unwrap();
        let with_file = config(&[("SLIPWAY_JWT_KEYS_FILE", file.to_str().unwrap())]);
        [
            (Verifier::from_config(&with_secret).expect("a verifier with a secret"), true),
            (Verifier::from_config(&with_file).expect("a verifier with a keys file"), false),
        ]
    })
}

#[derive(Debug)]
struct Case {
    token: String,
    signature: String,
    /// The claims as sent, when the payload is JSON text of an object.
    claims: Option<Map<String, Value>>,
    /// The secret that signed it, if any key did.
    signed_with: Option<[u8; 32]>,
}

fn value(u: &mut Unstructured, depth: u32) -> Result<Value> {
    Ok(match u.int_in_range(0..=if depth == 0 { 5 } else { 7 })? {
        0 => Value::Null,
        1 => json!(u.arbitrary::<bool>()?),
        // Around now, to meet exp and nbf on both sides.
        2 => json!(NOW + f64::from(u.int_in_range(-5000i32..=5000)?) / 4.0),
        3 => json!(u.arbitrary::<f64>().ok().filter(|f| f.is_finite()).unwrap_or(0.0)),
        4 => json!(WORDS[u.choose_index(WORDS.len())?]),
        5 => json!(u.arbitrary::<String>()?),
        6 => Value::Array((0..u.int_in_range(0..=3)?).map(|_| value(u, depth - 1)).collect::<Result<_>>()?),
        _ => Value::Object(object(u, &CLAIM_NAMES, depth - 1)?),
    })
}

fn object(u: &mut Unstructured, names: &[&str], depth: u32) -> Result<Map<String, Value>> {
    let mut map = Map::new();
    for _ in 0..u.int_in_range(0..=names.len() + 1)? {
        let name = match u.int_in_range(0..=names.len())? {
            i if i < names.len() => names[i].to_owned(),
            _ => u.arbitrary::<String>()?,
        };
        map.insert(name, value(u, depth)?);
    }
    Ok(map)
}

fn part(json: &impl serde::Serialize) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(json).unwrap())
}

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        if u.ratio(1, 16)? {
            let token: String = u.arbitrary()?;
            let signature = token.rsplit('.').next().unwrap_or("").to_owned();
            return Ok(Case { token, signature, claims: None, signed_with: None });
        }
        let mut header = object(u, &HEADER_NAMES, 1)?;
        if u.ratio(3, 4)? {
            header.insert("alg".into(), json!("HS256"));
        }
        let mut claims = object(u, &CLAIM_NAMES, 2)?;
        if u.ratio(3, 4)? {
            // Mostly a token that could pass, so the fuzzer reaches past each claim.
            claims.entry("exp").or_insert(json!(NOW + 60.0));
            claims.entry("aud").or_insert(json!("slipway"));
            claims.entry("deployments").or_insert(json!(["*"]));
            if u.arbitrary()? {
                claims.entry("iss").or_insert(json!(ISSUER));
            }
        }
        let message = format!("{}.{}", part(&header), part(&claims));
        let key = [Some(*SECRET), Some(KEY_A), Some(KEY_B), Some(STRANGER), None][u.int_in_range(0..=4)?];
        let mut signature = match key {
            Some(secret) => {
                jsonwebtoken::crypto::sign(message.as_bytes(), &EncodingKey::from_secret(&secret), Algorithm::HS256)
                    .expect("HMAC signs anything")
            }
            None => u.arbitrary::<String>()?,
        };
        let mut signed_with = key.filter(|k| *k != STRANGER);
        let mut token = format!("{message}.{signature}");
        match u.int_in_range(0u8..=7)? {
            0 => {
                token = message.clone();
                signed_with = None;
            }
            1 => {
                token.push('=');
            }
            2 => {
                signature = u.arbitrary::<String>()?;
                token = format!("{message}.{signature}");
                signed_with = None;
            }
            3 => {
                let head: String = u.arbitrary()?;
                if head != part(&header) {
                    signed_with = None;
                }
                token = format!("{head}.{}.{signature}", part(&claims));
            }
            _ => {}
        }
        let claims = Some(claims);
        Ok(Case { token, signature, claims, signed_with })
    }
}

fuzz_target!(|case: Case| {
    for (verifier, has_issuer) in verifiers() {
        match verifier.check(&case.token, NOW) {
            Err(refusal) => {
                let sentence = refusal.to_string();
                assert!(!sentence.contains('\n') && !sentence.contains('\r'), "{sentence:?}");
                // Only what a signature looks like (16 or more base64url
                // characters): a text of the fuzzer's could be a piece of any
                // sentence ("the token is malforme" was one). A kid the
                // refusal quotes by design may equal the signature too.
                let like_a_signature = case.signature.len() >= 16
                    && case.signature.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
                let in_header = case.token.split('.').next().is_some_and(|head| {
                    let decoded = URL_SAFE_NO_PAD.decode(head.trim_end_matches('=')).unwrap_or_default();
                    String::from_utf8_lossy(&decoded).contains(&case.signature)
                });
                if like_a_signature && !in_header {
                    assert!(!sentence.contains(&case.signature), "the refusal repeats the signature: {sentence}");
                }
                if case.claims.is_some() {
                    assert!(!sentence.contains(&case.token), "the refusal repeats the token: {sentence}");
                }
            }
            Ok(accepted) => {
                let secret = case.signed_with.expect("a token no configured key signed was accepted");
                assert!(if *has_issuer { secret == *SECRET } else { secret != *SECRET }, "signed by a foreign key");
                let claims = case.claims.as_ref().expect("an accepted token's claims are known");
                let (head, _) = case.token.split_once('.').unwrap();
                let header: Value =
                    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(head.trim_end_matches('=')).unwrap()).unwrap();
                assert_eq!(header.get("alg"), Some(&json!("HS256")));
                assert!(header.get("crit").is_none());
                assert_eq!(claims.get("exp").and_then(Value::as_f64), Some(accepted.exp));
                assert!(accepted.exp > NOW);
                if let Some(nbf) = claims.get("nbf") {
                    assert!(nbf.as_f64().is_some_and(|nbf| nbf <= NOW), "nbf {nbf}");
                }
                assert!(accepted.aud.contains("slipway"));
                if *has_issuer {
                    assert_eq!(accepted.iss.as_deref(), Some(ISSUER));
                }
                assert_eq!(claims.get("deployments"), Some(&json!(accepted.deployments)));
                assert_eq!(accepted.operator, claims.get("operator") == Some(&json!(true)));
                assert_eq!(accepted.sub, claims.get("sub").and_then(Value::as_str).unwrap_or(""));
                assert_eq!(verifier.check(&case.token, accepted.exp), Err(TokenError::Expired));
            }
        }
    }
});
