//! The callback URL check (`jobs/src/callback.rs`, DL-2 and SEC-2) and the
//! address table of a reconcile push (`jobs/src/callback/address.rs`) under
//! a fuzzer.
//!
//! A case is a URL, either any text or one of a few spellings of allowed
//! and refused origins followed by any text, checked against a fixed
//! allowlist. It checks that:
//!
//! - [`check_url`] never panics, and a refusal's sentence is one line;
//! - an accepted URL is `http` or `https`, has no user information and no
//!   fragment, is at most [`MAX_URL_BYTES`] long, has an origin the
//!   allowlist allows, and checking its serialisation again accepts the
//!   same URL (the check is stable under the parser's own normalisation);
//! - [`forbidden_address`] never panics, and a refused IPv4 address is
//!   refused in its IPv4-mapped IPv6 form (`::ffff:a.b.c.d`) and its NAT64
//!   form (`64:ff9b::a.b.c.d`) too: no IPv6 spelling launders it.
//!
//! Run it with `scripts/fuzz` (docs/TESTING.md).

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use slipway_jobs::callback::{check_url, forbidden_address, Origins, MAX_URL_BYTES};

/// Beginnings of URLs: allowed origins as written and disguised, and
/// origins the allowlist does not hold.
const PREFIXES: [&str; 12] = [
    "https://panel.example",
    "HTTPS://PANEL.EXAMPLE:443",
    "https://panel.example.",
    "http://localhost:3000",
    "http://localhost:3000@evil.test",
    "https://bücher.example",
    "https://xn--bcher-kva.example",
    "http://[::1]:8080",
    "http://127.0.0.1",
    "https://evil.test",
    "https:panel.example",
    "javascript:",
];

fn origins() -> &'static Origins {
    static ORIGINS: OnceLock<Origins> = OnceLock::new();
    ORIGINS.get_or_init(|| {
        Origins::parse([
            "https://panel.example",
            "http://localhost:3000",
            "https://bücher.example",
            "http://[::1]:8080",
        ])
        .expect("the fuzz allowlist parses")
    })
}

#[derive(Debug, Arbitrary)]
struct Case {
    /// `None`: `tail` is the whole URL.
    prefix: Option<u8>,
    tail: String,
    /// An address for the table.
    v4: [u8; 4],
    v6: [u8; 16],
}

fuzz_target!(|case: Case| {
    let raw = match case.prefix {
        Some(i) => format!("{}{}", PREFIXES[usize::from(i) % PREFIXES.len()], case.tail),
        None => case.tail.clone(),
    };
    match check_url(&raw, origins()) {
        Ok(url) => {
            assert!(matches!(url.scheme(), "http" | "https"), "{raw:?} -> {url}");
            assert!(url.username().is_empty() && url.password().is_none(), "{raw:?} -> {url}");
            assert!(url.fragment().is_none(), "{raw:?} -> {url}");
            assert!(raw.len() <= MAX_URL_BYTES);
            assert!(origins().allows(&url.origin().ascii_serialization()), "{raw:?} -> {url}");
            let again = check_url(url.as_str(), origins());
            assert_eq!(again.as_ref().ok(), Some(&url), "{raw:?} -> {url}, checked again: {again:?}");
        }
        Err(refusal) => {
            let sentence = refusal.to_string();
            assert!(!sentence.contains('\n') && !sentence.contains('\r'), "{sentence:?}");
        }
    }

    let v4 = Ipv4Addr::from(case.v4);
    if forbidden_address(IpAddr::V4(v4)).is_some() {
        assert!(forbidden_address(IpAddr::V6(v4.to_ipv6_mapped())).is_some(), "::ffff:{v4} is allowed");
        let [a, b, c, d] = case.v4;
        let nat64 = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]));
        assert!(forbidden_address(IpAddr::V6(nat64)).is_some(), "{nat64} is allowed");
    }
    let _ = forbidden_address(IpAddr::V6(Ipv6Addr::from(case.v6)));
});
