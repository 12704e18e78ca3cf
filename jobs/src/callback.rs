//! The callback of a delete and its reconcile push (PRODUCT.md DL-2, SEC-2).
//!
//! A delete may carry a `callback_url` and a `callback_token`; when its
//! destroy reaches `idle`, the `reconcile_push` job POSTs once to the URL
//! with the token as a bearer header. A URL from a caller is a server-side
//! request forgery primitive, so this module holds every limit on it:
//!
//! - [`Origins`]: the allowlist of `SLIPWAY_ALLOWED_ORIGINS`, the same for
//!   CORS and for callbacks;
//! - [`check_url`]: the shape of a callback URL and its origin, checked when
//!   the delete is accepted and again right before the push;
//! - [`BLOCKS`] and [`forbidden_address`]: the one table of addresses a
//!   push never connects to (every range of the IANA special-purpose
//!   registries that is not globally reachable, multicast, the cloud
//!   metadata addresses, and the IPv6 forms that embed them) unless
//!   `SLIPWAY_CALLBACK_ALLOW_PRIVATE` is set; `SLIPWAY_NIX_ALLOWED_URIS`
//!   is checked against the same table;
//! - [`check_delete_callback`]: a delete's body (`callback_url`,
//!   `callback_token`) checked when the delete is accepted;
//! - [`push`]: the one POST, to the addresses that were checked, with no
//!   second resolution, no proxy, no redirect and no retry.
//!
//! Nothing here logs, and no outcome or error carries the token.

mod address;
mod push;

pub use address::{block_of, forbidden_address, refusing_block, Block, Rule, BLOCKS};
pub use push::{
    checked_client, classify as classify_request_error, install_crypto_provider, push, Lookup, PushError, PushOutcome,
    PushRequest, Resolve, SystemResolver, PUSH_DEADLINE,
};

use serde_json::{Map, Value};
use url::Url;

/// The origins of `SLIPWAY_ALLOWED_ORIGINS` (PRODUCT.md §12): the browsers
/// that may call the api (CORS) and the only places a delete's callback may
/// point to (DL-2).
///
/// Each entry is kept as a browser serialises an origin (the `Origin`
/// header): `scheme://host[:port]` with the scheme and host in lower case,
/// an international host in its ASCII (punycode) form, and the scheme's
/// default port dropped; `https://PANEL.example:443/` is kept as
/// `https://panel.example`. Order is the configured order, without repeats.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origins(Vec<String>);

/// An entry of `SLIPWAY_ALLOWED_ORIGINS` that is not an `http` or `https`
/// origin; [`Origins::parse`] refuses the whole list on the first one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?} is not an origin: {reason}")]
pub struct OriginError {
    /// The entry as configured (trimmed).
    pub entry: String,
    /// What is wrong with it, as a phrase (`"an origin has no path"`).
    pub reason: &'static str,
}

impl Origins {
    /// Parses the entries of the allowlist (the comma-separated items of
    /// `SLIPWAY_ALLOWED_ORIGINS`), trimming each and skipping empty ones.
    ///
    /// Errors: the first entry that is not a URL, whose scheme is not `http`
    /// or `https`, or that has user information (`@`), a path other than
    /// `/`, a query (`?`, even empty), a fragment (`#`, even empty),
    /// whitespace, a control character or a backslash.
    pub fn parse<I, S>(entries: I) -> Result<Self, OriginError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut origins: Vec<String> = Vec::new();
        for entry in entries {
            let entry = entry.as_ref().trim();
            if entry.is_empty() {
                continue;
            }
            let origin = serialise_origin(entry).map_err(|reason| OriginError { entry: entry.to_owned(), reason })?;
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        Ok(Self(origins))
    }

    /// Whether an origin, as an `Origin` header carries it
    /// (`https://panel.example`), is in the allowlist. The value is
    /// normalised as the entries were; a value that is not an origin
    /// (`null`, one with a path, …) is never allowed.
    pub fn allows(&self, origin: &str) -> bool {
        serialise_origin(origin.trim()).is_ok_and(|origin| self.contains(&origin))
    }

    /// The origins, serialised (`https://panel.example`), in configured order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        self.0.iter().map(String::as_str)
    }

    /// Whether the allowlist is empty: no browser may call, no callback is
    /// ever allowed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn contains(&self, serialised: &str) -> bool {
        self.0.iter().any(|o| o == serialised)
    }
}

/// The serialised origin of an allowlist entry or an `Origin` header value,
/// or why it is not one.
fn serialise_origin(entry: &str) -> Result<String, &'static str> {
    if has_whitespace_or_control(entry) || entry.contains('\\') {
        return Err("an origin has no whitespace, control character or backslash");
    }
    let url =
        Url::parse(entry).map_err(|_| "expected an origin such as https://panel.example or http://localhost:3000")?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("an origin's scheme is http or https");
    }
    if has_userinfo(entry, &url) {
        return Err("an origin has no user information (@)");
    }
    if url.path() != "/" {
        return Err("an origin has no path");
    }
    if url.query().is_some() {
        return Err("an origin has no query (?)");
    }
    if entry.contains('#') {
        return Err("an origin has no fragment (#)");
    }
    Ok(url.origin().ascii_serialization())
}

/// Why a callback URL is refused (DL-2). The `Display` form is the reason
/// sentence for the delete's answer; it never repeats the URL (only, for
/// [`Refusal::Origin`], the origin that was read from it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The URL is the empty string.
    #[error("the callback URL is empty")]
    Empty,
    /// The WHATWG URL parser refuses it.
    #[error("the callback URL is not a URL ({0})")]
    NotAUrl(url::ParseError),
    /// A scheme other than `http` and `https` (`file`, `javascript`, …).
    #[error("the callback URL's scheme is {0}; only http and https are allowed")]
    Scheme(String),
    /// Whitespace or a control character anywhere, which parsers strip or
    /// keep differently.
    #[error("the callback URL contains whitespace or a control character")]
    Whitespace,
    /// A backslash, which browsers read as `/` and other parsers do not.
    #[error("the callback URL contains a backslash")]
    Backslash,
    /// User information before the host (`user@`, `user:pass@`, or an empty `@`).
    #[error("the callback URL carries user information (an @ before the host)")]
    Userinfo,
    /// A fragment (`#`, even empty).
    #[error("the callback URL has a fragment (#)")]
    Fragment,
    /// The WHATWG parser (`url`) and the `http` crate's parser read a
    /// different scheme, host or port, or the second one refuses the URL.
    #[error("two URL parsers read the callback URL's scheme, host or port differently")]
    Ambiguous,
    /// Longer than [`MAX_URL_BYTES`].
    #[error("the callback URL is longer than {MAX_URL_BYTES} bytes")]
    TooLong,
    /// The origin read from the URL is not in the allowlist.
    #[error("the callback origin {origin} is not in SLIPWAY_ALLOWED_ORIGINS")]
    Origin {
        /// The origin as the URL parser read it (`https://evil.test`).
        origin: String,
    },
}

/// The longest callback URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 8192;

/// Checks a delete's `callback_url` (DL-2) and gives it parsed.
///
/// Checked when a delete is accepted and again by [`push`] right before the
/// call, against the allowlist of that moment. Refused (see [`Refusal`])
/// when the URL is empty or longer than [`MAX_URL_BYTES`], is not a URL, has a scheme other than `http` or
/// `https`, contains whitespace, a control character or a backslash, carries
/// user information or a fragment, is read differently by two parsers (the
/// WHATWG one and the `http` crate's: scheme, host compared
/// case-insensitively and effective port), or when its origin is not in
/// `origins`.
pub fn check_url(raw: &str, origins: &Origins) -> Result<Url, Refusal> {
    if raw.is_empty() {
        return Err(Refusal::Empty);
    }
    if raw.len() > MAX_URL_BYTES {
        return Err(Refusal::TooLong);
    }
    let url = Url::parse(raw).map_err(Refusal::NotAUrl)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Refusal::Scheme(url.scheme().to_owned()));
    }
    if has_whitespace_or_control(raw) {
        return Err(Refusal::Whitespace);
    }
    if raw.contains('\\') {
        return Err(Refusal::Backslash);
    }
    if has_userinfo(raw, &url) {
        return Err(Refusal::Userinfo);
    }
    if raw.contains('#') || url.fragment().is_some() {
        return Err(Refusal::Fragment);
    }
    if !parsers_agree(raw, &url) {
        return Err(Refusal::Ambiguous);
    }
    let origin = url.origin().ascii_serialization();
    if !origins.contains(&origin) {
        return Err(Refusal::Origin { origin });
    }
    Ok(url)
}

fn has_whitespace_or_control(s: &str) -> bool {
    s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Whether a URL carries user information, also an empty `@` that the
/// parsed URL no longer shows: the authority is read as the WHATWG parser
/// reads a special scheme's (after `scheme:` and any slashes, up to the
/// first `/`, `?` or `#`; backslashes are refused before this).
fn has_userinfo(raw: &str, url: &Url) -> bool {
    let after_scheme = raw.split_once(':').map_or(raw, |(_, rest)| rest);
    let authority = after_scheme.trim_start_matches('/').split(['/', '?', '#']).next().unwrap_or("");
    authority.contains('@') || !url.username().is_empty() || url.password().is_some()
}

/// Whether the `http` crate reads the same scheme, host and effective port
/// as the WHATWG parser did. The `http` crate takes ASCII only: a non-ASCII
/// input is given to it with each non-ASCII byte replaced by `x` (so the
/// offsets stay and no delimiter is added), and the host text it finds is
/// then taken from the input and compared, through the WHATWG host parser
/// (IDNA), with the URL's ASCII serialisation.
fn parsers_agree(raw: &str, url: &Url) -> bool {
    let ascii;
    let input = if raw.is_ascii() {
        raw
    } else {
        ascii = raw.bytes().map(|b| if b.is_ascii() { char::from(b) } else { 'x' }).collect::<String>();
        &ascii
    };
    let Ok(uri) = input.parse::<http::Uri>() else { return false };
    let (Some(scheme), Some(host), Some(url_host)) = (uri.scheme_str(), uri.host(), url.host_str()) else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case(url.scheme()) {
        return false;
    }
    let same_host = if raw.is_ascii() {
        host.eq_ignore_ascii_case(url_host)
    } else {
        // User information is refused before this, so the host starts the authority.
        let span = input.find("://").map(|i| i + 3..i + 3 + host.len());
        let original = span.filter(|span| input.get(span.clone()) == Some(host)).and_then(|span| raw.get(span));
        // An address written with other than ASCII characters (full-width
        // digits, which IDNA maps to ASCII ones) is a disguise, not a name.
        let ip = matches!(url.host(), Some(url::Host::Ipv4(_) | url::Host::Ipv6(_)));
        original.is_some_and(|original| match original.is_ascii() {
            true => original.eq_ignore_ascii_case(url_host),
            false => !ip && url::Host::parse(original).is_ok_and(|h| h.to_string().eq_ignore_ascii_case(url_host)),
        })
    };
    let default_port = match url.scheme() {
        "https" => 443,
        _ => 80,
    };
    same_host && uri.port_u16().unwrap_or(default_port) == url.port_or_known_default().unwrap_or(default_port)
}

/// The fields of the optional body of a delete (`DELETE /deployments/{id}`, DL-2):
/// where and with which token to push when the destroy reaches `idle`.
pub const DELETE_FIELDS: [&str; 2] = ["callback_url", "callback_token"];

/// The longest callback token accepted, in bytes.
pub const MAX_CALLBACK_TOKEN: usize = 4096;

/// Why a delete's callback will not be pushed ([`check_delete_callback`]).
/// The `Display` form is the reason sentence of the delete's answer
/// (`callback.reason`); it never repeats the token. The delete itself goes
/// ahead (DL-2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CallbackRefused(String);

impl CallbackRefused {
    fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

/// Checks the optional body of a delete (`{"callback_url",
/// "callback_token"}`, DL-2): `Ok` the callback to store, `Err` why none
/// will be pushed (unknown fields, a field that is not a string, half a
/// pair, a token that is not 1 to [`MAX_CALLBACK_TOKEN`] visible ASCII
/// characters, a URL [`check_url`] refuses, or a host written as an address
/// of a [`forbidden_address`] kind without `allow_private`,
/// `SLIPWAY_CALLBACK_ALLOW_PRIVATE`). Reasons never repeat the token.
///
/// The body is read as any JSON object and checked here, so that nothing in
/// it blocks the delete (an unknown field, a token of the wrong type) and no
/// refusal repeats a value (serde's messages would).
pub fn check_delete_callback(
    body: &Map<String, Value>,
    origins: &Origins,
    allow_private: bool,
) -> Result<crate::submit::Callback, CallbackRefused> {
    let unknown: Vec<&str> = body.keys().map(String::as_str).filter(|k| !DELETE_FIELDS.contains(k)).collect();
    if !unknown.is_empty() {
        return Err(CallbackRefused::new(format!(
            "the body has fields this service does not know ({}); it takes callback_url and callback_token",
            unknown.iter().take(5).map(|k| format!("{:?}", truncate(k, 64))).collect::<Vec<_>>().join(", ")
        )));
    }
    // Each field's type first, so a field of the wrong type is named as
    // such, not as missing its other half.
    let text = |name: &str| match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(CallbackRefused::new(format!("{name} must be a string"))),
    };
    let (url, token) = match (text("callback_url")?, text("callback_token")?) {
        (Some(url), Some(token)) => (url, token),
        (Some(_), None) => {
            return Err(CallbackRefused::new("callback_url needs a callback_token to send with the push"))
        }
        _ => return Err(CallbackRefused::new("callback_token was given without a callback_url")),
    };
    if token.is_empty() || token.len() > MAX_CALLBACK_TOKEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(CallbackRefused::new(format!(
            "callback_token must be 1 to {MAX_CALLBACK_TOKEN} visible ASCII characters (it is sent as a bearer token)"
        )));
    }
    let parsed = check_url(url, origins).map_err(|refusal| CallbackRefused::new(refusal.to_string()))?;
    // A host written as an address can be judged now; a name is resolved
    // and judged by the worker right before the push.
    let ip = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
        _ => None,
    };
    if let Some(why) = ip.and_then(forbidden_address) {
        if !allow_private {
            return Err(CallbackRefused::new(format!(
                "the callback host is an address of a refused kind ({why}); pushes go there only with \
                 SLIPWAY_CALLBACK_ALLOW_PRIVATE=true"
            )));
        }
    }
    Ok(crate::submit::Callback { url: url.clone(), token: secrecy::SecretString::from(token.clone()) })
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(entries: &[&str]) -> Origins {
        Origins::parse(entries).unwrap()
    }

    #[test]
    fn origins_are_kept_as_a_browser_serialises_them() {
        let o = origins(&[" https://PANEL.Example.org:443/ ", "http://localhost:3000", "https://bücher.example", ""]);
        let kept: Vec<&str> = o.iter().collect();
        assert_eq!(kept, ["https://panel.example.org", "http://localhost:3000", "https://xn--bcher-kva.example"]);
        assert!(o.allows("https://panel.example.org"));
        assert!(o.allows("https://panel.example.org:443"));
        assert!(o.allows("https://xn--bcher-kva.example"));
        assert!(!o.allows("http://panel.example.org"));
        assert!(!o.allows("https://panel.example.org:8443"));
        assert!(!o.allows("null"));
        assert!(!o.allows("https://panel.example.org/x"));
        assert!(Origins::parse(Vec::<String>::new()).unwrap().is_empty());
    }

    #[test]
    fn an_origin_entry_with_a_path_query_fragment_or_userinfo_is_refused_by_name() {
        for bad in [
            "https://panel.example/app",
            "https://panel.example/?",
            "https://panel.example#",
            "https://user@panel.example",
            "https://@panel.example",
            "ftp://panel.example",
            "panel.example",
            "https://panel .example",
        ] {
            let err = Origins::parse(["http://localhost:3000", bad]).unwrap_err();
            assert_eq!(err.entry, bad);
            assert!(err.to_string().contains(bad), "{err}");
        }
    }

    #[test]
    fn a_callback_url_with_tricky_characters_is_refused_with_its_reason() {
        let o = origins(&["https://panel.example", "http://127.0.0.1:3000"]);
        let cases: &[(&str, Refusal)] = &[
            ("", Refusal::Empty),
            ("https://panel.example/a b", Refusal::Whitespace),
            ("https://panel.example/\tx", Refusal::Whitespace),
            ("https://panel.example/\u{7f}", Refusal::Whitespace),
            ("https://panel.example\\@evil.test/", Refusal::Backslash),
            ("https://@panel.example/", Refusal::Userinfo),
            ("https://:@panel.example/", Refusal::Userinfo),
            ("https:@panel.example/", Refusal::Userinfo),
            ("https://panel.example/#", Refusal::Fragment),
            ("https:///panel.example/", Refusal::Ambiguous),
            ("https://panel%2Eexample/", Refusal::Ambiguous),
            ("http://0x7f.1:3000/", Refusal::Ambiguous),
            // Full-width digits, which IDNA maps to 127.0.0.1.
            ("http://\u{ff11}\u{ff12}\u{ff17}.\u{ff10}.\u{ff10}.\u{ff11}:3000/", Refusal::Ambiguous),
            ("https://evil.test/", Refusal::Origin { origin: "https://evil.test".to_owned() }),
        ];
        let long = format!("https://panel.example/{}", "a".repeat(MAX_URL_BYTES));
        assert_eq!(check_url(&long, &o).err(), Some(Refusal::TooLong));
        for (raw, want) in cases {
            assert_eq!(check_url(raw, &o).as_ref().err(), Some(want), "{raw:?}");
            assert!(!want.to_string().is_empty());
        }
    }

    #[test]
    fn an_international_host_is_compared_in_its_ascii_form() {
        let o = origins(&["https://bücher.example"]);
        let url = check_url("https://Bücher.example/cb?x=ü", &o).unwrap();
        assert_eq!(url.host_str(), Some("xn--bcher-kva.example"));
        assert!(check_url("https://xn--bcher-kva.example/cb", &o).is_ok());
    }

    #[test]
    fn a_refusal_never_repeats_the_url() {
        let o = origins(&["https://panel.example"]);
        for raw in ["https://panel.example/secret#x", "https://u:secret@panel.example/", "gopher://secret/"] {
            let reason = check_url(raw, &o).unwrap_err().to_string();
            assert!(!reason.contains("secret"), "{reason}");
        }
    }
}
