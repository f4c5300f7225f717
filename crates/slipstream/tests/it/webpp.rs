//! `slipstream experiment webpp --quick`: the paper-001 harness runs end to end over real
//! loopback sockets and its accounting holds. Response times are not checked here; they are
//! reported in docs/experiments/001-webpp.md.

use std::collections::HashMap;

use serde_json::Value;

use crate::support::bin;

fn n(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("`{key}` is not a count in {v}"))
}

#[test]
fn quick_run_covers_every_policy_and_size_and_its_counts_add_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = bin()
        .args(["experiment", "webpp", "--quick", "--seed", "3", "--out"])
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "webpp --quick failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("results.json")).expect("results.json"),
    )
    .expect("valid JSON");
    let policies: Vec<&str> = json["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .map(|p| p.as_str().expect("a policy name"))
        .collect();
    let sizes: Vec<u64> = json["sizes"]
        .as_array()
        .expect("sizes")
        .iter()
        .map(|s| s.as_u64().expect("a size"))
        .collect();
    assert_eq!(policies.len(), 5, "{policies:?}");
    assert!(policies.contains(&"single") && policies.contains(&"optimal"));
    assert_eq!(sizes.len(), 4, "{sizes:?}");
    assert_eq!(json["single"], "us-east");
    let replicas = json["replicas"].as_array().expect("replicas").len() as u64;
    assert_eq!(replicas, 3);
    let single_at = json["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .position(|r| *r == json["single"])
        .expect("the single server is a replica");
    let day: Vec<&Value> = json["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .filter(|c| c["window"] == "day")
        .collect();
    assert_eq!(day.len(), policies.len() * sizes.len());

    // requests.csv, one row per logical request: its own count of each (policy, size)'s
    // requests and of the exchanges beyond the first (fail-overs and hedges, counted from
    // their own columns; optimal: one per other replica), independent of the summary cells.
    let csv = std::fs::read_to_string(dir.path().join("requests.csv")).expect("requests.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let mut from_csv: HashMap<(String, u64), (u64, u64)> = HashMap::new();
    for row in &rows {
        let count = |name: &str| row[col(name)].parse::<u64>().expect(name);
        let policy = row[col("policy")];
        let beyond_first = if policy == "optimal" {
            replicas - 1
        } else {
            count("failovers") + count("hedges")
        };
        let e = from_csv
            .entry((policy.to_string(), count("size")))
            .or_default();
        e.0 += 1;
        e.1 += beyond_first;
    }

    let mut logical = 0;
    let (mut answered, mut exchanges, mut probes) = (0, 0, 0);
    for &size in &sizes {
        let cell = |policy: &str| {
            *day.iter()
                .find(|c| c["policy"] == policy && c["size"] == size)
                .unwrap_or_else(|| panic!("no cell for {policy} at {size} bytes"))
        };
        // The policies of a slot run side by side: the same number of requests each.
        let requests = n(cell("single"), "requests");
        assert!(requests > 0, "no requests at {size} bytes");
        logical += requests * policies.len() as u64;
        for &policy in &policies {
            let c = cell(policy);
            assert_eq!(n(c, "requests"), requests, "{policy} at {size}");
            let (csv_requests, csv_beyond_first) = from_csv
                .get(&(policy.to_string(), size))
                .copied()
                .unwrap_or_else(|| panic!("no requests.csv rows for {policy} at {size}"));
            assert_eq!(csv_requests, requests, "{policy} at {size}");
            let heads = n(c, "refresh_probes") + n(c, "recover_probes");
            answered += n(c, "answered");
            exchanges += n(c, "exchanges");
            probes += heads;
            let served: u64 = c["served_by"]
                .as_array()
                .expect("served_by")
                .iter()
                .map(|v| v.as_u64().expect("count"))
                .sum();
            assert_eq!(served + n(c, "failed"), requests, "{policy} at {size}");
            assert_eq!(
                n(c, "extra_requests"),
                csv_beyond_first + heads,
                "{policy} at {size}"
            );
        }
        // Optimal sends every request to all three replicas.
        let optimal = cell("optimal");
        assert_eq!(n(optimal, "exchanges"), replicas * requests);
        assert_eq!(n(optimal, "extra_requests"), (replicas - 1) * requests);
        // Single never leaves its designated server, and sends nothing extra.
        let single = cell("single");
        let served = single["served_by"].as_array().expect("served_by");
        assert_eq!(
            served[single_at].as_u64(),
            Some(requests - n(single, "failed"))
        );
        assert_eq!(n(single, "extra_requests"), 0);
        // Refresh refreshes stale entries with HEADs (the quick day is many TTLs long).
        assert!(
            n(cell("refresh"), "refresh_probes") > 0,
            "refresh at {size}"
        );
    }

    // The servers' own counts bound the clients': every answered request was a GET a server
    // received, every GET received was an exchange started, every HEAD received a probe sent
    // (an outage's relay swallows some, and a cancelled exchange may never arrive).
    let served = json["served"].as_array().expect("served");
    let got: u64 = served.iter().map(|s| n(s, "get")).sum();
    let heads: u64 = served.iter().map(|s| n(s, "head")).sum();
    assert!(
        answered <= got && got <= exchanges,
        "{answered} <= {got} <= {exchanges}"
    );
    assert!(heads <= probes, "{heads} HEADs received, {probes} sent");
    assert!(heads > 0, "no HEAD reached a server");

    // Every logical request is a row of requests.csv, and a row's exchanges are its first
    // one plus its fail-overs and hedges (optimal: one per replica).
    assert_eq!(rows.len() as u64, logical);
    for row in &rows {
        let count = |name: &str| row[col(name)].parse::<u64>().expect(name);
        let expected = if row[col("policy")] == "optimal" {
            replicas
        } else {
            1 + count("failovers") + count("hedges")
        };
        assert_eq!(count("exchanges"), expected, "{row:?}");
        if row[col("policy")] == "single" && !row[col("response_ms")].is_empty() {
            assert_eq!(row[col("served_by")], "us-east", "{row:?}");
        }
    }
    for chart in [
        "load.svg",
        "absolute.svg",
        "relative.svg",
        "extra.svg",
        "timeline-500KB.svg",
        "bars-0.5KB.svg",
    ] {
        assert!(dir.path().join(chart).is_file(), "{chart} missing");
    }
}
