//! The deploy planner: pure, no I/O.

pub mod changes;
pub mod desired;
pub mod dns;
pub mod ip;
pub mod placement;
