//! Many multi-GPU gangs competing for overlapping GPUs: each gets all of its GPUs or none, and every
//! acquisition ends (no deadlock).

use std::time::Duration;

use actix::prelude::*;
use futures::future::join_all;
use gangway_actors::gang::{Acquire, Disband, GangActor, GangError};
use gangway_actors::gpu::{GpuActor, Holder, Inspect, LeaseError};
use gangway_core::cluster::GpuId;
use gangway_core::job::JobId;

const GPUS: u32 = 24;

/// GPUs per server: one actor holds each server's GPUs.
const PER_SERVER: u32 = 4;

/// xorshift64*, so that a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// A gang of 2 to 8 GPUs, scattered over the cluster (fragmented: no two gangs line up).
fn random_gang(rng: &mut Rng) -> Vec<u32> {
    let size = 2 + rng.below(7) as usize;
    let mut gpus = Vec::new();
    while gpus.len() < size {
        let g = rng.below(u64::from(GPUS)) as u32;
        if !gpus.contains(&g) {
            gpus.push(g);
        }
    }
    gpus
}

#[actix::test]
async fn competing_gangs_get_all_their_gpus_or_none_and_never_deadlock() {
    let servers: Vec<Addr<GpuActor>> = (0..GPUS / PER_SERVER)
        .map(|s| GpuActor::new((s * PER_SERVER..(s + 1) * PER_SERVER).map(GpuId)).start())
        .collect();
    let actor = |g: u32| servers[(g / PER_SERVER) as usize].clone();
    // Every GPU's state, in ascending id.
    let inspect = || async {
        let each = join_all(servers.iter().map(|s| s.send(Inspect))).await;
        each.into_iter()
            .flat_map(Result::unwrap)
            .collect::<Vec<_>>()
    };
    let mut rng = Rng(42);
    let mut granted = 0;
    let mut refused = 0;
    for wave in 0..20u64 {
        let before: Vec<bool> = (inspect().await.iter())
            .map(|l| l.lease.is_free())
            .collect();
        let mut granted_now = 0;
        // Gangs from earlier waves still hold GPUs, so the cluster stays fragmented.
        let gangs: Vec<(Holder, Vec<u32>, Addr<GangActor>)> = (0..30)
            .map(|k| {
                let members = random_gang(&mut rng);
                let holder = Holder {
                    job: JobId((wave * 100 + k) as u32),
                    attempt: wave,
                };
                let addrs = members.iter().map(|&g| (GpuId(g), actor(g))).collect();
                (holder, members, GangActor::new(holder, None, addrs).start())
            })
            .collect();
        let results = tokio::time::timeout(
            Duration::from_secs(10),
            join_all(gangs.iter().map(|(_, _, gang)| gang.send(Acquire))),
        )
        .await
        .expect("every acquisition ends: no deadlock");

        let leases = inspect().await;
        assert_eq!(leases.len(), GPUS as usize);
        for lease in &leases {
            assert!(
                lease.lease.reserved.is_empty(),
                "GPU {} keeps a reservation",
                lease.gpu
            );
            assert!(
                lease.lease.committed.len() <= 1,
                "GPU {} leased twice",
                lease.gpu
            );
        }
        let mut keep = Vec::new();
        let mut some_gang_fit = false;
        for ((holder, members, gang), result) in gangs.into_iter().zip(results) {
            let held: Vec<u32> = leases
                .iter()
                .filter(|l| l.lease.committed.iter().any(|(h, _)| *h == holder))
                .map(|l| l.gpu)
                .collect();
            some_gang_fit |= members.iter().all(|&g| before[g as usize]);
            match result.unwrap() {
                Ok(()) => {
                    granted += 1;
                    granted_now += 1;
                    let mut want = members.clone();
                    want.sort_unstable();
                    assert_eq!(held, want, "a granted gang holds exactly its GPUs");
                    keep.push(gang);
                }
                Err(GangError::Lease {
                    cause: LeaseError::Busy { .. },
                    ..
                }) => {
                    refused += 1;
                    assert!(held.is_empty(), "a refused gang holds {held:?}");
                }
                Err(other) => panic!("unexpected: {other}"),
            }
        }
        // Ordered reservation: contention alone never makes every gang fail.
        assert!(
            !some_gang_fit || granted_now > 0,
            "wave {wave}: a gang's GPUs were all free, yet no gang got its GPUs"
        );
        // Half of the granted gangs finish; the rest keep their GPUs into the next wave.
        for gang in keep.iter().step_by(2) {
            gang.send(Disband).await.unwrap();
        }
    }
    // Both outcomes happened, many times.
    assert!(
        granted > 10 && refused > 10,
        "granted {granted}, refused {refused}"
    );
}

#[actix::test]
async fn take_leases_a_free_gpu_at_once_and_never_jumps_a_gang_still_acquiring() {
    use gangway_actors::gpu::{Release, Reserve, Take};
    let gpu = GpuActor::new([GpuId(0)]).start();
    let holder = |job| Holder {
        job: JobId(job),
        attempt: 0,
    };
    let take = |job| Take {
        gpu: GpuId(0),
        holder: holder(job),
        partner: None,
    };
    assert_eq!(gpu.send(take(1)).await.unwrap(), Ok(()));
    let lease = gpu.send(Inspect).await.unwrap().remove(0).lease;
    assert_eq!(lease.committed.as_slice(), [(holder(1), None)]);
    assert!(lease.reserved.is_empty());
    // Held: refused at once, not queued.
    assert_eq!(
        gpu.send(take(2)).await.unwrap(),
        Err(LeaseError::Busy {
            gpu: 0,
            by: JobId(1)
        })
    );
    let release = Release {
        gpu: GpuId(0),
        holder: holder(1),
    };
    gpu.send(release).await.unwrap();
    // Reserved by a gang still acquiring: taking it would jump that gang, so it is refused.
    let reserve = Reserve {
        gpu: GpuId(0),
        holder: holder(3),
        partner: None,
    };
    assert_eq!(gpu.send(reserve).await.unwrap(), Ok(()));
    assert_eq!(
        gpu.send(take(2)).await.unwrap(),
        Err(LeaseError::Busy {
            gpu: 0,
            by: JobId(3)
        })
    );
}

#[actix::test]
async fn a_batch_of_handovers_tells_which_gangs_were_refused_even_by_a_gpu_gone() {
    use gangway_actors::gpu::{Handover, Handovers, Take, Tally, TallyAnswer};
    let holder = |job| Holder {
        job: JobId(job),
        attempt: 0,
    };
    let take = |gpu, job, answer: TallyAnswer| Handover::Take {
        gpu: GpuId(gpu),
        holder: holder(job),
        partner: None,
        answer,
    };
    let release = |gpu, job| Handover::Release {
        gpu: GpuId(gpu),
        holder: holder(job),
    };
    // A server of GPUs 0 and 1, and one of GPU 2 whose actor will be gone.
    let server = GpuActor::new([GpuId(0), GpuId(1)]).start();
    let elsewhere = Arbiter::new();
    let gone = GpuActor::start_in_arbiter(&elsewhere.handle(), |_| GpuActor::new([GpuId(2)]));
    // Job 1 takes GPU 0 and job 2 GPU 1, in one message.
    let (tally, answered) = Tally::new(2, 2);
    let both = vec![
        take(0, 1, tally.answer_for(0)),
        take(1, 2, tally.answer_for(1)),
    ];
    server.do_send(Handovers(both));
    assert_eq!(answered.await.unwrap(), [false, false]);
    // Job 3 takes GPU 0 from job 1 (given back first, in the same message) and GPU 1 (still job
    // 2's: refused); job 4 takes GPU 2, whose actor is gone, and GPU 5, which no actor here holds.
    elsewhere.stop();
    elsewhere.join().unwrap();
    assert!(!gone.connected());
    let (tally, answered) = Tally::new(2, 4);
    let moves = vec![
        release(0, 1),
        take(0, 3, tally.answer_for(0)),
        take(1, 3, tally.answer_for(0)),
        take(5, 4, tally.answer_for(1)),
    ];
    server.do_send(Handovers(moves));
    gone.do_send(Handovers(vec![take(2, 4, tally.answer_for(1))]));
    assert_eq!(answered.await.unwrap(), [true, true]);
    let gpus = server.send(Inspect).await.unwrap();
    assert_eq!(gpus[0].lease.committed.as_slice(), [(holder(3), None)]);
    assert_eq!(gpus[1].lease.committed.as_slice(), [(holder(2), None)]);
    // A message about a GPU the actor does not hold says so.
    let stray = Take {
        gpu: GpuId(5),
        holder: holder(4),
        partner: None,
    };
    assert_eq!(
        server.send(stray).await.unwrap(),
        Err(LeaseError::Elsewhere { gpu: 5 })
    );
    // Nothing to answer: done at once.
    let (_, answered) = Tally::new(0, 0);
    assert_eq!(answered.await.unwrap(), Vec::<bool>::new());
}
