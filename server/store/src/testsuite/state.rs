//! The state rows, their TTLs, and the settle cells (`cancelled_generation`,
//! `succeeded_generation`) as reads apply them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::fixture::{state, Fixture, SVC};
use crate::{Status, TxState, WriteTime};

pub async fn state_rows_round_trip(f: &dyn Fixture) {
    let s = f.store();
    assert_eq!(s.get_state(SVC, "t1").await.unwrap(), None);
    let row = state(SVC, "t1", 5);
    s.put_state(&row, None).await.unwrap();
    assert_eq!(s.get_state(SVC, "t1").await.unwrap(), Some(row.clone()));
    // Defaults and empties come back as they went in.
    let bare = TxState {
        payload: Vec::new(),
        attributes: Default::default(),
        policy: Default::default(),
        location: None,
        last_error: String::new(),
        ..state(SVC, "t2", 1)
    };
    s.put_state(&bare, None).await.unwrap();
    assert_eq!(s.get_state(SVC, "t2").await.unwrap(), Some(bare));
    // The whole row is replaced.
    let next = TxState {
        status: Status::Dead,
        generation: 6,
        base_generation: 5,
        attempt: 4,
        payload: b"other".to_vec(),
        attributes: [("only".to_string(), "one".to_string())].into(),
        location: None,
        last_error: "gave up".to_string(),
        ..row.clone()
    };
    s.put_state(&next, Some(3600)).await.unwrap();
    assert_eq!(s.get_state(SVC, "t1").await.unwrap(), Some(next));
    // A transaction id is per service.
    assert_eq!(s.get_state("other", "t1").await.unwrap(), None);
}

pub async fn a_succeeded_write_sets_the_success_cell(f: &dyn Fixture) {
    let s = f.store();
    let done = TxState {
        status: Status::Succeeded,
        ..state(SVC, "t", 3)
    };
    s.put_state(&done, Some(3600)).await.unwrap();
    // Read back with the success cell at its generation.
    assert_eq!(
        s.get_state(SVC, "t").await.unwrap(),
        Some(TxState {
            succeeded_generation: Some(3),
            ..done.clone()
        })
    );
    // A schedule derived from the succeeded generation (a writer on another node that read
    // generation 3 before the ack) reads as SUCCEEDED: the cell is applied on read.
    let late = TxState {
        base_generation: 3,
        ..state(SVC, "t", 4)
    };
    s.put_state(&late, None).await.unwrap();
    assert_eq!(
        s.get_state(SVC, "t").await.unwrap(),
        Some(TxState {
            status: Status::Succeeded,
            succeeded_generation: Some(3),
            ..late.clone()
        })
    );
    // One derived from a later generation is SCHEDULED; the cell stays, since only a
    // SUCCEEDED write sets it.
    let fresh = TxState {
        base_generation: 4,
        ..state(SVC, "t", 5)
    };
    s.put_state(&fresh, None).await.unwrap();
    let read = s.get_state(SVC, "t").await.unwrap().unwrap();
    assert_eq!(
        read,
        TxState {
            succeeded_generation: Some(3),
            ..fresh
        }
    );
    assert_eq!(read.generation_floor(), 5);
}

pub async fn cancel_state_writes_the_row_and_the_cancel_cell(f: &dyn Fixture) {
    let s = f.store();
    let live = state(SVC, "t", 2);
    s.put_state(&live, None).await.unwrap();
    let cancelled = TxState {
        status: Status::Cancelled,
        ..live.clone()
    };
    s.cancel_state(&cancelled, 3600, 7200).await.unwrap();
    assert_eq!(
        s.get_state(SVC, "t").await.unwrap(),
        Some(TxState {
            cancelled_generation: Some(2),
            ..cancelled.clone()
        })
    );
    // A writer that read generation 2 before the cancel and writes generation 3 over it:
    // the row reads as CANCELLED anyway.
    let racing = TxState {
        base_generation: 2,
        ..state(SVC, "t", 3)
    };
    s.put_state(&racing, None).await.unwrap();
    let read = s.get_state(SVC, "t").await.unwrap().unwrap();
    assert_eq!(
        read,
        TxState {
            status: Status::Cancelled,
            cancelled_generation: Some(2),
            ..racing
        }
    );
    assert!(!read.is_live(3));
    // A new enqueue above the cancel is SCHEDULED; the cancel cell stays.
    let again = TxState {
        base_generation: 4,
        ..state(SVC, "t", 4)
    };
    s.put_state(&again, None).await.unwrap();
    assert_eq!(
        s.get_state(SVC, "t").await.unwrap(),
        Some(TxState {
            cancelled_generation: Some(2),
            ..again
        })
    );
    // A SUCCEEDED row keeps the cancel cell beside its own.
    let done = TxState {
        status: Status::Succeeded,
        ..state(SVC, "t", 5)
    };
    s.put_state(&done, Some(3600)).await.unwrap();
    let read = s.get_state(SVC, "t").await.unwrap().unwrap();
    assert_eq!(
        (
            read.status,
            read.cancelled_generation,
            read.succeeded_generation
        ),
        (Status::Succeeded, Some(2), Some(5))
    );
    // A cancel wins over a success when both cover a schedule's base.
    let stale = TxState {
        base_generation: 2,
        ..state(SVC, "t", 6)
    };
    s.put_state(&stale, None).await.unwrap();
    let read = s.get_state(SVC, "t").await.unwrap().unwrap();
    assert_eq!((read.status, read.generation), (Status::Cancelled, 6));
    assert_eq!(read.generation_floor(), 6);
}

/// A SUCCEEDED ack, or a dead letter, written on another node over a generation that was
/// cancelled (the ack read the row before the cancel landed, wrote after it) reads as
/// CANCELLED: the cancel answered `cancelled = true` and is never undone.
pub async fn a_cancel_wins_over_an_ack_that_raced_it(f: &dyn Fixture) {
    let s = f.store();
    for (id, status) in [("ok", Status::Succeeded), ("dead", Status::Dead)] {
        let live = TxState {
            base_generation: 3,
            ..state(SVC, id, 4)
        };
        s.put_state(&live, None).await.unwrap();
        s.cancel_state(
            &TxState {
                status: Status::Cancelled,
                ..live.clone()
            },
            3600,
            7200,
        )
        .await
        .unwrap();
        // The ack's write lands after the cancel's, from the row it read before.
        s.put_state(
            &TxState {
                status,
                ..live.clone()
            },
            Some(3600),
        )
        .await
        .unwrap();
        let read = s.get_state(SVC, id).await.unwrap().unwrap();
        assert_eq!(
            (read.status, read.cancelled_generation),
            (Status::Cancelled, Some(4)),
            "{id}: an ack undid a cancel"
        );
        // A new enqueue above the cancel starts afresh, and can succeed for real.
        let again = TxState {
            status: Status::Succeeded,
            base_generation: 9,
            ..state(SVC, id, 9)
        };
        s.put_state(&again, Some(3600)).await.unwrap();
        let read = s.get_state(SVC, id).await.unwrap().unwrap();
        assert_eq!(read.status, Status::Succeeded, "{id}: a fresh start");
    }
}

pub async fn terminal_state_rows_expire_with_their_ttl(f: &dyn Fixture) {
    let s = f.store();
    let dead = TxState {
        status: Status::Dead,
        ..state(SVC, "short", 1)
    };
    let kept = TxState {
        status: Status::Succeeded,
        ..state(SVC, "long", 1)
    };
    let live = state(SVC, "live", 1);
    // TTLs are whole seconds: 2 s is at least 1 s from now, enough to read it back.
    s.put_state(&dead, Some(2)).await.unwrap();
    s.put_state(&kept, Some(3600)).await.unwrap();
    s.put_state(&live, None).await.unwrap();
    assert_eq!(s.get_state(SVC, "short").await.unwrap(), Some(dead));
    f.advance(Duration::from_secs(3)).await;
    // Expired: no row at all, not an empty one.
    assert_eq!(s.get_state(SVC, "short").await.unwrap(), None);
    let ids = ["short", "long", "live"].map(String::from);
    let read = s.get_states(SVC, &ids).await.unwrap();
    assert_eq!(read[0], None);
    assert_eq!(read[1].as_ref().map(|r| r.status), Some(Status::Succeeded));
    assert_eq!(read[2], Some(live));
}

pub async fn a_row_rewritten_without_ttl_lives_on_and_its_cells_expire(f: &dyn Fixture) {
    let s = f.store();
    // A retry that succeeded (terminal, with a TTL) and is enqueued again under its id.
    let done = TxState {
        status: Status::Succeeded,
        ..state(SVC, "s", 1)
    };
    s.put_state(&done, Some(1)).await.unwrap();
    let again = TxState {
        base_generation: 2,
        ..state(SVC, "s", 2)
    };
    s.put_state(&again, None).await.unwrap();
    // A retry cancelled (row 1 s, cancel cell 2 s) and enqueued again above the cancel.
    let cancelled = TxState {
        status: Status::Cancelled,
        ..state(SVC, "c", 1)
    };
    s.cancel_state(&cancelled, 1, 2).await.unwrap();
    let renewed = TxState {
        base_generation: 2,
        ..state(SVC, "c", 2)
    };
    s.put_state(&renewed, None).await.unwrap();
    f.advance(Duration::from_secs(3)).await;
    // The rows live on without a TTL; each settle cell expired with its own TTL (the success
    // cell with the SUCCEEDED write's, the cancel cell with `cancel_ttl_seconds`).
    assert_eq!(s.get_state(SVC, "s").await.unwrap(), Some(again));
    assert_eq!(s.get_state(SVC, "c").await.unwrap(), Some(renewed));
}

pub async fn a_cancel_cell_outlives_its_row_as_a_ghost(f: &dyn Fixture) {
    let s = f.store();
    let cancelled = TxState {
        status: Status::Cancelled,
        ..state(SVC, "t", 7)
    };
    // The row lives 1 s, the cancel cell 4 s.
    s.cancel_state(&cancelled, 1, 4).await.unwrap();
    f.advance(Duration::from_secs(2)).await;
    // Only the cell is left: the retry reads as cancelled at its generation, nothing else.
    let ghost = TxState::cancelled_ghost(SVC, "t", 7);
    assert_eq!(s.get_state(SVC, "t").await.unwrap(), Some(ghost.clone()));
    assert_eq!(
        s.get_states(SVC, &["t".to_string()]).await.unwrap(),
        vec![Some(ghost.clone())]
    );
    assert_eq!(ghost.generation_floor(), 7);
    f.advance(Duration::from_secs(3)).await;
    assert_eq!(s.get_state(SVC, "t").await.unwrap(), None);
}

pub async fn get_states_answers_in_order_with_none_for_missing(f: &dyn Fixture) {
    let s = f.store();
    for id in ["a", "b", "c"] {
        s.put_state(&state(SVC, id, 1), None).await.unwrap();
        s.put_state(&state("other", id, 2), None).await.unwrap();
    }
    assert_eq!(s.get_states(SVC, &[]).await.unwrap(), vec![]);
    let ask = ["c", "x", "a", "b", "a"].map(String::from);
    // One answer per id, in order; an id asked twice is answered twice.
    assert_eq!(
        s.get_states(SVC, &ask).await.unwrap(),
        vec![
            Some(state(SVC, "c", 1)),
            None,
            Some(state(SVC, "a", 1)),
            Some(state(SVC, "b", 1)),
            Some(state(SVC, "a", 1)),
        ]
    );
    // Many ids (more than one read's worth), every third one missing.
    let rows: Vec<(TxState, Option<u32>)> = (0..150)
        .filter(|i| i % 3 != 0)
        .map(|i| (state(SVC, &format!("m{i:03}"), i), None))
        .collect();
    assert!(s.put_states(rows).await.iter().all(Result::is_ok));
    let ask: Vec<String> = (0..150).rev().map(|i| format!("m{i:03}")).collect();
    let got = s.get_states(SVC, &ask).await.unwrap();
    assert_eq!(got.len(), 150);
    for (id, row) in ask.iter().zip(&got) {
        let i: i64 = id[1..].parse().unwrap();
        if i % 3 == 0 {
            assert_eq!(row, &None, "{id}");
        } else {
            assert_eq!(row, &Some(state(SVC, id, i)), "{id}");
        }
    }
}

pub async fn put_states_gives_one_result_per_row(f: &dyn Fixture) {
    let s = f.store();
    assert!(s.put_states(Vec::new()).await.is_empty());
    let rows: Vec<(TxState, Option<u32>)> = (0..25)
        .map(|i| {
            let mut row = state(SVC, &format!("p{i}"), i + 1);
            row.payload = vec![i as u8; 10 * i as usize];
            let ttl = if i % 5 == 0 {
                row.status = Status::Dead;
                Some(3600)
            } else {
                None
            };
            (row, ttl)
        })
        .collect();
    let results = s.put_states(rows.clone()).await;
    assert_eq!(results.len(), 25);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let ids: Vec<String> = rows.iter().map(|(r, _)| r.transaction_id.clone()).collect();
    let got = s.get_states(SVC, &ids).await.unwrap();
    let want: Vec<Option<TxState>> = rows.into_iter().map(|(r, _)| Some(r)).collect();
    assert_eq!(got, want);
}

/// `settle_states`: one result per row, in order. Each row read before lands as its
/// `settle_state` would; one whose write time is unknown fails alone and changes nothing;
/// one cancelled after its read stays cancelled.
pub async fn settle_states_gives_one_result_per_row(f: &dyn Fixture) {
    let s = f.store();
    assert!(s.settle_states(Vec::new()).await.is_empty());
    let ids: Vec<String> = (0..14).map(|i| format!("q{i:02}")).collect();
    let rows: Vec<(TxState, Option<u32>)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let mut row = state(SVC, id, i as i64 + 1);
            row.payload = vec![i as u8; 40 * i];
            (row, None)
        })
        .collect();
    assert!(s.put_states(rows.clone()).await.iter().all(Result::is_ok));
    let read: Vec<TxState> = s
        .get_states(SVC, &ids)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.expect("written above"))
        .collect();
    // q03 is cancelled after its read: its settle loses.
    let cancelled = TxState {
        status: Status::Cancelled,
        ..read[3].clone()
    };
    s.cancel_state(&cancelled, 3600, 7200).await.unwrap();
    let settles: Vec<(TxState, u32)> = read
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut done = TxState {
                status: Status::Succeeded,
                ..r.clone()
            };
            if i == 5 {
                // No known write time: refused.
                done.written = Default::default();
            }
            (done, 3600)
        })
        .collect();
    let results = s.settle_states(settles.clone()).await;
    assert_eq!(results.len(), 14);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.is_err(), i == 5, "row {i}: {r:?}");
    }
    let after = s.get_states(SVC, &ids).await.unwrap();
    for (i, row) in after.into_iter().enumerate() {
        let row = row.expect("every row is there");
        match i {
            3 => assert_eq!(
                (row.status, row.generation),
                (Status::Cancelled, read[3].generation)
            ),
            5 => assert_eq!(row, read[5]),
            _ => assert_eq!(
                row,
                TxState {
                    succeeded_generation: Some(read[i].generation),
                    ..settles[i].0.clone()
                },
                "row {i}"
            ),
        }
    }
}

/// Many single reads and writes at once (as a coalescing layer sees them): each call is
/// answered about its own row, and each write lands.
pub async fn concurrent_single_state_calls_each_get_their_own_row(f: &dyn Fixture) {
    let s = f.store();
    let rows: Vec<TxState> = (0..80)
        .map(|i| state(SVC, &format!("c{i:02}"), i + 1))
        .collect();
    let written = futures::future::join_all(rows.iter().map(|r| s.put_state(r, None))).await;
    assert!(written.iter().all(Result::is_ok), "{written:?}");
    let read =
        futures::future::join_all(rows.iter().map(|r| s.get_state(SVC, &r.transaction_id))).await;
    for (want, got) in rows.iter().zip(read) {
        assert_eq!(got.unwrap().as_ref(), Some(want));
    }
}

/// A settle (`settle_state`, a SUCCEEDED ack that does not read the row again) of a row that
/// nothing changed since it was read lands: SUCCEEDED, the success cell, the TTL. A row with
/// no known write time cannot be settled, and that write changes nothing.
pub async fn a_settle_lands_on_the_row_it_read(f: &dyn Fixture) {
    let s = f.store();
    let live = state(SVC, "t", 5);
    s.put_state(&live, None).await.unwrap();
    let read = s.get_state(SVC, "t").await.unwrap().unwrap();
    assert!(
        read.written.0.is_some(),
        "a read row carries its write time"
    );
    let done = TxState {
        status: Status::Succeeded,
        delivery_count: 9,
        ..read.clone()
    };
    // Whole seconds: 2 s is at least 1 s from now, enough to read it back.
    s.settle_state(&done, 2).await.unwrap();
    let after = s.get_state(SVC, "t").await.unwrap().unwrap();
    assert_eq!(
        after,
        TxState {
            succeeded_generation: Some(5),
            ..done.clone()
        }
    );
    // Without a known write time: refused, nothing written.
    let other = state(SVC, "u", 5);
    s.put_state(&other, None).await.unwrap();
    let unknown = TxState {
        status: Status::Succeeded,
        ..other.clone()
    };
    assert!(s.settle_state(&unknown, 3600).await.is_err());
    assert_eq!(s.get_state(SVC, "u").await.unwrap(), Some(other));
    // The settle's TTL is the row's: it expires, so no state row outlives its retry.
    f.advance(Duration::from_secs(3)).await;
    assert_eq!(s.get_state(SVC, "t").await.unwrap(), None);
}

/// Lets the store's clock reach the next millisecond, so that these tests pin down the order
/// of writes across milliseconds; a write in the same millisecond as the read cannot tie with
/// the settle either, since the store numbers its writes itself
/// (`a_settle_never_ties_with_a_write_in_the_same_millisecond`, and docs/architecture.md,
/// "A SUCCEEDED ack is one write").
async fn later_millisecond() {
    tokio::time::sleep(Duration::from_millis(2)).await;
}

/// A settle loses to every write made after the read it settles, wherever it lands: a cancel
/// stays CANCELLED, a fresh start after a cancel stays SCHEDULED (the settle must not write
/// the old generation back over it), and a schedule or a dead letter derived from the settled
/// generation reads as SUCCEEDED through the success cell the settle still sets.
pub async fn a_settle_loses_to_every_write_after_its_read(f: &dyn Fixture) {
    let s = f.store();
    let settle = |read: &TxState| TxState {
        status: Status::Succeeded,
        ..read.clone()
    };
    let cancelled = |live: &TxState| TxState {
        status: Status::Cancelled,
        ..live.clone()
    };
    // A cancel after the read.
    let live = state(SVC, "cancel", 5);
    s.put_state(&live, None).await.unwrap();
    let read = s.get_state(SVC, "cancel").await.unwrap().unwrap();
    later_millisecond().await;
    s.cancel_state(&cancelled(&live), 3600, 7200).await.unwrap();
    s.settle_state(&settle(&read), 3600).await.unwrap();
    let after = s.get_state(SVC, "cancel").await.unwrap().unwrap();
    assert_eq!((after.status, after.generation), (Status::Cancelled, 5));

    // A cancel, then a fresh start above it, both after the read.
    let live = state(SVC, "fresh", 5);
    s.put_state(&live, None).await.unwrap();
    let read = s.get_state(SVC, "fresh").await.unwrap().unwrap();
    later_millisecond().await;
    s.cancel_state(&cancelled(&live), 3600, 7200).await.unwrap();
    let fresh = state(SVC, "fresh", 9);
    s.put_state(&fresh, None).await.unwrap();
    s.settle_state(&settle(&read), 3600).await.unwrap();
    let after = s.get_state(SVC, "fresh").await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.generation, after.payload.clone()),
        (Status::Scheduled, 9, fresh.payload.clone()),
        "a settle of the cancelled generation undid a fresh start"
    );

    // A new schedule derived from the read generation (an enqueue on another node).
    let live = state(SVC, "derived", 5);
    s.put_state(&live, None).await.unwrap();
    let read = s.get_state(SVC, "derived").await.unwrap().unwrap();
    later_millisecond().await;
    let derived = TxState {
        base_generation: 5,
        ..state(SVC, "derived", 7)
    };
    s.put_state(&derived, None).await.unwrap();
    s.settle_state(&settle(&read), 3600).await.unwrap();
    let after = s.get_state(SVC, "derived").await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.generation, after.succeeded_generation),
        (Status::Succeeded, 7, Some(5))
    );

    // A dead letter of the same attempt after the read (a second delivery of it, on another
    // node, acked FAILED): the SUCCEEDED ack's row loses, its success cell does not, and
    // the step that did succeed reads SUCCEEDED. A dead letter of a later, fresh start is not
    // covered.
    let live = TxState {
        base_generation: 4,
        ..state(SVC, "dead", 5)
    };
    s.put_state(&live, None).await.unwrap();
    let read = s.get_state(SVC, "dead").await.unwrap().unwrap();
    later_millisecond().await;
    let dead = TxState {
        status: Status::Dead,
        ..live.clone()
    };
    s.put_state(&dead, Some(3600)).await.unwrap();
    s.settle_state(&settle(&read), 3600).await.unwrap();
    let after = s.get_state(SVC, "dead").await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.generation, after.succeeded_generation),
        (Status::Succeeded, 5, Some(5))
    );
    let fresh_dead = TxState {
        status: Status::Dead,
        base_generation: 9,
        ..state(SVC, "dead", 9)
    };
    s.put_state(&fresh_dead, Some(3600)).await.unwrap();
    let after = s.get_state(SVC, "dead").await.unwrap().unwrap();
    assert_eq!((after.status, after.generation), (Status::Dead, 9));
}

/// A settle ties with no write made after its read, even one in the same millisecond as the
/// write it read (docs/architecture.md, "A SUCCEEDED ack is one write"): the store numbers
/// every plain write itself, two apart and even, so a settle's timestamp (read + 1) is odd and
/// no other write can take it. Many rows written at once (so that many writes share a
/// millisecond) each read back with an even write time, their settles with an odd one, and a
/// write made right after the read and sent after the settle wins over it, with no pause.
pub async fn a_settle_never_ties_with_a_write_in_the_same_millisecond(f: &dyn Fixture) {
    let s = f.store();
    let ids: Vec<String> = (0..120).map(|i| format!("tie-{i}")).collect();
    let rows: Vec<(TxState, Option<u32>)> =
        ids.iter().map(|id| (state(SVC, id, 5), None)).collect();
    let singles =
        futures::future::join_all(rows.iter().take(60).map(|(row, _)| s.put_state(row, None)))
            .await;
    for r in singles {
        r.unwrap();
    }
    for r in s.put_states(rows[60..].to_vec()).await {
        r.unwrap();
    }
    let read: Vec<TxState> = s
        .get_states(SVC, &ids)
        .await
        .unwrap()
        .into_iter()
        .map(Option::unwrap)
        .collect();
    for r in &read {
        let w = r.written.0.expect("a row read has its write time");
        assert_eq!(
            w % 2,
            0,
            "{}: a plain write at an odd time ({w})",
            r.transaction_id
        );
    }
    // A write after each read (a fresh start), sent after the settle of that read: the write
    // wins, though it may share the read write's millisecond.
    let settles: Vec<(TxState, u32)> = read
        .iter()
        .map(|r| {
            (
                TxState {
                    status: Status::Succeeded,
                    ..r.clone()
                },
                3600,
            )
        })
        .collect();
    for r in s.settle_states(settles[..60].to_vec()).await {
        r.unwrap();
    }
    let settled = s.get_states(SVC, &ids[..60]).await.unwrap();
    for (r, before) in settled.iter().zip(&read) {
        let r = r.as_ref().unwrap();
        assert_eq!(r.status, Status::Succeeded);
        assert_eq!(
            r.written.0,
            before.written.0.map(|w| w + 1),
            "{}: a settle goes at the read write time plus one",
            r.transaction_id
        );
    }
    let next: Vec<(TxState, Option<u32>)> = ids
        .iter()
        .map(|id| {
            // A fresh start (its own base), which the succeeded cell does not cover.
            (state(SVC, id, 9), None)
        })
        .collect();
    for r in s.put_states(next.clone()).await {
        r.unwrap();
    }
    for r in s.settle_states(settles[60..].to_vec()).await {
        r.unwrap();
    }
    for (r, id) in s.get_states(SVC, &ids).await.unwrap().into_iter().zip(&ids) {
        let r = r.unwrap();
        assert_eq!(
            (r.status, r.generation),
            (Status::Scheduled, 9),
            "{id}: a settle of the read undid a write made after it"
        );
        assert_eq!(r.written.0.unwrap() % 2, 0, "{id}");
    }
}

/// A conditional write made right after a plain write of its row lands above it, though
/// Cassandra numbers a lightweight transaction itself, from the coordinator's clock in whole
/// milliseconds: a plain write the store numbered later in that millisecond, or above a write
/// time it read from a clock ahead, would otherwise stand over a conditional write that was
/// "applied" (docs/architecture.md, "A SUCCEEDED ack is one write"). Rows are written, read
/// and conditionally moved to a next generation at once, first with the store's clock raised
/// 300 ms ahead by a read (as a row written by a node whose clock runs that far ahead
/// raises it); the conditional write must stand above the plain one, and an end of the old
/// generation must then not land.
pub async fn a_conditional_write_lands_above_the_plain_write_it_follows(f: &dyn Fixture) {
    let s = f.store();
    let ahead = state(SVC, "ahead", 5);
    s.put_state(&ahead, None).await.unwrap();
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    let from_ahead = TxState {
        status: Status::Succeeded,
        written: WriteTime(Some(now_us + 300_000)),
        ..ahead
    };
    s.settle_state(&from_ahead, 3600).await.unwrap();
    s.get_state(SVC, "ahead").await.unwrap().unwrap();
    for i in 0..20 {
        let id = format!("follow-{i}");
        let live = state(SVC, &id, 5);
        s.put_state(&live, None).await.unwrap();
        let plain = s
            .get_state(SVC, &id)
            .await
            .unwrap()
            .unwrap()
            .written
            .0
            .unwrap();
        assert!(
            s.put_state_if(&state(SVC, &id, 7), None, 5).await.unwrap(),
            "{id}: the next schedule found its generation"
        );
        let row = s.get_state(SVC, &id).await.unwrap().unwrap();
        assert_eq!(
            (row.status, row.generation),
            (Status::Scheduled, 7),
            "{id}: the conditional write was applied under the plain write before it"
        );
        assert!(
            row.written.0 > Some(plain),
            "{id}: {:?} after {plain}",
            row.written.0
        );
        let dead = TxState {
            status: Status::Dead,
            ..live
        };
        assert!(!s.put_state_if(&dead, Some(3600), 5).await.unwrap(), "{id}");
    }
}

/// `put_state_if` and `cancel_state_if` write only over the SCHEDULED row of the generation
/// they name: of two ends of one generation (a SUCCEEDED and a DEAD answered at once) the
/// first lands and the second finds it; a next schedule lands over its generation's row and
/// not over an end; a cancel lands over neither an end nor a newer schedule, and no end lands
/// over it; a missing row is not written. A terminal row written so expires whole with its
/// TTL, as a plain terminal write does.
pub async fn conditional_writes_land_only_on_the_scheduled_row_they_name(f: &dyn Fixture) {
    let s = f.store();
    let with = |live: &TxState, status: Status| TxState {
        status,
        ..live.clone()
    };
    let status = |id: &'static str| {
        let s = s.clone();
        async move { s.get_state(SVC, id).await.unwrap().map(|r| r.status) }
    };
    // SUCCEEDED first, then DEAD: SUCCEEDED stays (with its cell), and expires whole.
    let live = state(SVC, "end", 5);
    s.put_state(&live, None).await.unwrap();
    let done = with(&live, Status::Succeeded);
    assert!(s.put_state_if(&done, Some(2), 5).await.unwrap());
    let dead = with(&live, Status::Dead);
    assert!(!s.put_state_if(&dead, Some(3600), 5).await.unwrap());
    let after = s.get_state(SVC, "end").await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.generation, after.succeeded_generation),
        (Status::Succeeded, 5, Some(5))
    );

    // DEAD first: neither a SUCCEEDED, nor a next schedule, nor a cancel lands over it.
    let live = state(SVC, "dead", 5);
    s.put_state(&live, None).await.unwrap();
    assert!(s
        .put_state_if(&with(&live, Status::Dead), Some(3600), 5)
        .await
        .unwrap());
    assert!(!s
        .put_state_if(&with(&live, Status::Succeeded), Some(3600), 5)
        .await
        .unwrap());
    let next = state(SVC, "dead", 6);
    assert!(!s.put_state_if(&next, None, 5).await.unwrap());
    assert!(!s
        .cancel_state_if(&with(&live, Status::Cancelled), 3600, 7200)
        .await
        .unwrap());
    let after = s.get_state(SVC, "dead").await.unwrap().unwrap();
    assert_eq!(
        (
            after.status,
            after.generation,
            after.succeeded_generation,
            after.cancelled_generation
        ),
        (Status::Dead, 5, None, None)
    );

    // A next schedule lands over its generation's row; an end of the old generation then
    // does not, and a cancel of the old generation does not either.
    let live = state(SVC, "moved", 5);
    s.put_state(&live, None).await.unwrap();
    let next = state(SVC, "moved", 7);
    assert!(s.put_state_if(&next, None, 5).await.unwrap());
    assert!(!s
        .put_state_if(&with(&live, Status::Dead), Some(3600), 5)
        .await
        .unwrap());
    assert!(!s
        .cancel_state_if(&with(&live, Status::Cancelled), 3600, 7200)
        .await
        .unwrap());
    let after = s.get_state(SVC, "moved").await.unwrap().unwrap();
    assert_eq!((after.status, after.generation), (Status::Scheduled, 7));

    // A cancel of the current generation lands, with its cell; no end lands over it.
    assert!(s
        .cancel_state_if(&with(&next, Status::Cancelled), 3600, 7200)
        .await
        .unwrap());
    assert!(!s
        .put_state_if(&with(&next, Status::Dead), Some(3600), 7)
        .await
        .unwrap());
    let after = s.get_state(SVC, "moved").await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.cancelled_generation),
        (Status::Cancelled, Some(7))
    );

    // No row: nothing written.
    let never = state(SVC, "never", 5);
    assert!(!s
        .put_state_if(&with(&never, Status::Dead), Some(3600), 5)
        .await
        .unwrap());
    assert!(!s
        .cancel_state_if(&with(&never, Status::Cancelled), 3600, 7200)
        .await
        .unwrap());
    assert_eq!(status("never").await, None);

    f.advance(Duration::from_secs(3)).await;
    assert_eq!(status("end").await, None);
}
