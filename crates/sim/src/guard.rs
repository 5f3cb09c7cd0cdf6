//! Runs core code so that a panic becomes a recorded violation instead of killing the run.
//!
//! A core asserts its state invariants (`DESIGN.md`: "a broken invariant is an `assert!`") and
//! the simulator calls `check_invariants` after every input, so a planted bug usually surfaces
//! as a panic inside the core. The run must go on to report it (with the seed to reproduce),
//! and the default panic hook must not spray the terminal for a panic that is being recorded:
//! the hook installed here stays quiet while core code runs on this thread, remembers the
//! location, and defers to the previous hook for every other panic.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static IN_CORE: Cell<bool> = const { Cell::new(false) };
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if IN_CORE.with(Cell::get) {
                let at = info.location().map(|l| format!("{}:{}", l.file(), l.line()));
                LOCATION.with(|l| *l.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f`; a panic comes back as its message and location.
pub fn guarded<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    install_hook();
    let was = IN_CORE.with(|c| c.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    IN_CORE.with(|c| c.set(was));
    result.map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".to_string());
        match LOCATION.with(|l| l.borrow_mut().take()) {
            Some(at) => format!("{msg} (at {at})"),
            None => msg,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_messages_and_values_pass_through() {
        assert_eq!(guarded(|| 3), Ok(3));
        let err = guarded(|| -> u32 { panic!("broken {}", 7) }).unwrap_err();
        assert!(err.starts_with("broken 7 (at ") && err.contains("guard.rs"), "{err}");
        assert!(guarded(|| -> u8 { panic!("static message") })
            .unwrap_err()
            .starts_with("static message (at "));
        let out_of_bounds = guarded(|| Vec::<u8>::new()[1]).unwrap_err();
        assert!(out_of_bounds.contains("index out of bounds"), "{out_of_bounds}");
    }
}
