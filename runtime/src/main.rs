//! The `strata` binary: see [`strata_runtime::cli`].

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = strata_runtime::cli::Cli::parse();
    match strata_runtime::cli::main(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata: error: {e}");
            // Wrong invocations (a bad configuration value, a missing
            // config file, a directory that cannot be used) exit 2, as
            // clap's own usage errors do; failed jobs exit 1.
            match e {
                strata_runtime::RuntimeError::Config { .. }
                | strata_runtime::RuntimeError::Usage(_) => std::process::ExitCode::from(2),
                _ => std::process::ExitCode::FAILURE,
            }
        }
    }
}
