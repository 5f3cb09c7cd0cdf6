//! Who may do what: the role each client request needs, and the check against the role the
//! runtime attached to the connection (`docs/design.md`, "Security model").
//!
//! The runtime only learns a connection's role — from the client certificate verified in the
//! TLS handshake, or `Admin` for every connection of a node started with
//! `--insecure-plaintext` — and reports it with [`crate::Host::on_connected`]. The decision is
//! here, in one pure function, so the simulator and the unit tests check the same rule the
//! node runs.

use strata_wire::client::{ErrorCode, Request};
use strata_wire::Role;

/// The least role that may send `req`.
///
/// | role | requests |
/// |---|---|
/// | `read` | sessions, `Get`, `Acquire`, `LogRead`, `LogReadMany`, `ReleaseReservations` (a read for update's), `ListTables`, `LeaseInfo`, `Status`, `Ping` |
/// | `write` | `Put`, `Delete`, `Release`, `Faa`, `Cas`, `LogWrite`, `RenewLease`, `TxnPrepare`, `TxnDecide` (read-only transactions too: they take a lease), `KairosReport` (a transaction client's watermarks: they move `ts_GC`, which can abort others' transactions `TooOld`) |
/// | `admin` | `SetFault`, `CreateTable`, `FreezeShard`, `AdoptShard` (shard moves) |
pub fn required_role(req: &Request) -> Role {
    match req {
        Request::OpenSession
        | Request::CloseSession { .. }
        | Request::Get { .. }
        | Request::Acquire { .. }
        | Request::LogRead { .. }
        | Request::LogReadMany { .. }
        | Request::ReleaseReservations { .. }
        | Request::ListTables
        | Request::LeaseInfo { .. }
        | Request::Status
        // Answered by the runtime's reader as a keep-alive; listed for completeness.
        | Request::Ping => Role::Read,
        Request::Put { .. }
        | Request::Delete { .. }
        | Request::Release { .. }
        | Request::Faa { .. }
        | Request::Cas { .. }
        | Request::LogWrite { .. }
        | Request::TxnPrepare { .. }
        | Request::TxnDecide { .. }
        | Request::KairosReport { .. }
        // A lease is what a writer holds (rifl.md §5.5); creating one changes the lease table.
        | Request::RenewLease { .. } => Role::Write,
        Request::SetFault { .. }
        | Request::CreateTable { .. }
        | Request::FreezeShard { .. }
        | Request::AdoptShard { .. } => Role::Admin,
    }
}

/// Whether a connection with `role` (`None`: no credentials) may send `req`; if not, the
/// error the client gets.
pub fn authorize(role: Option<Role>, req: &Request) -> Result<(), (ErrorCode, String)> {
    let needed = required_role(req);
    match role {
        Some(role) if role >= needed => Ok(()),
        Some(role) => Err((
            ErrorCode::Forbidden,
            format!(
                "forbidden: {} needs the {needed} role; this connection's certificate grants {role}",
                request_name(req)
            ),
        )),
        None => Err((
            ErrorCode::Unauthenticated,
            format!(
                "unauthenticated: this node requires a client certificate (role {needed} or \
                 higher for {}); connect with one issued by the cluster's CA",
                request_name(req)
            ),
        )),
    }
}

fn request_name(req: &Request) -> &'static str {
    match req {
        Request::OpenSession => "opening a session",
        Request::CloseSession { .. } => "closing a session",
        Request::Get { .. } => "get",
        Request::Put { .. } => "put",
        Request::Delete { .. } => "delete",
        Request::Release { .. } => "release",
        Request::Acquire { .. } => "acquire",
        Request::Faa { .. } => "fetch-and-add",
        Request::Cas { .. } => "compare-and-swap",
        Request::Status => "status",
        Request::Ping => "ping",
        Request::SetFault { .. } => "setting a fault",
        Request::LogWrite { .. } => "a log-table write",
        Request::LogRead { .. } => "a log-table read",
        Request::LogReadMany { .. } => "a log-table read of several keys",
        Request::ReleaseReservations { .. } => "releasing reads for update",
        Request::CreateTable { .. } => "creating a table",
        Request::ListTables => "listing tables",
        Request::RenewLease { .. } => "a lease",
        Request::LeaseInfo { .. } => "lease information",
        Request::FreezeShard { .. } => "freezing a shard (shard move)",
        Request::AdoptShard { .. } => "adopting a shard (shard move)",
        Request::TxnPrepare { .. } => "a transaction's prepare",
        Request::TxnDecide { .. } => "a transaction's decision",
        Request::KairosReport { .. } => "a kairos watermark report",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use strata_wire::client::LinkFault;
    use strata_wire::SessionId;

    fn put() -> Request {
        Request::Put { session: SessionId::default(), key: Bytes::from("k"), value: Bytes::new() }
    }

    fn get() -> Request {
        Request::Get { session: SessionId::default(), key: Bytes::from("k") }
    }

    fn fault() -> Request {
        Request::SetFault { peer: None, fault: LinkFault::default() }
    }

    #[test]
    fn each_role_may_do_what_its_level_allows_and_no_more() {
        let freeze = Request::FreezeShard { table: "t".into(), shard: 0, replicas: Vec::new() };
        for (role, allowed) in [
            (Role::Read, [true, false, false, false]),
            (Role::Write, [true, true, false, false]),
            (Role::Admin, [true, true, true, true]),
        ] {
            let got: Vec<bool> = [get(), put(), fault(), freeze.clone()]
                .iter()
                .map(|r| authorize(Some(role), r).is_ok())
                .collect();
            assert_eq!(got, allowed, "role {role}");
        }
    }

    #[test]
    fn no_credentials_may_do_nothing_and_are_told_so() {
        for req in [Request::OpenSession, Request::Status, get(), put(), fault()] {
            let (code, message) = authorize(None, &req).unwrap_err();
            assert_eq!(code, ErrorCode::Unauthenticated);
            assert!(message.contains("client certificate"), "{message}");
        }
        let (code, message) = authorize(Some(Role::Read), &put()).unwrap_err();
        assert_eq!(code, ErrorCode::Forbidden);
        assert!(message.contains("write role") && message.contains("grants read"), "{message}");
    }
}
