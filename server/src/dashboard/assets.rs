//! The page's files, compiled into the binary from `assets/` (no CDN, nothing from the
//! network). Each answer has `Cache-Control: no-cache` and an ETag (a hash of the bytes,
//! computed once), so a browser asks again on every load and gets 304 when nothing changed,
//! and the strict security headers of [`security_headers`].
//!
//! A file added to `assets/` must be added to [`ASSETS`] too; a unit test fails until it is.

use std::sync::OnceLock;

use axum::{
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use sha2::{Digest, Sha256};

/// One embedded file: where it is served, its media type and its bytes.
struct Asset {
    path: &'static str,
    /// The file's name in `assets/` (read by the test that every file there is served).
    #[cfg_attr(not(test), allow(dead_code))]
    file: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

static ASSETS: &[Asset] = &[
    Asset {
        path: "/",
        file: "index.html",
        content_type: "text/html; charset=utf-8",
        bytes: include_bytes!("assets/index.html"),
    },
    Asset {
        path: "/app.js",
        file: "app.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("assets/app.js"),
    },
    Asset {
        path: "/app.css",
        file: "app.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("assets/app.css"),
    },
];

pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; \
     style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

/// The headers every dashboard answer carries (the API's too).
pub fn security_headers(h: &mut HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

/// Each asset's ETag, in [`ASSETS`] order: a quoted prefix of the SHA-256 of its bytes.
fn etags() -> &'static [HeaderValue] {
    static ETAGS: OnceLock<Vec<HeaderValue>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let hex: String = Sha256::digest(a.bytes)[..12]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                HeaderValue::from_str(&format!("\"{hex}\"")).expect("hex is a header value")
            })
            .collect()
    })
}

/// Whether an `If-None-Match` value names `etag` (or is `*`); weak tags compare too.
fn matches(if_none_match: &str, etag: &str) -> bool {
    if_none_match
        .split(',')
        .map(|t| t.trim())
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
}

fn serve(i: usize, request: &HeaderMap) -> Response {
    let (asset, etag) = (&ASSETS[i], &etags()[i]);
    let fresh = request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| matches(v, etag.to_str().unwrap_or("")));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut r = asset.bytes.into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        );
        r
    };
    let h = response.headers_mut();
    h.insert(header::ETAG, etag.clone());
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    security_headers(h);
    response
}

/// `GET` (and `HEAD`) of every asset.
pub fn router() -> Router {
    let mut r = Router::new();
    for (i, a) in ASSETS.iter().enumerate() {
        r = r.route(a.path, get(move |h: HeaderMap| async move { serve(i, &h) }));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_in_assets_is_served() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/dashboard/assets");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            assert!(
                ASSETS.iter().any(|a| a.file == name),
                "{name} is in {} but not in dashboard::assets::ASSETS",
                dir.display()
            );
        }
    }

    #[test]
    fn if_none_match_lists_and_weak_tags() {
        assert!(matches("\"abc\"", "\"abc\""));
        assert!(matches("\"x\", W/\"abc\"", "\"abc\""));
        assert!(matches("*", "\"abc\""));
        assert!(!matches("\"abd\"", "\"abc\""));
        assert_eq!(etags().len(), ASSETS.len());
    }
}
