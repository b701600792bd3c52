//! The one walk of the directory, years → days → windows → instances → buckets
//! (docs/architecture.md, "Data model"), shared by the dispatcher's scan, the admin statistics and
//! the compactor. Each level is listed here once, so the rules of the walk hold for all three: days
//! are read from every year that holds one plus the years that must be read even when unlisted, and
//! a day's windows from its low-water mark on, oldest first. Callers decide at each level whether
//! to go deeper, skip or stop; the walk reads nothing they do not ask for.

use rebound_store::{window::WindowId, DirectoryStore, InstanceRow, StoreResult, TokenRange};

/// The years a walk visits: every year that holds a day (`listed`, a backlog of any age),
/// plus `always`, sorted, without duplicates, and none after `until` when given.
pub fn years(mut listed: Vec<i32>, always: &[i32], until: Option<i32>) -> Vec<i32> {
    listed.extend_from_slice(always);
    if let Some(until) = until {
        listed.retain(|y| *y <= until);
    }
    listed.sort_unstable();
    listed.dedup();
    listed
}

/// One instance of a window with its buckets (see [`Walk::entries`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub window: WindowId,
    pub row: InstanceRow,
    pub buckets: Vec<u32>,
}

/// A walk over the directory of `store`.
#[derive(Debug)]
pub struct Walk<'a, S: ?Sized>(pub &'a S);

impl<S: DirectoryStore + ?Sized> Walk<'_, S> {
    /// The years to visit (see [`years`]), listing those that hold a day.
    pub async fn years(&self, always: &[i32], until: Option<i32>) -> StoreResult<Vec<i32>> {
        Ok(years(self.0.list_years().await?, always, until))
    }

    /// The days of `year`, ascending.
    pub async fn days(&self, year: i32) -> StoreResult<Vec<i32>> {
        self.0.list_days(year).await
    }

    /// The low-water mark of `day` and its windows from there on, ascending.
    pub async fn windows(&self, day: i32) -> StoreResult<(u32, Vec<u32>)> {
        let low = self.0.low_water(day).await?;
        Ok((low, self.0.list_windows_from(day, low).await?))
    }

    /// The instances of `window` in each of `ranges`, range after range.
    pub async fn instances(
        &self,
        window: WindowId,
        ranges: &[TokenRange],
    ) -> StoreResult<Vec<InstanceRow>> {
        let mut rows = Vec::new();
        for r in ranges {
            rows.extend(self.0.list_instances(window, *r).await?);
        }
        Ok(rows)
    }

    /// The buckets of one instance of `window`.
    pub async fn buckets(&self, window: WindowId, row: &InstanceRow) -> StoreResult<Vec<u32>> {
        self.0
            .list_buckets(window, &row.service, &row.instance)
            .await
    }

    /// The whole walk over `years`: every instance (all token ranges) of every window, oldest
    /// first, with its buckets; only `service`'s when given.
    pub async fn entries(&self, years: &[i32], service: Option<&str>) -> StoreResult<Vec<Entry>> {
        let mut out = Vec::new();
        for y in years {
            for day in self.days(*y).await? {
                let (_, windows) = self.windows(day).await?;
                for index in windows {
                    let window = WindowId { day, index };
                    for row in self.instances(window, &[TokenRange::FULL]).await? {
                        if service.is_some_and(|s| s != row.service) {
                            continue;
                        }
                        let buckets = self.buckets(window, &row).await?;
                        out.push(Entry {
                            window,
                            row,
                            buckets,
                        });
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn years_hold_the_listed_and_the_required_ones_in_order() {
        assert_eq!(
            years(vec![2019, 2025], &[2024, 2025], Some(2025)),
            vec![2019, 2024, 2025]
        );
        assert_eq!(
            years(vec![2027], &[2024, 2025], Some(2025)),
            vec![2024, 2025]
        );
        assert_eq!(
            years(vec![2027, 2019], &[2024, 2025, 2026], None),
            vec![2019, 2024, 2025, 2026, 2027]
        );
    }
}
