//! Keys made of several fields never collide: route-history keys a flight
//! by the pair (origin, destination), so the routes ("A-B" → "C") and
//! ("A" → "B-C") keep separate histories, and `strata state get` takes a
//! key as its fields and shows them back.

use strata_tests::*;

fn windows(lines: &[Line], origin: &str, destination: &str) -> Vec<(String, u64, f64)> {
    lines
        .iter()
        .filter(|l| l.origin == origin && l.destination == destination)
        .map(|l| (l.date.clone(), l.flights_60d, f64::from_bits(l.avg_bits)))
        .collect()
}

#[test]
fn routes_whose_joined_codes_coincide_keep_separate_histories() {
    let input = case("route-key-ambiguity.csv");
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let o = strata(&route_history_args(&input, &out, Some(&chk), &[]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = read_output(&out);
    // The specification's windows: each route sees only its own flights.
    assert_eq!(
        windows(&got, "A", "B-C"),
        vec![
            ("2001-01-01T01:00:00".into(), 1, 1000.0),
            ("2001-01-01T06:00:00".into(), 2, 1500.0)
        ]
    );
    assert_eq!(
        windows(&got, "A-B", "C"),
        vec![
            ("2001-01-01T00:00:00".into(), 1, 10.0),
            ("2001-01-01T02:00:00".into(), 2, 15.0)
        ]
    );
    let want = reference_from_flights(&csv_flights(&input));
    assert!(
        first_difference(&got, &want).is_none(),
        "{:?}",
        first_difference(&got, &want)
    );

    // `state get` takes the key's fields and shows them back.
    let chk = chk.to_str().unwrap();
    let state = strata(&["state", "get", chk, "history", "A", "B-C"]);
    assert!(
        state.status.success(),
        "{}",
        String::from_utf8_lossy(&state.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&state.stdout).unwrap();
    assert_eq!(v["key"], serde_json::json!(["A", "B-C"]));
    let delays: Vec<i64> = v["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["delay"].as_i64().unwrap())
        .collect();
    assert_eq!(delays, vec![1000, 2000]);
    let state = strata(&["state", "get", chk, "history", "東京", "大阪"]);
    let v: serde_json::Value = serde_json::from_slice(&state.stdout).unwrap();
    assert_eq!(v["value"].as_array().unwrap().len(), 1);

    let joined = strata(&["state", "get", chk, "history", "A-B-C"]);
    assert_eq!(joined.status.code(), Some(2));
    let err = String::from_utf8_lossy(&joined.stderr);
    assert!(err.contains("two fields, ORIGIN DESTINATION"), "{err}");
}
