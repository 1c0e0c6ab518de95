//! The Hugging Face Hub source: `GET {endpoint}/{repo}/resolve/main/{file}`.
//!
//! Like `huggingface_hub`, redirects are followed by hand so that the first response's
//! `x-linked-etag` (the SHA-256 of an LFS file) is seen before the CDN answers, and the token is
//! only ever sent to the endpoint's own origin.

use std::path::Path;
use std::time::Duration;

use ureq::http::HeaderMap;

use crate::atomic::{Expected, PartialFile};
use crate::error::FetchError;
use crate::progress;
use crate::PullOptions;

/// Waiting for response headers once connected: the Hub answers in well under a second, but a
/// cold CDN edge can take several.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
/// A transfer that delivers no byte for this long is dead rather than slow.
const READ_STALL_TIMEOUT: Duration = Duration::from_secs(60);
const MAX_REDIRECTS: usize = 10;

/// `{endpoint}/{repo}/resolve/main/{file}`.
pub fn file_url(endpoint: &str, repo: &str, file: &str) -> String {
    format!(
        "{}/{repo}/resolve/main/{file}",
        endpoint.trim_end_matches('/')
    )
}

/// Downloads `repo`/`file` to `dest` atomically, verified against the SHA-256 the Hub announces.
/// Returns that SHA-256.
pub(crate) fn download(
    repo: &str,
    file: &str,
    dest: &Path,
    opts: &PullOptions,
) -> Result<String, FetchError> {
    let url = file_url(&opts.hub_endpoint, repo, file);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_resolve(Some(opts.hub_timeout))
        .timeout_connect(Some(opts.hub_timeout))
        .timeout_recv_response(Some(RESPONSE_TIMEOUT))
        .timeout_per_read(Some(READ_STALL_TIMEOUT))
        .max_redirects(0)
        .http_status_as_error(false)
        .user_agent(concat!("tensorfold/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();

    let mut current = url.clone();
    let mut send_token = true;
    let mut linked_sha256: Option<String> = None;
    let mut linked_size: Option<u64> = None;
    for _ in 0..=MAX_REDIRECTS {
        let mut request = agent.get(&current);
        if let (true, Some(token)) = (send_token, &opts.hub_token) {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let response = request.call().map_err(|e| FetchError::Unreachable {
            url: current.clone(),
            reason: e.to_string(),
        })?;
        let status = response.status().as_u16();
        let headers = response.headers();
        linked_sha256 = linked_sha256.or_else(|| header_sha256(headers, "x-linked-etag"));
        linked_size = linked_size.or_else(|| header_u64(headers, "x-linked-size"));

        if (300..400).contains(&status) {
            let Some(location) = header(headers, "location") else {
                return Err(http_status(
                    current,
                    status,
                    " (redirect without a Location)",
                ));
            };
            let next = join_url(&current, location);
            send_token &= origin(&next) == origin(&current);
            current = next;
            continue;
        }
        if status != 200 {
            return Err(http_status(url, status, status_hint(status)));
        }
        let sha256 = linked_sha256
            .or_else(|| header_sha256(headers, "etag"))
            .ok_or_else(|| FetchError::NoChecksum { url: url.clone() })?;
        let size_bytes = linked_size.or_else(|| header_u64(headers, "content-length"));

        let bar = progress::bar(
            opts.progress,
            size_bytes.unwrap_or(0),
            format!("{repo}/{file}"),
        );
        let mut partial = PartialFile::create(dest, bar)?;
        let mut body = response.into_body().into_reader();
        partial
            .append_from(&mut body)
            .map_err(|e| FetchError::io(format!("downloading {url}"), e))?;
        return partial.finish(Expected {
            sha256: &sha256,
            size_bytes,
        });
    }
    Err(http_status(url, 310, " (too many redirects)"))
}

fn http_status(url: String, status: u16, hint: &'static str) -> FetchError {
    FetchError::HttpStatus { url, status, hint }
}

fn status_hint(status: u16) -> &'static str {
    match status {
        401 | 403 => " (gated or private: set HF_TOKEN)",
        404 => " (no such repository or file)",
        429 => " (rate limited: try again later)",
        _ => "",
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    header(headers, name).and_then(|v| v.trim().parse().ok())
}

/// An ETag that is a SHA-256 (as the Hub's are for LFS files), lowercased; `None` for any other
/// ETag, such as the git blob SHA-1 of a small file.
fn header_sha256(headers: &HeaderMap, name: &str) -> Option<String> {
    let value = header(headers, name)?.trim();
    let value = value.strip_prefix("W/").unwrap_or(value).trim_matches('"');
    (value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| value.to_ascii_lowercase())
}

/// `scheme://host[:port]` of an absolute URL.
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find('/')
        .map_or(url.len(), |i| after_scheme + i);
    &url[..end]
}

/// Resolves a `Location` header against the URL that sent it.
fn join_url(base: &str, location: &str) -> String {
    if location.contains("://") {
        location.to_string()
    } else if location.starts_with("//") {
        let scheme = base.split("://").next().unwrap_or("https");
        format!("{scheme}:{location}")
    } else if location.starts_with('/') {
        format!("{}{location}", origin(base))
    } else {
        let dir = base.rfind('/').map_or(base, |i| &base[..=i]);
        format!("{dir}{location}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            file_url("https://huggingface.co/", "o/r", "f.gguf"),
            "https://huggingface.co/o/r/resolve/main/f.gguf"
        );
        assert_eq!(origin("http://127.0.0.1:9/a/b"), "http://127.0.0.1:9");
        assert_eq!(join_url("http://h:1/a/b", "/c/d"), "http://h:1/c/d");
        assert_eq!(join_url("https://h/a/b", "https://cdn/x"), "https://cdn/x");
        assert_eq!(join_url("https://h/a/b", "//cdn/x"), "https://cdn/x");
        assert_eq!(join_url("https://h/a/b", "c"), "https://h/a/c");
    }

    #[test]
    fn etag_must_be_a_sha256() {
        let sha = "ab".repeat(32);
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-linked-etag",
            format!("\"{}\"", sha.to_uppercase()).parse().unwrap(),
        );
        headers.insert(
            "etag",
            "W/\"0123456789abcdef0123456789abcdef01234567\""
                .parse()
                .unwrap(),
        );
        assert_eq!(header_sha256(&headers, "x-linked-etag"), Some(sha));
        assert_eq!(header_sha256(&headers, "etag"), None);
    }
}
