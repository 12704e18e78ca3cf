//! The settings of the sandbox that every process run on a module source
//! gets (SEC-3), and of the fetches that bring a source in: who those
//! processes run as, what of the host they see, which URIs Nix may fetch
//! during an evaluation, and the limits on memory and output sizes. Read by
//! workers only; docs/SECURITY.md gives the threat model behind them.

use super::{boolean, ConfigError};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How processes run on a module source are contained and bounded
/// ([`crate::sandbox`]): `git` fetches, Slipway's own Nix evaluations and
/// builds, and the source's effects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// `SLIPWAY_SANDBOX_USER`: the user (a name, or `uid:gid`) every such
    /// process runs as; never root. Default `nobody`.
    pub user: String,
    /// `SLIPWAY_SANDBOX_PATHS`: host folders shown read-only inside the
    /// sandbox besides `/usr`, `/etc` and the Nix store (tools an effect
    /// needs that live elsewhere, such as `/opt/provider`). Absolute paths,
    /// comma separated. Default none.
    pub paths: Vec<PathBuf>,
    /// `SLIPWAY_EFFECT_NETWORK`: `host` lets effects use the host's network
    /// (a provider whose effects reach machines or APIs); `none` (the
    /// default) gives them a network of their own with only a loopback.
    pub effect_network: bool,
    /// `SLIPWAY_NIX_ALLOWED_URIS`: the URI prefixes Nix may fetch during an
    /// evaluation (`allowed-uris`, such as a pinned nixpkgs tarball's
    /// `https://github.com/NixOS/nixpkgs/archive/`): `https://` URLs whose
    /// host is a name or a public address, each ending in `/` after the
    /// host at least. Default none: an evaluation fetches nothing and runs
    /// without a network.
    pub nix_allowed_uris: Vec<String>,
    /// `SLIPWAY_NIX_REQUIRE_SANDBOX`: a worker refuses to start when the
    /// Nix daemon does not build in Nix's sandbox (a builder would see the
    /// host and its network). Default `true`; `false` only logs a warning.
    pub nix_require_sandbox: bool,
    /// `NIX_MEMORY_LIMIT`: the address space each process of a sandbox may
    /// take, in bytes (`RLIMIT_AS`); past it Nix fails `out_of_memory`.
    /// Default an eighth of the host's memory.
    pub memory_limit: u64,
    /// `SLIPWAY_OUTPUT_LIMIT`: the largest document output of a source
    /// (`schema.json`, `applications.json`, `renames.json`, `meta.json`,
    /// `nodes.json`), in bytes. Default 4 MiB.
    pub output_limit: u64,
    /// `SLIPWAY_NODE_LIMIT`: the most nodes a `names` output may list.
    /// Default 256.
    pub node_limit: u32,
    /// `SLIPWAY_SOURCE_LIMIT`: the largest fetched source, in bytes (the
    /// download and the checked-out tree each). Default 256 MiB.
    pub source_limit: u64,
}

/// How `git` fetches a module source: only Slipway's settings apply,
/// never the host's git configuration ([`crate::fetch`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GitConfig {
    /// `SLIPWAY_GIT_PROXY`: the proxy git uses for `https` fetches (a URL);
    /// unset: none, whatever the host's environment or git configuration say.
    pub proxy: Option<String>,
    /// `SLIPWAY_GIT_SSH_KEY`: the private key file of `ssh` fetches (a
    /// deploy key); unset: `ssh` fetches offer no key.
    pub ssh_key: Option<PathBuf>,
    /// `SLIPWAY_GIT_KNOWN_HOSTS`: the `known_hosts` file `ssh` fetches check
    /// servers against (strictly); unset: `ssh` fetches fail.
    pub known_hosts: Option<PathBuf>,
    /// `SLIPWAY_GIT_CREDENTIALS`: a file in git's credential-store format
    /// (`https://user:token@host` per line) for private `https`
    /// repositories; each is sent only to its own host.
    pub credentials: Option<PathBuf>,
    /// `SLIPWAY_GIT_CA_FILE`: the certificates (PEM) `https` fetches trust
    /// instead of the host's, for a git server with a private authority.
    pub ca_file: Option<PathBuf>,
}

const MIB: u64 = 1024 * 1024;

impl SandboxConfig {
    /// Reads the sandbox keys of `keys`.
    pub(super) fn from_keys(keys: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let get = |k: &str| keys.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let user = get("SLIPWAY_SANDBOX_USER").unwrap_or("nobody").to_owned();
        if user == "root" || user == "0" || user.starts_with("0:") {
            return Err(ConfigError::Invalid {
                key: "SLIPWAY_SANDBOX_USER",
                value: user,
                reason: "the sandbox user must not be root: name an unprivileged user such as nobody",
            });
        }
        let paths = list(get("SLIPWAY_SANDBOX_PATHS"))
            .into_iter()
            .map(|p| {
                let path = PathBuf::from(&p);
                if path.is_absolute() && path.components().all(|c| !matches!(c, std::path::Component::ParentDir)) {
                    Ok(path)
                } else {
                    Err(ConfigError::Invalid {
                        key: "SLIPWAY_SANDBOX_PATHS",
                        value: p,
                        reason: "comma-separated absolute paths without '..'",
                    })
                }
            })
            .collect::<Result<_, _>>()?;
        let effect_network = match get("SLIPWAY_EFFECT_NETWORK").map(str::to_ascii_lowercase).as_deref() {
            None | Some("none") => false,
            Some("host") => true,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    key: "SLIPWAY_EFFECT_NETWORK",
                    value: other.to_owned(),
                    reason: "expected none or host",
                })
            }
        };
        let nix_allowed_uris =
            list(get("SLIPWAY_NIX_ALLOWED_URIS")).into_iter().map(|u| allowed_uri(&u)).collect::<Result<_, _>>()?;
        Ok(Self {
            user,
            paths,
            effect_network,
            nix_allowed_uris,
            nix_require_sandbox: boolean(keys, "SLIPWAY_NIX_REQUIRE_SANDBOX", true)?,
            memory_limit: size(keys, "NIX_MEMORY_LIMIT", host_memory() / 8)?,
            output_limit: size(keys, "SLIPWAY_OUTPUT_LIMIT", 4 * MIB)?,
            node_limit: super::number(keys, "SLIPWAY_NODE_LIMIT", 256)?,
            source_limit: size(keys, "SLIPWAY_SOURCE_LIMIT", 256 * MIB)?,
        })
    }
}

impl GitConfig {
    /// Reads the git keys of `keys`.
    pub(super) fn from_keys(keys: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let get = |k: &str| keys.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let file = |key: &'static str| -> Result<Option<PathBuf>, ConfigError> {
            match get(key) {
                None => Ok(None),
                Some(p) if PathBuf::from(p).is_absolute() => Ok(Some(PathBuf::from(p))),
                Some(p) => Err(ConfigError::Invalid { key, value: p.to_owned(), reason: "expected an absolute path" }),
            }
        };
        let proxy = match get("SLIPWAY_GIT_PROXY") {
            None => None,
            Some(p) => {
                let parsed = url::Url::parse(p)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https" | "socks5" | "socks5h") && u.host().is_some());
                if parsed.is_none() {
                    return Err(ConfigError::Invalid {
                        key: "SLIPWAY_GIT_PROXY",
                        value: p.to_owned(),
                        reason: "expected a proxy URL such as http://proxy.internal:3128",
                    });
                }
                Some(p.to_owned())
            }
        };
        Ok(Self {
            proxy,
            ssh_key: file("SLIPWAY_GIT_SSH_KEY")?,
            known_hosts: file("SLIPWAY_GIT_KNOWN_HOSTS")?,
            credentials: file("SLIPWAY_GIT_CREDENTIALS")?,
            ca_file: file("SLIPWAY_GIT_CA_FILE")?,
        })
    }
}

fn list(value: Option<&str>) -> Vec<String> {
    value.map(|v| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect()).unwrap_or_default()
}

/// One entry of `SLIPWAY_NIX_ALLOWED_URIS`, checked and in the form Nix
/// compares by prefix (so `https://example.org` becomes
/// `https://example.org/`, and cannot admit `https://example.org.evil/`).
fn allowed_uri(value: &str) -> Result<String, ConfigError> {
    let invalid = |reason: &'static str| ConfigError::Invalid {
        key: "SLIPWAY_NIX_ALLOWED_URIS",
        value: value.to_owned(),
        reason,
    };
    let url = url::Url::parse(value).map_err(|_| invalid("comma-separated https:// URL prefixes"))?;
    if url.scheme() != "https" {
        return Err(invalid("only https:// URLs may be allowed (never file:, http: or another scheme)"));
    }
    if !url.username().is_empty() || url.password().is_some() || url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("an allowed URI holds no user, password, query or fragment"));
    }
    let public = match url.host() {
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            d.contains('.') && d != "localhost" && !d.ends_with(".localhost")
        }
        Some(url::Host::Ipv4(ip)) => crate::callback::forbidden_address(ip.into()).is_none(),
        Some(url::Host::Ipv6(ip)) => crate::callback::forbidden_address(ip.into()).is_none(),
        None => false,
    };
    if !public {
        return Err(invalid("an allowed URI names a public host (no loopback, private or single-label name)"));
    }
    Ok(url.to_string())
}

/// `4194304`, `4096K`, `4M`, `4MiB`, `2G`, `2GiB` (binary units) as bytes.
pub fn parse_size(value: &str) -> Option<u64> {
    let v = value.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (digits, unit) = v.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// The size `key` gives (at least 1 MiB, [`parse_size`]), or `default`.
pub(super) fn size(keys: &BTreeMap<String, String>, key: &'static str, default: u64) -> Result<u64, ConfigError> {
    match keys.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => parse_size(v).filter(|n| *n >= 1024 * 1024).ok_or_else(|| ConfigError::Invalid {
            key,
            value: v.to_owned(),
            reason: "expected a size of at least 1 MiB, such as 512M or 2G",
        }),
    }
}

/// The host's memory in bytes (`MemTotal` of `/proc/meminfo`); 4 GiB when
/// it cannot be read.
fn host_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(4 << 30)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(pairs: &[(&str, &str)]) -> Result<SandboxConfig, String> {
        let keys = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        SandboxConfig::from_keys(&keys).map_err(|e| e.to_string())
    }

    #[test]
    fn the_defaults_contain_a_source_by_default() {
        let c = sandbox(&[]).unwrap();
        assert_eq!(c.user, "nobody");
        assert!(!c.effect_network);
        assert!(c.nix_allowed_uris.is_empty());
        assert!(c.nix_require_sandbox);
        assert_eq!(c.memory_limit, host_memory() / 8);
        assert_eq!((c.output_limit, c.node_limit, c.source_limit), (4 * MIB, 256, 256 * MIB));
    }

    #[test]
    fn the_sandbox_user_is_never_root() {
        for root in ["root", "0", "0:0"] {
            let err = sandbox(&[("SLIPWAY_SANDBOX_USER", root)]).unwrap_err();
            assert!(err.starts_with("SLIPWAY_SANDBOX_USER:") && err.contains("not be root"), "{err}");
        }
    }

    #[test]
    fn allowed_uris_are_public_https_prefixes_ending_after_the_host() {
        let c = sandbox(&[("SLIPWAY_NIX_ALLOWED_URIS", "https://github.com, https://Example.org/nix/")]).unwrap();
        assert_eq!(c.nix_allowed_uris, ["https://github.com/", "https://example.org/nix/"]);
        for refused in [
            "file:///proc/self/environ",
            "http://github.com/",
            "https://127.0.0.1:8080/",
            "https://localhost/",
            "https://[::1]/",
            "https://10.1.2.3/",
            "https://169.254.169.254/",
            "https://internal/",
            "https://user:pw@github.com/",
            "not a url",
        ] {
            let err = sandbox(&[("SLIPWAY_NIX_ALLOWED_URIS", refused)]).unwrap_err();
            assert!(err.starts_with("SLIPWAY_NIX_ALLOWED_URIS:"), "{refused}: {err}");
        }
    }

    #[test]
    fn an_allowed_uri_on_an_address_is_judged_by_the_outbound_address_table() {
        // The callback's table (`callback::BLOCKS`): every refusing row's first address.
        for block in crate::callback::BLOCKS.iter().filter(|b| b.rule == crate::callback::Rule::Refuse) {
            let uri = match block.first() {
                std::net::IpAddr::V4(a) => format!("https://{a}/"),
                std::net::IpAddr::V6(a) => format!("https://[{a}]/"),
            };
            let err = sandbox(&[("SLIPWAY_NIX_ALLOWED_URIS", &uri)]).unwrap_err();
            assert!(err.starts_with("SLIPWAY_NIX_ALLOWED_URIS:"), "{uri} ({block}): {err}");
        }
        for uri in ["https://198.18.0.1/", "https://168.63.129.16/", "https://[::ffff:198.18.0.1]/"] {
            assert!(sandbox(&[("SLIPWAY_NIX_ALLOWED_URIS", uri)]).is_err(), "{uri}");
        }
        let c = sandbox(&[("SLIPWAY_NIX_ALLOWED_URIS", "https://93.184.216.34/nix/")]).unwrap();
        assert_eq!(c.nix_allowed_uris, ["https://93.184.216.34/nix/"]);
    }

    #[test]
    fn sizes_take_binary_units_and_refuse_less_than_a_mebibyte() {
        assert_eq!(parse_size("4194304"), Some(4 * MIB));
        assert_eq!(parse_size("512M"), Some(512 * MIB));
        assert_eq!(parse_size("2GiB"), Some(2048 * MIB));
        assert_eq!(parse_size("2x"), None);
        assert_eq!(sandbox(&[("NIX_MEMORY_LIMIT", "1G")]).unwrap().memory_limit, 1024 * MIB);
        let err = sandbox(&[("SLIPWAY_OUTPUT_LIMIT", "10K")]).unwrap_err();
        assert!(err.starts_with("SLIPWAY_OUTPUT_LIMIT:"), "{err}");
        let err = sandbox(&[("SLIPWAY_EFFECT_NETWORK", "some")]).unwrap_err();
        assert!(err.contains("none or host"), "{err}");
        let err = sandbox(&[("SLIPWAY_SANDBOX_PATHS", "opt/tools")]).unwrap_err();
        assert!(err.starts_with("SLIPWAY_SANDBOX_PATHS:"), "{err}");
    }

    #[test]
    fn git_settings_take_absolute_files_and_a_proxy_url() {
        let keys: BTreeMap<String, String> =
            [("SLIPWAY_GIT_PROXY", "http://proxy.internal:3128"), ("SLIPWAY_GIT_SSH_KEY", "/etc/slipway/deploy-key")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let g = GitConfig::from_keys(&keys).unwrap();
        assert_eq!(g.proxy.as_deref(), Some("http://proxy.internal:3128"));
        assert_eq!(g.ssh_key, Some(PathBuf::from("/etc/slipway/deploy-key")));
        let keys = BTreeMap::from([("SLIPWAY_GIT_CA_FILE".to_owned(), "ca.pem".to_owned())]);
        assert!(GitConfig::from_keys(&keys).unwrap_err().to_string().starts_with("SLIPWAY_GIT_CA_FILE:"));
        let keys = BTreeMap::from([("SLIPWAY_GIT_PROXY".to_owned(), "file:///tmp/x".to_owned())]);
        assert!(GitConfig::from_keys(&keys).unwrap_err().to_string().starts_with("SLIPWAY_GIT_PROXY:"));
    }
}
