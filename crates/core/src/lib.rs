//! The sans-IO contract (`DESIGN.md` "The sans-IO contract").
//!
//! A protocol core is a deterministic state machine. It never reads a clock, opens a socket,
//! touches a file or spawns a thread: time arrives as an argument, randomness from a seeded
//! [`Prng`], and everything it wants done leaves as [`Effects`] that the caller executes — the
//! tokio runtime in `strata-node`, or the simulator in `strata-sim`. The code that is tested is
//! the code that runs.

mod effects;
mod prng;
mod timeout;

pub use effects::Effects;
pub use prng::Prng;
pub use timeout::{DeadlineQueue, Timeout};

use strata_wire::{Instant, NodeId};

/// Opaque number by which a driver routes replies back to a client connection.
pub type Route = u64;

/// A protocol core. Drivers call one `on_*` input at a time, then drain [`Node::poll_effects`]
/// and re-arm a single timer at [`Node::poll_timeout`].
pub trait Node {
    /// A client request routed to this core (carries whatever the core needs to answer it).
    type Request;
    /// A node-to-node message.
    type Message: Clone;
    /// A reply to a client request, routed back by the driver.
    type Reply;
    /// A record the driver must make durable before `on_persisted` reports it.
    type Persist;
    /// Something observable for tests, metrics or tracing (e.g. a version creation).
    type Event;

    fn id(&self) -> NodeId;

    fn on_client_request(&mut self, now: Instant, req: Self::Request);
    fn on_message(&mut self, now: Instant, from: NodeId, msg: Self::Message);
    /// Called at (or after) the deadline returned by `poll_timeout`, and whenever the driver
    /// likes: a tick with nothing due does nothing.
    fn on_tick(&mut self, now: Instant);
    /// Every persist record with token `<= upto` is durable.
    fn on_persisted(&mut self, now: Instant, upto: u64);

    /// The next instant at which `on_tick` has work to do.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Moves every pending effect into `out` (appending), leaving the core's buffers empty.
    fn poll_effects(
        &mut self,
        out: &mut Effects<Self::Message, Self::Reply, Self::Persist, Self::Event>,
    );

    /// Asserts the core's state invariants. Run after every input in debug and simulation.
    fn check_invariants(&self);
}
