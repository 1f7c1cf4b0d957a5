//! Reading what the verifier measured. The verifier phase itself (containers, modes) runs in
//! `trial/`, through the sandbox; this module owns the rules for turning its files into a
//! reward and a status, the integrity classifier (`integrity`) and the harness toolbox
//! (`toolbox`).

pub mod integrity;
mod reward;
pub mod toolbox;

pub use reward::{Reward, RewardError, parse_reward, primary_value};
