//! The deploy engine's scenarios on the simulated cloud and agents (`kubosh-sim`), with a
//! paused clock.

mod deploy_sim;
