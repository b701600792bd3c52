//! The check of a push target's host when it is set (`AdminService.SetPushTarget`): the
//! guard's own check of each request ([`guard::resolve`]) made once before the target is
//! stored, so that a target at a metadata, loopback or private address is refused at once
//! rather than at its first push. docs/push.md, "Which addresses a push may reach".

use std::time::Duration;

use rebound_proto::v1 as pb;

use crate::{
    error::Error,
    guard::{self, Allow, ResolveError},
};

/// How long SetPushTarget waits for the target's host name to resolve ([`check_address`]).
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// The address check of a validated target (`validate`'s answer), made before it is stored:
/// the guard's own check of each request ([`guard::resolve`]) on the URL's host, under the
/// node's `REBOUND_PUSH_ALLOW` (`allow`). An IP literal in a refused range, or a host name
/// that resolves to any refused address, is refused with INVALID_ARGUMENT on `target.url`
/// naming the host, the address, why, and `REBOUND_PUSH_ALLOW`.
///
/// A name that does not resolve, or not within [`RESOLVE_TIMEOUT`], is accepted: it may
/// resolve later (a receiver not deployed yet, a resolver down for a moment), and every request
/// is checked again anyway, since DNS can change after the target is set. `Ok(Some(why))` says
/// why it could not be judged now; `Ok(None)`: every address is public or permitted.
///
/// The look-up runs on tokio's blocking pool and is bounded by the timeout, so it never
/// blocks the runtime nor holds the call longer.
pub async fn check_address(t: &pb::PushTarget, allow: &Allow) -> Result<Option<String>, Error> {
    check_address_with(t, allow, RESOLVE_TIMEOUT, guard::system_lookup).await
}

/// [`check_address`] with the look-up and its timeout given (tests).
pub async fn check_address_with<F, Fut>(
    t: &pb::PushTarget,
    allow: &Allow,
    timeout: Duration,
    lookup: F,
) -> Result<Option<String>, Error>
where
    F: FnOnce(String, u16) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<Vec<std::net::SocketAddr>>>,
{
    const FIELD: &str = "target.url";
    let u = url::Url::parse(&t.url)
        .map_err(|e| Error::invalid(FIELD, format!("must be an absolute http(s) URL ({e})")))?;
    let (Some(host), Some(port)) = (u.host_str(), u.port_or_known_default()) else {
        return Err(Error::invalid(FIELD, "must name a host"));
    };
    match tokio::time::timeout(timeout, guard::resolve_with(host, port, allow, lookup)).await {
        Ok(Ok(_)) => Ok(None),
        Ok(Err(ResolveError::Refused(r))) => Err(Error::invalid(FIELD, r.0)),
        Ok(Err(ResolveError::Dns(why))) => Ok(Some(why)),
        Err(_) => Ok(Some(format!(
            "{host:?} did not resolve within {}s",
            timeout.as_secs_f64()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::services::push_target::{tests::good, validate};

    /// The check SetPushTarget makes, after `validate`, with the look-up given.
    fn set_time<F, Fut>(url: &str, allow: &str, lookup: F) -> Result<Option<String>, Error>
    where
        F: FnOnce(String, u16) -> Fut,
        Fut: std::future::Future<Output = std::io::Result<Vec<std::net::SocketAddr>>>,
    {
        let t = validate(Some(&pb::PushTarget {
            url: url.into(),
            ..good()
        }))?;
        let allow = Allow::parse(allow).expect("allow");
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(check_address_with(&t, &allow, RESOLVE_TIMEOUT, lookup))
    }

    /// A look-up that must not be made (the host is a literal).
    async fn no_lookup(host: String, _: u16) -> std::io::Result<Vec<std::net::SocketAddr>> {
        Err(std::io::Error::other(format!("looked up {host}")))
    }

    fn answers(
        ips: &'static [&'static str],
    ) -> impl FnOnce(String, u16) -> std::future::Ready<std::io::Result<Vec<std::net::SocketAddr>>>
    {
        move |_, port| {
            std::future::ready(Ok(ips
                .iter()
                .map(|ip| std::net::SocketAddr::new(ip.parse().expect(ip), port))
                .collect()))
        }
    }

    fn refused_at_set(r: Result<Option<String>, Error>) -> String {
        match r {
            Err(Error::InvalidArgument { field, message }) if field == "target.url" => message,
            other => panic!("not refused on target.url: {other:?}"),
        }
    }

    /// Every range the guard refuses, as URL hosts, with the forms the URL parser turns into
    /// them (the stored URL is the normalized one, the one requests go to).
    const REFUSED_HOSTS: &[(&str, &str)] = &[
        ("127.0.0.1", "loopback"),
        ("127.1", "loopback"),
        ("2130706433", "loopback"),
        ("0x7f.0.0.1", "loopback"),
        ("0177.0.0.1", "loopback"),
        ("[::1]", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "this network"),
        ("224.0.0.251", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.10", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("192.0.0.8", "IETF protocol"),
        ("192.88.99.1", "6to4 relay"),
        ("[fd00::1]", "unique local"),
        ("[fc00::1]", "unique local"),
        ("[fe80::1]", "link-local"),
        ("[fec0::1]", "site-local"),
        ("[ff02::1]", "multicast"),
        ("[::]", "unspecified"),
        ("[::ffff:169.254.169.254]", "IPv4-mapped"),
        ("[::ffff:127.0.0.1]", "IPv4-mapped"),
        ("[0:0:0:0:0:ffff:a00:1]", "IPv4-mapped"),
        ("[::127.0.0.1]", "IPv4-compatible"),
        ("[64:ff9b::169.254.169.254]", "NAT64"),
        ("[64:ff9b:1::1]", "local-use NAT64"),
        ("[2002:a9fe:a9fe::1]", "6to4"),
        ("[2001:db8::1]", "documentation"),
        ("[2001::1]", "Teredo"),
        ("[100::1]", "discard-only"),
        ("[3fff::1]", "documentation"),
        ("[5f00::1]", "not global unicast"),
    ];

    #[test]
    fn literal_addresses_in_refused_ranges_are_refused_when_set() {
        for (host, why) in REFUSED_HOSTS {
            let url = format!("http://{host}:8080/latest/meta-data?token=s3cret");
            let m = refused_at_set(set_time(&url, "", no_lookup));
            assert!(m.contains(why), "{host}: {m}");
            assert!(m.contains("REBOUND_PUSH_ALLOW"), "{host}: {m}");
            assert!(
                !m.contains("s3cret") && !m.contains("meta-data"),
                "no URL: {m}"
            );
        }
        let m = refused_at_set(set_time(
            "http://169.254.169.254/latest/meta-data",
            "",
            no_lookup,
        ));
        assert_eq!(
            m,
            "push to 169.254.169.254 refused: address 169.254.169.254 is link-local (cloud \
             metadata services), 169.254.0.0/16; REBOUND_PUSH_ALLOW can permit the host or a \
             network holding the address"
        );
        // Public literals pass, unresolved.
        for host in [
            "8.8.8.8",
            "[2606:4700::1]",
            "[::ffff:8.8.8.8]",
            "100.128.0.1",
        ] {
            let url = format!("https://{host}/hooks");
            assert_eq!(set_time(&url, "", no_lookup), Ok(None), "{host}");
        }
    }

    #[test]
    fn the_allow_list_permits_at_set_time_as_at_request_time() {
        for (host, allow) in [
            ("127.0.0.1", "127.0.0.1"),
            ("127.0.0.1", "127.0.0.0/8"),
            ("[::1]", "::1"),
            ("[::ffff:10.1.2.3]", "10.0.0.0/8"),
            ("169.254.169.254", "169.254.169.254"),
            ("[fd00::1]", "fd00::/8"),
            ("100.64.0.1", "0.0.0.0/0"),
        ] {
            let url = format!("http://{host}/x");
            assert_eq!(set_time(&url, allow, no_lookup), Ok(None), "{host} {allow}");
        }
        // Another network does not.
        let m = refused_at_set(set_time("http://10.1.2.3/x", "192.168.0.0/16", no_lookup));
        assert!(m.contains("private, 10.0.0.0/8"), "{m}");
        // A host name, exactly: whatever it resolves to.
        assert_eq!(
            set_time(
                "http://Hooks.Internal/x",
                "hooks.internal",
                answers(&["10.0.0.7"])
            ),
            Ok(None)
        );
        let m = refused_at_set(set_time(
            "http://other.internal/x",
            "hooks.internal",
            answers(&["10.0.0.7"]),
        ));
        assert!(
            m.contains("other.internal") && m.contains("10.0.0.7"),
            "{m}"
        );
    }

    #[test]
    fn names_are_judged_by_what_they_resolve_to_when_set() {
        // Only refused addresses.
        let m = refused_at_set(set_time(
            "https://metadata.internal/x",
            "",
            answers(&["169.254.169.254"]),
        ));
        assert!(
            m.contains("metadata.internal") && m.contains("169.254.169.254"),
            "{m}"
        );
        let m = refused_at_set(set_time(
            "https://two.internal/x",
            "",
            answers(&["10.0.0.1", "::ffff:127.0.0.1"]),
        ));
        assert!(m.contains("10.0.0.1"), "{m}");
        // Any refused address refuses the host, as each request would.
        let m = refused_at_set(set_time(
            "https://mixed.example/x",
            "",
            answers(&["93.184.216.34", "192.168.0.9"]),
        ));
        assert!(m.contains("192.168.0.9"), "{m}");
        // Public addresses only: accepted.
        assert_eq!(
            set_time(
                "https://hooks.example.com/x",
                "",
                answers(&["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"])
            ),
            Ok(None)
        );
        // The look-up gets the URL's host and port (the scheme's default when none).
        let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        let s = seen.clone();
        assert_eq!(
            set_time("https://Hooks.Example.com/x", "", move |h, p| {
                *s.lock().unwrap() = Some((h, p));
                std::future::ready(Ok(vec![std::net::SocketAddr::new(
                    "93.184.216.34".parse().unwrap(),
                    p,
                )]))
            }),
            Ok(None)
        );
        assert_eq!(
            *seen.lock().unwrap(),
            Some(("hooks.example.com".into(), 443))
        );
        // The system resolver: localhost is loopback.
        let m = refused_at_set(set_time(
            "http://localhost:8080/x",
            "",
            guard::system_lookup,
        ));
        assert!(m.contains("localhost") && m.contains("loopback"), "{m}");
        assert_eq!(
            set_time("http://localhost:8080/x", "localhost", guard::system_lookup),
            Ok(None)
        );
    }

    #[test]
    fn names_that_do_not_resolve_are_accepted_unjudged() {
        let r = set_time("https://not-deployed.example/x", "", |h: String, _| {
            std::future::ready(Err(std::io::Error::other(format!("no such host {h}"))))
        });
        assert!(
            matches!(&r, Ok(Some(why)) if why.contains("cannot resolve") && why.contains("not-deployed.example")),
            "{r:?}"
        );
        let r = set_time("https://nothing.example/x", "", answers(&[]));
        assert!(
            matches!(&r, Ok(Some(why)) if why.contains("no address")),
            "{r:?}"
        );
        // A resolver that never answers: bounded by the timeout (zero here, so the test does
        // not wait), then accepted.
        let t = validate(Some(&pb::PushTarget {
            url: "https://slow.example/x".into(),
            ..good()
        }))
        .unwrap();
        let r = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(check_address_with(
                &t,
                &Allow::default(),
                Duration::ZERO,
                |_, _| std::future::pending(),
            ));
        assert!(
            matches!(&r, Ok(Some(why)) if why.contains("did not resolve within")),
            "{r:?}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The set-time check of any IPv4 address, as a literal and in its IPv4-mapped IPv6
        /// form, refuses exactly what the guard refuses, unless the allow list holds it.
        #[test]
        fn set_time_check_is_the_guards(n in any::<u32>(), allow_all in any::<bool>()) {
            let v4 = std::net::Ipv4Addr::from(n);
            let public = guard::is_public(v4.into());
            let allow = if allow_all { "0.0.0.0/0" } else { "" };
            for url in [format!("http://{v4}/x"), format!("http://[{}]/x", v4.to_ipv6_mapped())] {
                match set_time(&url, allow, no_lookup) {
                    Ok(None) => prop_assert!(public || allow_all, "{} accepted", url),
                    Err(Error::InvalidArgument { field, message }) => {
                        prop_assert!(!public && !allow_all, "{} refused", url);
                        prop_assert_eq!(field, "target.url");
                        prop_assert!(message.contains("REBOUND_PUSH_ALLOW"));
                    }
                    other => prop_assert!(false, "{}: {:?}", url, other),
                }
            }
        }

        /// Any IPv6 address as a literal: refused exactly when the guard refuses it.
        #[test]
        fn set_time_check_of_ipv6(n in any::<u128>()) {
            let v6 = std::net::Ipv6Addr::from(n);
            let url = format!("http://[{v6}]/x");
            let r = set_time(&url, "", no_lookup);
            prop_assert_eq!(r.is_ok(), guard::is_public(v6.into()), "{}: {:?}", url, r);
        }
    }
}
