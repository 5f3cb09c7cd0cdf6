//! (under construction: the crate arrives with issue #4)
