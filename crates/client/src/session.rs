//! Sessions: ordered streams of requests bound to one node (Kite §2.1, §2.3).
//!
//! A session pipelines: [`Session::submit`] queues a request and returns at once with its
//! [`ReqId`]; completions are consumed in session order, with [`Session::next`] one at a time
//! or with [`Session::wait`], which waits for a request *and every earlier one* — so waiting
//! for the last request of a batch tells that the whole batch is done (Kite §2.3 `poll`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strata_wire::client::{ErrorCode, Request, Response};
use strata_wire::{counter, Carstamp, LeaseInfo, Rifl, SessionId, WINDOW};
use tracing::debug;

use crate::client::{RiflClient, Shared};
use crate::conn::{await_reply, ConnHandle, ReplySlot};
use crate::error::ClientError;
use crate::lease::LeaseKeeper;

/// Number of a request within its session: 1, 2, 3, ... in submission order.
pub type ReqId = u64;

/// An operation a session can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Relaxed read (Kite §5.2): the node's local replica, no coordination.
    Get { key: Bytes },
    /// Relaxed write (Kite §5.3): applied at the node, broadcast, acknowledged at once.
    Put { key: Bytes, value: Bytes },
    /// Relaxed delete: a relaxed write of the absent value.
    Delete { key: Bytes },
    /// Release-write (Kite §5.4): every earlier operation of the session is visible to anyone
    /// whose acquire reads this value. Blocks the session until done.
    Release { key: Bytes, value: Bytes },
    /// Acquire-read (Kite §5.5): linearizable; every later operation of the session sees all
    /// that preceded the release it reads from. Blocks the session until done.
    Acquire { key: Bytes },
    /// Fetch-and-add (Kite §2.2): the counter (decimal text, absent = 0) plus `delta`; see
    /// [`RmwOutcome::faa_old`] for the old value, or why the value was left unchanged.
    Faa { key: Bytes, delta: u64 },
    /// Compare-and-swap: installs `new` iff the value equals `expected` (`None` = absent).
    /// Strong: always decided with a quorum. Weak: may fail at once, like a relaxed read, when
    /// the local replica differs.
    Cas { key: Bytes, expected: Option<Bytes>, new: Bytes, weak: bool },
}

impl Op {
    pub fn get(key: impl Into<Bytes>) -> Op {
        Op::Get { key: key.into() }
    }
    pub fn put(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Op {
        Op::Put { key: key.into(), value: value.into() }
    }
    pub fn delete(key: impl Into<Bytes>) -> Op {
        Op::Delete { key: key.into() }
    }
    pub fn release(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Op {
        Op::Release { key: key.into(), value: value.into() }
    }
    pub fn acquire(key: impl Into<Bytes>) -> Op {
        Op::Acquire { key: key.into() }
    }
    pub fn faa(key: impl Into<Bytes>, delta: u64) -> Op {
        Op::Faa { key: key.into(), delta }
    }
    pub fn cas(
        key: impl Into<Bytes>,
        expected: Option<Bytes>,
        new: impl Into<Bytes>,
        weak: bool,
    ) -> Op {
        Op::Cas { key: key.into(), expected, new: new.into(), weak }
    }
    /// Whether the operation may change the store.
    pub fn is_write(&self) -> bool {
        !matches!(self, Op::Get { .. } | Op::Acquire { .. })
    }
}

/// A value as read, with the version it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned {
    /// `None`: the key was never written, or was deleted.
    pub value: Option<Bytes>,
    pub version: Carstamp,
}

/// The result of one operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A read's value.
    Value(Versioned),
    /// A write's (or delete's, or release's) new version.
    Written(Carstamp),
    /// A fetch-and-add's or compare-and-swap's result.
    Rmw(RmwOutcome),
}

/// What a read-modify-write saw and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RmwOutcome {
    /// The value it read (and its version): for FAA the old counter, for CAS the value compared.
    pub observed: Versioned,
    /// The version it created; `None` for a weak CAS that failed locally.
    pub written: Option<Carstamp>,
    /// CAS: whether it installed the new value.
    pub swapped: bool,
}

impl RmwOutcome {
    /// For a fetch-and-add of `delta`: the counter it read, the value before the addition
    /// (`strata_wire::counter`: decimal text, absent = 0). `InvalidArgument` if the FAA changed
    /// nothing because the value is not a counter or the sum would pass `u64::MAX` — the
    /// replicas decided that from the same value, so the outcome is certain.
    pub fn faa_old(&self, delta: u64) -> Result<u64, ClientError> {
        let value = self.observed.value.as_deref();
        match counter::add(value, delta) {
            Ok(_) => Ok(counter::parse(value).expect("add parsed it")),
            Err(e) => Err(ClientError::InvalidArgument(format!(
                "fetch-and-add of {delta} changed nothing: {e} (the value is {})",
                value.unwrap_or_default().escape_ascii()
            ))),
        }
    }
}

/// A request sent and not yet answered: what is needed to send it again (rifl.md §5.1 C2).
struct InFlight {
    id: ReqId,
    op: Op,
    /// The RIFL sequence number of a mutating request (its envelope is rebuilt on every
    /// re-send, with a fresh `first_incomplete`).
    rifl_seq: Option<u64>,
    /// The lease id `rifl_seq` belongs to (0: not sent yet, no lease then).
    owner: u64,
    /// The envelope last sent: re-sent as it is once the session's lease changed (R-D21).
    last: Option<Rifl>,
    /// An envelope the caller chose ([`Session::submit_as`]), re-sent as it is.
    given: Option<Rifl>,
    slot: ReplySlot,
}

pub struct Session {
    shared: Arc<Shared>,
    /// The session's RIFL identity (one RIFL client per session: see `RiflClient`).
    rifl: RiflClient,
    conn: Arc<ConnHandle>,
    id: SessionId,
    /// The last `ReqId` handed out.
    last_submitted: ReqId,
    /// Submitted, not yet completed, oldest first.
    in_flight: VecDeque<InFlight>,
    /// Completed, not yet consumed, oldest first.
    completed: VecDeque<(ReqId, Result<Outcome, ClientError>)>,
    closed: bool,
}

impl Session {
    pub(crate) fn new(shared: Arc<Shared>, conn: Arc<ConnHandle>, id: SessionId) -> Session {
        let rifl = RiflClient::new(LeaseKeeper::new(shared.endpoints.clone(), shared.opts.clone()));
        Session {
            shared,
            rifl,
            conn,
            id,
            last_submitted: 0,
            in_flight: VecDeque::new(),
            completed: VecDeque::new(),
            closed: false,
        }
    }

    /// The session's RIFL client id — its lease id, which its mutating requests carry
    /// (rifl.md §0); 0 until the first mutating request got a lease.
    pub fn client_id(&self) -> u64 {
        self.rifl.client_id
    }

    /// The session's RIFL lease as its requests carry it (id, expiration and grant time in
    /// cluster time), while one is held outside its danger zone.
    pub fn lease(&self) -> Option<LeaseInfo> {
        self.rifl.keeper.usable()
    }

    /// The session's id at its current node (a new one after a reconnection).
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The address of the node the session is bound to.
    pub fn node_addr(&self) -> std::net::SocketAddr {
        self.conn.addr
    }

    /// Requests submitted whose completion has not been consumed yet.
    pub fn outstanding(&self) -> usize {
        self.in_flight.len() + self.completed.len()
    }

    /// Queues `op` and returns its id at once (never blocks). Fails with
    /// [`ClientError::QueueFull`] when `max_in_flight` requests are outstanding, or when the
    /// client has 512 mutating requests whose completions were not consumed (RIFL's window,
    /// rifl.md §5.2).
    pub fn submit(&mut self, op: Op) -> Result<ReqId, ClientError> {
        let opts = &self.shared.opts;
        if self.outstanding() >= opts.max_in_flight {
            return Err(ClientError::QueueFull(format!(
                "{} requests outstanding on session {} (the limit); consume completions first",
                self.outstanding(),
                self.id
            )));
        }
        let mut req = InFlight {
            id: self.last_submitted + 1,
            op,
            rifl_seq: None,
            owner: 0,
            last: None,
            given: None,
            slot: lost_slot(),
        };
        if opts.exactly_once && req.op.is_write() {
            // rifl.md §5.1 C1: the lease first (a new id restarts the tracker), then the seq.
            let lease = self.rifl.keeper.usable();
            if let Some(l) = &lease {
                self.rifl.adopt(l);
            }
            let seq = self.rifl.tracker.new_sequence_num().map_err(|_| {
                ClientError::QueueFull(format!(
                    "{WINDOW} exactly-once requests of session {} are unanswered or unconsumed (RIFL's window); consume completions first",
                    self.id
                ))
            })?;
            req.rifl_seq = Some(seq);
            req.owner = self.rifl.client_id;
            // Without a usable lease (none yet, or in its danger zone) the request waits in
            // flight with a "lost" slot: `next` takes the recovery path, which gets a lease
            // (blocking, §5.5.1) and sends it.
            req.last = lease.map(|l| self.rifl.envelope(seq, l));
            if req.last.is_none() {
                self.last_submitted += 1;
                self.in_flight.push_back(req);
                return Ok(self.last_submitted);
            }
        }
        req.slot = match self.conn.send_with(req.last, request(self.id, &req.op)) {
            Ok(slot) => slot,
            // The connection broke while the session was idle: `next` reconnects and re-sends.
            Err(ClientError::ConnectionLost { .. }) if opts.exactly_once => lost_slot(),
            Err(e) => {
                if let Some(seq) = req.rifl_seq {
                    self.rifl.tracker.rpc_completed(seq);
                }
                return Err(e);
            }
        };
        self.last_submitted += 1;
        self.in_flight.push_back(req);
        Ok(self.last_submitted)
    }

    /// Queues `op` with an envelope the caller built, bypassing this client's RIFL identity.
    /// For load generators that simulate many clients over one connection (rifl.md §8.3 Q3:
    /// latency and server memory as the number of clients grows); the caller is responsible for
    /// the envelope's ids and `first_incomplete`. Not for applications.
    #[doc(hidden)]
    pub fn submit_as(&mut self, op: Op, rifl: Rifl) -> Result<ReqId, ClientError> {
        let slot = self.conn.send_with(Some(rifl), request(self.id, &op))?;
        self.last_submitted += 1;
        self.in_flight.push_back(InFlight {
            id: self.last_submitted,
            op,
            rifl_seq: None,
            owner: 0,
            last: None,
            given: Some(rifl),
            slot,
        });
        Ok(self.last_submitted)
    }

    /// The oldest completion not consumed yet, in session order; `None` if nothing is
    /// outstanding. Waits (up to the request timeout) for it to arrive. If the connection
    /// broke, an exactly-once session first reconnects and re-sends what was unanswered.
    pub async fn next(&mut self) -> Option<(ReqId, Result<Outcome, ClientError>)> {
        loop {
            if let Some(done) = self.completed.pop_front() {
                return Some(done);
            }
            let front = self.in_flight.front_mut()?;
            let id = front.id;
            let result = match self.shared.opts.request_timeout {
                Some(t) => match tokio::time::timeout(t, &mut front.slot).await {
                    Ok(r) => r.unwrap_or(Err(ClientError::ConnectionLost {
                        node: self.conn.addr,
                        reason: None,
                    })),
                    // Stays in flight: a later call may still see its result.
                    Err(_) => return Some((id, Err(ClientError::TimedOut(t)))),
                },
                None => (&mut front.slot).await.unwrap_or(Err(ClientError::ConnectionLost {
                    node: self.conn.addr,
                    reason: None,
                })),
            };
            if matches!(result, Err(ClientError::ConnectionLost { .. }))
                && self.shared.opts.exactly_once
            {
                self.recover().await;
                continue;
            }
            let done = self.in_flight.pop_front().expect("the front");
            return Some((id, self.finish(&done, result)));
        }
    }

    /// Ends a request: its RIFL id completes (rifl.md §5.1 C2), its reply becomes an outcome.
    fn finish(
        &mut self,
        req: &InFlight,
        result: Result<Response, ClientError>,
    ) -> Result<Outcome, ClientError> {
        // A seq of an older lease belongs to a tracker that is gone (R-D21).
        if let Some(seq) = req.rifl_seq.filter(|_| req.owner == self.rifl.client_id) {
            self.rifl.tracker.rpc_completed(seq);
        }
        result.and_then(outcome)
    }

    /// The envelope to (re-)send `p` with, under the current lease `lease`: a fresh one for a
    /// request of this lease (new `first_incomplete`); the last one sent for a request of an
    /// expired lease (the node answers from its record or `ExpiredLease`, R-D21); a request
    /// never sent under an older lease takes a seq of the current one.
    fn envelope_for(&mut self, p: &mut InFlight, lease: Option<LeaseInfo>) -> Option<Rifl> {
        if p.given.is_some() {
            return p.given;
        }
        let seq = p.rifl_seq?;
        let Some(lease) = lease else { return p.last };
        if p.owner == 0 && self.rifl.client_id == lease.client_id {
            p.owner = lease.client_id; // allocated before the first lease, of this tracker
        }
        let env = if p.owner == lease.client_id {
            self.rifl.envelope(seq, lease)
        } else if let Some(last) = p.last {
            last
        } else {
            let seq = self.rifl.tracker.new_sequence_num().ok()?;
            p.rifl_seq = Some(seq);
            p.owner = lease.client_id;
            self.rifl.envelope(seq, lease)
        };
        p.last = Some(env);
        p.last
    }

    /// rifl.md §5.1 C2 after a broken connection: open a session again — at the same node if
    /// it is up, else at another — and re-send every unanswered request in order, one at a
    /// time (so session order holds across the reconnection), each mutating one with its RPC
    /// id. A retry that finds its first attempt still executing (`InProgress`) waits and
    /// re-sends; one that finds it completed gets its recorded result. Gives up after
    /// `retry_for` with `ConnectionLost` (outcome unknown) for what is left.
    async fn recover(&mut self) {
        let opts = self.shared.opts.clone();
        let mut pending: Vec<InFlight> = self.in_flight.drain(..).collect();
        let mut backoff = Duration::from_millis(5);
        let mut i = 0;
        // §5.5.1: a usable lease before anything is sent (first use, danger zone, expiry).
        let mut lease = None;
        if pending.iter().any(|p| p.rifl_seq.is_some()) {
            match self.rifl.keeper.acquire().await {
                Ok(l) => {
                    self.rifl.adopt(&l);
                    lease = Some(l);
                }
                Err(e) => {
                    let why = format!("no lease could be obtained from the lease service: {e}");
                    for p in pending {
                        // Refused credentials are said as such: nothing was sent.
                        let err =
                            e.denial_copy().unwrap_or_else(|| ClientError::TableUnavailable {
                                table: "__leases".into(),
                                last: why.clone(),
                                waited: opts.retry_for,
                            });
                        let done = self.finish(&p, Err(err));
                        self.completed.push_back((p.id, done));
                    }
                    return;
                }
            }
        }
        // `retry_for` counts from here: getting the lease has its own bound.
        let deadline = tokio::time::Instant::now() + opts.retry_for;
        // A request that waited for a lease on a healthy connection is sent on it.
        let mut reuse = self.conn.is_usable();
        'reconnect: while i < pending.len() {
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            if !std::mem::take(&mut reuse) {
                match self.shared.open_session().await {
                    Ok((conn, id)) => {
                        debug!(node = %conn.addr, session = %id, unanswered = pending.len() - i, "session reconnected; re-sending");
                        self.conn = conn;
                        self.id = id;
                    }
                    Err(_) => {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_millis(500));
                        continue;
                    }
                }
            }
            while i < pending.len() {
                // The latest grant of the same lease (renewed in the background meanwhile).
                let current = lease.map(|l| {
                    self.rifl.keeper.usable().filter(|u| u.client_id == l.client_id).unwrap_or(l)
                });
                let p = &mut pending[i];
                let rifl = self.envelope_for(p, current);
                let p = &pending[i];
                let Ok(slot) = self.conn.send_with(rifl, request(self.id, &p.op)) else {
                    continue 'reconnect;
                };
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                match tokio::time::timeout(left, slot).await {
                    Ok(Ok(Ok(Response::Error { code: ErrorCode::InProgress, .. }))) => {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    Ok(Ok(reply @ Ok(_)))
                    | Ok(Ok(reply @ Err(ClientError::WrongCluster { .. }))) => {
                        let done = self.finish(p, reply);
                        self.completed.push_back((p.id, done));
                        i += 1;
                    }
                    Ok(_) => {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_millis(500));
                        continue 'reconnect;
                    }
                    Err(_) => break 'reconnect,
                }
            }
        }
        for p in &pending[i..] {
            let done = self
                .finish(p, Err(ClientError::ConnectionLost { node: self.conn.addr, reason: None }));
            self.completed.push_back((p.id, done));
        }
    }

    /// Waits until request `req` and every earlier one have completed, consuming their
    /// completions. Returns `req`'s outcome, or the first error among them.
    pub async fn wait(&mut self, req: ReqId) -> Result<Outcome, ClientError> {
        let mut first_err = None;
        loop {
            let front =
                self.completed.front().map(|(id, _)| *id).or(self.in_flight.front().map(|f| f.id));
            match front {
                Some(id) if id <= req => {}
                _ => {
                    return Err(first_err.unwrap_or_else(|| {
                        ClientError::InvalidArgument(format!(
                            "request {req} is not outstanding on session {}",
                            self.id
                        ))
                    }))
                }
            }
            let (id, r) = self.next().await.expect("an outstanding request");
            if matches!(r, Err(ClientError::TimedOut(_))) {
                return r; // still in flight; nothing was consumed
            }
            if id == req {
                return match first_err {
                    Some(e) => Err(e),
                    None => r,
                };
            }
            if let (Err(e), None) = (r, &first_err) {
                first_err = Some(e);
            }
        }
    }

    /// Runs one operation and returns its outcome (submit, then wait).
    pub async fn call(&mut self, op: Op) -> Result<Outcome, ClientError> {
        let id = self.submit(op)?;
        self.wait(id).await
    }

    /// Relaxed read of `key`.
    pub async fn get(&mut self, key: impl Into<Bytes>) -> Result<Versioned, ClientError> {
        value(self.call(Op::get(key)).await?)
    }

    /// Acquire-read of `key` (Kite §5.5).
    pub async fn acquire(&mut self, key: impl Into<Bytes>) -> Result<Versioned, ClientError> {
        value(self.call(Op::acquire(key)).await?)
    }

    /// Release-write (Kite §5.4); returns the version it created.
    pub async fn release(
        &mut self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
    ) -> Result<Carstamp, ClientError> {
        written(self.call(Op::release(key, value)).await?)
    }

    /// Fetch-and-add; returns the value before the addition.
    pub async fn faa(&mut self, key: impl Into<Bytes>, delta: u64) -> Result<u64, ClientError> {
        rmw(self.call(Op::faa(key, delta)).await?)?.faa_old(delta)
    }

    /// Compare-and-swap (strong unless `weak`); see [`Op::Cas`].
    pub async fn cas(
        &mut self,
        key: impl Into<Bytes>,
        expected: Option<Bytes>,
        new: impl Into<Bytes>,
        weak: bool,
    ) -> Result<RmwOutcome, ClientError> {
        rmw(self.call(Op::cas(key, expected, new, weak)).await?)
    }

    /// Relaxed write; returns the version it created.
    pub async fn put(
        &mut self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
    ) -> Result<Carstamp, ClientError> {
        written(self.call(Op::put(key, value)).await?)
    }

    /// Relaxed delete; returns the version (tombstone) it created.
    pub async fn delete(&mut self, key: impl Into<Bytes>) -> Result<Carstamp, ClientError> {
        written(self.call(Op::delete(key)).await?)
    }

    /// Closes the session at the node, after its outstanding requests.
    pub async fn close(mut self) -> Result<(), ClientError> {
        self.closed = true;
        let slot = self.conn.send(Request::CloseSession { session: self.id })?;
        match await_reply(slot, self.shared.opts.request_timeout, self.conn.addr).await? {
            Response::SessionClosed => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.closed && self.conn.is_usable() {
            self.conn.send_and_forget(Request::CloseSession { session: self.id });
        }
    }
}

/// The wire request of `op` in session `session`.
fn request(session: SessionId, op: &Op) -> Request {
    match op.clone() {
        Op::Get { key } => Request::Get { session, key },
        Op::Put { key, value } => Request::Put { session, key, value },
        Op::Delete { key } => Request::Delete { session, key },
        Op::Release { key, value } => Request::Release { session, key, value },
        Op::Acquire { key } => Request::Acquire { session, key },
        Op::Faa { key, delta } => Request::Faa { session, key, delta },
        Op::Cas { key, expected, new, weak } => Request::Cas { session, key, expected, new, weak },
    }
}

/// A reply slot that reports a lost connection (a request that could not be sent).
fn lost_slot() -> ReplySlot {
    let (_, rx) = tokio::sync::oneshot::channel();
    rx
}

fn outcome(resp: Response) -> Result<Outcome, ClientError> {
    match resp {
        Response::Value { value, cs } => Ok(Outcome::Value(Versioned { value, version: cs })),
        Response::Written { cs } => Ok(Outcome::Written(cs)),
        Response::Rmw { observed, observed_cs, written, swapped } => Ok(Outcome::Rmw(RmwOutcome {
            observed: Versioned { value: observed, version: observed_cs },
            written,
            swapped,
        })),
        other => Err(unexpected(other)),
    }
}

fn value(o: Outcome) -> Result<Versioned, ClientError> {
    match o {
        Outcome::Value(v) => Ok(v),
        other => Err(ClientError::UnexpectedReply(format!("{other:?} to a read"))),
    }
}

fn rmw(o: Outcome) -> Result<RmwOutcome, ClientError> {
    match o {
        Outcome::Rmw(r) => Ok(r),
        other => Err(ClientError::UnexpectedReply(format!("{other:?} to a read-modify-write"))),
    }
}

fn written(o: Outcome) -> Result<Carstamp, ClientError> {
    match o {
        Outcome::Written(cs) => Ok(cs),
        other => Err(ClientError::UnexpectedReply(format!("{other:?} to a write"))),
    }
}

/// Turns an error reply into its typed error, anything else into `UnexpectedReply`.
pub(crate) fn unexpected(resp: Response) -> ClientError {
    match resp {
        // The cluster id does not matter here: WrongCluster is caught at the frame level.
        Response::Error { code, message } => {
            ClientError::from_code(code, message, Default::default())
        }
        other => ClientError::UnexpectedReply(format!("{other:?}")),
    }
}
