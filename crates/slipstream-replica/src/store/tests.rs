use super::*;

fn html(bytes: &[u8]) -> Content {
    Content::new("text/html", bytes)
}

#[test]
fn reopen_finds_everything_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replica.redb");
    let exact = Pattern::parse("/a.html").unwrap();
    let wild = Pattern::parse("/img/*").unwrap();
    let gone = Pattern::parse("/gone").unwrap();
    {
        let mut store = Store::open(&path).unwrap();
        store
            .put(&exact, "http://n/a.html", Some(&html(b"<p>a</p>")))
            .unwrap();
        store.put(&wild, "http://n/img/*", None).unwrap();
        store.put_body("/img/x.png", &html(b"png")).unwrap();
        store
            .put(&gone, "http://n/gone", Some(&html(b"bye")))
            .unwrap();
        assert!(store.delete(&gone).unwrap().is_some());
        assert_eq!(store.delete(&gone).unwrap(), None);
    }
    let mut store = Store::open(&path).unwrap();
    let entries: Vec<_> = store
        .own()
        .entries()
        .map(|(p, e)| (p.clone(), e.clone()))
        .collect();
    assert_eq!(
        entries,
        [
            (exact.clone(), Entry::live(1, "http://n/a.html")),
            (gone.clone(), Entry::tombstone(4)),
            (wild.clone(), Entry::live(2, "http://n/img/*")),
        ]
    );
    assert_eq!(store.body("/a.html").unwrap(), Some(html(b"<p>a</p>")));
    assert_eq!(store.body("/img/x.png").unwrap(), Some(html(b"png")));
    assert_eq!(store.body("/gone").unwrap(), None);
    // Versions continue after the restart, above the tombstone's.
    assert_eq!(
        store.put(&gone, "http://n/gone", None).unwrap(),
        Entry::live(5, "http://n/gone")
    );
    // Deleting a wildcard drops the bodies it covers, but not those of live exact entries
    // under it, which stay.
    let logo = Pattern::parse("/img/logo.png").unwrap();
    store
        .put(&logo, "http://n/img/logo.png", Some(&html(b"logo")))
        .unwrap();
    store.delete(&wild).unwrap();
    assert_eq!(store.body("/img/x.png").unwrap(), None);
    assert_eq!(store.body("/img/logo.png").unwrap(), Some(html(b"logo")));
    assert_eq!(store.body("/a.html").unwrap(), Some(html(b"<p>a</p>")));
}

#[test]
fn invalid_input_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("r.redb")).unwrap();
    let wild = Pattern::parse("/img/*").unwrap();
    assert!(matches!(
        store.put(&wild, "http://n/no-star", None),
        Err(Error::Invalid(ParseError::WildcardMismatch))
    ));
    assert_eq!(store.own().entries().count(), 0);
}
