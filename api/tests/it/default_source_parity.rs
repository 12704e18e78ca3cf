//! MS-5 parity: the outputs baked into the api (`api/default-source/`) are
//! exactly what Nix builds from `nix/core` for the default provider today.
//! On a difference, run `scripts/gen-default-source` and commit the result.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_baked_default_source_equals_a_fresh_nix_build_byte_for_byte() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let source = root.join("nix");
    let baked = root.join("api/default-source");
    for (attribute, file) in [
        ("schema", "schema.json"),
        ("applicationSchemas", "applications.json"),
        ("renames", "renames.json"),
        ("meta", "meta.json"),
    ] {
        // The command docs/MODULE-SOURCE.md gives for each output.
        let built = Command::new("nix-build")
            .arg(source.join("core"))
            .args(["-A", attribute, "--no-out-link"])
            .output()
            .expect("nix-build runs");
        assert!(built.status.success(), "building {attribute}: {}", String::from_utf8_lossy(&built.stderr));
        let out = PathBuf::from(String::from_utf8(built.stdout).unwrap().trim());
        let fresh = std::fs::read(out.join(file)).unwrap();
        let committed = std::fs::read(baked.join(file)).unwrap();
        assert!(
            fresh == committed,
            "api/default-source/{file} differs from nix-build nix/core -A {attribute}; run scripts/gen-default-source"
        );
    }
    // The baked texts are the ones the binary embeds.
    assert_eq!(slipway_api::default_source::SCHEMA.as_bytes(), std::fs::read(baked.join("schema.json")).unwrap());
}
