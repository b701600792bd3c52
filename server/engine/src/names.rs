//! The name rules that request validation (`validate`) and the credentials file (`auth`)
//! share. The ground floor of the crate: it depends on no other module, so both can use it
//! without either depending on the other or on the domain error.

pub const MAX_SERVICE_LEN: usize = 64;

/// Shows at most 64 characters of a hostile value in an error message.
pub fn show(v: &str) -> String {
    let cut: String = v.chars().take(64).collect();
    if cut.len() < v.len() {
        format!("{cut:?}...")
    } else {
        format!("{cut:?}")
    }
}

/// Why `v` is not a service name (1-64 characters of `[A-Za-z0-9._-]` starting with a letter
/// or digit), or None when it is one. The reason reads after the field name.
pub fn service_problem(v: &str) -> Option<String> {
    name_problem(v, MAX_SERVICE_LEN)
}

/// The longest dependency name (`EnqueueRetryRequest.dependency`).
pub const MAX_DEPENDENCY_LEN: usize = 128;

/// Why `v` is not a dependency name: the rules of a service name, 1-128 characters.
pub fn dependency_problem(v: &str) -> Option<String> {
    name_problem(v, MAX_DEPENDENCY_LEN)
}

fn name_problem(v: &str, max: usize) -> Option<String> {
    let ok = !v.is_empty()
        && v.len() <= max
        && v.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        None
    } else if v.is_empty() {
        Some("is required".into())
    } else {
        Some(format!(
            "must be 1-{max} characters of [A-Za-z0-9._-] starting with a letter or digit, got {}",
            show(v)
        ))
    }
}
