//! `flights-head <rows> <dir>`: writes the first `rows` flights of the
//! flights file to `<dir>/flights-<rows>.parquet` (for benchmark runs that
//! must be short, as the tests' `flights_head`).

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, rows, dir] = &args[..] else {
        eprintln!("usage: flights-head <rows> <dir>");
        std::process::exit(2);
    };
    let rows: usize = rows.parse().expect("rows: a count");
    strata_tests::write_flights_head(rows, std::path::Path::new(dir));
}
