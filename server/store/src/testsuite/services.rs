//! Service settings: one row per service, each setting written on its own.

use std::time::Duration;

use super::fixture::Fixture;
use crate::{HoldRow, ProbeClaim, ProbeRow, ServiceRow};

pub async fn services_are_touched_paused_resumed_and_configured(f: &dyn Fixture) {
    let s = f.store();
    assert_eq!(s.list_services().await.unwrap(), vec![]);
    s.touch_service("zeta", 100).await.unwrap();
    s.touch_service("alpha", 110).await.unwrap();
    // A setting for a service never seen makes its row too.
    s.set_service_policy("mid", b"policy-1", 120).await.unwrap();
    let row = |service: &str| ServiceRow {
        service: service.to_string(),
        ..ServiceRow::default()
    };
    // By name.
    assert_eq!(
        s.list_services().await.unwrap(),
        vec![
            ServiceRow {
                seen_at_ms: Some(110),
                ..row("alpha")
            },
            ServiceRow {
                policy: b"policy-1".to_vec(),
                updated_at_ms: Some(120),
                ..row("mid")
            },
            ServiceRow {
                seen_at_ms: Some(100),
                ..row("zeta")
            },
        ]
    );

    s.touch_service("alpha", 200).await.unwrap();
    s.set_service_paused("alpha", true, 210).await.unwrap();
    s.set_service_limits("alpha", b"limits-1", 220)
        .await
        .unwrap();
    let alpha = || async { s.list_services().await.unwrap().remove(0) };
    assert_eq!(
        alpha().await,
        ServiceRow {
            seen_at_ms: Some(200),
            paused: true,
            paused_at_ms: Some(210),
            limits: b"limits-1".to_vec(),
            updated_at_ms: Some(220),
            ..row("alpha")
        }
    );
    // Resuming keeps when it was last paused.
    s.set_service_paused("alpha", false, 230).await.unwrap();
    s.set_service_policy("alpha", b"policy-2", 240)
        .await
        .unwrap();
    assert_eq!(
        alpha().await,
        ServiceRow {
            seen_at_ms: Some(200),
            paused: false,
            paused_at_ms: Some(210),
            policy: b"policy-2".to_vec(),
            limits: b"limits-1".to_vec(),
            updated_at_ms: Some(240),
            ..row("alpha")
        }
    );
    // Empty settings read as none stored.
    s.set_service_policy("alpha", b"", 250).await.unwrap();
    s.set_service_limits("alpha", b"", 260).await.unwrap();
    let a = alpha().await;
    assert_eq!(
        (a.policy, a.limits, a.updated_at_ms),
        (Vec::new(), Vec::new(), Some(260))
    );
    assert_eq!(s.list_services().await.unwrap().len(), 3);
}

/// The push target is one more setting: set, replaced and cleared on its own, leaving pause,
/// policy and limits as they were.
pub async fn push_targets_are_set_replaced_and_cleared(f: &dyn Fixture) {
    let s = f.store();
    s.touch_service("orders", 100).await.unwrap();
    s.set_service_paused("orders", true, 110).await.unwrap();
    s.set_service_policy("orders", b"policy-1", 120)
        .await
        .unwrap();
    s.set_service_limits("orders", b"limits-1", 130)
        .await
        .unwrap();
    let settings = ServiceRow {
        service: "orders".to_string(),
        seen_at_ms: Some(100),
        paused: true,
        paused_at_ms: Some(110),
        policy: b"policy-1".to_vec(),
        limits: b"limits-1".to_vec(),
        ..ServiceRow::default()
    };
    assert_eq!(
        s.list_services().await.unwrap(),
        vec![ServiceRow {
            updated_at_ms: Some(130),
            ..settings.clone()
        }],
        "no push target until one is set"
    );

    s.set_service_push("orders", b"push-1", 140).await.unwrap();
    // A push target for a service never seen makes its row too.
    s.set_service_push("billing", b"push-b", 150).await.unwrap();
    assert_eq!(
        s.list_services().await.unwrap(),
        vec![
            ServiceRow {
                service: "billing".to_string(),
                push: b"push-b".to_vec(),
                updated_at_ms: Some(150),
                ..ServiceRow::default()
            },
            ServiceRow {
                push: b"push-1".to_vec(),
                updated_at_ms: Some(140),
                ..settings.clone()
            },
        ]
    );
    let orders = || async {
        s.list_services()
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.service == "orders")
            .unwrap()
    };

    // Replaced as a whole.
    s.set_service_push("orders", b"push-2", 160).await.unwrap();
    assert_eq!(
        orders().await,
        ServiceRow {
            push: b"push-2".to_vec(),
            updated_at_ms: Some(160),
            ..settings.clone()
        }
    );
    // The other setters leave it alone.
    s.set_service_paused("orders", false, 170).await.unwrap();
    s.set_service_limits("orders", b"limits-2", 180)
        .await
        .unwrap();
    s.set_service_policy("orders", b"policy-2", 190)
        .await
        .unwrap();
    s.touch_service("orders", 200).await.unwrap();
    assert_eq!(
        orders().await,
        ServiceRow {
            seen_at_ms: Some(200),
            paused: false,
            policy: b"policy-2".to_vec(),
            limits: b"limits-2".to_vec(),
            push: b"push-2".to_vec(),
            updated_at_ms: Some(190),
            ..settings.clone()
        }
    );
    // Cleared: empty reads as none stored; the rest stays.
    s.set_service_push("orders", b"", 210).await.unwrap();
    assert_eq!(
        orders().await,
        ServiceRow {
            seen_at_ms: Some(200),
            paused: false,
            policy: b"policy-2".to_vec(),
            limits: b"limits-2".to_vec(),
            push: Vec::new(),
            updated_at_ms: Some(210),
            ..settings
        }
    );
    // Clearing again is harmless.
    s.set_service_push("orders", b"", 220).await.unwrap();
    assert_eq!(orders().await.push, Vec::<u8>::new());
    assert_eq!(s.list_services().await.unwrap().len(), 2);
}

/// Dependency holds: a row per dependency, written whole (a second hold replaces the first,
/// a release is a write of its end), listed whole, and gone once its TTL has run out.
pub async fn dependency_holds_are_put_replaced_listed_and_expire(f: &dyn Fixture) {
    let s = f.store();
    assert!(s.list_holds().await.unwrap().is_empty());
    let pay = HoldRow {
        dependency: "payments-gateway".to_string(),
        until_ms: 2_000,
        reason: "503 from the gateway".to_string(),
        held_at_ms: 1_000,
        source: "executor".to_string(),
        renewals: 0,
    };
    let db = HoldRow {
        dependency: "ledger-db".to_string(),
        until_ms: 5_000,
        reason: String::new(),
        held_at_ms: 1_500,
        source: "admin".to_string(),
        renewals: 2,
    };
    s.put_hold(&pay, 3_600).await.unwrap();
    s.put_hold(&db, 2).await.unwrap();
    let mut rows = s.list_holds().await.unwrap();
    rows.sort_by(|a, b| a.dependency.cmp(&b.dependency));
    assert_eq!(rows, vec![db.clone(), pay.clone()]);

    // A renewal replaces the row whole.
    let renewed = HoldRow {
        until_ms: 9_000,
        held_at_ms: 3_000,
        reason: String::new(),
        renewals: 1,
        ..pay.clone()
    };
    s.put_hold(&renewed, 3_600).await.unwrap();
    let mut rows = s.list_holds().await.unwrap();
    rows.sort_by(|a, b| a.dependency.cmp(&b.dependency));
    assert_eq!(rows, vec![db, renewed.clone()]);

    // The row written with a 2 s TTL is gone after it; the other stays.
    f.advance(Duration::from_secs(3)).await;
    assert_eq!(s.list_holds().await.unwrap(), vec![renewed]);
}

/// The probe after a hold: one claim wins (a second node loses and is told the claim that
/// stands), the owner claims again and wins, a claim is taken over only once stale and
/// unanswered, only the owner records the answer, an answered probe is never claimed again,
/// and each hold end has a probe of its own.
pub async fn a_dependency_probe_is_claimed_by_one_node(f: &dyn Fixture) {
    let s = f.store();
    let ttl = 3_600;
    let won = s
        .claim_probe("pay", 2_000, "a", 2_100, 0, ttl)
        .await
        .unwrap();
    assert_eq!(won, ProbeClaim::Won);
    let lost = s
        .claim_probe("pay", 2_000, "b", 2_200, 0, ttl)
        .await
        .unwrap();
    assert_eq!(
        lost,
        ProbeClaim::Lost(ProbeRow {
            owner: "a".into(),
            claimed_at_ms: 2_100,
            answered_at_ms: 0,
        })
    );
    assert_eq!(
        s.claim_probe("pay", 2_000, "a", 2_300, 0, ttl)
            .await
            .unwrap(),
        ProbeClaim::Won,
        "the owner's own claim"
    );
    // Another hold end of the same dependency, and another dependency: probes of their own.
    assert_eq!(
        s.claim_probe("pay", 9_000, "b", 9_100, 0, ttl)
            .await
            .unwrap(),
        ProbeClaim::Won
    );
    assert_eq!(
        s.claim_probe("db", 2_000, "b", 2_100, 0, ttl)
            .await
            .unwrap(),
        ProbeClaim::Won
    );

    // Stale (claimed before the 5th argument) and unanswered: c takes it over, once.
    assert_eq!(
        s.claim_probe("pay", 2_000, "c", 70_000, 2_100, ttl)
            .await
            .unwrap(),
        ProbeClaim::Lost(ProbeRow {
            owner: "a".into(),
            claimed_at_ms: 2_100,
            answered_at_ms: 0,
        }),
        "claimed at 2_100, not stale before 2_100"
    );
    assert_eq!(
        s.claim_probe("pay", 2_000, "c", 70_000, 2_101, ttl)
            .await
            .unwrap(),
        ProbeClaim::Won,
        "taken over"
    );
    assert!(matches!(
        s.claim_probe("pay", 2_000, "b", 70_001, 70_000, ttl).await.unwrap(),
        ProbeClaim::Lost(ProbeRow { ref owner, claimed_at_ms: 70_000, .. }) if owner == "c"
    ));

    // Only the owner records the answer; once answered, it is never taken over.
    assert!(!s
        .answer_probe("pay", 2_000, "a", 71_000, ttl)
        .await
        .unwrap());
    assert!(s
        .answer_probe("pay", 2_000, "c", 71_000, ttl)
        .await
        .unwrap());
    let answered = ProbeClaim::Lost(ProbeRow {
        owner: "c".into(),
        claimed_at_ms: 70_000,
        answered_at_ms: 71_000,
    });
    assert_eq!(
        s.claim_probe("pay", 2_000, "b", 500_000, 500_000, ttl)
            .await
            .unwrap(),
        answered
    );
    assert_eq!(
        s.claim_probe("pay", 2_000, "c", 500_000, 500_000, ttl)
            .await
            .unwrap(),
        answered,
        "not even by its owner (after a restart, say)"
    );
    assert!(
        !s.answer_probe("nothing", 2_000, "c", 71_000, ttl)
            .await
            .unwrap(),
        "no claim, no answer"
    );
}
