//! Work for a user that the kernel may hold for as long as a file system of theirs likes, done apart.
//!
//! Looking a path up on a FUSE mount whose server never answers waits in the kernel, where not even
//! SIGKILL ends the wait; so does reading a process's environment while it is in `execve` closing a
//! descriptor on such a mount. A daemon that did either on a thread the control plane waits for
//! would be held with it. [`Apart::run`] does it on a thread of its own, waits a while, and while
//! such a thread of a user's has not come back, refuses that user's next at once: each user holds
//! at most one thread in the kernel, and nobody else waits. A server that answers, but just before
//! the wait gives up, would still cost whoever waits that long each time: with
//! [`Apart::resting`], a user whose work took long rests a while before their next is done; and so
//! does one whose work, in pieces each quick enough, takes more than a share of the clock in all
//! (one slow piece per job of theirs, say).

use std::collections::HashMap;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The work under way apart, and the users resting after slow work or owing time beyond their
/// share, by uid (users with none of these are not kept). Handles made by [`Apart::resting`] share
/// the users of the handle they were made from; a user's rest and debt are judged by what their
/// work was last charged under, whichever handle asks.
#[derive(Clone, Debug, Default)]
pub struct Apart {
    users: Arc<Mutex<HashMap<u32, User>>>,
    /// When a user's work rests them ([`Apart::resting`]).
    rest: Option<Rest>,
}

/// When a user's work rests them, and for how long ([`Apart::resting`]).
#[derive(Clone, Copy, Debug)]
struct Rest {
    /// A piece of work that takes this long, or work that adds up to it beyond `share`.
    slow: Duration,
    /// The share of the clock a user's work may take for as long as it likes.
    share: f64,
    /// How long they rest.
    rest: Duration,
}

/// What [`Apart`] keeps of one user.
#[derive(Debug, Default)]
struct User {
    underway: usize,
    /// When a piece of their work that took long ended: the rest is counted from then.
    slow_ended: Option<Instant>,
    /// How much of their work's time was beyond the share at `owed_at`: it goes down at the share
    /// of the clock ([`User::owed`]).
    owed: Duration,
    owed_at: Option<Instant>,
    /// What their work was last charged under: their rest and what they owe are judged by it,
    /// whichever handle on the users looks.
    rest: Option<Rest>,
}

impl User {
    /// How much of their work's time is beyond the share at `now`.
    fn owed(&self, now: Instant) -> Duration {
        match (self.owed_at, self.rest) {
            (Some(at), Some(rest)) => {
                let paid = now.saturating_duration_since(at).mul_f64(rest.share);
                self.owed.saturating_sub(paid)
            }
            _ => Duration::ZERO,
        }
    }

    /// Charges them a piece of work that ended at `now` and took `took`, `slow_piece` or longer
    /// being slow on its own: whether they rest from now.
    fn charge(&mut self, now: Instant, took: Duration, slow_piece: Duration, rest: Rest) -> bool {
        let owed = self.owed(now).saturating_add(took);
        self.rest = Some(rest);
        if took >= slow_piece || owed >= rest.slow {
            self.slow_ended = Some(now);
            (self.owed, self.owed_at) = (Duration::ZERO, None);
            true
        } else {
            (self.owed, self.owed_at) = (owed, Some(now));
            false
        }
    }

    /// How much longer they rest at `now`, if they do: under `rest`, or else what their work was
    /// last charged under.
    fn resting(&self, now: Instant, rest: Option<Rest>) -> Option<Duration> {
        let until = self.slow_ended?.checked_add(rest.or(self.rest)?.rest);
        // A rest too long for the clock lasts for good.
        Some(until.map_or(Duration::MAX, |until| until.saturating_duration_since(now)))
            .filter(|left| !left.is_zero())
    }

    /// Whether anything of theirs is worth keeping at `now`: work under way, a rest, or time owed.
    fn kept(&self, now: Instant) -> bool {
        self.underway > 0 || self.resting(now, None).is_some() || self.owed(now) > Duration::ZERO
    }
}

/// Why [`Apart::run`] has no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotDone {
    /// An earlier piece of work for the same user has not come back.
    Underway,
    /// It took longer than its patience (it goes on, and is counted until it ends).
    Late(Duration),
    /// An earlier piece of work for the same user took this long or longer, or their work took
    /// this long beyond its share in all, and they rest for this much more ([`Apart::resting`]).
    Resting {
        /// How long their earlier work took, at least (in one piece, or beyond its share).
        slow: Duration,
        /// How much longer they rest.
        left: Duration,
    },
    /// Its thread ended without an answer.
    Lost(String),
    /// Its thread could not start (this machine is out of threads or memory).
    NoThread(String),
}

impl std::fmt::Display for NotDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotDone::Underway => write!(
                f,
                "an earlier one for the same user has not come back (a file system of theirs does \
                 not answer)"
            ),
            NotDone::Late(patience) => write!(
                f,
                "it took longer than {} s (a file system of its user's does not answer)",
                patience.as_secs_f64()
            ),
            NotDone::Resting { left, .. } => write!(
                f,
                "earlier ones for the same user were slow (a file system of theirs answers \
                 slowly, or did not answer): theirs wait {} s more",
                left.as_secs().max(1)
            ),
            NotDone::Lost(why) | NotDone::NoThread(why) => write!(f, "{why}"),
        }
    }
}

/// One piece of work of [`Apart`]'s, counted until dropped.
struct Underway {
    apart: Apart,
    uid: u32,
    began: Instant,
    /// Its user rests if it takes this long: the rest's `slow`, or its patience if shorter.
    slow: Duration,
}

impl Drop for Underway {
    fn drop(&mut self) {
        let now = Instant::now();
        let took = now.saturating_duration_since(self.began);
        let mut users = (self.apart.users.lock()).unwrap_or_else(PoisonError::into_inner);
        if let Some(user) = users.get_mut(&self.uid) {
            user.underway -= 1;
            if let Some(rest) = self.apart.rest {
                user.charge(now, took, self.slow, rest);
            }
            if !user.kept(now) {
                users.remove(&self.uid);
            }
        }
    }
}

impl Apart {
    /// This work apart (the same users, counted together), where a user rests for `rest` (their
    /// next is refused at once until then: [`NotDone::Resting`]) once a piece of their work took
    /// `slow` or longer, or outlasted its patience, or once their work took `slow` beyond `share` of
    /// the clock in all. A file system that answers just before the patience then costs its user's
    /// waiter that long once per `rest`, not every time; and one that answers just before `slow`
    /// costs it a `share` of its time, however many pieces of work the user has it do.
    ///
    /// # Panics
    ///
    /// Where `share` is not above 0 and at most 1.
    pub fn resting(&self, slow: Duration, share: f64, rest: Duration) -> Self {
        assert!(
            share > 0.0 && share <= 1.0,
            "a share of the clock is above 0 and at most 1, not {share}"
        );
        Apart {
            users: self.users.clone(),
            rest: Some(Rest { slow, share, rest }),
        }
    }

    /// `work` for `uid`, on a thread of its own (`name`), waited for `patience` at most; refused at
    /// once while an earlier piece of work for `uid` is still under way, or while `uid` rests.
    pub fn run<T: Send + 'static>(
        &self,
        uid: u32,
        name: &str,
        patience: Duration,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, NotDone> {
        let underway = {
            let mut users = self.users.lock().unwrap_or_else(PoisonError::into_inner);
            let asked = Instant::now();
            // Users with nothing left to keep go (one entry per user that has work done apart).
            users.retain(|_, user| user.kept(asked));
            let user = users.entry(uid).or_default();
            if user.underway > 0 {
                return Err(NotDone::Underway);
            }
            // This handle's rest where it has one (an operator may have changed it since).
            let rest = self.rest.or(user.rest);
            if let (Some(left), Some(rest)) = (user.resting(asked, rest), rest) {
                return Err(NotDone::Resting {
                    slow: rest.slow,
                    left,
                });
            }
            user.slow_ended = None;
            user.underway += 1;
            Underway {
                apart: self.clone(),
                uid,
                began: asked,
                slow: self.rest.map_or(patience, |r| r.slow.min(patience)),
            }
        };
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut underway = underway;
                // Charged from here: a machine slow to start the thread is not the user's doing.
                underway.began = Instant::now();
                let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
                // Counted out before the answer (or, after a panic, before the channel closes), so
                // that whoever reads it finds it over.
                drop(underway);
                // Nobody reads it if the wait gave up; what it holds is dropped here.
                if let Ok(done) = done {
                    let _ = answer.send(done);
                }
            })
            .map_err(|e| NotDone::NoThread(format!("cannot start a thread for it: {e}")))?;
        answered.recv_timeout(patience).map_err(|e| match e {
            RecvTimeoutError::Timeout => NotDone::Late(patience),
            RecvTimeoutError::Disconnected => NotDone::Lost("it ended without an answer".into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_whose_work_has_not_come_back_waits_and_nobody_else_does() {
        let apart = Apart::default();
        // Long enough for any answer that comes; short for the one that never does.
        let (long, short) = (Duration::from_secs(30), Duration::from_millis(50));
        assert_eq!(apart.run(7, "t", long, || 1), Ok(1));
        let (release, held) = std::sync::mpsc::channel::<()>();
        let stuck = apart.run(7, "t", short, move || held.recv().is_ok());
        assert_eq!(stuck, Err(NotDone::Late(short)));
        assert_eq!(apart.run(7, "t", long, || 2), Err(NotDone::Underway));
        assert_eq!(apart.run(8, "t", long, || 3), Ok(3));
        release.send(()).unwrap();
        // Once it comes back, the user's work runs again.
        let deadline = std::time::Instant::now() + long;
        loop {
            match apart.run(7, "t", long, || 4) {
                Ok(answer) => break assert_eq!(answer, 4),
                Err(NotDone::Underway) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            apart.run(9, "t", long, || panic!("lost")),
            Err::<(), _>(NotDone::Lost("it ended without an answer".into()))
        );
        assert_eq!(apart.run(9, "t", long, || 5), Ok(5));
    }

    #[test]
    fn a_user_whose_work_took_long_rests_and_nobody_else_does() {
        // Slow well above what quick work takes on a loaded machine; a rest far longer than the
        // test.
        let (slow, rest) = (Duration::from_millis(500), Duration::from_secs(600));
        let apart = Apart::default().resting(slow, 0.1, rest);
        let long = Duration::from_secs(30);
        assert_eq!(apart.run(7, "t", long, || 1), Ok(1));
        assert_eq!(apart.run(7, "t", long, || 2), Ok(2), "quick work: no rest");
        assert_eq!(
            apart.run(7, "t", long, move || std::thread::sleep(slow)),
            Ok(())
        );
        match apart.run(7, "t", long, || 3) {
            Err(NotDone::Resting { slow: said, left }) => {
                assert_eq!(said, slow);
                assert!(left <= rest, "{left:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(apart.run(8, "t", long, || 4), Ok(4), "others do not rest");
        // A rest that is over lets the user's work run again.
        let brief = Apart::default().resting(slow, 1.0, Duration::ZERO);
        assert_eq!(
            brief.run(7, "t", long, move || std::thread::sleep(slow)),
            Ok(())
        );
        assert_eq!(brief.run(7, "t", long, || 5), Ok(5));
        // Once what it owes is paid back (at the whole clock here), nothing of the user is kept.
        let deadline = Instant::now() + long;
        while brief.users.lock().unwrap().contains_key(&7) {
            assert!(Instant::now() < deadline, "kept");
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(brief.run(8, "t", long, || 7), Ok(7));
        }
        // Without a rest, slow work is not remembered.
        let plain = Apart::default();
        assert_eq!(
            plain.run(7, "t", long, move || std::thread::sleep(slow)),
            Ok(())
        );
        assert_eq!(plain.run(7, "t", long, || 6), Ok(6));
        assert!(plain.users.lock().unwrap().is_empty(), "nothing kept");
    }

    #[test]
    fn a_user_whose_quick_work_adds_up_beyond_its_share_rests_and_nobody_else_does() {
        let (slow, rest, long) = (
            Duration::from_millis(300),
            Duration::from_secs(600),
            Duration::from_secs(30),
        );
        let never_resting = Apart::default();
        let apart = never_resting.resting(slow, 0.1, rest);
        // Pieces each well under `slow`, one after the other: the whole clock, beyond its tenth.
        let piece = Duration::from_millis(50);
        let mut pieces = 0;
        loop {
            match apart.run(7, "t", long, move || std::thread::sleep(piece)) {
                Ok(()) => pieces += 1,
                Err(NotDone::Resting { slow: said, left }) => {
                    assert_eq!(said, slow);
                    assert!(left <= rest, "{left:?}");
                    break;
                }
                other => panic!("{other:?}"),
            }
            assert!(pieces <= 20, "never rested");
        }
        assert!(pieces > 1, "rested after one quick piece");
        assert_eq!(apart.run(8, "t", long, || 1), Ok(1), "others do not rest");
        // A handle on the same users that never rests them keeps the rests of those that do, and
        // a user's rest is theirs whichever handle asks.
        assert_eq!(never_resting.run(8, "t", long, || 2), Ok(2));
        for handle in [&apart, &never_resting] {
            assert!(matches!(
                handle.run(7, "t", long, || 3),
                Err(NotDone::Resting { .. })
            ));
        }
    }

    /// What a user owes, on a clock of the test's own.
    #[test]
    fn work_beyond_its_share_is_owed_and_paid_back_at_the_share() {
        let rest = Rest {
            slow: Duration::from_millis(300),
            share: 0.1,
            rest: Duration::from_secs(30),
        };
        let ms = Duration::from_millis;
        let start = Instant::now();
        // 50 ms pieces back to back: 50 ms owed, then 45 more at each (5 paid back), 320 at the
        // seventh.
        let mut user = User::default();
        for k in 1..=7 {
            let rested = user.charge(start + ms(50 * k), ms(50), ms(500), rest);
            assert_eq!(rested, k == 7, "piece {k}: owed {:?}", user.owed);
        }
        assert_eq!(user.resting(start + ms(350), None), Some(ms(30_000)));
        assert_eq!(user.resting(start + ms(30_350), None), None, "rested");
        let brief = Some(Rest {
            rest: ms(100),
            ..rest
        });
        assert_eq!(
            user.resting(start + ms(350), brief),
            Some(ms(100)),
            "as asked"
        );
        assert!(!user.kept(start + ms(30_350)));
        // 20 ms pieces 320 ms apart (a sixteenth of the clock): each paid back before the next,
        // however many.
        let mut user = User::default();
        for k in 1..=100 {
            assert!(!user.charge(start + ms(320 * k), ms(20), ms(500), rest));
            assert_eq!(user.owed, ms(20));
        }
        assert!(user.kept(start + ms(32_000)), "20 ms owed");
        assert!(!user.kept(start + ms(32_200)), "paid back");
        // One slow piece rests them, whatever they owe.
        assert!(User::default().charge(start, ms(500), ms(500), rest));
        // A rest too long for the clock lasts.
        let forever = Rest {
            rest: Duration::MAX,
            ..rest
        };
        let mut user = User::default();
        assert!(user.charge(start, ms(500), ms(500), forever));
        assert_eq!(user.resting(start, None), Some(Duration::MAX));
    }
}
