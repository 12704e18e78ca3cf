//! Tests of Slipway's own Nix runs against real Nix: the options that
//! hold whatever the host says, and request values as data.

use super::*;
use std::collections::BTreeMap as Map;

fn config(state: &Path) -> crate::config::Config {
    let keys = Map::from([("SLIPWAY_STATE_DIR".to_owned(), state.display().to_string())]);
    crate::config::Config::from_keys(&keys).unwrap()
}

/// A source whose `core` has one attribute per way an evaluation could
/// reach past its own tree when the host's Nix settings let it.
fn hostile_source(dir: &Path) {
    std::fs::create_dir_all(dir.join("core")).unwrap();
    let core = r#"{ provider ? { } }: {
  readHost = builtins.readFile "/etc/hostname";
  nixpkgs = (import <nixpkgs>).marker;
  exec = builtins.exec [ "/bin/sh" "-c" "echo true" ];
  fetchTree = builtins.readFile (builtins.fetchTree { type = "path"; path = "/etc/hostname"; }).outPath;
  fetchurl = builtins.readFile (builtins.fetchurl "file:///etc/hostname");
  own = builtins.readFile ./default.nix;
}"#;
    std::fs::write(dir.join("core/default.nix"), core).unwrap();
}

/// SEC-3: the options on Slipway's own command lines hold whatever the
/// host's `nix.conf`, `NIX_CONFIG` and `NIX_PATH` say: each attack
/// below works with those settings alone, and fails with Slipway's
/// command line (run here outside the sandbox, so only the options
/// stand between the evaluation and the host).
#[test]
fn slipways_own_nix_options_hold_whatever_the_hosts_nix_settings_say() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = format!("slipway-nixpkgs-marker-{}", std::process::id());
    let source = tmp.path().join("source");
    hostile_source(&source);
    let nixpkgs = tmp.path().join("nixpkgs");
    std::fs::create_dir_all(&nixpkgs).unwrap();
    std::fs::write(nixpkgs.join("default.nix"), format!("{{ marker = \"{marker}\"; }}\n")).unwrap();
    let hostile = format!(
        "restrict-eval = false\nallow-unsafe-native-code-during-evaluation = true\n\
         experimental-features = nix-command flakes\nextra-allowed-uris = file:///\n\
         allow-import-from-derivation = true\nnix-path = nixpkgs={}\n",
        nixpkgs.display()
    );
    let plain = tmp.path().join("plain");
    let with_plugin = tmp.path().join("with-plugin");
    for (dir, extra) in
        [(&plain, String::new()), (&with_plugin, format!("plugin-files = {}/none.so\n", tmp.path().display()))]
    {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("nix.conf"), format!("{hostile}{extra}")).unwrap();
    }
    let policy = crate::sandbox::Policy::new(&config(&tmp.path().join("state"))).unwrap();
    let nix = NixRun {
        dir: &source,
        provider: "local",
        work: tmp.path(),
        until: Instant::now(),
        marker: "test",
        policy: &policy,
        limits: Limits { output: 1 << 20, nodes: 1 },
    };
    let eval = |attribute: &str, slipways: bool, conf: &Path| {
        let mut argv = nix.eval_command(&[], &["--eval", "--strict", "-A", attribute]);
        if !slipways {
            let from = argv.iter().position(|a| a == "-E").unwrap();
            argv.drain(..from);
        }
        let out = std::process::Command::new("nix-instantiate")
            .args(&argv)
            .env("NIX_CONF_DIR", conf)
            .env("NIX_CONFIG", &hostile)
            .env("NIX_PATH", format!("nixpkgs={}", nixpkgs.display()))
            .env("NIX_REMOTE", "daemon")
            .env_remove("NIX_USER_CONF_FILES")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success(), stdout, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, value, _) = eval("own", true, &with_plugin);
    assert!(ok && value.contains("readHost"), "the source's own tree is readable: {value}");
    // Without Slipway's options, the host's settings are in force: a
    // plugin it names is loaded, and every attack gets through…
    let (ok, _, out) = eval("own", false, &with_plugin);
    assert!(!ok && out.contains("none.so"), "the host's plugin setting is not in force: {out}");
    for attribute in ["readHost", "nixpkgs", "exec", "fetchTree", "fetchurl"] {
        let (ok, value, out) = eval(attribute, false, &plain);
        assert!(ok && !value.trim().is_empty(), "{attribute} did not get through without the options: {out}");
    }
    assert!(eval("nixpkgs", false, &plain).1.contains(&marker));
    // …and with them, none does.
    for (attribute, refusal) in [
        ("readHost", "forbidden in restricted mode"),
        ("nixpkgs", "was not found in the Nix search path"),
        ("exec", "attribute 'exec' missing"),
        ("fetchTree", "experimental Nix feature 'flakes' is disabled"),
        ("fetchurl", "forbidden in restricted mode"),
    ] {
        let (ok, value, out) = eval(attribute, true, &with_plugin);
        assert!(!ok && out.contains(refusal), "{attribute}: {value}{out}");
    }
}

/// EV-1: a configuration reaches Nix as a file named with `--argstr`,
/// so a value written in Nix's syntax is a string like any other: it is
/// never parsed, and the names eval gives it back as it was sent.
#[tokio::test]
async fn a_configuration_value_in_nix_syntax_is_data_to_the_names_eval() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    std::fs::create_dir_all(source.join("core")).unwrap();
    let core = r#"{ provider ? { } }: {
  names = { configFile }:
let domain = (builtins.fromJSON (builtins.readFile configFile)).domain; in
derivation {
  name = "names"; system = builtins.currentSystem; builder = "/bin/sh"; PATH = "/usr/bin:/bin";
  text = builtins.toJSON { nodes = [ { name = "web"; dnsNames = [ domain ]; } ]; };
  passAsFile = [ "text" ];
  args = [ "-c" "mkdir $out && cp $textPath $out/nodes.json" ];
};
}"#;
    std::fs::write(source.join("core/default.nix"), core).unwrap();
    let config = config(&tmp.path().join("state"));
    crate::sandbox::check(&config).await.unwrap();
    let policy = crate::sandbox::Policy::new(&config).unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let nix = NixRun {
        dir: &source,
        provider: "local",
        work: &work,
        until: Instant::now() + Duration::from_secs(120),
        marker: "slipway-nix:test-data",
        policy: &policy,
        limits: Limits::of(&config),
    };
    for value in [
        "${builtins.readFile /etc/passwd}",
        "\"; builtins.exec [ \"/bin/sh\" \"-c\" \"id\" ]; #",
        "'' + builtins.readFile \"/etc/passwd\" + ''",
    ] {
        let configuration = serde_json::json!({ "domain": value });
        let argv = nix.eval_command(&[], &["--argstr", "configFile", "/x"]);
        assert!(!argv.iter().any(|a| a.contains(value)), "a request value on the command line");
        let mut log = String::new();
        let names = nix.eval_names(&configuration, &mut log).await.unwrap_or_else(|f| panic!("{f}: {log}"));
        assert_eq!(names.nodes[0].dns_names, [value], "{log}");
        assert!(!log.contains("root:x:0:0"), "{log}");
    }
}
