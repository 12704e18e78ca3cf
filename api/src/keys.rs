//! The keys tokens are verified with (SEC-1, SEC-4): the one key of
//! `SLIPWAY_JWT_SECRET` (HS256) or `SLIPWAY_JWT_PUBLIC_KEY` (Ed25519 PEM),
//! or the several keys of the JWK Set (RFC 7517 §5) named by
//! `SLIPWAY_JWT_KEYS_FILE`, each with its `kid`.
//!
//! A keys file is `{"keys": [key, …]}` with at least one key, each key one of
//!
//! - `{"kty": "oct", "kid": …, "k": …}`: an HS256 secret, `k` in base64url
//!   (RFC 7515 §2, no padding) of at least [`MIN_SECRET_BYTES`] bytes;
//! - `{"kty": "OKP", "crv": "Ed25519", "kid": …, "x": …}`: an Ed25519 public
//!   key (RFC 8037), `x` the 32 bytes of the key in base64url;
//!
//! with, optionally, `alg` (`HS256` or `EdDSA`, the key's own), `use`
//! (`sig`) and `key_ops` (naming `verify`); other members are ignored, as
//! RFC 7517 §4 asks. A kid is 1 to [`MAX_KID_CHARS`] visible ASCII
//! characters, and no two keys share one. The file is read strictly: a
//! repeated member, an unknown `kty` or `crv`, a secret too short, an `x`
//! that is not a point of Ed25519, a private key (`d`) are each refused,
//! naming the key by its index (from 0) and its kid. No error, log line or
//! `Debug` form ever shows a key's material.

use crate::auth::MIN_SECRET_BYTES;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey};
use secrecy::zeroize::Zeroizing;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value};
use slipway_jobs::config::Config;
use slipway_jobs::id::quoted;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The longest kid accepted, in characters.
pub const MAX_KID_CHARS: usize = 128;

/// The largest keys file read, in bytes (1 MiB: thousands of keys).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// One verification key: HS256 (a shared secret) or EdDSA (an Ed25519
/// public key). `Debug` shows its kid and algorithm, never the key.
pub struct Key {
    kid: Option<String>,
    algorithm: Algorithm,
    decoding: DecodingKey,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("algorithm", &self.algorithm)
            .field("key", &"[redacted]")
            .finish()
    }
}

impl Key {
    /// The key's id; `None` for the key of `SLIPWAY_JWT_SECRET` or
    /// `SLIPWAY_JWT_PUBLIC_KEY`.
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    /// `HS256` or `EdDSA`.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The algorithm's name as a token's `alg` header gives it.
    pub fn algorithm_name(&self) -> &'static str {
        algorithm_name(self.algorithm)
    }

    /// Whether `signature` (base64url) signs `message` with this key. An
    /// `Err` of kind `Base64` means the signature is not base64url.
    pub fn verifies(&self, message: &[u8], signature: &str) -> Result<bool, jsonwebtoken::errors::Error> {
        jsonwebtoken::crypto::verify(signature, message, &self.decoding, self.algorithm)
    }

    /// The HS256 secret, to sign with (`slipway-api token`); `None` for an
    /// Ed25519 public key, which cannot sign.
    pub fn hmac_secret(&self) -> Option<&[u8]> {
        self.decoding.try_get_hmac_secret().ok()
    }
}

/// The name of an algorithm Slipway accepts, as in a token's `alg`.
fn algorithm_name(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::EdDSA => "EdDSA",
        _ => "HS256",
    }
}

/// The keys live at one moment: never empty. From a keys file every key has
/// a kid (the set is *named*); otherwise it is the one key of
/// `SLIPWAY_JWT_SECRET` or `SLIPWAY_JWT_PUBLIC_KEY`, without one.
#[derive(Debug)]
pub struct KeySet {
    keys: Vec<Key>,
}

impl KeySet {
    /// The keys of the configuration (§12), and the keys file they come
    /// from, if any (read once, its stamp recorded). Exactly one of
    /// `SLIPWAY_JWT_SECRET`, `SLIPWAY_JWT_PUBLIC_KEY` and
    /// `SLIPWAY_JWT_KEYS_FILE` must be set (the api refuses to run
    /// unauthenticated). A secret shorter than [`MIN_SECRET_BYTES`], a PEM
    /// that is not an Ed25519 public key or a keys file that is not a key
    /// set is an error naming the setting, never its value.
    pub fn from_config(config: &Config) -> anyhow::Result<(Self, Option<KeysFile>)> {
        let (secret, pem, file) = (&config.api.jwt_secret, &config.api.jwt_public_key, &config.api.jwt_keys_file);
        if let Some(path) = file {
            if secret.is_some() || pem.is_some() {
                anyhow::bail!(
                    "set SLIPWAY_JWT_KEYS_FILE alone: it replaces SLIPWAY_JWT_SECRET and SLIPWAY_JWT_PUBLIC_KEY (put \
                     their keys in the file, each with a kid)"
                )
            }
            let file = KeysFile::new(path.clone());
            return Ok((file.read()?, Some(file)));
        }
        let key = match (secret, pem) {
            (Some(_), Some(_)) => anyhow::bail!("set one of SLIPWAY_JWT_SECRET and SLIPWAY_JWT_PUBLIC_KEY, not both"),
            (Some(secret), None) => {
                if secret.expose_secret().len() < MIN_SECRET_BYTES {
                    anyhow::bail!("SLIPWAY_JWT_SECRET is shorter than {MIN_SECRET_BYTES} bytes; use a random secret of at least that length")
                }
                Key {
                    kid: None,
                    algorithm: Algorithm::HS256,
                    decoding: DecodingKey::from_secret(secret.expose_secret().as_bytes()),
                }
            }
            (None, Some(pem)) => Key {
                kid: None,
                algorithm: Algorithm::EdDSA,
                decoding: DecodingKey::from_ed_pem(pem.as_bytes())
                    .map_err(|e| anyhow::anyhow!("SLIPWAY_JWT_PUBLIC_KEY is not an Ed25519 public key in PEM: {e}"))?,
            },
            (None, None) => anyhow::bail!(
                "no token key: set SLIPWAY_JWT_SECRET (HS256), SLIPWAY_JWT_PUBLIC_KEY (Ed25519 PEM) or \
                 SLIPWAY_JWT_KEYS_FILE (a JWK Set); the api refuses to run unauthenticated"
            ),
        };
        Ok((Self { keys: vec![key] }, None))
    }

    /// Reads the keys file at `path` (see the module's documentation).
    pub fn read(path: &Path) -> Result<Self, KeysError> {
        use std::io::Read as _;
        let unreadable = |e: std::io::Error| KeysError::Read { path: path.to_owned(), reason: e.to_string() };
        let mut bytes = Zeroizing::new(Vec::new());
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(unreadable)?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(KeysError::Invalid {
                path: path.to_owned(),
                problems: vec![format!("it is larger than {MAX_FILE_BYTES} bytes, more than a key set needs")],
            });
        }
        Self::parse(&bytes).map_err(|problems| KeysError::Invalid { path: path.to_owned(), problems })
    }

    /// A JWK Set's keys, or every problem found: the document's, or the
    /// first of each key (`key 1 (kid "b"): …`).
    pub fn parse(bytes: &[u8]) -> Result<Self, Vec<String>> {
        let document = crate::extract::strict_value(bytes).map_err(|e| vec![format!("it is not JSON: {e}")])?;
        let shape = "a JWK Set is a JSON object {\"keys\": [key, …]}";
        let Value::Object(mut document) = document else {
            return Err(vec![format!("it is not a JWK Set: {shape}")]);
        };
        let list = match document.remove("keys") {
            Some(Value::Array(list)) => list,
            Some(_) => return Err(vec![format!("its keys member is not a list: {shape}")]),
            None => return Err(vec![format!("it has no keys member: {shape}")]),
        };
        if list.is_empty() {
            return Err(vec!["its keys list is empty: the api needs at least one key".to_owned()]);
        }
        let mut keys: Vec<Key> = Vec::with_capacity(list.len());
        let mut problems = Vec::new();
        let mut kids: Vec<(String, usize)> = Vec::new();
        for (at, jwk) in list.into_iter().enumerate() {
            let Value::Object(jwk) = jwk else {
                problems.push(format!("key {at} is not a JSON object"));
                continue;
            };
            let kid = match kid_of(&jwk) {
                Ok(kid) => kid,
                Err(problem) => {
                    problems.push(format!("key {at}: {problem}"));
                    continue;
                }
            };
            let name = format!("key {at} (kid {})", quoted(&kid));
            if let Some((_, first)) = kids.iter().find(|(k, _)| *k == kid) {
                problems.push(format!("{name}: key {first} has the same kid; each key needs a kid of its own"));
                continue;
            }
            kids.push((kid.clone(), at));
            match key_of(jwk, kid) {
                Ok(key) => keys.push(key),
                Err(problem) => problems.push(format!("{name}: {problem}")),
            }
        }
        if problems.is_empty() {
            Ok(Self { keys })
        } else {
            Err(problems)
        }
    }

    /// Whether the keys have kids (a keys file): a token's `kid` then picks
    /// its key. The one key of `SLIPWAY_JWT_SECRET` or
    /// `SLIPWAY_JWT_PUBLIC_KEY` has none, and a token's `kid` is not read.
    pub fn named(&self) -> bool {
        self.keys.iter().all(|k| k.kid.is_some())
    }

    /// Every key, in the file's order.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// The key named `kid`.
    pub fn by_kid(&self, kid: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.kid.as_deref() == Some(kid))
    }

    /// The kids, in the file's order (empty for an unnamed key): what the
    /// logs show of a set.
    pub fn kids(&self) -> Vec<&str> {
        self.keys.iter().filter_map(Key::kid).collect()
    }

    /// The algorithms of the set, as a refusal names them: `HS256`,
    /// `EdDSA`, or `HS256 and EdDSA`.
    pub fn accepted(&self) -> &'static str {
        let has = |a: Algorithm| self.keys.iter().any(|k| k.algorithm == a);
        match (has(Algorithm::HS256), has(Algorithm::EdDSA)) {
            (true, true) => "HS256 and EdDSA",
            (false, true) => "EdDSA",
            _ => "HS256",
        }
    }
}

/// A key's kid: 1 to [`MAX_KID_CHARS`] visible ASCII characters.
fn kid_of(jwk: &Map<String, Value>) -> Result<String, String> {
    match jwk.get("kid") {
        None => Err("it has no kid; every key of the file needs one, so that a token can name it".to_owned()),
        Some(Value::String(kid))
            if (1..=MAX_KID_CHARS).contains(&kid.len()) && kid.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            Ok(kid.clone())
        }
        Some(Value::String(kid)) => Err(format!(
            "its kid {} is not 1 to {MAX_KID_CHARS} visible ASCII characters (letters, digits, punctuation; no space)",
            quoted(kid)
        )),
        Some(_) => Err("its kid is not a string".to_owned()),
    }
}

/// The key of one JWK whose kid is `kid`, or its first fault. Its secret
/// (`k`) is taken out of the JSON into a [`SecretString`] at once, and
/// never quoted.
fn key_of(mut jwk: Map<String, Value>, kid: String) -> Result<Key, String> {
    let text = |jwk: &Map<String, Value>, member: &str| -> Result<Option<String>, String> {
        match jwk.get(member) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("its {member} is not a string")),
        }
    };
    match text(&jwk, "use")?.as_deref() {
        None | Some("sig") => {}
        Some(other) => {
            return Err(format!("its use is {}: a key that verifies tokens has use \"sig\" (or none)", quoted(other)))
        }
    }
    if let Some(ops) = jwk.get("key_ops") {
        if !ops.as_array().is_some_and(|ops| ops.iter().any(|op| op == "verify")) {
            return Err(
                "its key_ops do not name \"verify\": a key that verifies tokens needs it (or no key_ops)".to_owned()
            );
        }
    }
    let alg = text(&jwk, "alg")?;
    let base64url = |value: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(value).map(Zeroizing::new);
    match text(&jwk, "kty")?.as_deref() {
        Some("oct") => {
            if let Some(alg) = alg.filter(|a| a != "HS256") {
                return Err(format!("its alg is {}; an oct key verifies HS256 tokens only", quoted(&alg)));
            }
            let k = match jwk.remove("k") {
                Some(Value::String(k)) => SecretString::from(k),
                Some(_) => return Err("its k is not a string".to_owned()),
                None => return Err("it has no k, the secret of an oct key".to_owned()),
            };
            let secret = base64url(k.expose_secret())
                .map_err(|_| "its k is not base64url (RFC 7515 §2: A-Z a-z 0-9 - _, no padding)".to_owned())?;
            if secret.len() < MIN_SECRET_BYTES {
                return Err(format!(
                    "its k holds {} bytes; an HS256 secret needs at least {MIN_SECRET_BYTES} random bytes",
                    secret.len()
                ));
            }
            Ok(Key { kid: Some(kid), algorithm: Algorithm::HS256, decoding: DecodingKey::from_secret(&secret) })
        }
        Some("OKP") => {
            match text(&jwk, "crv")?.as_deref() {
                Some("Ed25519") => {}
                Some(other) => return Err(format!("its crv is {}; the one curve read here is Ed25519", quoted(other))),
                None => return Err("it has no crv (Ed25519)".to_owned()),
            }
            if jwk.contains_key("d") {
                return Err(
                    "it holds a private key (d): give the api the public key (x) only, and keep d with the front-end"
                        .to_owned(),
                );
            }
            if let Some(alg) = alg.filter(|a| a != "EdDSA") {
                return Err(format!("its alg is {}; an Ed25519 key verifies EdDSA tokens only", quoted(&alg)));
            }
            let x = text(&jwk, "x")?.ok_or("it has no x, the public key of an OKP key")?;
            let bytes = base64url(&x).map_err(|_| "its x is not base64url (RFC 7515 §2: no padding)".to_owned())?;
            // jsonwebtoken takes any length here, and its verifier then
            // panics on fewer than 32 bytes.
            if bytes.len() != 32 {
                return Err(format!("its x holds {} bytes; an Ed25519 public key is 32", bytes.len()));
            }
            let decoding = DecodingKey::from_ed_components(&x).map_err(|_| "its x is not base64url".to_owned())?;
            let key = Key { kid: Some(kid), algorithm: Algorithm::EdDSA, decoding };
            // A signature of zeros does not verify with a key; the key
            // itself is refused only when it is not a point of the curve.
            if key.verifies(b"", &"A".repeat(86)).is_err() {
                return Err("its x is not an Ed25519 public key (not a point of the curve)".to_owned());
            }
            Ok(key)
        }
        Some(other) => Err(format!(
            "its kty is {}; the kinds read here are oct (an HS256 secret) and OKP (an Ed25519 public key)",
            quoted(other)
        )),
        None => Err("it has no kty (oct for an HS256 secret, OKP for an Ed25519 public key)".to_owned()),
    }
}

/// Why a keys file was not read: at start the api refuses to run; on a
/// reload the keys live before stay live. Never shows a key's material.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    /// The file cannot be read (missing, unreadable, a folder…).
    #[error("cannot read the token keys file {}: {reason}", path.display())]
    Read {
        /// `SLIPWAY_JWT_KEYS_FILE`.
        path: PathBuf,
        /// What the system said.
        reason: String,
    },
    /// The file is read but is not a key set of keys Slipway can use.
    #[error("the token keys file {} is refused: {}", path.display(), problems.join("; "))]
    Invalid {
        /// `SLIPWAY_JWT_KEYS_FILE`.
        path: PathBuf,
        /// Every problem: the document's, or the first of each key.
        problems: Vec<String>,
    },
    /// There is no keys file to reload: the key comes from
    /// `SLIPWAY_JWT_SECRET` or `SLIPWAY_JWT_PUBLIC_KEY`.
    #[error(
        "no token keys file to reload: the key comes from SLIPWAY_JWT_SECRET or SLIPWAY_JWT_PUBLIC_KEY, read at \
         start only (SLIPWAY_JWT_KEYS_FILE holds keys that rotate)"
    )]
    NoFile,
}

/// What the api compares, each second, to see that the keys file changed
/// (through symbolic links): the device and inode (a file renamed over it
/// is a new inode), the size and the modification time. `None` when the
/// file cannot be looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    device: u64,
    inode: u64,
    len: u64,
    modified: (i64, i64),
}

impl Stamp {
    /// The file's stamp now.
    pub fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let m = std::fs::metadata(path).ok()?;
        Some(Self { device: m.dev(), inode: m.ino(), len: m.len(), modified: (m.mtime(), m.mtime_nsec()) })
    }
}

/// The keys file and the [`Stamp`] it had when it was last read.
#[derive(Debug)]
pub struct KeysFile {
    path: PathBuf,
    read: Mutex<Option<Stamp>>,
}

impl KeysFile {
    /// The file at `path`, not read yet.
    pub fn new(path: PathBuf) -> Self {
        Self { path, read: Mutex::new(None) }
    }

    /// `SLIPWAY_JWT_KEYS_FILE`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file ([`KeySet::read`]) and records its stamp, taken
    /// before the read, so a change during it is seen by the next
    /// [`KeysFile::read_if_changed`]. Reads run one at a time.
    pub fn read(&self) -> Result<KeySet, KeysError> {
        self.read_unless(|_| false).expect("an unconditional read reads")
    }

    /// As [`KeysFile::read`] when the file's stamp differs from the one of
    /// the last read; `None` when it does not. A file that cannot be read
    /// is so reported once, until it changes again.
    pub fn read_if_changed(&self) -> Option<Result<KeySet, KeysError>> {
        self.read_unless(|same| same)
    }

    fn read_unless(&self, skip: impl Fn(bool) -> bool) -> Option<Result<KeySet, KeysError>> {
        let mut last = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Stamp::of(&self.path);
        if skip(now == *last) {
            return None;
        }
        *last = now;
        Some(KeySet::read(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A 32-byte secret, base64url.
    fn k(byte: u8) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([byte; 32])
    }

    /// The test Ed25519 public key of `auth.rs`'s tests, as a JWK's `x`.
    const ED_X: &str = "NwkzUfGZvjQxb2NNA0kHyUDDHZpDNmy8nau_3jIZqBU";

    fn problems(document: Value) -> Vec<String> {
        KeySet::parse(document.to_string().as_bytes()).expect_err("the file is refused")
    }

    #[test]
    fn a_key_set_reads_each_key_with_its_kid_and_algorithm() {
        let set = KeySet::parse(
            json!({ "keys": [
                { "kty": "oct", "kid": "2026-01", "k": k(1), "alg": "HS256", "use": "sig" },
                { "kty": "OKP", "crv": "Ed25519", "kid": "panel-ed", "x": ED_X, "key_ops": ["verify"], "x5t": "ignored" },
                { "kty": "oct", "kid": "2026-02", "k": k(2) },
            ]})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        assert!(set.named());
        assert_eq!(set.kids(), ["2026-01", "panel-ed", "2026-02"]);
        assert_eq!(set.by_kid("panel-ed").unwrap().algorithm(), Algorithm::EdDSA);
        assert_eq!(set.by_kid("2026-02").unwrap().hmac_secret(), Some(&[2u8; 32][..]));
        assert_eq!(set.by_kid("panel-ed").unwrap().hmac_secret(), None);
        assert_eq!(set.accepted(), "HS256 and EdDSA");
    }

    #[test]
    fn each_fault_of_a_keys_file_is_named_by_key_and_kid_and_never_shows_a_secret() {
        let short = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b"sixteen-bytes-ok");
        let private = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A";
        // y = 2 is no point's coordinate: (y² - 1) / (d·y² + 1) has no square root mod 2²⁵⁵ - 19.
        let mut two = [0u8; 32];
        two[0] = 2;
        let not_a_point = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(two);
        for (key, want) in [
            (json!({ "kty": "oct", "k": k(1) }), "key 0: it has no kid"),
            (json!({ "kty": "oct", "kid": 7, "k": k(1) }), "key 0: its kid is not a string"),
            (json!({ "kty": "oct", "kid": "", "k": k(1) }), "key 0: its kid \"\" is not 1 to 128 visible"),
            (json!({ "kty": "oct", "kid": "a b", "k": k(1) }), "key 0: its kid \"a b\" is not 1 to 128"),
            (json!({ "kid": "a", "k": k(1) }), "key 0 (kid \"a\"): it has no kty"),
            (json!({ "kty": "RSA", "kid": "a", "n": "x", "e": "AQAB" }), "key 0 (kid \"a\"): its kty is \"RSA\""),
            (json!({ "kty": "oct", "kid": "a" }), "key 0 (kid \"a\"): it has no k"),
            (
                json!({ "kty": "oct", "kid": "a", "k": short }),
                "its k holds 16 bytes; an HS256 secret needs at least 32",
            ),
            (json!({ "kty": "oct", "kid": "a", "k": format!("{}==", k(1)) }), "its k is not base64url"),
            (json!({ "kty": "oct", "kid": "a", "k": k(1), "alg": "HS512" }), "its alg is \"HS512\"; an oct key"),
            (json!({ "kty": "oct", "kid": "a", "k": k(1), "use": "enc" }), "its use is \"enc\""),
            (json!({ "kty": "oct", "kid": "a", "k": k(1), "key_ops": ["sign"] }), "its key_ops do not name \"verify\""),
            (json!({ "kty": "OKP", "kid": "e", "x": ED_X }), "key 0 (kid \"e\"): it has no crv"),
            (json!({ "kty": "OKP", "crv": "X25519", "kid": "e", "x": ED_X }), "its crv is \"X25519\""),
            (json!({ "kty": "OKP", "crv": "Ed25519", "kid": "e" }), "it has no x"),
            (json!({ "kty": "OKP", "crv": "Ed25519", "kid": "e", "x": &ED_X[..20] }), "its x holds 15 bytes"),
            (
                json!({ "kty": "OKP", "crv": "Ed25519", "kid": "e", "x": ED_X, "d": private }),
                "it holds a private key (d)",
            ),
            (json!({ "kty": "OKP", "crv": "Ed25519", "kid": "e", "x": ED_X, "alg": "ES256" }), "its alg is \"ES256\""),
            (
                json!({ "kty": "OKP", "crv": "Ed25519", "kid": "e", "x": not_a_point }),
                "its x is not an Ed25519 public key",
            ),
        ] {
            let found = problems(json!({ "keys": [key] }));
            assert_eq!(found.len(), 1, "{key}: {found:?}");
            assert!(found[0].contains(want), "{key}: {found:?} does not say {want:?}");
            for secret in [k(1), short.clone(), private.to_owned()] {
                assert!(!found[0].contains(&secret), "{key}: the message shows a secret: {found:?}");
            }
        }
    }

    #[test]
    fn a_keys_file_that_is_not_a_set_or_repeats_a_kid_or_a_member_says_so() {
        for (text, want) in [
            ("{\"keys\": [", "it is not JSON: EOF while parsing"),
            ("[]", "it is not a JWK Set"),
            ("{\"kty\": \"oct\"}", "it has no keys member"),
            ("{\"keys\": {}}", "its keys member is not a list"),
            ("{\"keys\": []}", "its keys list is empty"),
            ("{\"keys\": [7]}", "key 0 is not a JSON object"),
            ("{\"keys\": [{\"kty\": \"oct\", \"kty\": \"OKP\"}]}", "it is not JSON: duplicate key \"kty\""),
        ] {
            let found = KeySet::parse(text.as_bytes()).expect_err(text);
            assert!(found.len() == 1 && found[0].starts_with(want), "{text}: {found:?}");
        }
        // Every key's fault at once, a repeated kid named with the key it repeats.
        let found = problems(json!({ "keys": [
            { "kty": "oct", "kid": "a", "k": k(1) },
            { "kty": "oct", "kid": "b", "k": "c2hvcnQ" },
            { "kty": "oct", "kid": "a", "k": k(2) },
        ]}));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("key 1 (kid \"b\"): its k holds 5 bytes"), "{found:?}");
        assert_eq!(found[1], "key 2 (kid \"a\"): key 0 has the same kid; each key needs a kid of its own");
    }

    #[test]
    fn a_long_kid_is_quoted_cut_short() {
        let long = "x".repeat(4000);
        let found = problems(json!({ "keys": [{ "kty": "RSA", "kid": long }] }));
        assert!(found[0].len() < 200 && found[0].contains(&format!("\"{}\"…", "x".repeat(48))), "{found:?}");
    }

    #[test]
    fn no_debug_form_or_error_of_a_key_set_shows_its_material() {
        let set =
            KeySet::parse(json!({ "keys": [{ "kty": "oct", "kid": "a", "k": k(7) }] }).to_string().as_bytes()).unwrap();
        let debug = format!("{set:?} {set:#?}");
        assert!(debug.contains("\"a\"") && debug.contains("[redacted]"), "{debug}");
        for shown in [k(7), format!("{:?}", [7u8; 32]), "7, 7, 7".to_owned()] {
            assert!(!debug.contains(&shown), "{debug}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        std::fs::write(&path, json!({ "keys": [{ "kty": "oct", "kid": "a", "k": "c2hvcnQ" }] }).to_string()).unwrap();
        let error = KeySet::read(&path).unwrap_err();
        let shown = format!("{error} {error:?}");
        assert!(shown.contains("key 0 (kid \"a\"): its k holds 5 bytes") && !shown.contains("c2hvcnQ"), "{shown}");
    }

    #[test]
    fn a_keys_file_is_read_again_only_when_its_stamp_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let one = json!({ "keys": [{ "kty": "oct", "kid": "a", "k": k(1) }] }).to_string();
        std::fs::write(&path, &one).unwrap();
        let file = KeysFile::new(path.clone());
        assert_eq!(file.read().unwrap().kids(), ["a"]);
        assert!(file.read_if_changed().is_none(), "read again unchanged");
        assert_eq!(file.read().unwrap().kids(), ["a"], "a read without condition reads");
        // A new file renamed over it: a new inode, even of the same size.
        let next = dir.path().join("keys.json.new");
        std::fs::write(&next, one.replace("\"a\"", "\"b\"")).unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_eq!(file.read_if_changed().unwrap().unwrap().kids(), ["b"]);
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(file.read_if_changed(), Some(Err(KeysError::Read { .. }))));
        assert!(file.read_if_changed().is_none(), "a missing file is reported once");
    }
}
