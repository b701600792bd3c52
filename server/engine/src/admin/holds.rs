//! AdminService's dependency holds (docs/architecture.md, "Dependency holds").

use rebound_proto::{time::ts, v1 as pb};

use crate::handle::Handle;
use crate::{error::Error, validate};
use rebound_store::HoldRow;

pub fn hold_pb(h: HoldRow) -> pb::DependencyHoldInfo {
    pb::DependencyHoldInfo {
        dependency: h.dependency,
        until: Some(ts(h.until_ms)),
        reason: h.reason,
        held_at: Some(ts(h.held_at_ms)),
        source: h.source,
    }
}

impl Handle {
    pub async fn hold_dependency(
        &self,
        r: &pb::HoldDependencyRequest,
    ) -> Result<pb::DependencyHoldInfo, Error> {
        validate::dependency("dependency", &r.dependency)?;
        let (duration, reason) = validate::hold("", r.duration.as_ref(), &r.reason)?;
        let row = self
            .holds
            .hold(&r.dependency, duration, &reason, "admin", 0)
            .await?;
        Ok(hold_pb(row))
    }

    pub async fn release_dependency(
        &self,
        r: &pb::ReleaseDependencyRequest,
    ) -> Result<pb::ReleaseDependencyResponse, Error> {
        validate::dependency("dependency", &r.dependency)?;
        Ok(pb::ReleaseDependencyResponse {
            released: self.holds.release(&r.dependency).await?,
        })
    }

    pub async fn list_dependency_holds(&self) -> Result<pb::ListDependencyHoldsResponse, Error> {
        Ok(pb::ListDependencyHoldsResponse {
            holds: self.holds.list().await?.into_iter().map(hold_pb).collect(),
        })
    }
}
