//! The deploy planner: pure, no I/O.

pub mod bound;
pub mod changes;
pub mod compile;
pub mod desired;
pub mod dns;
pub mod ip;
pub mod placement;
pub mod rollout;
