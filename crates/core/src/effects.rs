use strata_wire::NodeId;

/// What a core asks its driver to do, drained after every input.
///
/// Ordering against durability lives in the types: a message in `send_after_persist` leaves
/// only once the persist with its token has completed; a `reply` is emitted only when the
/// protocol's rule for that operation is met, so the driver may send it at once.
#[derive(Debug)]
pub struct Effects<M, R, P, E> {
    pub send: Vec<(NodeId, M)>,
    /// `(persist token, destination, message)`.
    pub send_after_persist: Vec<(u64, NodeId, M)>,
    /// `(token, record)`; tokens increase, and `on_persisted(upto)` acknowledges a prefix.
    pub persist: Vec<(u64, P)>,
    pub reply: Vec<R>,
    pub event: Vec<E>,
}

impl<M, R, P, E> Default for Effects<M, R, P, E> {
    fn default() -> Self {
        Effects {
            send: Vec::new(),
            send_after_persist: Vec::new(),
            persist: Vec::new(),
            reply: Vec::new(),
            event: Vec::new(),
        }
    }
}

impl<M, R, P, E> Effects<M, R, P, E> {
    pub fn is_empty(&self) -> bool {
        self.send.is_empty()
            && self.send_after_persist.is_empty()
            && self.persist.is_empty()
            && self.reply.is_empty()
            && self.event.is_empty()
    }

    /// Moves everything into `out`, keeping this buffer's capacity for reuse.
    pub fn move_into(&mut self, out: &mut Effects<M, R, P, E>) {
        out.send.append(&mut self.send);
        out.send_after_persist.append(&mut self.send_after_persist);
        out.persist.append(&mut self.persist);
        out.reply.append(&mut self.reply);
        out.event.append(&mut self.event);
    }

    pub fn clear(&mut self) {
        self.send.clear();
        self.send_after_persist.clear();
        self.persist.clear();
        self.reply.clear();
        self.event.clear();
    }
}
