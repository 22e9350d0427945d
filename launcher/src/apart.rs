//! Work for a user that the kernel may hold for as long as a file system of theirs likes, done apart.
//!
//! Looking a path up on a FUSE mount whose server never answers waits in the kernel, where not even
//! SIGKILL ends the wait; so does reading a process's environment while it is in `execve` closing a
//! descriptor on such a mount. A daemon that did either on a thread the control plane waits for
//! would be held with it. [`Apart::run`] does it on a thread of its own, waits a while, and while
//! such a thread of a user's has not come back, refuses that user's next at once: each user holds
//! at most one thread in the kernel, and nobody else waits.

use std::collections::HashMap;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The work under way apart, by the uid it is done for (users with none are not kept).
#[derive(Clone, Debug, Default)]
pub struct Apart(Arc<Mutex<HashMap<u32, usize>>>);

/// Why [`Apart::run`] has no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotDone {
    /// An earlier piece of work for the same user has not come back.
    Underway,
    /// It took longer than its patience (it goes on, and is counted until it ends).
    Late(Duration),
    /// Its thread could not start, or ended without an answer.
    Lost(String),
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
            NotDone::Lost(why) => write!(f, "{why}"),
        }
    }
}

/// One piece of work of [`Apart`]'s, counted until dropped.
struct Underway {
    apart: Apart,
    uid: u32,
}

impl Drop for Underway {
    fn drop(&mut self) {
        let mut underway = (self.apart.0.lock()).unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = underway.get_mut(&self.uid) {
            *count -= 1;
            if *count == 0 {
                underway.remove(&self.uid);
            }
        }
    }
}

impl Apart {
    /// `work` for `uid`, on a thread of its own (`name`), waited for `patience` at most; refused at
    /// once while an earlier piece of work for `uid` is still under way.
    pub fn run<T: Send + 'static>(
        &self,
        uid: u32,
        name: &str,
        patience: Duration,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, NotDone> {
        let underway = {
            let mut underway = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if underway.get(&uid).is_some_and(|&count| count > 0) {
                return Err(NotDone::Underway);
            }
            *underway.entry(uid).or_default() += 1;
            Underway {
                apart: self.clone(),
                uid,
            }
        };
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
                // Counted out before the answer (or, after a panic, before the channel closes), so
                // that whoever reads it finds it over.
                drop(underway);
                // Nobody reads it if the wait gave up; what it holds is dropped here.
                if let Ok(done) = done {
                    let _ = answer.send(done);
                }
            })
            .map_err(|e| NotDone::Lost(format!("cannot start a thread for it: {e}")))?;
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
}
