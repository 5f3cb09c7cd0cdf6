//! Who a client is allowed to be: the roles a connection can carry.
//!
//! A role is not sent in any message: the runtime learns it from the connection (the client
//! certificate verified in the TLS handshake, `strata-tls`) and hands it to the host core,
//! which decides what each request needs (`strata_host::auth`). It lives here because the
//! client library, the runtime, the CLI and the host all name it.

use std::fmt;
use std::str::FromStr;

/// What a client may do. Ordered: each role may do everything the ones below it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Sessions, reads of every kind, the table list, status.
    Read,
    /// `Read`, and every write: put, delete, release, FAA, CAS, log-table writes, leases.
    Write,
    /// `Write`, and the administration of the cluster: faults, tables, shard moves.
    Admin,
}

impl Role {
    /// Every role, lowest first.
    pub const ALL: [Role; 3] = [Role::Read, Role::Write, Role::Admin];

    /// The role's name: `read`, `write` or `admin`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| format!("unknown role {s:?}: use read, write or admin"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_and_parse_from_their_names() {
        assert!(Role::Read < Role::Write && Role::Write < Role::Admin);
        for r in Role::ALL {
            assert_eq!(r.name().parse::<Role>(), Ok(r));
        }
        assert!("root".parse::<Role>().is_err());
    }
}
