//! Service settings: one partition per namespace, a row per service. Each setter changes
//! only its own columns, as the Cassandra UPDATEs do. The push target is the value's last
//! field: a row written before it (shorter) reads as having none, and a build before it reads
//! a newer row's fields up to it and ignores the rest.

use async_trait::async_trait;

use super::{
    keys::{Dec, Enc, Key, KeyReader, Table},
    EmbeddedStore, NEVER,
};
use rebound_store::{ServiceRow, ServiceStore, StoreResult};

fn encode(r: &ServiceRow) -> Vec<u8> {
    Enc::new()
        .opt_i64(r.seen_at_ms)
        .bool(r.paused)
        .opt_i64(r.paused_at_ms)
        .bytes(&r.policy)
        .bytes(&r.limits)
        .opt_i64(r.updated_at_ms)
        .bytes(&r.push)
        .into_bytes()
}

fn decode(service: String, v: &[u8]) -> StoreResult<ServiceRow> {
    let mut d = Dec::new(v);
    let mut row = ServiceRow {
        service,
        seen_at_ms: d.opt_i64()?,
        paused: d.bool()?,
        paused_at_ms: d.opt_i64()?,
        policy: d.bytes()?,
        limits: d.bytes()?,
        updated_at_ms: d.opt_i64()?,
        push: Vec::new(),
    };
    // A row written before push targets ends here: it has none.
    if !d.is_empty() {
        row.push = d.bytes()?;
    }
    Ok(row)
}

impl EmbeddedStore {
    /// Reads the service's row (a default one when missing), changes it, writes it back, in
    /// one transaction.
    async fn update_service(
        &self,
        service: &str,
        change: impl FnOnce(&mut ServiceRow) + Send + 'static,
    ) -> StoreResult<()> {
        let key: Key = self.key(Table::Services).str(service);
        let service = service.to_string();
        self.blocking(move |i| {
            i.write(|w| {
                let mut row = match w.get(key.as_bytes())? {
                    Some(v) => decode(service, &v)?,
                    None => ServiceRow {
                        service,
                        ..ServiceRow::default()
                    },
                };
                change(&mut row);
                w.put(key.as_bytes(), &encode(&row), NEVER)
            })
        })
        .await
    }
}

#[async_trait]
impl ServiceStore for EmbeddedStore {
    async fn list_services(&self) -> StoreResult<Vec<ServiceRow>> {
        let prefix = self.key(Table::Services);
        let n = prefix.as_bytes().len();
        self.scan_partition(prefix)
            .await?
            .iter()
            .map(|(k, v)| decode(KeyReader::after(k, n)?.str()?, v))
            .collect()
    }

    async fn touch_service(&self, service: &str, now_ms: i64) -> StoreResult<()> {
        self.update_service(service, move |r| r.seen_at_ms = Some(now_ms))
            .await
    }

    async fn set_service_paused(&self, service: &str, paused: bool, now: i64) -> StoreResult<()> {
        self.update_service(service, move |r| {
            r.paused = paused;
            // Resuming keeps paused_at (the last pause).
            if paused {
                r.paused_at_ms = Some(now);
            }
            r.updated_at_ms = Some(now);
        })
        .await
    }

    async fn set_service_policy(&self, service: &str, policy: &[u8], now: i64) -> StoreResult<()> {
        let policy = policy.to_vec();
        self.update_service(service, move |r| {
            r.policy = policy;
            r.updated_at_ms = Some(now);
        })
        .await
    }

    async fn set_service_limits(&self, service: &str, limits: &[u8], now: i64) -> StoreResult<()> {
        let limits = limits.to_vec();
        self.update_service(service, move |r| {
            r.limits = limits;
            r.updated_at_ms = Some(now);
        })
        .await
    }

    async fn set_service_push(&self, service: &str, push: &[u8], now: i64) -> StoreResult<()> {
        let push = push.to_vec();
        self.update_service(service, move |r| {
            r.push = push;
            r.updated_at_ms = Some(now);
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_written_before_push_targets_reads_without_one() {
        let row = ServiceRow {
            service: "orders".into(),
            seen_at_ms: Some(1),
            paused: true,
            paused_at_ms: Some(2),
            policy: b"p".to_vec(),
            limits: b"l".to_vec(),
            push: b"t".to_vec(),
            updated_at_ms: Some(3),
        };
        let now = encode(&row);
        assert_eq!(decode("orders".into(), &now).unwrap(), row);
        // The layout before the push field: the same fields without it.
        let old = Enc::new()
            .opt_i64(row.seen_at_ms)
            .bool(row.paused)
            .opt_i64(row.paused_at_ms)
            .bytes(&row.policy)
            .bytes(&row.limits)
            .opt_i64(row.updated_at_ms)
            .into_bytes();
        assert_eq!(now[..old.len()], old[..], "the push field comes last");
        assert_eq!(
            decode("orders".into(), &old).unwrap(),
            ServiceRow {
                push: Vec::new(),
                ..row
            }
        );
        // A truncated push field is malformed, not a panic.
        assert!(decode("orders".into(), &now[..now.len() - 1]).is_err());
    }
}
