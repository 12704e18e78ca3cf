//! Where a deploy's time goes (issue 14): a real deploy of the reference
//! source records the split of its wall time in its run report (Slipway's
//! parts, Nix evaluation, Nix builds, the effect's own work), stored with
//! the build, and the parts add up to within the build's wall time.

use slipway_jobs::jobs::timing::Timings;
use slipway_jobs::state::{BuildKind, BuildStatus};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::world;

/// Every part, named, and their sum.
fn parts(t: &Timings) -> ([(&'static str, f64); 10], f64) {
    let parts = [
        ("queue_wait_ms", t.queue_wait_ms),
        ("claim_ms", t.claim_ms),
        ("prepare_ms", t.prepare_ms),
        ("collect_ms", t.collect_ms),
        ("record_ms", t.record_ms),
        ("sbom_store_ms", t.sbom_store_ms),
        ("nix_eval_ms", t.nix_eval_ms),
        ("nix_build_ms", t.nix_build_ms),
        ("effect_ms", t.effect_ms),
        ("slipway_ms", t.slipway_ms),
    ];
    (parts, t.slipway_ms + t.nix_eval_ms + t.nix_build_ms + t.effect_ms)
}

async fn a_reference_deploy_records_where_its_time_went_and_the_parts_add_up_to_its_wall_time(engine: Engine) {
    let w = world(engine, &[]).await;
    // A domain no other run has built: the first deploy builds every node.
    let mut configuration = slipway_jobs::test_support::demo();
    configuration["domain"] = format!("t{}.example.org", ulid::Ulid::generate().to_string().to_lowercase()).into();
    for run in ["cold", "warm"] {
        let id = w.queue_configuration("demo", BuildKind::Deploy, None, configuration.clone()).await;
        let report = w.run(&id).await;
        assert_eq!(report.status, BuildStatus::Succeeded, "{run}: {report:?}");
        let t = report.timings.unwrap_or_else(|| panic!("{run}: the report has no timings"));
        let (named, sum) = parts(&t);
        for (name, value) in named {
            assert!(value.is_finite() && value >= 0.0, "{run}: {name} is {value}");
        }
        assert!(sum <= t.wall_ms + 0.01, "{run}: the parts ({sum} ms) exceed the wall time ({} ms): {t:?}", t.wall_ms);
        assert!(sum >= t.wall_ms - 0.01, "{run}: the parts ({sum} ms) leave out time ({} ms): {t:?}", t.wall_ms);
        let slipway = t.queue_wait_ms + t.claim_ms + t.prepare_ms + t.collect_ms + t.record_ms + t.sbom_store_ms;
        assert!((slipway - t.slipway_ms).abs() < 0.01, "{run}: Slipway's parts do not sum to its share: {t:?}");
        // The reference effect evaluates once and builds (or finds built) each node.
        assert!(t.nix_eval_ms > 0.0 && t.nix_build_ms > 0.0, "{run}: the effect's Nix time is missing: {t:?}");
        assert!(t.sbom_store_ms > 0.0, "{run}: the SBOM store took no time: {t:?}");
        // The wall time is the build's own: submit stored → end written.
        let row = w.build(&id).await;
        let stored = row.finished_at.unwrap() - row.queued_at;
        assert!((t.wall_ms - stored as f64).abs() <= 1.0, "{run}: wall {} ms, the row says {stored} ms", t.wall_ms);
        // Stored with the build (what GET /builds/{id} shows), and in the text report.
        let kept: Timings = serde_json::from_value(row.report.unwrap()["timings"].clone()).expect("stored timings");
        assert_eq!(kept, t, "{run}");
        let text = report.to_text();
        assert!(text.contains("Nix evaluation") && text.contains("SBOM store"), "{run}: {text}");
    }
}

slipway_jobs::on_both_engines!(a_reference_deploy_records_where_its_time_went_and_the_parts_add_up_to_its_wall_time,);
