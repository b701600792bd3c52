//! Dead letters: one partition per (service, day), rows by (dead_at, transaction_id).

use std::time::Duration;

use futures::{stream, StreamExt};

use super::fixture::{all, Fixture, SVC};
use crate::{DeadLetter, DeadLetterRow, RetryStore};

const DAY: i32 = 20_400;

fn letter(service: &str, day: i32, dead_at_ms: i64, id: &str) -> DeadLetter {
    DeadLetter {
        service: service.to_string(),
        transaction_id: id.to_string(),
        day,
        dead_at_ms,
        attempt: 5,
        last_error: format!("error of {id}"),
        generation: 11,
    }
}

async fn letters(
    s: &dyn RetryStore,
    service: &str,
    day: i32,
    from: i64,
    to: i64,
) -> Vec<DeadLetterRow> {
    all(s.stream_dead_letters(service, day, from, to).await).await
}

fn plain(ls: &[DeadLetter]) -> Vec<DeadLetterRow> {
    ls.iter()
        .map(|l| DeadLetterRow {
            letter: l.clone(),
            redriven_at_ms: None,
        })
        .collect()
}

pub async fn dead_letters_stream_in_order_within_a_range(f: &dyn Fixture) {
    let s = f.store();
    assert_eq!(letters(&*s, SVC, DAY, 0, i64::MAX).await, vec![]);
    let l = |at, id| letter(SVC, DAY, at, id);
    for d in [
        l(1_000, "b"),
        l(3_000, "c"),
        l(1_000, "a"),
        l(500, "z"),
        l(2_000, "a"),
    ] {
        s.put_dead_letter(&d, 3600).await.unwrap();
    }
    s.put_dead_letter(&letter(SVC, DAY + 1, 1_500, "n"), 3600)
        .await
        .unwrap();
    s.put_dead_letter(&letter("other", DAY, 1_500, "o"), 3600)
        .await
        .unwrap();
    // By time, then transaction id.
    assert_eq!(
        letters(&*s, SVC, DAY, 0, i64::MAX).await,
        plain(&[
            l(500, "z"),
            l(1_000, "a"),
            l(1_000, "b"),
            l(2_000, "a"),
            l(3_000, "c")
        ])
    );
    // `from` included, `to` excluded.
    assert_eq!(
        letters(&*s, SVC, DAY, 1_000, 3_000).await,
        plain(&[l(1_000, "a"), l(1_000, "b"), l(2_000, "a")])
    );
    assert_eq!(letters(&*s, SVC, DAY, 1_001, 2_000).await, vec![]);
    assert_eq!(letters(&*s, SVC, DAY, 1_000, 1_000).await, vec![]);
    assert_eq!(letters(&*s, SVC, DAY, 3_000, 1_000).await, vec![]);

    s.mark_redriven(&l(1_000, "b"), 9_999).await.unwrap();
    let got = letters(&*s, SVC, DAY, 1_000, 1_001).await;
    assert_eq!(
        got,
        vec![
            DeadLetterRow {
                letter: l(1_000, "a"),
                redriven_at_ms: None
            },
            DeadLetterRow {
                letter: l(1_000, "b"),
                redriven_at_ms: Some(9_999)
            },
        ]
    );
    // Writing the letter again replaces its fields.
    let again = DeadLetter {
        attempt: 6,
        last_error: "again".to_string(),
        generation: 12,
        ..l(2_000, "a")
    };
    s.put_dead_letter(&again, 3600).await.unwrap();
    assert_eq!(letters(&*s, SVC, DAY, 2_000, 2_001).await, plain(&[again]));
}

pub async fn dead_letters_stream_to_the_end_over_many_pages(f: &dyn Fixture) {
    let s = f.store();
    let n = f.page_size() + 7;
    let want: Vec<DeadLetter> = (0..n)
        .map(|i| letter(SVC, DAY, 1_000 + (i / 2) as i64, &format!("tx-{i:06}")))
        .collect();
    let results: Vec<_> = stream::iter(want.iter().rev().cloned())
        .map(|d| {
            let s = s.clone();
            async move { s.put_dead_letter(&d, 3600).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(results.iter().all(Result::is_ok));
    let got = letters(&*s, SVC, DAY, 0, i64::MAX).await;
    assert_eq!(got.len(), n);
    assert!(got == plain(&want), "every letter once, in order");
}

pub async fn dead_letter_day_delete_leaves_neighbours_alone(f: &dyn Fixture) {
    let s = f.store();
    let target = [letter(SVC, DAY, 100, "a"), letter(SVC, DAY, 200, "b")];
    let neighbours = [
        letter(SVC, DAY - 1, 100, "a"),
        letter(SVC, DAY + 1, 100, "a"),
        letter("other", DAY, 100, "a"),
    ];
    for d in target.iter().chain(&neighbours) {
        s.put_dead_letter(d, 3600).await.unwrap();
    }
    s.delete_dead_letter_day(SVC, DAY).await.unwrap();
    assert_eq!(letters(&*s, SVC, DAY, 0, i64::MAX).await, vec![]);
    for d in &neighbours {
        assert_eq!(
            letters(&*s, &d.service, d.day, 0, i64::MAX).await,
            plain(std::slice::from_ref(d))
        );
    }
    // The day is written again after its delete.
    s.put_dead_letter(&target[0], 3600).await.unwrap();
    assert_eq!(
        letters(&*s, SVC, DAY, 0, i64::MAX).await,
        plain(&target[..1])
    );
}

pub async fn dead_letter_range_delete_removes_the_range_only(f: &dyn Fixture) {
    let s = f.store();
    let day: Vec<DeadLetter> = (1..=5)
        .map(|i| letter(SVC, DAY, i * 100, &format!("t{i}")))
        .collect();
    for d in &day {
        s.put_dead_letter(d, 3600).await.unwrap();
    }
    let next = letter(SVC, DAY + 1, 300, "t3");
    s.put_dead_letter(&next, 3600).await.unwrap();
    // `from` included, `to` excluded: 200 and 300 go, 400 stays.
    s.delete_dead_letter_range(SVC, DAY, 200, 400)
        .await
        .unwrap();
    assert_eq!(
        letters(&*s, SVC, DAY, 0, i64::MAX).await,
        plain(&[day[0].clone(), day[3].clone(), day[4].clone()])
    );
    assert_eq!(
        letters(&*s, SVC, DAY + 1, 0, i64::MAX).await,
        plain(&[next])
    );
}

pub async fn dead_letters_expire_with_their_ttl(f: &dyn Fixture) {
    let s = f.store();
    let short = letter(SVC, DAY, 100, "short");
    let long = letter(SVC, DAY, 200, "long");
    // 2 s is at least 1 s from now (whole seconds), enough to read it back.
    s.put_dead_letter(&short, 2).await.unwrap();
    s.put_dead_letter(&long, 3600).await.unwrap();
    assert_eq!(
        letters(&*s, SVC, DAY, 0, i64::MAX).await,
        plain(&[short, long.clone()])
    );
    f.advance(Duration::from_secs(3)).await;
    assert_eq!(letters(&*s, SVC, DAY, 0, i64::MAX).await, plain(&[long]));
}

pub async fn a_redrive_mark_expires_with_its_letter_and_makes_no_row_of_its_own(f: &dyn Fixture) {
    let s = f.store();
    let short = letter(SVC, DAY, 100, "short");
    s.put_dead_letter(&short, 2).await.unwrap();
    s.mark_redriven(&short, 5_000).await.unwrap();
    assert_eq!(
        letters(&*s, SVC, DAY, 0, i64::MAX).await,
        vec![DeadLetterRow {
            letter: short.clone(),
            redriven_at_ms: Some(5_000),
        }]
    );
    // A mark on a letter that does not exist writes nothing.
    s.mark_redriven(&letter(SVC, DAY, 300, "never"), 5_000)
        .await
        .unwrap();
    assert_eq!(letters(&*s, SVC, DAY, 300, 301).await, vec![]);
    f.advance(Duration::from_secs(3)).await;
    assert_eq!(letters(&*s, SVC, DAY, 0, i64::MAX).await, vec![]);
}
