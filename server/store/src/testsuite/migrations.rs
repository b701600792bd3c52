//! The schema: migrating is idempotent.

use super::fixture::Fixture;

pub async fn migrations_re_run_as_a_no_op(f: &dyn Fixture) {
    let s = f.store();
    let first = f.first_migration();
    assert!(!first.is_empty(), "a fresh store applies its migrations");
    let applied = s.applied_migrations().await.unwrap();
    // Every version the first run applied, ascending, each once.
    assert_eq!(applied, first);
    assert!(applied.windows(2).all(|w| w[0] < w[1]), "{applied:?}");
    for _ in 0..2 {
        assert_eq!(s.migrate(f.now_ms()).await.unwrap(), Vec::<i32>::new());
        assert_eq!(s.applied_migrations().await.unwrap(), applied);
    }
    // The data written between runs survives them.
    s.put_day(2026, 20_400).await.unwrap();
    assert_eq!(s.migrate(f.now_ms()).await.unwrap(), Vec::<i32>::new());
    assert_eq!(s.list_days(2026).await.unwrap(), vec![20_400]);
}

/// The shared settings are recorded once: the first value of each name stands, whatever is
/// offered later or at once, and an answer gives the recorded value of each name, in order.
pub async fn shared_settings_are_recorded_once(f: &dyn Fixture) {
    let s = f.store();
    let pairs = |w: &str, l: &str| {
        vec![
            ("window_seconds".to_string(), w.to_string()),
            ("lanes".to_string(), l.to_string()),
        ]
    };
    assert_eq!(
        s.record_settings("n1", &pairs("60", "8")).await.unwrap(),
        ["60", "8"]
    );
    assert_eq!(
        s.record_settings("n2", &pairs("30", "8")).await.unwrap(),
        ["60", "8"]
    );
    // A name not recorded yet is recorded beside the others.
    let more = vec![
        ("slots".to_string(), "64".to_string()),
        ("window_seconds".to_string(), "2".to_string()),
    ];
    assert_eq!(s.record_settings("n2", &more).await.unwrap(), ["64", "60"]);
    // Two at once with different values: both get the one that won.
    let (xa, xb) = (
        [("x".to_string(), "a".to_string())],
        [("x".to_string(), "b".to_string())],
    );
    let (a, b) = futures::join!(s.record_settings("n3", &xa), s.record_settings("n4", &xb));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b);
    assert!(a == ["a"] || a == ["b"], "{a:?}");
}
