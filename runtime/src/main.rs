//! The `strata` binary: see [`strata_runtime::cli`].

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = strata_runtime::cli::Cli::parse();
    match strata_runtime::cli::main(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
