//! Window math (docs/architecture.md, "Data model" and invariant 1, "Windows close before
//! they are read").
//!
//! A UTC day is cut into `86400 / window_seconds` windows. An item due at `t` goes into
//! `max(window_of(t), current + 1)` (the W+1 rule, `target`), except a near-term item, which
//! goes into the current window while that has more than `near_headroom_ms` left
//! (`near_target`). A write counts only once durable before its window's end by its writer's
//! clock (the writer checks, and places the item again otherwise), and a window is read only
//! once `now >= end + skew_margin`, so no reader reads a window that a kept write may still
//! reach. The window's id, as the directory keys it, is the storage contract's
//! (`rebound_store::window::WindowId`).

use rebound_store::window::{WindowId, DAY_MS};

/// The grid of windows for one `window_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowGrid {
    window_ms: i64,
}

impl WindowGrid {
    /// `window_seconds` must divide 86400 (checked by the configuration).
    pub fn new(window_seconds: u32) -> Self {
        assert!(window_seconds > 0 && 86_400 % window_seconds == 0);
        Self {
            window_ms: i64::from(window_seconds) * 1000,
        }
    }

    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }

    pub fn windows_per_day(&self) -> u32 {
        (DAY_MS / self.window_ms) as u32
    }

    pub fn window_of(&self, t_ms: i64) -> WindowId {
        let day = t_ms.div_euclid(DAY_MS);
        let in_day = t_ms.rem_euclid(DAY_MS);
        WindowId {
            day: day as i32,
            index: (in_day / self.window_ms) as u32,
        }
    }

    pub fn start_ms(&self, w: WindowId) -> i64 {
        i64::from(w.day) * DAY_MS + i64::from(w.index) * self.window_ms
    }

    /// First millisecond after the window.
    pub fn end_ms(&self, w: WindowId) -> i64 {
        self.start_ms(w) + self.window_ms
    }

    pub fn next(&self, w: WindowId) -> WindowId {
        if w.index + 1 >= self.windows_per_day() {
            WindowId {
                day: w.day + 1,
                index: 0,
            }
        } else {
            WindowId {
                day: w.day,
                index: w.index + 1,
            }
        }
    }

    /// The window an item due at `due_ms` is written to when the writer's clock reads `now_ms`:
    /// its own window, but never the current or a past one.
    pub fn target(&self, now_ms: i64, due_ms: i64) -> WindowId {
        let earliest = self.next(self.window_of(now_ms));
        self.window_of(due_ms).max(earliest)
    }

    /// The window an item due at `due_ms` is first written to: the current one when the item
    /// falls due in it, counting the timer's settle time (`settle_ms`, so that the timer fires
    /// before the window is read), and the window has more than `near_headroom_ms` left for
    /// the write to be durable in; otherwise `target`'s.
    pub fn near_target(&self, now_ms: i64, due_ms: i64, settle_ms: i64) -> WindowId {
        let current = self.window_of(now_ms);
        let fires = due_ms.max(now_ms.saturating_add(settle_ms));
        if self.window_of(fires) == current
            && now_ms.saturating_add(self.near_headroom_ms()) < self.end_ms(current)
        {
            current
        } else {
            self.target(now_ms, due_ms)
        }
    }

    /// How much of the current window must be left for a near-term write into it: a quarter
    /// of the window, at most a second. A write that takes longer is placed again (W+1).
    pub fn near_headroom_ms(&self) -> i64 {
        (self.window_ms / 4).min(1_000)
    }

    /// True once a reader may scan `w`: the window has ended and the skew margin has passed.
    pub fn is_readable(&self, w: WindowId, now_ms: i64, skew_margin_ms: i64) -> bool {
        now_ms >= self.end_ms(w) + skew_margin_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDateTime, TimeZone, Utc};

    fn ms(s: &str) -> i64 {
        let t = NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.3f").unwrap();
        Utc.from_utc_datetime(&t).timestamp_millis()
    }

    #[test]
    fn window_of_and_bounds() {
        let g = WindowGrid::new(60);
        let w = g.window_of(ms("2026-11-30 10:15:23.451"));
        assert_eq!(w.index, 615);
        assert_eq!(w.date().to_string(), "2026-11-30");
        assert_eq!(g.start_ms(w), ms("2026-11-30 10:15:00.000"));
        assert_eq!(g.end_ms(w), ms("2026-11-30 10:16:00.000"));
        assert_eq!(g.windows_per_day(), 1440);
    }

    #[test]
    fn w_plus_one_inside_a_day() {
        let g = WindowGrid::new(60);
        let now = ms("2026-11-30 10:15:59.999");
        // Due now, or in the past: the next window.
        assert_eq!(g.target(now, now).index, 616);
        assert_eq!(g.target(now, now - 3_600_000).index, 616);
        // Due in the next window: that window.
        assert_eq!(g.target(now, now + 1).index, 616);
        // Due later: its own window.
        assert_eq!(g.target(now, ms("2026-11-30 10:20:00.000")).index, 620);
    }

    #[test]
    fn w_plus_one_rolls_into_the_next_day_and_year() {
        let g = WindowGrid::new(60);
        let now = ms("2026-12-31 23:59:59.999");
        let t = g.target(now, now);
        assert_eq!((t.date().to_string(), t.index), ("2027-01-01".into(), 0));
        assert_eq!(t.year(), 2027);
        let g1 = WindowGrid::new(1);
        let t = g1.target(now, now);
        assert_eq!((t.date().to_string(), t.index), ("2027-01-01".into(), 0));
        let now = ms("2026-12-31 23:59:58.000");
        assert_eq!(g1.target(now, now).index, 86_399);
    }

    #[test]
    fn near_term_items_go_into_the_current_window_while_it_has_headroom() {
        let g = WindowGrid::new(60);
        let start = ms("2026-11-30 10:15:00.000");
        // Due now, in the past, or later in this window: the current window.
        assert_eq!(g.near_target(start, start, 500).index, 615);
        assert_eq!(g.near_target(start, start - 3_600_000, 500).index, 615);
        assert_eq!(g.near_target(start, start + 58_999, 500).index, 615);
        // Due in a later window: its own.
        assert_eq!(g.near_target(start, start + 60_000, 500).index, 616);
        assert_eq!(
            g.near_target(start, ms("2026-11-30 10:20:00.000"), 500)
                .index,
            620
        );
        // The last second of the window is its headroom: W+1.
        let late = ms("2026-11-30 10:15:59.000");
        assert_eq!(g.near_headroom_ms(), 1_000);
        assert_eq!(g.near_target(late, late, 0).index, 616);
        assert_eq!(g.near_target(late - 1, late - 1, 0).index, 615);
        // The timer's settle time counts: due now, it fires 500 ms on, past the window.
        let g1 = WindowGrid::new(1);
        let t = ms("2026-11-30 10:15:00.600");
        assert_eq!(g1.near_headroom_ms(), 250);
        assert_eq!(g1.near_target(t, t, 500), g1.next(g1.window_of(t)));
        assert_eq!(g1.near_target(t - 200, t - 200, 500), g1.window_of(t));
        // Never a past window, even for an item due long ago.
        let now = ms("2026-12-31 23:59:59.999");
        let w = g.near_target(now, now - 86_400_000, 500);
        assert_eq!((w.date().to_string(), w.index), ("2027-01-01".into(), 0));
    }

    #[test]
    fn readable_only_after_end_plus_margin() {
        let g = WindowGrid::new(2);
        let w = g.window_of(ms("2026-11-30 00:00:01.000"));
        assert!(!g.is_readable(w, ms("2026-11-30 00:00:03.999"), 2000));
        assert!(g.is_readable(w, ms("2026-11-30 00:00:04.000"), 2000));
    }

    #[test]
    fn windows_before_the_epoch() {
        let g = WindowGrid::new(60);
        assert_eq!(g.window_of(-1).day, -1);
        assert_eq!(g.window_of(-1).index, 1439);
    }
}
