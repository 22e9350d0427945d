//! Property tests: every plan keeps the planning rules, and is the largest one that could.

use std::collections::HashSet;

use gangway_elastic::{BatchPlan, HostOffer, JobSpec, PlanError, ResizePolicy, plan};
use proptest::prelude::*;

fn specs() -> impl Strategy<Value = JobSpec> {
    (
        1u32..=4,
        1u32..=3,
        0u32..=16,
        0u32..=24,
        1u32..=256,
        1u32..=16,
        any::<bool>(),
    )
        .prop_map(
            |(tp, pp, min_gpus, extra, global_batch, max_micro_batch, rescale_batch)| JobSpec {
                tp,
                pp,
                min_gpus,
                max_gpus: min_gpus + extra,
                global_batch,
                max_micro_batch,
                rescale_batch,
            },
        )
}

fn offers() -> impl Strategy<Value = Vec<HostOffer>> {
    prop::collection::vec(prop::collection::btree_set(0u32..8, 0..=8), 0..=4).prop_map(|hosts| {
        let named = hosts.into_iter().enumerate();
        named
            .map(|(i, gpus)| HostOffer::new(format!("node{i}"), gpus))
            .collect()
    })
}

/// The largest world size the rules allow, found by brute force.
fn best_world(spec: &JobSpec, offer: &[HostOffer]) -> Option<u32> {
    let (tp, pp) = (spec.tp, spec.pp);
    let groups: u32 = offer.iter().map(|h| h.gpus.len() as u32 / tp).sum();
    (1..=spec.max_gpus).rev().find(|&w| {
        let dp = w / (tp * pp);
        w.is_multiple_of(tp * pp)
            && w >= spec.min_gpus
            && w / tp <= groups
            && (spec.rescale_batch || spec.global_batch.is_multiple_of(dp))
    })
}

proptest! {
    #[test]
    fn plans_keep_the_rules_and_are_largest(spec in specs(), offer in offers()) {
        let unit = spec.tp * spec.pp;
        match (plan(&spec, &offer), best_world(&spec, &offer)) {
            (Ok(p), Some(best)) => {
                let world = p.world_size();
                prop_assert_eq!(world, best);
                prop_assert_eq!(world % unit, 0);
                prop_assert!(spec.min_gpus <= world && world <= spec.max_gpus);
                prop_assert_eq!(p.ranks.len() as u32, world);
                for group in p.ranks.chunks(spec.tp as usize) {
                    prop_assert!(group.iter().all(|s| s.host == group[0].host), "{:?}", group);
                }
                let mut used = HashSet::new();
                for slot in &p.ranks {
                    prop_assert!(used.insert(slot), "{:?} used twice", slot);
                    let host = offer.iter().find(|h| h.host == slot.host).unwrap();
                    prop_assert!(host.gpus.contains(&slot.gpu), "{:?} not offered", slot);
                }
                let b = p.batch;
                prop_assert_eq!(b.micro_batch * b.accum_steps * p.parallel.dp, b.global_batch);
                prop_assert!(b.micro_batch <= spec.max_micro_batch);
                prop_assert!(spec.rescale_batch || b.global_batch == spec.global_batch);
                // One CUDA_VISIBLE_DEVICES entry per used host: each host's ranks are contiguous.
                let visible = p.cuda_visible_devices();
                let hosts: HashSet<_> = p.ranks.iter().map(|s| &s.host).collect();
                prop_assert_eq!(visible.len(), hosts.len());
            }
            (Err(_), None) => {}
            (got, best) => prop_assert!(false, "plan {:?}, brute force {:?}", got, best),
        }
    }

    #[test]
    fn batch_split_is_exact_or_nearest(
        global in 1u32..1000, dp in 1u32..64, max_micro in 1u32..64, rescale in any::<bool>(),
    ) {
        match BatchPlan::fit(global, dp, max_micro, rescale) {
            Ok(b) => {
                prop_assert_eq!(b.micro_batch * b.accum_steps * dp, b.global_batch);
                prop_assert!(1 <= b.micro_batch && b.micro_batch <= max_micro);
                if !rescale || global.is_multiple_of(dp) {
                    prop_assert_eq!(b.global_batch, global);
                } else {
                    // No multiple of dp (at least dp) is strictly nearer.
                    let dist = b.global_batch.abs_diff(global);
                    prop_assert!(global < dp || dist <= dp / 2, "{:?}", b);
                    prop_assert_eq!(b.global_batch % dp, 0);
                }
            }
            Err(e) => {
                prop_assert!(!rescale && !global.is_multiple_of(dp));
                prop_assert_eq!(e, PlanError::BatchIndivisible { global_batch: global, dps: vec![dp] });
            }
        }
    }

    #[test]
    fn resize_pays_for_itself(
        current in 0.1f64..100.0, new in 0.1f64..100.0, restart in 0.0f64..1e4,
        remaining in 0.0f64..1e5, margin in 0.0f64..1.0,
    ) {
        let policy = ResizePolicy { margin };
        let d = policy.worth_resizing(current, new, restart, remaining);
        if d.resize {
            // Net of the restart and the margin, finishing is still sooner.
            prop_assert!(new > current);
            prop_assert!(d.after_resize_s + margin * restart < d.remaining_s, "{}", d);
            // More work left, or a cheaper restart, only makes the resize more worthwhile.
            prop_assert!(policy.worth_resizing(current, new, restart, remaining * 2.0).resize);
            prop_assert!(policy.worth_resizing(current, new, restart / 2.0, remaining).resize);
        } else {
            prop_assert!(d.saved_s <= d.threshold_s, "{}", d);
        }
    }
}
