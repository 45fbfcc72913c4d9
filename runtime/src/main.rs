//! The `strata` binary: see [`strata_runtime::cli`].

use clap::Parser;

/// jemalloc for Rust and, unprefixed, for RocksDB's C++ too: glibc's malloc
/// ran the read-modify-write benchmark 20-68 % slower (docs/benchmarks.md,
/// "Memory").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    let cli = strata_runtime::cli::Cli::parse();
    strata_runtime::cli::exit_code(strata_runtime::cli::main(cli))
}
