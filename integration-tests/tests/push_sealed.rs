//! Push targets' secrets sealed at rest (docs/architecture.md, "Push delivery"), against a real
//! node, Cassandra and a real HTTP receiver: with `REBOUND_SECRETS_KEY_FILE` set, the
//! `services` row holds neither the signing secret nor the header values, yet every push is
//! signed with the real secret and carries the real header; a new key first in the file
//! (SIGHUP) seals new writes; a target sealed with a key the node no longer holds is refused by
//! GetPushTarget naming the key and the setting, and its deliveries are postponed, never sent.

use std::{path::Path, time::Duration};

use rebound_engine::{
    push::sign, services::push_target::secret_key, services::seal::SEALED_PREFIX,
};
use rebound_integration_tests::{
    dispatch_config, enqueue_req, eventually, get_retry,
    receiver::{Answer, Receiver},
    secs, TestNode,
};
use rebound_proto::v1::{self as pb, admin_service_client::AdminServiceClient};
use tonic::{transport::Channel, Code};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const API_KEY: &str = "receiver-api-key-4242";
const K1: &str = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const K2: &str = "k2 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
const K3: &str = "k3 QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=";

fn admin(n: &TestNode) -> AdminServiceClient<Channel> {
    AdminServiceClient::new(n.channel.clone())
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The raw `push` blob of `service`, and the whole row as CQL's JSON shows it.
async fn raw_row(n: &TestNode, service: &str) -> (Vec<u8>, String) {
    let rows: Vec<(String, Option<Vec<u8>>)> =
        n.select("SELECT service, push FROM {ks}.services").await;
    let push = rows
        .into_iter()
        .find(|(s, _)| s == service)
        .and_then(|(_, p)| p)
        .expect("a push blob");
    let json = n.rows("services", "*").await.join("\n");
    (push, json)
}

fn write_keys(path: &Path, lines: &[&str]) {
    std::fs::write(path, format!("# test keys\n{}\n", lines.join("\n"))).unwrap();
}

#[tokio::test]
async fn sealed_secrets_are_not_in_the_row_and_pushes_are_still_signed() {
    let rx = Receiver::start(|_| Answer::Status(200)).await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("secrets.keys");
    write_keys(&key_file, &[K1]);
    let mut config = dispatch_config("push_sealed");
    config.push_allow = "127.0.0.1".into();
    config.secrets_key_file = Some(key_file.clone());
    // The pushers follow a reload at the next settings refresh.
    config.settings_refresh_ms = 100;
    let n = TestNode::with_system_clock(config).await;
    let mut a = admin(&n);
    let service = "sealed";
    let target = pb::PushTarget {
        url: rx.url("/hooks/sealed"),
        timeout: Some(secs(2)),
        headers: [("x-api-key".to_string(), API_KEY.to_string())].into(),
        signing_secrets: vec![SECRET.into()],
        ..Default::default()
    };
    a.set_push_target(pb::SetPushTargetRequest {
        service: service.into(),
        target: Some(target.clone()),
    })
    .await
    .expect("set push target");

    // The row: the URL in clear, neither the secret nor the header value, in any form.
    let (push, json) = raw_row(&n, service).await;
    assert!(contains(&push, "/hooks/sealed"));
    let secret_body = &SECRET["whsec_".len()..];
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    for needle in [secret_body, API_KEY] {
        assert!(!contains(&push, needle), "{needle} in the push blob");
        assert!(
            !json.contains(needle) && !json.contains(&hex(needle)),
            "{needle} in {json}"
        );
    }
    assert!(contains(&push, &format!("{SEALED_PREFIX}k1:")));

    // GetPushTarget: the masked secret ends as the real one does.
    let got = a
        .get_push_target(pb::GetPushTargetRequest {
            service: service.into(),
        })
        .await
        .expect("get push target")
        .into_inner();
    assert!(got.signing_secrets[0].ends_with(&SECRET[SECRET.len() - 4..]));

    // A push: signed with the real secret, the real header sent.
    n.client
        .clone()
        .enqueue_retry(enqueue_req(service, "first", 0))
        .await
        .expect("enqueue");
    eventually(Duration::from_secs(20), "the first push", || {
        let got = !rx.of("first").is_empty();
        async move { got }
    })
    .await;
    let keys = [secret_key(SECRET).unwrap()];
    let r = &rx.of("first")[0];
    let ts: i64 = r.header("webhook-timestamp").parse().unwrap();
    assert_eq!(
        r.header("webhook-signature"),
        sign::signature(&keys, r.header("webhook-id"), ts, &r.body)
    );
    assert_eq!(r.header("x-api-key"), API_KEY);

    // Rotation: a new key first, SIGHUP; the next write seals with it.
    write_keys(&key_file, &[K2, K1]);
    n.node.as_ref().unwrap().reload().expect("reload");
    a.set_push_target(pb::SetPushTargetRequest {
        service: service.into(),
        target: Some(target.clone()),
    })
    .await
    .expect("set again");
    let (push, _) = raw_row(&n, service).await;
    assert!(contains(&push, &format!("{SEALED_PREFIX}k2:")));
    assert!(!contains(&push, &format!("{SEALED_PREFIX}k1:")));

    // A bad file is refused on reload, naming the setting; the keys stay.
    std::fs::write(&key_file, "k9 not-a-key\n").unwrap();
    let e = n.node.as_ref().unwrap().reload().unwrap_err().to_string();
    assert!(
        e.contains("REBOUND_SECRETS_KEY_FILE") && e.contains("line 1"),
        "{e}"
    );
    a.get_push_target(pb::GetPushTargetRequest {
        service: service.into(),
    })
    .await
    .expect("still opens");

    // The key that sealed it removed: GetPushTarget says why, and nothing is pushed.
    write_keys(&key_file, &[K3]);
    n.node.as_ref().unwrap().reload().expect("reload");
    let e = a
        .get_push_target(pb::GetPushTargetRequest {
            service: service.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("\"k2\"") && e.message().contains("REBOUND_SECRETS_KEY_FILE"),
        "{}",
        e.message()
    );
    assert!(!e.message().contains(secret_body));
    n.client
        .clone()
        // Due well after the next settings refresh, which the pushers follow.
        .enqueue_retry(enqueue_req(service, "held", 2_000))
        .await
        .expect("enqueue");
    eventually(Duration::from_secs(20), "the held retry postponed", || {
        let ch = n.channel.clone();
        async move {
            get_retry(&ch, service, "held")
                .await
                .last_error
                .contains("not sent")
        }
    })
    .await;
    let held = get_retry(&n.channel, service, "held").await;
    assert_eq!(held.status, pb::RetryStatus::Scheduled as i32);
    assert!(held.last_error.contains("\"k2\""), "{}", held.last_error);
    assert!(
        rx.of("held").is_empty(),
        "nothing is sent with an unusable target"
    );

    // The key back: the target opens again.
    write_keys(&key_file, &[K3, K2]);
    n.node.as_ref().unwrap().reload().expect("reload");
    let got = a
        .get_push_target(pb::GetPushTargetRequest {
            service: service.into(),
        })
        .await
        .expect("opens again")
        .into_inner();
    assert_eq!(got.url, target.url);
    n.finish().await;
}
