//! Which tenants a user other than the daemon's operator may submit under: the ones the operator
//! gives them (`gangway serve --tenants FILE`), else their account's name.
//!
//! A tenant is a share under a policy that shares by tenant (Gavel's hierarchical max-min fairness
//! gives each tenant an equal part): a user who could name any tenant would draw on a team's share,
//! or invent names for more shares. The daemon's user and root name any tenant.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use gangway_protocol::command::own_tenant;

use crate::IdMap;

/// The tenants each user other than the operator may submit under.
#[derive(Clone, Debug, Default)]
pub struct Tenants {
    /// By user id, the tenants the operator gave; a user not here submits under their account's
    /// name only.
    given: IdMap<u32, BTreeSet<String>>,
    /// Account names looked up, by user id: once each, as a lookup may go to a directory server
    /// (LDAP) while the API's thread waits (a renamed account is seen after a restart).
    names: Arc<Mutex<IdMap<u32, String>>>,
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
            names: Arc::default(),
        }
    }

    /// The tenant user `uid` submits under when given none ([`own_tenant`]), looked up once.
    fn own_name(&self, uid: u32) -> String {
        let names = || self.names.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = names().get(&uid) {
            return name.clone();
        }
        // Looked up without the lock: another user's first submission need not wait for it.
        let name = own_tenant(uid);
        names().insert(uid, name.clone());
        name
    }

    /// The tenant user `uid`'s job goes under when its request names none (the API's `default`):
    /// their account's name, or the one tenant the operator gave them; `None` when given several.
    pub fn default_for(&self, uid: u32) -> Option<String> {
        match self.given.get(&uid) {
            Some(given) if given.len() == 1 => given.first().cloned(),
            Some(_) => None,
            None => Some(self.own_name(uid)),
        }
    }

    /// Whether user `uid` may submit under `tenant`; the refusal says what they may.
    pub fn check(&self, uid: u32, tenant: &str) -> Result<(), String> {
        let theirs: Vec<String> = match self.given.get(&uid) {
            Some(given) => given.iter().cloned().collect(),
            None => vec![self.own_name(uid)],
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
        Err(format!(
            "tenant: uid {uid} may submit under {listed} only ({why}), not `{}` (elastic-run \
             --daemon --tenant NAME, gangway submit --tenant NAME)",
            crate::request::escape(tenant)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_submits_under_their_accounts_name_unless_given_others() {
        let own = Tenants::own_names();
        assert_eq!(own.check(0, "root"), Ok(()));
        let refused = own.check(0, "team-a").unwrap_err();
        assert!(
            refused.contains("uid 0 may submit under `root` only"),
            "{refused}"
        );
        assert!(refused.contains("not `team-a`"), "{refused}");
        // A user id with no account.
        assert_eq!(own.check(4_000_000_000, "uid-4000000000"), Ok(()));

        let given = Tenants::given([(0, "team-a".to_owned()), (0, "team-b".to_owned())]);
        assert_eq!(given.check(0, "team-b"), Ok(()));
        let refused = given.check(0, "root").unwrap_err();
        assert!(
            refused.contains("`team-a`, `team-b` only (the tenants the operator gave it"),
            "{refused}"
        );
        // A request that names no tenant goes under theirs, or the one they were given.
        assert_eq!(own.default_for(0).as_deref(), Some("root"));
        assert_eq!(given.default_for(0), None, "two given: name one");
        let one = Tenants::given([(0, "team-a".to_owned())]);
        assert_eq!(one.default_for(0).as_deref(), Some("team-a"));
        // Users the file does not name keep their own names.
        assert_eq!(given.check(4_000_000_000, "uid-4000000000"), Ok(()));
    }
}
