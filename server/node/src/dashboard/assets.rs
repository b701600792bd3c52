//! The page's files, compiled into the binary from `assets/` (no CDN, nothing from the
//! network). Each answer has `Cache-Control: no-cache` and an ETag (a hash of the bytes,
//! computed once), so a browser asks again on every load and gets 304 when nothing changed,
//! and the strict security headers of [`security_headers`].
//!
//! The script is ES modules: `app.js` (the entry, loaded by `index.html` with
//! `<script type="module">`) and the modules it imports from `js/`, each served at its path
//! under `assets/` (`/js/api.js`). A file added to `assets/` must be added to [`ASSETS`] too,
//! and every module a script imports must be served: unit tests fail until they are.

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
    /// The file's path in `assets/`, `/`-separated (read by the test that every file there
    /// is served).
    #[cfg_attr(not(test), allow(dead_code))]
    file: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";

/// A script module: served at `/` + its file name (its path in `assets/`), as JavaScript.
macro_rules! script {
    ($file:literal) => {
        Asset {
            path: concat!("/", $file),
            file: $file,
            content_type: JAVASCRIPT,
            bytes: include_bytes!(concat!("assets/", $file)),
        }
    };
}

static ASSETS: &[Asset] = &[
    Asset {
        path: "/",
        file: "index.html",
        content_type: "text/html; charset=utf-8",
        bytes: include_bytes!("assets/index.html"),
    },
    script!("app.js"),
    Asset {
        path: "/app.css",
        file: "app.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("assets/app.css"),
    },
    script!("js/api.js"),
    script!("js/charts.js"),
    script!("js/dead-letters.js"),
    script!("js/dom.js"),
    script!("js/format.js"),
    script!("js/forms.js"),
    script!("js/nav.js"),
    script!("js/overview.js"),
    script!("js/paging.js"),
    script!("js/push.js"),
    script!("js/retries.js"),
    script!("js/retry.js"),
    script!("js/ring.js"),
    script!("js/service.js"),
    script!("js/state.js"),
    script!("js/window.js"),
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
    use axum::body::{to_bytes, Body};
    use axum::http::Request;
    use std::path::Path;
    use tower::ServiceExt;

    /// Every file under `dir`, as a path relative to `root` with `/` separators.
    fn files(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                files(root, &entry.path(), out);
            } else {
                let rel = entry.path().strip_prefix(root).unwrap().to_owned();
                let parts: Vec<_> = rel.iter().map(|p| p.to_string_lossy()).collect();
                out.push(parts.join("/"));
            }
        }
    }

    #[test]
    fn every_file_in_assets_is_served_with_its_media_type() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/dashboard/assets");
        let mut names = Vec::new();
        files(&root, &root, &mut names);
        for name in names {
            let asset = ASSETS.iter().find(|a| a.file == name);
            let asset = asset.unwrap_or_else(|| {
                panic!(
                    "{name} is in {} but not in dashboard::assets::ASSETS",
                    root.display()
                )
            });
            let kind = match name.rsplit_once('.').map(|(_, ext)| ext) {
                Some("html") => "text/html; charset=utf-8",
                Some("js") => JAVASCRIPT,
                Some("css") => "text/css; charset=utf-8",
                _ => panic!("{name}: no media type for that extension (add one here)"),
            };
            assert_eq!(asset.content_type, kind, "{name}");
        }
        for (i, a) in ASSETS.iter().enumerate() {
            assert!(
                ASSETS[..i].iter().all(|b| b.path != a.path),
                "{} is listed twice",
                a.path
            );
        }
    }

    /// `specifier` (`./api.js`, `../app.js`, `/js/api.js`) resolved against the path `from`
    /// is served at, as a browser does; None for a bare specifier (`api.js`), which a browser
    /// refuses in an import.
    fn resolve(from: &str, specifier: &str) -> Option<String> {
        let mut parts: Vec<&str> = from.split('/').collect();
        parts.pop(); // the importing file's own name
        if specifier.starts_with('/') {
            parts = vec![""];
        } else if !(specifier.starts_with("./") || specifier.starts_with("../")) {
            return None;
        }
        for segment in specifier.split('/') {
            match segment {
                "" | "." => {}
                ".." => {
                    if parts.len() > 1 {
                        parts.pop();
                    }
                }
                s => parts.push(s),
            }
        }
        Some(parts.join("/"))
    }

    /// The text between the first pair of quotes (either kind) in `s`.
    fn quoted(s: &str) -> Option<&str> {
        let start = s.find(['"', '\''])?;
        let q = &s[start..start + 1];
        let rest = &s[start + 1..];
        Some(&rest[..rest.find(q)?])
    }

    /// One module's static imports and re-exports (prettier starts each statement on a line
    /// of its own and ends it with `;`): (specifier, the names it imports; none for
    /// `import "x"` and `import * as ns`).
    fn imports(source: &str) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        let mut lines = source.lines().map(str::trim_start);
        while let Some(line) = lines.next() {
            let re_export = line.starts_with("export {") || line.starts_with("export *");
            if !(line.starts_with("import ") || line.starts_with("import{") || re_export) {
                continue;
            }
            let mut statement = line.to_string();
            while !statement.trim_end().ends_with(';') {
                match lines.next() {
                    Some(next) => statement.push_str(next),
                    None => break,
                }
            }
            if re_export && !statement.contains(" from ") {
                continue; // `export { a, b };`: a list of local names, nothing imported
            }
            let (clause, from) = match statement.rsplit_once(" from ") {
                Some((clause, from)) => (clause, from),
                None => ("", statement.as_str()), // import "./x.js";
            };
            let clause = clause
                .strip_prefix("import")
                .or_else(|| clause.strip_prefix("export"))
                .unwrap_or(clause)
                .trim();
            let specifier = quoted(from)
                .unwrap_or_else(|| panic!("no module named in {statement:?}"))
                .to_string();
            let names = if clause.is_empty() || clause.starts_with('*') {
                Vec::new()
            } else if let Some(list) = clause.strip_prefix('{').and_then(|l| l.strip_suffix('}')) {
                list.split(',')
                    .map(|n| n.split(" as ").next().unwrap().trim().to_string())
                    .filter(|n| !n.is_empty())
                    .collect()
            } else {
                panic!("{statement:?}: only named imports (`import {{ a }} from`) are checked");
            };
            out.push((specifier, names));
        }
        assert!(
            !source.contains("import("),
            "a dynamic import() is not checked here: import statically"
        );
        out
    }

    /// The names a module exports (`export function f`, `export const x`, `export { a as b }`).
    fn exports(source: &str) -> Vec<String> {
        let mut out = Vec::new();
        for line in source.lines() {
            let Some(rest) = line.strip_prefix("export ") else {
                continue;
            };
            if let Some(list) = rest.strip_prefix('{') {
                let list = list.split('}').next().unwrap_or("");
                out.extend(
                    list.split(',')
                        .map(|n| n.rsplit(" as ").next().unwrap().trim().to_string())
                        .filter(|n| !n.is_empty()),
                );
                continue;
            }
            let rest = rest.trim_start_matches("async ");
            for keyword in [
                "function* ",
                "function ",
                "const ",
                "let ",
                "var ",
                "class ",
            ] {
                if let Some(decl) = rest.strip_prefix(keyword) {
                    let name: String = decl
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                        .collect();
                    out.push(name);
                }
            }
        }
        out
    }

    fn text(a: &Asset) -> &'static str {
        std::str::from_utf8(a.bytes).unwrap_or_else(|_| panic!("{} is not UTF-8", a.path))
    }

    /// A missing module (or export) fails here, not in the browser.
    #[test]
    fn every_import_names_a_served_module_and_its_exports() {
        let scripts: Vec<&Asset> = ASSETS
            .iter()
            .filter(|a| a.content_type == JAVASCRIPT)
            .collect();
        let mut imported = vec!["/app.js".to_string()]; // index.html's entry (checked below)
        for module in &scripts {
            for (specifier, names) in imports(text(module)) {
                let path = resolve(module.path, &specifier).unwrap_or_else(|| {
                    panic!(
                        "{}: import {specifier:?}: a bare name (a browser needs ./, ../ or /)",
                        module.path
                    )
                });
                let target = scripts.iter().find(|a| a.path == path).unwrap_or_else(|| {
                    panic!(
                        "{}: import {specifier:?}: {path} is not a served script \
                         (dashboard::assets::ASSETS)",
                        module.path
                    )
                });
                let exported = exports(text(target));
                for name in names {
                    assert!(
                        exported.contains(&name),
                        "{}: imports {name} from {path}, which does not export it",
                        module.path
                    );
                }
                imported.push(path);
            }
        }
        for module in &scripts {
            assert!(
                imported.iter().any(|p| p == module.path),
                "{} is served but nothing imports it",
                module.path
            );
        }
    }

    /// index.html names the entry module and the stylesheet, both served.
    #[test]
    fn the_page_loads_the_entry_module_and_the_stylesheet() {
        let page = text(&ASSETS[0]);
        assert_eq!(ASSETS[0].path, "/");
        let script = page
            .lines()
            .find(|l| l.contains("<script"))
            .expect("a <script> in index.html");
        assert!(script.contains(r#"type="module""#), "{script}");
        // A URL in the page: relative to `/`, where it is served.
        let url = |line: &str, attr: &str| {
            let v = quoted(&line[line.find(attr).expect(attr)..]).unwrap();
            if v.starts_with(['.', '/']) {
                resolve("/", v)
            } else {
                resolve("/", &format!("./{v}"))
            }
        };
        // The entry: what every_import_names_a_served_module_and_its_exports starts from.
        assert_eq!(url(script, "src=").as_deref(), Some("/app.js"));
        let css = page
            .lines()
            .find(|l| l.contains(r#"rel="stylesheet""#))
            .expect("a stylesheet in index.html");
        let href = url(css, "href=").unwrap();
        assert!(
            ASSETS.iter().any(|a| a.path == href),
            "{href} is not served"
        );
    }

    #[test]
    fn resolves_like_a_browser() {
        assert_eq!(
            resolve("/app.js", "./js/api.js").as_deref(),
            Some("/js/api.js")
        );
        assert_eq!(
            resolve("/js/nav.js", "./api.js").as_deref(),
            Some("/js/api.js")
        );
        assert_eq!(
            resolve("/js/nav.js", "../app.js").as_deref(),
            Some("/app.js")
        );
        assert_eq!(resolve("/js/nav.js", "/app.js").as_deref(), Some("/app.js"));
        assert_eq!(resolve("/js/nav.js", "api.js"), None);
        let module = [
            r#"import { a, b as c } from "./x.js";"#,
            "import {",
            "\td,",
            "} from './y.js';",
            r#"import * as ns from "./v.js";"#,
            r#"import "./z.js";"#,
            r#"export { e } from "./w.js";"#,
            "export { f };",
        ];
        let want: Vec<(String, Vec<String>)> = vec![
            ("./x.js".into(), vec!["a".into(), "b".into()]),
            ("./y.js".into(), vec!["d".into()]),
            ("./v.js".into(), vec![]),
            ("./z.js".into(), vec![]),
            ("./w.js".into(), vec!["e".into()]),
        ];
        assert_eq!(imports(&module.join("\n")), want);
        let module = [
            "export function f() {}",
            "export async function g() {}",
            "export const $ = 1;",
            "export let h;",
            "export { i, j as k };",
        ];
        assert_eq!(exports(&module.join("\n")), ["f", "g", "$", "h", "i", "k"]);
    }

    /// Every asset at its path: 200 with its media type and bytes, then 304 for its ETag.
    #[tokio::test]
    async fn every_asset_is_served_at_its_path_with_an_etag() {
        let app = router();
        for a in ASSETS {
            let r = app
                .clone()
                .oneshot(Request::get(a.path).body(Body::empty()).unwrap())
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{}", a.path);
            assert_eq!(r.headers()[header::CONTENT_TYPE], a.content_type);
            assert_eq!(r.headers()[header::CACHE_CONTROL], "no-cache");
            let etag = r.headers()[header::ETAG].clone();
            assert_eq!(to_bytes(r.into_body(), usize::MAX).await.unwrap(), a.bytes);
            let r = app
                .clone()
                .oneshot(
                    Request::get(a.path)
                        .header(header::IF_NONE_MATCH, etag.clone())
                        .body(Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "{}", a.path);
            assert_eq!(r.headers()[header::ETAG], etag);
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
