//! The proxy's memory is bounded by its capacity (issue 9): what an entry is charged covers what
//! it holds on the heap. Its own test binary, with one test, because it counts every allocation
//! of the process through the global allocator: another test in the same process (even one
//! finishing, its runtime freeing memory) would change the counts. `memory_bound.rs` checks the
//! whole proxy's bound the same way.

use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use slipstream_http::rfc9111;
use slipstream_proxy::store::{self, Store, Stored};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Net heap growth since `region` began.
fn growth(region: &Region<'_, std::alloc::System>) -> i64 {
    let c = region.change();
    // A reallocation is already counted in the bytes allocated or deallocated.
    c.bytes_allocated as i64 - c.bytes_deallocated as i64
}

/// The fields of a typical cacheable response.
fn response_fields(i: usize) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in [
        ("content-type", "application/octet-stream".to_owned()),
        ("content-length", "1024".to_owned()),
        ("cache-control", "public, max-age=3600".to_owned()),
        ("date", httpdate::fmt_http_date(SystemTime::now())),
        ("last-modified", "Sun, 22 Nov 2026 10:00:00 GMT".to_owned()),
        ("etag", format!("\"{i:016x}-400\"")),
        ("server", "origin/1.0".to_owned()),
        ("accept-ranges", "bytes".to_owned()),
        ("vary", "accept-encoding".to_owned()),
        ("x-request-id", format!("{i:032x}")),
        // Every fourth response carries 64 surrogate keys of 90 bytes (5.8 KB), which the
        // surrogate-key index holds as well: its share is charged to the entry.
        (
            "surrogate-key",
            if i.is_multiple_of(4) {
                (0..64)
                    .map(|j| format!("{i:08}-{j:02}-{}", "k".repeat(78)))
                    .collect::<Vec<_>>()
                    .join(" ")
            } else {
                "front".to_owned()
            },
        ),
    ] {
        h.insert(http::HeaderName::from_static(k), v.parse().expect("value"));
    }
    h
}

fn stored(i: usize) -> Stored {
    let req = Request::get(format!("/object/{i}"))
        .header("accept-encoding", "gzip")
        .body(())
        .expect("request")
        .into_parts()
        .0;
    let mut res = Response::new(());
    *res.headers_mut() = response_fields(i);
    let res = res.into_parts().0;
    let policy = rfc9111::Policy::new(&req, &res, SystemTime::now(), &rfc9111::Options::default())
        .expect("storable");
    Stored {
        status: res.status,
        headers: res.headers,
        body: Bytes::from(vec![b'x'; 1024]),
        total_len: 1024,
        policy,
        vary_key: "gzip".into(),
    }
}

#[test]
fn an_entry_is_charged_at_least_what_it_holds_on_the_heap() {
    let policy = "lru".parse().expect("policy");
    let store = Store::new(store::bounded_config(1 << 30, policy));
    let n = 2_000;
    let region = Region::new(GLOBAL);
    for i in 0..n {
        // Long URIs too, which the index keeps as their hash.
        let uri = if i % 2 == 0 {
            format!("http://example.test/object/{i}")
        } else {
            format!("http://example.test/object/{i}?{}", "q".repeat(400))
        };
        assert!(store.put(&uri, stored(i)));
    }
    let held = growth(&region);
    let (charged, _) = store.usage();
    assert_eq!(
        store.surrogate_index().2,
        n / 4 * 64 + n * 3 / 4,
        "every key indexed"
    );
    let charged = charged as i64;
    assert!(
        held <= charged,
        "{n} entries hold {held} heap bytes but are charged {charged}"
    );
    assert!(
        charged <= 2 * held,
        "{n} entries are charged {charged} bytes for {held} held: the charge is not realistic"
    );
}
