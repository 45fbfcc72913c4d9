//! `route-check <flights.parquet> <topic>`: compares route-history's
//! committed output in Kafka `<topic>` (read read_committed, each record's
//! key checked against its route) with the reference computation of the
//! flights file; prints `exact: N lines` (exit 0) or `WRONG: <first
//! difference>` (exit 1). The broker is `strata_tests::kafka::brokers()`.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, parquet, topic] = &args[..] else {
        eprintln!("usage: route-check <flights.parquet> <topic>");
        std::process::exit(2);
    };
    let got = strata_tests::kafka::read_route_history(topic);
    let want = strata_tests::reference_route_history(std::path::Path::new(parquet));
    match strata_tests::first_difference(&got, &want) {
        None => println!("exact: {} lines", got.len()),
        Some(diff) => {
            println!("WRONG: {diff}");
            std::process::exit(1);
        }
    }
}
