//! The unit tests of `api/src/auth.rs`: tokens read, verified and minted.

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
    assert_eq!(refusal(&v, &hs256(1, Some("e"))), "algorithm not accepted: the key \"e\" verifies EdDSA tokens only");
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
    let sig = jsonwebtoken::crypto::sign(message.as_bytes(), &EncodingKey::from_secret(&secret(1).0), Algorithm::HS256);
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
        assert_eq!(message, "the token's header has a crit parameter; this service understands no header extension");
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
    assert!(error.contains(&path.display().to_string()) && error.contains("key 1 (kid \"b\"): its k holds 5 bytes"));
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
