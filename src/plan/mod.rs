//! The deploy planner: pure, no I/O.

pub mod rollout;
