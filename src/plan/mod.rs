//! The deploy planner: pure, no I/O.

pub mod changes;
pub mod placement;
pub mod desired;
