//! One pass's kills of attempts without a cgroup, by one scan of each user's processes.

use std::collections::HashMap;
use std::time::Instant;

use super::attempt::kill_attempt;
use super::{ATTEMPT_VAR, Confinement, SCANNED_KILL_LOOK_EVERY, Stopping};
use crate::process::{Owner, kill_with_any_env};

/// One pass's kills of attempts without a cgroup (stops past their deadline, or what ended attempts
/// left): each user's processes are scanned once for all of that user's attempts whose kill is due
/// in it, rather than once per attempt, so that a wave of kills costs a user one scan a look
/// against their share of scans ([`crate::apart::Apart::resting`]), and the poll one wait per
/// user.
#[derive(Default)]
pub(super) struct Kills {
    users: HashMap<Owner, UserKills>,
}

/// One user's attempts whose kill is due in a [`Kills`] pass.
#[derive(Default)]
struct UserKills {
    /// Whether their stops past the deadline are looked at in this pass: at most one look each
    /// [`SCANNED_KILL_LOOK_EVERY`] per user. (A sweep's always are.)
    looked: bool,
    markers: Vec<String>,
    scan: UserScan,
}

/// A [`Kills`] pass's scan of one user's processes.
#[derive(Default)]
enum UserScan {
    /// Not made yet: made at the first kill of theirs the pass asks for.
    #[default]
    NotYet,
    /// It did not answer in time.
    Unanswered,
    /// Which of the user's markers had processes (killed).
    Found(Vec<bool>),
}

impl UserScan {
    /// Whether it was made (answered or not).
    fn made(&self) -> bool {
        !matches!(self, UserScan::NotYet)
    }
}

/// When each user's processes were last scanned for stops past their deadline: each user is looked
/// at again [`SCANNED_KILL_LOOK_EVERY`] after the end of their last look, not sooner, so that a user
/// with many stops lingering past their deadline costs the poll one scan a tenth of a second.
#[derive(Default)]
pub(super) struct KillLooks(HashMap<Owner, Instant>);

impl KillLooks {
    /// Whether `owner`'s processes may be looked at in a pass at `now`.
    fn due(&self, owner: Owner, now: Instant) -> bool {
        (self.0.get(&owner)).is_none_or(|&at| now >= at + SCANNED_KILL_LOOK_EVERY)
    }

    /// A pass whose looks ended at `looked` scanned the processes of `scanned`: theirs wait from
    /// then, and those whose wait is over are forgotten.
    pub(super) fn looked(&mut self, scanned: impl Iterator<Item = Owner>, looked: Instant) {
        (self.0).retain(|_, at| looked < *at + SCANNED_KILL_LOOK_EVERY);
        (self.0).extend(scanned.map(|owner| (owner, looked)));
    }
}

impl Kills {
    /// The kills of `attempts` (by marker and confinement) in one pass, each of whose users is
    /// looked at in it where `looked` says.
    pub(super) fn of<'a>(
        attempts: impl IntoIterator<Item = (&'a str, &'a Confinement)>,
        looked: impl Fn(Owner) -> bool,
    ) -> Self {
        let mut kills = Kills::default();
        for (marker, confinement) in attempts {
            if confinement.cgroup.is_some() {
                continue;
            }
            let owner = confinement.owner();
            let user = (kills.users.entry(owner)).or_insert_with(|| UserKills {
                looked: looked(owner),
                ..UserKills::default()
            });
            user.markers.push(marker.to_owned());
        }
        kills
    }

    /// The kills due in a pass over `stops` at `now`: users whose processes were looked at for a
    /// kill less than [`SCANNED_KILL_LOOK_EVERY`] before (`looks`) are not due.
    pub(super) fn past_deadline(stops: &[Stopping], looks: &KillLooks, now: Instant) -> Self {
        let past_deadline = stops.iter().filter(|s| s.kill_scanned(now));
        Kills::of(
            past_deadline.map(|s| (s.run.marker.as_str(), &s.run.confinement)),
            |owner| looks.due(owner, now),
        )
    }

    /// Whether `stop`, past its deadline, is looked at in this pass (one with a cgroup always is).
    pub(super) fn look_due(&self, stop: &Stopping) -> bool {
        let confinement = &stop.run.confinement;
        confinement.cgroup.is_some()
            || (self.users.get(&confinement.owner())).is_some_and(|user| user.looked)
    }

    /// Its user's kills in this pass, and `marker`'s place among them, where its kill is due in
    /// it.
    fn covering(
        &mut self,
        marker: &str,
        confinement: &Confinement,
    ) -> Option<(&mut UserKills, usize)> {
        if confinement.cgroup.is_some() {
            return None;
        }
        let user = self.users.get_mut(&confinement.owner())?;
        let k = user.markers.iter().position(|m| m == marker)?;
        Some((user, k))
    }

    /// [`kill_attempt`], from its user's one scan in this pass where its kill is due in it.
    pub(super) fn kill(&mut self, marker: &str, confinement: &Confinement) -> Option<bool> {
        let owner = confinement.owner();
        let Some((user, k)) = self.covering(marker, confinement) else {
            return kill_attempt(marker, confinement);
        };
        if !user.scan.made() {
            user.scan = match kill_with_any_env(ATTEMPT_VAR, &user.markers, owner) {
                Some(found) => {
                    let mut any = vec![false; user.markers.len()];
                    found.into_iter().for_each(|k| any[k] = true);
                    UserScan::Found(any)
                }
                None => UserScan::Unanswered,
            };
        }
        match &user.scan {
            UserScan::Found(any) => Some(!any[k]),
            UserScan::NotYet | UserScan::Unanswered => None,
        }
    }

    /// Whether this pass's scan of its user's processes has looked for `marker` already (a kill of
    /// it then costs no scan).
    pub(super) fn scanned_for(&mut self, marker: &str, confinement: &Confinement) -> bool {
        (self.covering(marker, confinement)).is_some_and(|(user, _)| user.scan.made())
    }

    /// The users whose processes this pass scanned.
    pub(super) fn scanned(&self) -> impl Iterator<Item = Owner> + '_ {
        (self.users.iter()).filter_map(|(&owner, user)| user.scan.made().then_some(owner))
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Child, Command};
    use std::time::Duration;

    use super::*;
    use crate::executor::attempt::attempt_processes;

    /// A user's processes are looked at for kills once a tenth of a second at most, counted from
    /// the end of the pass that looked; other users' are not held back by it.
    #[test]
    fn a_users_processes_are_looked_at_once_a_tenth_of_a_second() {
        let (alice, bob) = (Owner::User(65_533), Owner::User(65_534));
        let confinement = |uid| Confinement {
            owner: Some(uid),
            ..Confinement::default()
        };
        let t0 = Instant::now();
        let mut looks = KillLooks::default();
        assert!(looks.due(alice, t0), "never looked at");
        looks.looked([alice].into_iter(), t0);
        let ms = |n| t0 + Duration::from_millis(n);
        assert!(!looks.due(alice, ms(50)));
        assert!(!looks.due(alice, ms(99)));
        assert!(looks.due(alice, ms(100)));
        assert!(
            looks.due(bob, ms(50)),
            "another user's look is not held back"
        );
        // A pass looks at the processes of the users due in it.
        let (a, b) = (confinement(65_533), confinement(65_534));
        let kills = Kills::of([("a", &a), ("b", &b)], |owner| looks.due(owner, ms(50)));
        assert!(!kills.users[&alice].looked && kills.users[&bob].looked);
        // A later pass that scanned only bob's: alice's wait is over and forgotten, bob's begins.
        looks.looked([bob].into_iter(), ms(150));
        assert!(looks.due(alice, ms(150)));
        assert!(!looks.due(bob, ms(200)));
        assert!(looks.due(bob, ms(250)));
        assert_eq!(looks.0.len(), 1, "alice's look forgotten");
    }

    /// One scan of a user's processes kills every attempt of theirs due in a pass, and the others'
    /// kills read what it found (a fresh scan would find none of theirs left).
    #[test]
    fn a_pass_kills_a_users_attempts_by_one_scan() {
        use std::os::unix::process::ExitStatusExt;
        /// Children SIGKILLed and reaped when dropped (a failed assertion leaves none behind).
        struct Reaped(Vec<Child>);
        impl Drop for Reaped {
            fn drop(&mut self) {
                for child in &mut self.0 {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        let confinement = Confinement {
            owner: Some(crate::inherit::this_user()),
            ..Confinement::default()
        };
        let markers = ["first", "second"].map(|m| format!("kills-test-{m}-{}", std::process::id()));
        let mut children = Reaped(
            (markers.iter())
                .map(|marker| {
                    Command::new("sleep")
                        .arg("30")
                        .env(ATTEMPT_VAR, marker)
                        .spawn()
                        .unwrap()
                })
                .collect(),
        );
        // Each carries its marker once its exec is done.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(markers.iter())
            .all(|m| attempt_processes(m, &confinement).is_some_and(|p| p.len() == 1))
        {
            assert!(Instant::now() < deadline, "the children never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut kills = Kills::of(markers.iter().map(|m| (m.as_str(), &confinement)), |_| true);
        assert!(!kills.scanned_for(&markers[1], &confinement));
        // Not asked again on `None`: a scan that outlasts its patience still kills both.
        assert_eq!(
            kills.kill(&markers[0], &confinement),
            Some(false),
            "the first attempt's process was not found (None: the scan outlasted its patience)"
        );
        assert!(kills.scanned_for(&markers[1], &confinement));
        // Both were killed by that one scan: the second, too, before its own kill was asked for.
        for child in &mut children.0 {
            assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        }
        assert_eq!(kills.kill(&markers[1], &confinement), Some(false));
        assert_eq!(kill_attempt(&markers[1], &confinement), Some(true));
    }
}
