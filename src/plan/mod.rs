//! The deploy planner: pure, no I/O.

pub mod bound;
pub mod compile;
pub mod rollout;
