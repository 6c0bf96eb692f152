//! The deploy executor.

pub mod pool;
