//! Where a build's time goes: the moments a build passes on its
//! way, taken where it runs, and the split of its wall time that the run
//! report carries ([`Timings`], `report.timings`).
//!
//! The moments, in order: the submit stored the build (`queued_at`, the
//! api's clock), a worker's `builds` handler picked its job up, the claim
//! committed, the effect was started and was gone, the worker began to
//! record the end, the SBOM change was stored, and the end was written
//! (`finished_at`). Each Slipway part is the span between two of them, so
//! the parts add up to the wall time `finished_at - queued_at`; the effect's
//! span is split further by what the effect itself reports in
//! `$SBOM_OUT_DIR/timings.json` (docs/MODULE-SOURCE.md): its Nix
//! evaluation and its Nix builds, the rest being its own work. What follows
//! the written end (the dispatch of the deployment's next build, its event,
//! the commit) is outside the build's wall time.

use serde::{Deserialize, Serialize};

/// Microseconds since the Unix epoch, on the fleet's clock
/// ([`crate::clock::now_us`]: the database's, advanced on the monotonic
/// clock), so the moments compare with `queued_at`, which another process
/// wrote, and their spans do not jump when this host's wall clock is
/// stepped.
pub fn now_us() -> i64 {
    crate::clock::now_us()
}

/// What an effect says of its own time (`$SBOM_OUT_DIR/timings.json`,
/// optional): milliseconds of wall-clock time it spent waiting for Nix
/// evaluations and for Nix builds. Work it ran in the background while it
/// did something else counts once, where it waited for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectTimes {
    /// Nix evaluation (`nix-instantiate`, `nix eval`), ms.
    #[serde(default)]
    pub nix_eval_ms: f64,
    /// Nix builds (`nix-build`, `nix-store --realise`), ms.
    #[serde(default)]
    pub nix_build_ms: f64,
}

/// An effect's run as the worker saw it: started (spawned, lock and PID
/// namespace included) and gone (every process of it), in µs since the
/// epoch, and what it said of its own time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EffectSpan {
    /// Just before it was spawned.
    pub spawned_us: i64,
    /// Once it and every process it started were gone.
    pub ended_us: i64,
    /// Its own account of its Nix work, when it gave one.
    pub times: Option<EffectTimes>,
}

/// The moments of one build attempt, in µs since the epoch (see the module
/// doc). Zero marks a moment not reached: its span counts as nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Marks {
    /// The submit stored the build (`queued_at`, ms precision).
    pub queued_us: i64,
    /// The handler picked the job up.
    pub picked_us: i64,
    /// The claim committed.
    pub claimed_us: i64,
    /// The effect, when one ran.
    pub effect: Option<EffectSpan>,
    /// The worker began to record the end (its first try).
    pub recording_us: i64,
    /// The SBOM change's statements: started and done.
    pub sbom_started_us: i64,
    /// See `sbom_started_us`.
    pub sbom_ended_us: i64,
    /// The end was written (`finished_at`).
    pub written_us: i64,
}

/// A build's wall time, split (milliseconds, three decimals): the report's
/// `timings`. Every part is a span of its own, so `slipway_ms + nix_eval_ms
/// + nix_build_ms + effect_ms` is `wall_ms` (to rounding).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Submit stored → end written (`finished_at - queued_at`).
    pub wall_ms: f64,
    /// Slipway's share: the six parts below that are not the effect's.
    pub slipway_ms: f64,
    /// Stored → a worker's handler picked the job up (the queue; for a
    /// build that waited for its deployment's previous one, that wait too).
    pub queue_wait_ms: f64,
    /// Picked up → claim committed (the live-owner check and the claim).
    pub claim_ms: f64,
    /// Claimed → effect started (its source resolved, older attempts
    /// stopped, the claim checked, the work folder written, the log opened).
    pub prepare_ms: f64,
    /// The effect's Nix evaluation, as it reported it.
    pub nix_eval_ms: f64,
    /// The effect's Nix builds, as it reported them.
    pub nix_build_ms: f64,
    /// The rest of the effect's run (started → gone): its own work, with
    /// its process start-up and containment.
    pub effect_ms: f64,
    /// Effect gone → recording begins (the log flushed, `nodes.json` and
    /// the SBOMs read and checked, the report made).
    pub collect_ms: f64,
    /// Recording begins → end written, less the SBOM store (the write
    /// transaction, the deployment's lock, retries during an outage).
    pub record_ms: f64,
    /// The SBOM change's statements (replace or remove the deployment's SBOMs).
    pub sbom_store_ms: f64,
}

fn span(from: i64, to: i64) -> i64 {
    if from == 0 || to == 0 {
        0
    } else {
        (to - from).max(0)
    }
}

fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

impl Marks {
    /// The split of this attempt's wall time. Marks not reached count as
    /// the one before them (their span is nothing).
    pub fn timings(&self) -> Timings {
        let effect =
            self.effect.unwrap_or(EffectSpan { spawned_us: self.claimed_us, ended_us: self.claimed_us, times: None });
        let queue = span(self.queued_us, self.picked_us);
        let claim = span(self.picked_us, self.claimed_us);
        let prepare = span(self.claimed_us, effect.spawned_us);
        let ran = span(effect.spawned_us, effect.ended_us);
        let collect = span(effect.ended_us, self.recording_us);
        let sbom = span(self.sbom_started_us, self.sbom_ended_us);
        let record = (span(self.recording_us, self.written_us) - sbom).max(0);
        // The effect's own account, never more than its run as the worker saw it.
        let times = effect.times.unwrap_or_default();
        let (mut eval, mut build) = (times.nix_eval_ms, times.nix_build_ms);
        let reported = eval + build;
        if reported > ms(ran) && reported > 0.0 {
            let scale = ms(ran) / reported;
            (eval, build) = (eval * scale, build * scale);
        }
        let slipway = queue + claim + prepare + collect + record + sbom;
        Timings {
            wall_ms: round(ms(slipway + ran)),
            slipway_ms: round(ms(slipway)),
            queue_wait_ms: round(ms(queue)),
            claim_ms: round(ms(claim)),
            prepare_ms: round(ms(prepare)),
            nix_eval_ms: round(eval),
            nix_build_ms: round(build),
            effect_ms: round((ms(ran) - eval - build).max(0.0)),
            collect_ms: round(ms(collect)),
            record_ms: round(ms(record)),
            sbom_store_ms: round(ms(sbom)),
        }
    }
}

/// A duration for people: `850 ms`, `12.3 s`.
fn human(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

impl Timings {
    /// One line of the text report: the wall time and where it went.
    pub fn to_text(&self) -> String {
        format!(
            "time {} in all: Slipway {} (queue {}, claim {}, prepare {}, collect {}, record {}, SBOM store {}), \
             Nix evaluation {}, Nix builds {}, the effect's own work {}",
            human(self.wall_ms),
            human(self.slipway_ms),
            human(self.queue_wait_ms),
            human(self.claim_ms),
            human(self.prepare_ms),
            human(self.collect_ms),
            human(self.record_ms),
            human(self.sbom_store_ms),
            human(self.nix_eval_ms),
            human(self.nix_build_ms),
            human(self.effect_ms),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_add_up_to_the_wall_time_and_the_effect_never_reports_more_than_it_ran() {
        let marks = Marks {
            queued_us: 1_000_000,
            picked_us: 1_004_000,
            claimed_us: 1_006_000,
            effect: Some(EffectSpan {
                spawned_us: 1_010_000,
                ended_us: 1_110_000,
                times: Some(EffectTimes { nix_eval_ms: 150.0, nix_build_ms: 50.0 }),
            }),
            recording_us: 1_112_000,
            sbom_started_us: 1_113_000,
            sbom_ended_us: 1_118_000,
            written_us: 1_120_000,
        };
        let t = marks.timings();
        assert_eq!(t.wall_ms, 120.0);
        assert_eq!((t.queue_wait_ms, t.claim_ms, t.prepare_ms, t.collect_ms), (4.0, 2.0, 4.0, 2.0));
        assert_eq!((t.record_ms, t.sbom_store_ms), (3.0, 5.0));
        // 200 ms reported in a 100 ms run: scaled to the run, nothing left over.
        assert_eq!((t.nix_eval_ms, t.nix_build_ms, t.effect_ms), (75.0, 25.0, 0.0));
        let sum = t.slipway_ms + t.nix_eval_ms + t.nix_build_ms + t.effect_ms;
        assert!((sum - t.wall_ms).abs() < 0.01, "{sum} != {}", t.wall_ms);
    }

    #[test]
    fn a_build_that_ran_no_effect_splits_its_time_among_slipways_parts() {
        let marks = Marks {
            queued_us: 1_000_000,
            picked_us: 1_001_000,
            claimed_us: 1_002_000,
            effect: None,
            recording_us: 1_003_000,
            written_us: 1_004_000,
            ..Marks::default()
        };
        let t = marks.timings();
        assert_eq!((t.wall_ms, t.slipway_ms, t.effect_ms, t.prepare_ms, t.collect_ms), (4.0, 4.0, 0.0, 0.0, 1.0));
    }
}
