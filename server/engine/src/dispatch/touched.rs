//! The instances the timer worked (`Dispatcher::touched_by_timer`): a scan sweeps them even
//! without a subscriber (docs/architecture.md, "Dispatch": the sweep). Bounded in count; the
//! lookups borrow, so the timer's note of each delivery allocates nothing once its instance is
//! known.

use std::collections::{HashMap, HashSet};

use rebound_store::window::WindowId;

/// Service, then instance, then the windows of that instance.
#[derive(Debug, Default)]
pub(super) struct Touched {
    by_service: HashMap<String, HashMap<String, HashSet<WindowId>>>,
    len: usize,
}

impl Touched {
    /// Notes `(window, service, instance)`, unless `max` are noted already.
    pub(super) fn note(&mut self, max: usize, window: WindowId, service: &str, instance: &str) {
        if self.contains(window, service, instance) || self.len >= max {
            return;
        }
        let instances = match self.by_service.get_mut(service) {
            Some(i) => i,
            None => self.by_service.entry(service.to_string()).or_default(),
        };
        let windows = match instances.get_mut(instance) {
            Some(w) => w,
            None => instances.entry(instance.to_string()).or_default(),
        };
        windows.insert(window);
        self.len += 1;
    }

    pub(super) fn contains(&self, window: WindowId, service: &str, instance: &str) -> bool {
        self.by_service
            .get(service)
            .and_then(|i| i.get(instance))
            .is_some_and(|w| w.contains(&window))
    }

    /// Forgets `(window, service, instance)` (a scan is working it).
    pub(super) fn remove(&mut self, window: WindowId, service: &str, instance: &str) {
        let Some(instances) = self.by_service.get_mut(service) else {
            return;
        };
        let Some(windows) = instances.get_mut(instance) else {
            return;
        };
        if windows.remove(&window) {
            self.len -= 1;
        }
        if windows.is_empty() {
            instances.remove(instance);
        }
        if instances.is_empty() {
            self.by_service.remove(service);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_notes_once_forgets_and_stays_within_its_bound() {
        let w = |index| WindowId { day: 1, index };
        let mut t = Touched::default();
        t.note(2, w(1), "s", "i");
        t.note(2, w(1), "s", "i");
        assert_eq!(t.len, 1);
        t.note(2, w(2), "s", "i");
        t.note(2, w(3), "s", "j");
        assert_eq!(t.len, 2, "bounded");
        assert!(t.contains(w(1), "s", "i") && t.contains(w(2), "s", "i"));
        assert!(!t.contains(w(3), "s", "j"));
        t.remove(w(1), "s", "i");
        t.remove(w(1), "s", "i");
        assert_eq!(t.len, 1);
        t.remove(w(2), "s", "i");
        assert!(t.by_service.is_empty());
    }
}
