//! The schema: migrating is idempotent.

use crate::fixture::Fixture;

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
