//! spindle: the runtime crate (built in the runtime-core issue).
