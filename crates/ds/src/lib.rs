//! Lock-free data structures over Strata (issue #3 item 6); see the module docs.
