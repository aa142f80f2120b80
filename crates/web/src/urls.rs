//! Percent-encoding of what goes into the URLs llmwatch writes into pages
//! and redirects.

/// Percent-encodes one URL path segment (target names are config names,
/// but never trust that).
pub fn path_segment(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, URL_COMPONENT).to_string()
}

/// What a URL component may hold unencoded (RFC 3986's unreserved set).
const URL_COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

const QUERY_PATH: &percent_encoding::AsciiSet = &URL_COMPONENT.remove(b'/');

/// A local path as a query value: a URL component that keeps its slashes
/// readable (`/login?next=/sweeps`).
pub fn query_path(path: &str) -> String {
    percent_encoding::utf8_percent_encode(path, QUERY_PATH).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(path_segment("vllm-a_1.x"), "vllm-a_1.x");
        assert_eq!(path_segment("a b/<c>"), "a%20b%2F%3Cc%3E");
        assert_eq!(query_path("/sweeps/1?x=&y"), "/sweeps/1%3Fx%3D%26y");
    }
}
