//! What docs/INTEGRATOR-GUIDE.md gives a front-end author works as written:
//! its Python token minter (standard library only) mints tokens the api
//! accepts, for the deployments they name and no others.

use crate::common;

use axum::http::{Method, StatusCode};
use common::{assert_error_shape, harness, repo, SECRET};
use slipway_jobs::store::Engine;

/// The guide's first `python` code block.
fn python_minter() -> String {
    let guide = std::fs::read_to_string(repo().join("docs/INTEGRATOR-GUIDE.md")).unwrap();
    let start = guide.find("```python\n").expect("the guide has a python block") + "```python\n".len();
    let end = start + guide[start..].find("```").expect("the python block ends");
    guide[start..end].to_owned()
}

/// Runs the guide's minter for `deployments` with [`SECRET`].
fn mint_with_the_guide(deployments: &[&str]) -> String {
    let script = format!(
        "{}\nimport sys\nprint(slipway_token(sys.argv[1].encode(), sys.argv[2].split(',')))\n",
        python_minter()
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script, SECRET, &deployments.join(",")])
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn the_integrator_guides_python_minter_makes_tokens_the_api_accepts_for_their_deployments_only() {
    let h = harness(Engine::Sqlite).await;
    let token = mint_with_the_guide(&["demo"]);
    let (status, body) = h.call(Method::GET, "/deployments/demo", Some(&token), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = h.call(Method::GET, "/deployments/other", Some(&token), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_error_shape(&body, "forbidden");
    let (status, body) = h.call(Method::GET, "/deployments/demo", Some(&format!("{token}x")), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
}

/// The string literals passed as a first or second argument to the calls
/// that `marker` (`name(`) starts in `text`.
fn literals_after<'t>(text: &'t str, marker: &str) -> Vec<&'t str> {
    text.match_indices(marker)
        .filter_map(|(at, _)| {
            let rest = &text[at + marker.len()..];
            let quote = rest.find('"')?;
            // Only a literal among the call's own first arguments.
            if rest[..quote].contains(['(', ')', ';', '{']) {
                return None;
            }
            let rest = &rest[quote + 1..];
            let code = &rest[..rest.find('"')?];
            code.chars().all(|c| c.is_ascii_lowercase() || c == '_').then_some(code)
        })
        .collect()
}

/// Every `error` code the api can answer with: the status map's, and the
/// codes its sources (tests left out) and the Nix failures name.
fn error_codes() -> std::collections::BTreeSet<String> {
    let mut codes: std::collections::BTreeSet<String> =
        (400..600).map(|s| slipway_api::error::status_code(StatusCode::from_u16(s).unwrap()).0.to_owned()).collect();
    let mut sources = vec![repo().join("api/src/error.rs"), repo().join("api/src/extract.rs")];
    for entry in std::fs::read_dir(repo().join("api/src/routes")).unwrap() {
        sources.push(entry.unwrap().path());
    }
    for path in sources {
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for marker in ["bad_request(", "ApiError::new(", "Self::new("] {
            codes.extend(literals_after(code, marker).into_iter().map(str::to_owned));
        }
    }
    use slipway_jobs::nix::FailureCode::*;
    let failures = [
        OutputMissing,
        SourceTooOld,
        BuildFailed,
        FetchFailed,
        SourceRepositoryNotFound,
        SourceRevisionNotFound,
        Timeout,
        OutOfMemory,
        OutputTooLarge,
        SourceTooLarge,
        SourceUnsafe,
    ];
    codes.extend(failures.map(|c| c.as_str().to_owned()));
    codes
}

#[test]
fn the_integrator_guide_explains_every_error_code_the_api_answers_with() {
    let guide = std::fs::read_to_string(repo().join("docs/INTEGRATOR-GUIDE.md")).unwrap();
    let table = &guide[guide.find("## Errors and what to do").expect("the guide has its error table")..];
    let codes = error_codes();
    assert!(codes.len() > 20, "too few codes found, the scan is broken: {codes:?}");
    let missing: Vec<&String> = codes.iter().filter(|c| !table.contains(&format!("`{c}`"))).collect();
    assert!(missing.is_empty(), "docs/INTEGRATOR-GUIDE.md does not explain {missing:?}");
}
