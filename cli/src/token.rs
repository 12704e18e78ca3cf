//! `slipway token`: the claims of the token in use, decoded without
//! checking its signature. The client never holds the signing secret: a
//! token comes from a front-end, or from `slipway-api token` run where the
//! api's `SLIPWAY_JWT_SECRET` is (development), and only the api can tell a
//! genuine one.

use crate::client::Failure;
use crate::screen::Screen;
use base64::Engine as _;
use serde_json::{json, Value};

/// The claims of `token` (a JWT's middle part), or why it cannot be read.
/// The message never repeats the token.
pub fn claims(token: &str) -> Result<Value, Failure> {
    let malformed =
        || Failure::Usage("the token is not a JWT (three base64url parts, the middle one JSON claims)".into());
    let mut parts = token.trim().split('.');
    let (Some(_), Some(payload), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(malformed());
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|_| malformed())?;
    match serde_json::from_slice(&bytes) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ => Err(malformed()),
    }
}

/// Prints the token's claims and expiry (text, or one JSON object), through
/// `screen` (claims are text from elsewhere, escaped on a terminal).
pub fn show(token: Option<&str>, json_output: bool, screen: Screen) -> Result<(), Failure> {
    let token = token.filter(|t| !t.trim().is_empty()).ok_or_else(|| {
        Failure::Usage(
            "no token: pass --token or set SLIPWAY_TOKEN (tokens come from your front-end, or from `slipway-api token` in development)"
                .into(),
        )
    })?;
    let claims = claims(token)?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp() as f64;
    let exp = claims["exp"].as_f64();
    let expires_at = exp
        .and_then(|e| time::OffsetDateTime::from_unix_timestamp(e as i64).ok())
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok());
    let expired = exp.map(|e| now >= e);
    if json_output {
        screen.println(
            &screen.json(&json!({ "claims": claims, "expires_at": expires_at, "expired": expired, "verified": false })),
        );
        return Ok(());
    }
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let mut lines = vec![
        format!("subject      {}", text(&claims["sub"])),
        format!("audience     {}", text(&claims["aud"])),
        format!("issuer       {}", text(&claims["iss"])),
        format!("deployments  {}", text(&claims["deployments"])),
        format!("operator     {}", if claims["operator"] == json!(true) { "yes" } else { "no" }),
    ];
    lines.push(match (expires_at, exp) {
        (Some(at), Some(e)) if now >= e => {
            format!("expires      {at} (expired {} ago)", crate::table::age(&json!(((now - e) * 1000.0) as i64)))
        }
        (Some(at), Some(e)) => {
            format!("expires      {at} (in {})", crate::table::age(&json!(((e - now) * 1000.0) as i64)))
        }
        _ => "expires      - (no exp claim: the api refuses such a token)".into(),
    });
    lines.push("(decoded without checking the signature: only the api can tell whether it is genuine)".into());
    screen.println(&lines.join("\n"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_that_is_not_a_jwt_is_refused_without_repeating_it() {
        for token in ["secret-looking-value", "a.b", "a.!!!.c", "a.bm90IGpzb24.c"] {
            let message = claims(token).unwrap_err().to_string();
            assert!(message.starts_with("the token is not a JWT"), "{message}");
            assert!(!message.contains(token), "{message}");
        }
    }

    #[test]
    fn the_claims_of_a_jwt_are_read_from_its_middle_part() {
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"sub":"ops","operator":true}"#);
        let claims = claims(&format!("eyJhbGciOiJIUzI1NiJ9.{payload}.c2ln")).unwrap();
        assert_eq!(claims, json!({ "sub": "ops", "operator": true }));
    }
}
