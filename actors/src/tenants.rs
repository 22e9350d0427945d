//! Which tenants a user other than the daemon's operator may submit under: the ones the operator
//! gives them (`gangway serve --tenants FILE`), else their account's name.
//!
//! A tenant is a share under a policy that shares by tenant (Gavel's hierarchical max-min fairness
//! gives each tenant an equal part): a user who could name any tenant would draw on a team's share,
//! or invent names for more shares. The daemon's user and root name any tenant.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use gangway_protocol::command::{account_name, tenant_without_account};

use crate::IdMap;

/// The tenants each user other than the operator may submit under.
#[derive(Clone, Debug)]
pub struct Tenants {
    /// By user id, the tenants the operator gave; a user not here submits under their account's
    /// name only.
    given: IdMap<u32, BTreeSet<String>>,
    /// Account names looked up, by user id: once each, as a lookup may go to a directory server
    /// (LDAP) while the API's thread waits (a renamed account is seen after a restart). A user
    /// found without an account is looked up again after [`NO_ACCOUNT_KEPT`].
    names: Arc<Mutex<IdMap<u32, Looked>>>,
    /// How a user's account name is looked up: [`account_name`] (tests stand in for a directory
    /// server that does not answer).
    look_up: fn(u32) -> std::io::Result<Option<String>>,
}

/// How long a user found without an account is taken to have none before they are looked up
/// again: a user of a container without a password entry submits many jobs, each of which would
/// otherwise ask the directory server again; an account made meanwhile names their jobs this much
/// later.
pub const NO_ACCOUNT_KEPT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a user found without an account is taken to have none when they name another tenant
/// than `uid-N` (a new account's name, which the clients send once it exists): a client that keeps
/// naming one it does not have asks the account database at most this often.
pub const NEW_ACCOUNT_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// What a lookup of a user's account found.
#[derive(Clone, Debug)]
enum Looked {
    /// Its name.
    Named(String),
    /// No account, as of this moment.
    NoneAt(std::time::Instant),
}

/// Why a user may not submit under a tenant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TenantRefusal {
    /// It is not one of theirs (a 403); the refusal says which are.
    #[error("{0}")]
    NotTheirs(String),
    /// Their account's name, which theirs are, could not be looked up (a directory server that did
    /// not answer): the same submission may pass later (a 503).
    #[error("{0}")]
    Unanswered(String),
}

impl Default for Tenants {
    fn default() -> Tenants {
        Tenants {
            given: IdMap::default(),
            names: Arc::default(),
            look_up: account_name,
        }
    }
}

impl Tenants {
    /// No tenants given: each user submits under their account's name.
    pub fn own_names() -> Tenants {
        Tenants::default()
    }

    /// `(uid, tenant)` pairs the operator gave: each user may submit under theirs only.
    pub fn given(pairs: impl IntoIterator<Item = (u32, String)>) -> Tenants {
        let mut given: IdMap<u32, BTreeSet<String>> = IdMap::default();
        for (uid, tenant) in pairs {
            given.entry(uid).or_default().insert(tenant);
        }
        Tenants {
            given,
            ..Tenants::default()
        }
    }

    /// The tenant user `uid` submits under when given none
    /// ([`own_tenant`](gangway_protocol::command::own_tenant)): their account's name, looked up
    /// once found, or `uid-N` while they have none (looked up again [`NO_ACCOUNT_KEPT`] later, or
    /// [`NEW_ACCOUNT_RECHECK`] later when they ask for another tenant than `uid-N`: their account
    /// may be new; a lookup that failed, at their next submission).
    fn own_name(&self, uid: u32, asked: Option<&str>) -> Result<String, TenantRefusal> {
        let names = || self.names.lock().unwrap_or_else(|e| e.into_inner());
        let without = tenant_without_account(uid);
        match names().get(&uid) {
            Some(Looked::Named(name)) => return Ok(name.clone()),
            Some(Looked::NoneAt(at)) => {
                let kept = if asked.is_none_or(|t| t == without) {
                    NO_ACCOUNT_KEPT
                } else {
                    NEW_ACCOUNT_RECHECK
                };
                if at.elapsed() < kept {
                    return Ok(without);
                }
            }
            _ => {}
        }
        // Looked up without the lock: another user's first submission need not wait for it.
        let name = (self.look_up)(uid).map_err(|e| {
            TenantRefusal::Unanswered(format!(
                "tenant: the name of uid {uid}'s account, its own tenant, could not be looked up \
                 ({e}); submit it again once the account database answers"
            ))
        })?;
        let Some(name) = name else {
            names().insert(uid, Looked::NoneAt(std::time::Instant::now()));
            return Ok(without);
        };
        names().insert(uid, Looked::Named(name.clone()));
        Ok(name)
    }

    /// The tenant user `uid`'s job goes under when its request names none (the API's `default`):
    /// their account's name, or the one tenant the operator gave them; `None` when given several.
    pub fn default_for(&self, uid: u32) -> Result<Option<String>, TenantRefusal> {
        match self.given.get(&uid) {
            Some(given) if given.len() == 1 => Ok(given.first().cloned()),
            Some(_) => Ok(None),
            None => self.own_name(uid, None).map(Some),
        }
    }

    /// Whether user `uid` may submit under `tenant`; the refusal says what they may.
    pub fn check(&self, uid: u32, tenant: &str) -> Result<(), TenantRefusal> {
        let theirs: Vec<String> = match self.given.get(&uid) {
            Some(given) => given.iter().cloned().collect(),
            None => vec![self.own_name(uid, Some(tenant))?],
        };
        if theirs.iter().any(|t| t == tenant) {
            return Ok(());
        }
        let listed = theirs
            .iter()
            .map(|t| format!("`{}`", crate::request::escape(t)))
            .collect::<Vec<_>>()
            .join(", ");
        let why = if self.given.contains_key(&uid) {
            "the tenants the operator gave it (gangway serve --tenants)"
        } else {
            "its account's name; the operator gives others with gangway serve --tenants"
        };
        Err(TenantRefusal::NotTheirs(format!(
            "tenant: uid {uid} may submit under {listed} only ({why}), not `{}` (elastic-run \
             --daemon --tenant NAME, gangway submit --tenant NAME)",
            crate::request::escape(tenant)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_submits_under_their_accounts_name_unless_given_others() {
        let not_theirs = |refusal: Result<(), TenantRefusal>| match refusal {
            Err(TenantRefusal::NotTheirs(why)) => why,
            other => panic!("{other:?}"),
        };
        let own = Tenants::own_names();
        assert_eq!(own.check(0, "root"), Ok(()));
        let refused = not_theirs(own.check(0, "team-a"));
        assert!(
            refused.contains("uid 0 may submit under `root` only"),
            "{refused}"
        );
        assert!(refused.contains("not `team-a`"), "{refused}");
        // A user id with no account.
        assert_eq!(own.check(4_000_000_000, "uid-4000000000"), Ok(()));

        let given = Tenants::given([(0, "team-a".to_owned()), (0, "team-b".to_owned())]);
        assert_eq!(given.check(0, "team-b"), Ok(()));
        let refused = not_theirs(given.check(0, "root"));
        assert!(
            refused.contains("`team-a`, `team-b` only (the tenants the operator gave it"),
            "{refused}"
        );
        // A request that names no tenant goes under theirs, or the one they were given.
        assert_eq!(own.default_for(0), Ok(Some("root".into())));
        assert_eq!(given.default_for(0), Ok(None), "two given: name one");
        let one = Tenants::given([(0, "team-a".to_owned())]);
        assert_eq!(one.default_for(0), Ok(Some("team-a".into())));
        // Users the file does not name keep their own names.
        assert_eq!(given.check(4_000_000_000, "uid-4000000000"), Ok(()));
    }

    /// While the directory server does not answer, a user's own tenant is not known: their
    /// submission is put off (not put under `uid-N`, another share), and the failure is not kept.
    #[test]
    fn an_account_that_could_not_be_looked_up_is_looked_up_again() {
        static DOWN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
        let tenants = Tenants {
            look_up: |uid| {
                if DOWN.load(std::sync::atomic::Ordering::SeqCst) {
                    Err(std::io::Error::from_raw_os_error(libc::ETIMEDOUT))
                } else if uid == 2000 {
                    Ok(None)
                } else {
                    Ok(Some(format!("user-{uid}")))
                }
            },
            ..Tenants::given([(7, "team-a".to_owned())])
        };
        for refused in [
            tenants.check(1000, "uid-1000").unwrap_err(),
            tenants.default_for(1000).unwrap_err(),
        ] {
            let TenantRefusal::Unanswered(why) = refused else {
                panic!("{refused:?}");
            };
            assert!(why.contains("uid 1000's account"), "{why}");
            assert!(why.contains("timed out"), "{why}");
        }
        // A user the operator gave tenants to is not looked up.
        assert_eq!(tenants.check(7, "team-a"), Ok(()));
        DOWN.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(tenants.default_for(1000), Ok(Some("user-1000".into())));
        assert_eq!(tenants.check(1000, "user-1000"), Ok(()));
        // No account: `uid-N`, kept for a while, then looked up again.
        assert_eq!(tenants.default_for(2000), Ok(Some("uid-2000".into())));
        assert!(tenants.names.lock().unwrap().contains_key(&1000));
    }

    /// A user without an account is looked up once, not at each submission, until
    /// [`NO_ACCOUNT_KEPT`] has passed, or [`NEW_ACCOUNT_RECHECK`] when they ask for another tenant
    /// than `uid-N` (their account may be new: `gangway submit` sends its name).
    #[test]
    fn a_user_without_an_account_is_looked_up_again_only_after_a_while() {
        use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
        static LOOKUPS: AtomicU32 = AtomicU32::new(0);
        static MADE: AtomicBool = AtomicBool::new(false);
        let tenants = Tenants {
            look_up: |uid| {
                LOOKUPS.fetch_add(1, Ordering::SeqCst);
                Ok(MADE.load(Ordering::SeqCst).then(|| format!("user-{uid}")))
            },
            ..Tenants::default()
        };
        let lookups = || LOOKUPS.load(Ordering::SeqCst);
        // The absence as if found `ago` before now (`None` on a clock too young to hold it).
        let found_none = |uid: u32, ago| {
            let at = std::time::Instant::now().checked_sub(ago)?;
            (tenants.names.lock().unwrap()).insert(uid, Looked::NoneAt(at));
            Some(())
        };
        for _ in 0..3 {
            assert_eq!(tenants.check(3000, "uid-3000"), Ok(()));
        }
        assert_eq!(tenants.default_for(3000), Ok(Some("uid-3000".into())));
        assert!(tenants.check(3000, "user-3000").is_err());
        assert_eq!(lookups(), 1, "looked up at each submission");
        // The account is made: asked for by its name, it is found once the absence found is a
        // few seconds old; without it, a minute later.
        MADE.store(true, Ordering::SeqCst);
        if found_none(3000, NEW_ACCOUNT_RECHECK).is_none() {
            return;
        }
        assert_eq!(tenants.default_for(3000), Ok(Some("uid-3000".into())));
        assert_eq!(lookups(), 1);
        assert_eq!(tenants.check(3000, "user-3000"), Ok(()));
        assert_eq!(lookups(), 2);
        assert!(found_none(3001, NO_ACCOUNT_KEPT).is_some());
        assert_eq!(tenants.default_for(3001), Ok(Some("user-3001".into())));
        assert_eq!(lookups(), 3);
    }
}
