//! What Slipway's own builds of a source may build (SEC-3): before a
//! `nix-build`, the derivations Nix would build (not those already in the
//! store or fetched from a substituter) are read, and one that would reach
//! the network while it builds is refused. The Nix daemon builds a
//! fixed-output derivation with the host's network (its sandbox gives the
//! rest a network of their own), so a source's output could otherwise
//! connect to the database, OpenBao or the api on the worker's loopback.
//!
//! Allowed: derivations whose outputs are all input-addressed, and
//! `builtin:fetchurl` fixed-output derivations (Nix's own `<nix/fetchurl.nix>`)
//! whose `url` lies under `SLIPWAY_NIX_ALLOWED_URIS`, the prefixes an
//! evaluation may fetch from. Refused: any other fixed-output, floating
//! content-addressed or impure derivation, and any derivation asking to
//! build outside Nix's sandbox (`__noChroot`).

use std::collections::BTreeMap;
use std::path::Path;

/// The largest `.drv` file read (a derivation's text, its environment
/// included), in bytes: 64 MiB.
pub const DRV_LIMIT: u64 = 64 << 20;

/// One output of a derivation, as its `.drv` file gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Its name (`out`, `doc`, …).
    pub name: String,
    /// Its store path (empty for a floating content-addressed output).
    pub path: String,
    /// The hash algorithm of a fixed or content-addressed output
    /// (`sha256`, `r:sha256`), empty for an input-addressed one.
    pub hash_algo: String,
    /// The fixed hash, empty unless the output is fixed (`impure` for an impure derivation).
    pub hash: String,
}

/// What Slipway reads of a derivation (`Derive(outputs, inputDrvs,
/// inputSrcs, system, builder, args, env)`, Nix's ATerm form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derivation {
    /// Its outputs, by name.
    pub outputs: Vec<Output>,
    /// The builder (`/bin/sh`, `builtin:fetchurl`, …).
    pub builder: String,
    /// Its environment.
    pub env: BTreeMap<String, String>,
}

impl Derivation {
    /// The store path of output `name`.
    pub fn output(&self, name: &str) -> Option<&str> {
        self.outputs.iter().find(|o| o.name == name).map(|o| o.path.as_str()).filter(|p| !p.is_empty())
    }

    /// Why Nix must not build this derivation for a source, or `None`:
    /// see the module documentation. `allowed_uris` are the prefixes of
    /// `SLIPWAY_NIX_ALLOWED_URIS`.
    pub fn refusal(&self, allowed_uris: &[String]) -> Option<&'static str> {
        if self.env.get("__noChroot").is_some_and(|v| v == "1") || self.structured("__noChroot") {
            return Some("asks to build outside Nix's sandbox (__noChroot)");
        }
        if self.outputs.iter().all(|o| o.hash_algo.is_empty()) {
            return None;
        }
        let fixed = self.outputs.iter().all(|o| !o.hash.is_empty() && o.hash != "impure");
        let fetches_allowed = self.builder == "builtin:fetchurl"
            && self.env.get("url").is_some_and(|url| allowed_uris.iter().any(|prefix| uri_allowed(url, prefix)));
        if fixed && fetches_allowed {
            None
        } else if fixed {
            Some("is a fixed-output derivation, which builds with the host's network")
        } else {
            Some("is a content-addressed or impure derivation, which Slipway does not build for a source")
        }
    }

    /// Whether the structured attributes (`__json`) set `name` to `true`.
    fn structured(&self, name: &str) -> bool {
        self.env
            .get("__json")
            .and_then(|json| serde_json::from_str::<serde_json::Value>(json).ok())
            .is_some_and(|attrs| attrs.get(name) == Some(&serde_json::Value::Bool(true)))
    }
}

/// Whether `uri` lies under `prefix` as Nix's `allowed-uris` compares
/// them: equal, or longer and either the prefix ends in `/` or the next
/// character is one.
pub fn uri_allowed(uri: &str, prefix: &str) -> bool {
    uri == prefix
        || (!prefix.is_empty()
            && uri.len() > prefix.len()
            && uri.starts_with(prefix)
            && (prefix.ends_with('/') || uri.as_bytes()[prefix.len()] == b'/'))
}

/// Reads the derivation at `path` (a `.drv` file in the store): at most
/// [`DRV_LIMIT`] bytes, never through a symbolic link.
pub fn read(path: &Path) -> Result<Derivation, String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let name = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("{name}: {e}"))?;
    let size = file.metadata().map_err(|e| format!("{name}: {e}"))?.len();
    if size > DRV_LIMIT {
        return Err(format!("{name} is {size} bytes, more than the {DRV_LIMIT} a derivation may be"));
    }
    let mut text = Vec::with_capacity(size as usize);
    file.take(DRV_LIMIT).read_to_end(&mut text).map_err(|e| format!("{name}: {e}"))?;
    parse(&text).map_err(|e| format!("{name} is not a derivation: {e}"))
}

/// Parses a derivation's ATerm text.
pub fn parse(text: &[u8]) -> Result<Derivation, String> {
    let mut p = Parser { text, at: 0 };
    p.expect(b"Derive(")?;
    let outputs = p.list(|p| {
        p.expect(b"(")?;
        let name = p.string()?;
        p.expect(b",")?;
        let path = p.string()?;
        p.expect(b",")?;
        let hash_algo = p.string()?;
        p.expect(b",")?;
        let hash = p.string()?;
        p.expect(b")")?;
        Ok(Output { name, path, hash_algo, hash })
    })?;
    p.expect(b",")?;
    p.list(|p| {
        p.expect(b"(")?;
        p.string()?;
        p.expect(b",")?;
        p.list(Parser::string)?;
        p.expect(b")")
    })?;
    p.expect(b",")?;
    p.list(Parser::string)?;
    p.expect(b",")?;
    p.string()?;
    p.expect(b",")?;
    let builder = p.string()?;
    p.expect(b",")?;
    p.list(Parser::string)?;
    p.expect(b",")?;
    let env = p.list(|p| {
        p.expect(b"(")?;
        let key = p.string()?;
        p.expect(b",")?;
        let value = p.string()?;
        p.expect(b")")?;
        Ok((key, value))
    })?;
    p.expect(b")")?;
    if p.at != text.len() {
        return Err(format!("text after the derivation at byte {}", p.at));
    }
    Ok(Derivation { outputs, builder, env: env.into_iter().collect() })
}

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn expect(&mut self, token: &[u8]) -> Result<(), String> {
        if self.text[self.at..].starts_with(token) {
            self.at += token.len();
            Ok(())
        } else {
            Err(format!("expected {:?} at byte {}", String::from_utf8_lossy(token), self.at))
        }
    }

    /// `[item,item,…]`.
    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Result<T, String>) -> Result<Vec<T>, String> {
        self.expect(b"[")?;
        let mut items = Vec::new();
        if self.expect(b"]").is_ok() {
            return Ok(items);
        }
        loop {
            items.push(item(self)?);
            if self.expect(b"]").is_ok() {
                return Ok(items);
            }
            self.expect(b",")?;
        }
    }

    /// A quoted string with Nix's escapes (`\"`, `\\`, `\n`, `\r`, `\t`).
    fn string(&mut self) -> Result<String, String> {
        self.expect(b"\"")?;
        let mut bytes = Vec::new();
        loop {
            let Some(&b) = self.text.get(self.at) else { return Err("a string that does not end".into()) };
            self.at += 1;
            match b {
                b'"' => return Ok(String::from_utf8_lossy(&bytes).into_owned()),
                b'\\' => {
                    let Some(&e) = self.text.get(self.at) else { return Err("a string that does not end".into()) };
                    self.at += 1;
                    bytes.push(match e {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        other => other,
                    });
                }
                other => bytes.push(other),
            }
        }
    }
}

/// The derivations a `nix-store --realise --dry-run` says it would build:
/// the indented store paths after its `… will be built:` line.
pub fn to_build(dry_run: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut listing = false;
    for line in dry_run.lines() {
        if line.trim_end().ends_with("will be built:") {
            listing = true;
        } else if listing && line.starts_with("  ") && line.trim().ends_with(".drv") {
            paths.push(line.trim().to_owned());
        } else {
            listing = false;
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: &str = r#"Derive([("doc","/nix/store/7kbi7dj111ivm43zjkr5hd7jk4l0m3j1-b-doc","",""),("out","/nix/store/wzifph43jqsgljmmrgbmzb7abpyjsfpz-b","","")],[("/nix/store/3i44fil6qvhbczdmd8c6r16cj81y2pgz-a.drv",["out"])],["/nix/store/9h7bdqbprxrjqnafkdhxx1bcn3dqpz6n-builder.sh"],"x86_64-linux","/bin/sh",["-c","echo \"b\" > $out"],[("builder","/bin/sh"),("n","1\n2\t\\"),("out","/nix/store/wzifph43jqsgljmmrgbmzb7abpyjsfpz-b")])"#;

    fn fixed(builder: &str, url: &str) -> String {
        format!(
            r#"Derive([("out","/nix/store/6qby4d4qqadvfcmx0j1ljd1k2vpypkn6-f","sha256","0000000000000000000000000000000000000000000000000000")],[],[],"x86_64-linux","{builder}",[],[("url","{url}")])"#
        )
    }

    #[test]
    fn a_derivation_is_read_with_its_outputs_builder_and_environment() {
        let d = parse(PLAIN.as_bytes()).unwrap();
        assert_eq!(d.output("out"), Some("/nix/store/wzifph43jqsgljmmrgbmzb7abpyjsfpz-b"));
        assert_eq!(d.outputs.len(), 2);
        assert_eq!(d.builder, "/bin/sh");
        assert_eq!(d.env["n"], "1\n2\t\\");
        assert_eq!(d.refusal(&[]), None, "an input-addressed derivation builds without a network");
        for broken in ["Derive(", "Derive([(\"out\"", &PLAIN[..PLAIN.len() - 1], &format!("{PLAIN}x")] {
            assert!(parse(broken.as_bytes()).is_err(), "{broken}");
        }
    }

    #[test]
    fn a_derivation_that_would_reach_the_network_is_refused_unless_it_fetches_an_allowed_uri() {
        let allowed = ["https://github.com/NixOS/nixpkgs/archive/".to_owned()];
        let curl = parse(fixed("/bin/sh", "").as_bytes()).unwrap();
        assert!(curl.refusal(&allowed).unwrap().contains("fixed-output"));
        let loopback = parse(fixed("builtin:fetchurl", "http://127.0.0.1:8080/healthz").as_bytes()).unwrap();
        assert!(loopback.refusal(&allowed).is_some());
        let lookalike =
            parse(fixed("builtin:fetchurl", "https://github.com/NixOS/nixpkgs/archiveX").as_bytes()).unwrap();
        assert!(lookalike.refusal(&allowed).is_some());
        let pinned =
            parse(fixed("builtin:fetchurl", "https://github.com/NixOS/nixpkgs/archive/abc.tar.gz").as_bytes()).unwrap();
        assert_eq!(pinned.refusal(&allowed), None);
        assert!(pinned.refusal(&[]).is_some(), "no allowed URI: no fetch at all");
        let impure = PLAIN.replacen(r#""",""),("out""#, r#""r:sha256","impure"),("out""#, 1);
        assert!(parse(impure.as_bytes()).unwrap().refusal(&allowed).unwrap().contains("impure"));
        let no_chroot = PLAIN.replacen(r#"[("builder","/bin/sh")"#, r#"[("__noChroot","1"),("builder","/bin/sh")"#, 1);
        assert!(parse(no_chroot.as_bytes()).unwrap().refusal(&allowed).unwrap().contains("__noChroot"));
        let structured = PLAIN.replacen(
            r#"[("builder","/bin/sh")"#,
            r#"[("__json","{\"__noChroot\":true}"),("builder","/bin/sh")"#,
            1,
        );
        assert!(parse(structured.as_bytes()).unwrap().refusal(&allowed).is_some());
    }

    #[test]
    fn the_derivations_to_build_are_read_from_a_dry_run() {
        let out = "these 2 derivations will be built:\n  /nix/store/3i44-b.drv\n  /nix/store/dn76-a.drv\n\
                   these 1 paths will be fetched (0.01 MiB download, 0.02 MiB unpacked):\n  /nix/store/abcd-c\n";
        assert_eq!(to_build(out), ["/nix/store/3i44-b.drv", "/nix/store/dn76-a.drv"]);
        assert_eq!(to_build("this derivation will be built:\n  /nix/store/x-a.drv\n"), ["/nix/store/x-a.drv"]);
        assert!(to_build("these 1 paths will be fetched:\n  /nix/store/abcd-c.drv\n").is_empty());
    }
}
