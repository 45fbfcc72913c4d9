//! Jobs built into the `strata` CLI.

pub mod route_history;
pub mod user_history;
