//! A window's id as the directory keys it (docs/architecture.md, "Data model"): the UTC day
//! and the window's index within it, and the days' dates. Which window a retry goes to, and
//! when a window may be read, is the engine's (`rebound_engine::window`).

use chrono::{Datelike, NaiveDate};

pub const DAY_MS: i64 = 86_400_000;

/// One window: the UTC day (days since 1970-01-01) and its index within the day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WindowId {
    pub day: i32,
    pub index: u32,
}

impl WindowId {
    pub fn date(&self) -> NaiveDate {
        day_to_date(self.day)
    }

    pub fn year(&self) -> i32 {
        self.date().year()
    }
}

pub fn day_to_date(day: i32) -> NaiveDate {
    day.checked_add(EPOCH_DAYS_FROM_CE)
        .and_then(NaiveDate::from_num_days_from_ce_opt)
        .unwrap_or(NaiveDate::MIN)
}

pub fn date_to_day(date: NaiveDate) -> i32 {
    date.num_days_from_ce() - EPOCH_DAYS_FROM_CE
}

/// `NaiveDate::from_ymd(1970, 1, 1).num_days_from_ce()`.
const EPOCH_DAYS_FROM_CE: i32 = 719_163;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_round_trip_before_and_after_epoch() {
        for d in [-800, -1, 0, 1, 20_000, 20_787] {
            assert_eq!(date_to_day(day_to_date(d)), d);
        }
    }

    #[test]
    fn day_to_date_is_total() {
        for d in [i32::MIN, -1_000_000_000, -1, 0, 1, 1_000_000_000, i32::MAX] {
            let _ = day_to_date(d);
        }
        assert_eq!(day_to_date(i32::MAX), NaiveDate::MIN);
    }
}
