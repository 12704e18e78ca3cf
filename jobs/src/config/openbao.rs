//! Where operator secrets live: the `OPENBAO_*` keys (PRODUCT.md §8).

use super::ConfigError;
use secrecy::SecretString;

/// Where operator secrets live (PRODUCT.md §8, §12; `docs/OPENBAO.md`): an
/// OpenBao KV version 2 mount. Present in [`super::Config::openbao`] only when
/// `OPENBAO_ADDR` is set. `Debug` never shows the token.
#[derive(Clone)]
pub struct OpenBaoConfig {
    /// `OPENBAO_ADDR`: the server's base URL, `http(s)://host[:port][/path]`,
    /// without a trailing slash (requests go to `<addr>/v1/…`).
    pub addr: String,
    /// `OPENBAO_TOKEN`: the token Slipway sends as `X-Vault-Token`: the api's
    /// and the workers' are different tokens with different policies
    /// (`docs/openbao/`).
    pub token: SecretString,
    /// `OPENBAO_MOUNT`: the KV version 2 mount, default `secret`; one or
    /// more segments of `A-Z a-z 0-9 - . _ ~` joined by `/`.
    pub mount: String,
    /// `OPENBAO_ROOT`: the folder of the mount that holds every
    /// deployment's entries, default `deployments`; same shape as `mount`.
    pub root: String,
}

impl std::fmt::Debug for OpenBaoConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenBaoConfig")
            .field("addr", &self.addr)
            .field("token", &"[redacted]")
            .field("mount", &self.mount)
            .field("root", &self.root)
            .finish()
    }
}

impl OpenBaoConfig {
    /// Reads the `OPENBAO_*` keys: `None` when `OPENBAO_ADDR` is unset (no
    /// operator secrets). An address without a token, a token without an
    /// address, an address that is not an `http(s)` URL, or a mount or root
    /// that is not a plain path is a [`ConfigError`] naming the key; the
    /// token is never echoed.
    pub(super) fn from_keys(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, ConfigError> {
        let token = get("OPENBAO_TOKEN");
        let Some(addr) = get("OPENBAO_ADDR") else {
            if token.is_some() {
                return Err(ConfigError::Missing {
                    key: "OPENBAO_ADDR",
                    reason: "OPENBAO_TOKEN is set, but without an address Slipway keeps no operator secrets",
                });
            }
            return Ok(None);
        };
        let addr = openbao_addr(addr.trim())?;
        let Some(token) = token.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()) else {
            return Err(ConfigError::Missing {
                key: "OPENBAO_TOKEN",
                reason: "OPENBAO_ADDR is set: Slipway needs a token to reach OpenBao",
            });
        };
        let folder = |key: &'static str, default: &str| -> Result<String, ConfigError> {
            let value = get(key).unwrap_or_else(|| default.to_owned());
            let trimmed = value.trim().trim_matches('/');
            let plain = !trimmed.is_empty()
                && trimmed.split('/').all(|s| {
                    !s.is_empty()
                        && s != "."
                        && s != ".."
                        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
                });
            if plain {
                Ok(trimmed.to_owned())
            } else {
                Err(ConfigError::Invalid {
                    key,
                    value,
                    reason: "expected a path of OpenBao such as `secret` or `team/kv`: segments of letters, digits, \
                             `-`, `.`, `_` and `~` joined by `/` (no empty, `.` or `..` segment)",
                })
            }
        };
        Ok(Some(Self {
            addr,
            token: SecretString::from(token),
            mount: folder("OPENBAO_MOUNT", "secret")?,
            root: folder("OPENBAO_ROOT", "deployments")?,
        }))
    }
}

/// `OPENBAO_ADDR` checked and without its trailing slash. User information
/// (`user:password@`) is refused without echoing the value.
fn openbao_addr(value: &str) -> Result<String, ConfigError> {
    let invalid = |value: &str, reason| ConfigError::Invalid { key: "OPENBAO_ADDR", value: value.to_owned(), reason };
    if value.contains('@') {
        return Err(invalid(
            "[not shown: it may hold user information]",
            "an OpenBao address carries no user information (`@`); the token goes in OPENBAO_TOKEN",
        ));
    }
    let url = url::Url::parse(value)
        .map_err(|_| invalid(value, "expected an http or https URL such as http://127.0.0.1:8200"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(invalid(value, "expected an http or https URL such as http://127.0.0.1:8200"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(value, "an OpenBao address has no query and no fragment"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}
