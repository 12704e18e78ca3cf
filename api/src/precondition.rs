//! `If-Match` and `If-None-Match` of `PUT` and `DELETE /deployments/{id}`
//! (RFC 9110 §13.1.1–2) read into a
//! [`slipway_jobs::precondition::Precondition`], which the submit or delete
//! checks in its own transaction. A deployment's `ETag` is its version,
//! `"<version>"` ([`slipway_jobs::precondition::etag`]).

use crate::error::ApiError;
use axum::http::{header, HeaderMap, HeaderName};
use slipway_jobs::precondition::Precondition;

/// The precondition the request's headers set, if any: `If-Match: *`, or a
/// list of entity tags (a weak one never matches, RFC 9110 §8.8.3.2); with
/// `create_only`, `If-None-Match: *` (a `PUT`). Anything else, or both
/// headers, is `400 invalid_request` naming the header.
pub fn read(headers: &HeaderMap, create_only: bool) -> Result<Option<Precondition>, ApiError> {
    let if_match = joined(headers, header::IF_MATCH)?;
    let if_none_match = joined(headers, header::IF_NONE_MATCH)?;
    match (if_match, if_none_match) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "invalid_request",
            "send If-Match (change the deployment as read) or If-None-Match: * (create it only), not both",
        )),
        (Some(value), None) => if_match_list(&value).map(Some),
        (None, Some(value)) if create_only && value.trim() == "*" => Ok(Some(Precondition::Absent)),
        (None, Some(_)) if create_only => Err(ApiError::bad_request(
            "invalid_request",
            "If-None-Match takes only * here (create the deployment only if it does not exist)",
        )),
        (None, Some(_)) => {
            Err(ApiError::bad_request("invalid_request", "this request takes If-Match, not If-None-Match"))
        }
    }
}

/// Every field of `name`, comma-joined; `None` when absent.
fn joined(headers: &HeaderMap, name: HeaderName) -> Result<Option<String>, ApiError> {
    let mut values = Vec::new();
    for value in headers.get_all(&name) {
        values.push(value.to_str().map_err(|_| {
            ApiError::bad_request("invalid_request", format!("the {name} header is not visible ASCII"))
        })?);
    }
    Ok((!values.is_empty()).then(|| values.join(",")))
}

/// `*`, or `#entity-tag` (RFC 9110 §8.8.3): the versions of its strong tags.
fn if_match_list(value: &str) -> Result<Precondition, ApiError> {
    let bad = || {
        ApiError::bad_request(
            "invalid_request",
            "If-Match takes * or a list of entity tags such as \"3\" (the ETag of GET /deployments/{id})",
        )
    };
    if value.trim() == "*" {
        return Ok(Precondition::Exists);
    }
    let mut versions = Vec::new();
    let mut rest = value.trim_start_matches([' ', '\t', ',']);
    while !rest.is_empty() {
        let (weak, tagged) = match rest.strip_prefix("W/") {
            Some(tagged) => (true, tagged),
            None => (false, rest),
        };
        let inner = tagged.strip_prefix('"').ok_or_else(bad)?;
        let end = inner.find('"').ok_or_else(bad)?;
        if !weak {
            if let Ok(version) = inner[..end].parse::<i64>() {
                versions.push(version);
            }
        }
        rest = inner[end + 1..].trim_start_matches([' ', '\t']);
        match rest.strip_prefix(',') {
            Some(more) => rest = more.trim_start_matches([' ', '\t', ',']),
            None if rest.is_empty() => {}
            None => return Err(bad()),
        }
    }
    Ok(Precondition::Version(versions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with(name: HeaderName, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn if_match_reads_star_and_lists_of_strong_tags() {
        assert_eq!(read(&HeaderMap::new(), true).unwrap(), None);
        assert_eq!(read(&with(header::IF_MATCH, "*"), false).unwrap(), Some(Precondition::Exists));
        assert_eq!(
            read(&with(header::IF_MATCH, "\"3\", W/\"4\",\"x\" ,\"5\""), false).unwrap(),
            Some(Precondition::Version(vec![3, 5]))
        );
        assert_eq!(read(&with(header::IF_NONE_MATCH, "*"), true).unwrap(), Some(Precondition::Absent));
        for (name, value, create_only) in [
            (header::IF_MATCH, "3", false),
            (header::IF_MATCH, "\"3", false),
            (header::IF_MATCH, "\"3\" \"4\"", false),
            (header::IF_NONE_MATCH, "\"3\"", true),
            (header::IF_NONE_MATCH, "*", false),
        ] {
            let e = read(&with(name.clone(), value), create_only).unwrap_err();
            assert_eq!((e.status.as_u16(), e.code), (400, "invalid_request"), "{name}: {value}");
        }
    }
}
