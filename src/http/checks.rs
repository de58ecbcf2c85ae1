//! What a request's head must show before anything else reads it: a `Host` (one, agreeing with
//! an absolute-form target) and an `Origin` from the allow-lists (against DNS rebinding and
//! cross-site pages), and the token, compared in constant time.
//!
//! The allow-lists match as the MCP SDKs' do: a host entry without a port is that name on any
//! port; an origin entry is `scheme://host:port`, `scheme://host:*` (any port) or `null`, and
//! one without a port still matches any port (with a warning at start, as rmcp gives).

use axum::extract::Request;
use axum::http::uri::Authority;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// A refusal: its status and text.
pub(super) type Refusal = (StatusCode, &'static str);

/// The `Host` and `Origin` values requests may carry, parsed once.
pub(super) struct Allowed {
    /// Empty: any host.
    hosts: Vec<HostEntry>,
    /// Empty: no request with an `Origin` header.
    origins: Vec<Origin>,
}

struct HostEntry {
    host: String,
    /// `None`: any port.
    port: Option<u16>,
}

/// An origin as compared (the host in lower case, without brackets). On the allow-list a site
/// without a port is any port; in a request, the scheme's default.
#[derive(Debug, PartialEq)]
enum Origin {
    Null,
    Site {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

fn normalize_host(host: &str) -> String {
    host.trim_matches(['[', ']']).to_ascii_lowercase()
}

fn parse_origin(value: &str) -> Option<Origin> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("null") {
        return Some(Origin::Null);
    }
    let uri = Uri::try_from(value).ok()?;
    let authority = uri.authority()?;
    Some(Origin::Site {
        scheme: uri.scheme_str()?.to_ascii_lowercase(),
        host: normalize_host(authority.host()),
        port: authority.port_u16(),
    })
}

/// An allow-list entry: an origin, or `scheme://host:*`.
fn parse_allowed_origin(value: &str) -> Option<Origin> {
    let value = value.trim();
    let Some(base) = value.strip_suffix(":*") else {
        let origin = parse_origin(value)?;
        if matches!(origin, Origin::Site { port: None, .. }) {
            tracing::warn!(
                allowed_origin = value,
                "allowed origin without a port matches any port; write `:*` or the port"
            );
        }
        return Some(origin);
    };
    match parse_origin(base)? {
        site @ Origin::Site { port: None, .. } => Some(site),
        _ => None,
    }
}

/// The port a scheme implies when an origin omits it (RFC 6454 §4).
fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

impl Origin {
    /// Whether this allow-list entry admits a request's `origin`.
    fn admits(&self, origin: &Origin) -> bool {
        match (self, origin) {
            (Origin::Null, Origin::Null) => true,
            (
                Origin::Site { scheme, host, port },
                Origin::Site {
                    scheme: s,
                    host: h,
                    port: p,
                },
            ) => {
                scheme == s
                    && host == h
                    && port.is_none_or(|port| p.or_else(|| default_port(s)) == Some(port))
            }
            _ => false,
        }
    }
}

impl Allowed {
    pub(super) fn new(hosts: &[String], origins: &[String]) -> Allowed {
        let hosts = hosts
            .iter()
            .map(|h| h.trim())
            .filter(|h| !h.is_empty())
            .map(|h| match Authority::try_from(h) {
                Ok(a) => HostEntry {
                    host: normalize_host(a.host()),
                    port: a.port_u16(),
                },
                Err(_) => HostEntry {
                    host: normalize_host(h),
                    port: None,
                },
            })
            .collect();
        let origins = origins
            .iter()
            .filter_map(|o| parse_allowed_origin(o))
            .collect();
        Allowed { hosts, origins }
    }

    /// Whether a request's head passes: one `Host` (or an absolute-form target standing for
    /// it), agreeing with the target, on the list; an `Origin`, if any, on its list.
    pub(super) fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), Refusal> {
        self.check_host(uri, headers)?;
        self.check_origin(headers)
    }

    /// One `Host` (or the absolute-form target's authority), agreeing with the target, on the
    /// list.
    fn check_host(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), Refusal> {
        let mut hosts = headers.get_all(header::HOST).iter();
        let (host, more) = (hosts.next(), hosts.next());
        if more.is_some() {
            return Err((
                StatusCode::BAD_REQUEST,
                "bad request: more than one Host header\n",
            ));
        }
        let host = match host {
            Some(v) => {
                let v = v.to_str().map_err(|_| {
                    (
                        StatusCode::BAD_REQUEST,
                        "Bad Request: Invalid Host header encoding",
                    )
                })?;
                Authority::try_from(v)
                    .map_err(|_| (StatusCode::BAD_REQUEST, "Bad Request: Invalid Host header"))?
            }
            None => uri
                .authority()
                .cloned()
                .ok_or((StatusCode::BAD_REQUEST, "Bad Request: missing Host header"))?,
        };
        if let Some(target) = uri.authority()
            && !target.host().eq_ignore_ascii_case(host.host())
        {
            return Err((
                StatusCode::BAD_REQUEST,
                "bad request: the request target's authority and the Host header differ\n",
            ));
        }
        let name = normalize_host(host.host());
        let admitted = self.hosts.is_empty()
            || self
                .hosts
                .iter()
                .any(|e| e.host == name && e.port.is_none_or(|port| host.port_u16() == Some(port)));
        if !admitted {
            tracing::warn!(host = %crate::error::clip(host.as_str()), "refused a request whose Host is not allowed (DNS rebinding?)");
            return Err((
                StatusCode::FORBIDDEN,
                "Forbidden: Host header is not allowed",
            ));
        }
        Ok(())
    }

    /// An `Origin`, if the request has one, on its list.
    fn check_origin(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin.to_str().map_err(|_| {
            (
                StatusCode::FORBIDDEN,
                "Forbidden: Invalid Origin header encoding",
            )
        })?;
        let parsed = parse_origin(origin)
            .ok_or((StatusCode::FORBIDDEN, "Forbidden: Invalid Origin header"))?;
        if !self.origins.iter().any(|e| e.admits(&parsed)) {
            tracing::warn!(origin = %crate::error::clip(origin), "refused a request whose Origin is not allowed");
            return Err((
                StatusCode::FORBIDDEN,
                "Forbidden: Origin header is not allowed",
            ));
        }
        Ok(())
    }
}

/// The configured token, kept as its SHA-256 digest: a presented token is compared as a
/// digest, in constant time, so neither the token nor its length shows in the timing.
#[derive(Clone)]
pub struct Token([u8; 32]);

impl Token {
    pub fn new(token: &str) -> Token {
        Token(Sha256::digest(token.as_bytes()).into())
    }

    /// Whether `presented` is the token.
    pub fn matches(&self, presented: &str) -> bool {
        let digest = Sha256::digest(presented.as_bytes());
        digest
            .iter()
            .zip(self.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// A route group's credential check, run before the request's body is read when a token is
/// configured: the refusal to send, if refused (the body is then drained, not read).
pub type Auth = fn(&Request, &Token) -> Option<Response>;

/// The credentials of an `Authorization: Bearer …` header, trimmed; the scheme's name is
/// case-insensitive (RFC 7235).
pub fn bearer_credentials(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, credentials) = value.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(credentials.trim())
}

/// `/mcp`'s check: the token as a bearer token, else 401 with a `WWW-Authenticate` challenge.
pub fn bearer(request: &Request, token: &Token) -> Option<Response> {
    if bearer_credentials(request.headers()).is_some_and(|t| token.matches(t)) {
        return None;
    }
    let challenge = HeaderValue::from_static("Bearer realm=\"agent-as-model\"");
    Some(
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, challenge)],
            "unauthorized\n",
        )
            .into_response(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(allowed: &Allowed, target: &str, headers: &[(&str, &str)]) -> Option<u16> {
        let uri: Uri = target.parse().unwrap();
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(
                axum::http::HeaderName::try_from(*k).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        allowed.check(&uri, &map).err().map(|(s, _)| s.as_u16())
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn hosts_match_by_name_on_any_port_unless_one_is_named() {
        let allowed = Allowed::new(
            &strings(&["localhost", "::1", "[::1]", "example.com:8080"]),
            &[],
        );
        assert_eq!(check(&allowed, "/mcp", &[("host", "LOCALHOST:1")]), None);
        assert_eq!(check(&allowed, "/mcp", &[("host", "[::1]:9")]), None);
        assert_eq!(
            check(&allowed, "/mcp", &[("host", "example.com:8080")]),
            None
        );
        assert_eq!(
            check(&allowed, "/mcp", &[("host", "example.com:8081")]),
            Some(403)
        );
        assert_eq!(
            check(&allowed, "/mcp", &[("host", "example.com")]),
            Some(403)
        );
        assert_eq!(check(&allowed, "/mcp", &[]), Some(400));
        assert_eq!(
            check(
                &allowed,
                "/mcp",
                &[("host", "localhost"), ("host", "localhost")]
            ),
            Some(400)
        );
        assert_eq!(check(&allowed, "http://localhost:5/mcp", &[]), None);
        assert_eq!(
            check(
                &allowed,
                "http://evil.example/mcp",
                &[("host", "localhost")]
            ),
            Some(400)
        );
    }

    #[test]
    fn origins_match_scheme_host_and_port() {
        let allowed = Allowed::new(
            &[],
            &strings(&[
                "http://localhost:8000",
                "https://app.example:*",
                "null",
                "https://bare.example",
                "https://bad.example:443:*",
            ]),
        );
        let with = |o: &str| check(&allowed, "/", &[("host", "x"), ("origin", o)]);
        assert_eq!(with("http://localhost:8000"), None);
        assert_eq!(with("http://LOCALHOST:8000"), None);
        assert_eq!(with("http://localhost:8001"), Some(403));
        assert_eq!(with("https://localhost:8000"), Some(403));
        assert_eq!(with("https://app.example:1"), None);
        assert_eq!(with("https://app.example"), None);
        assert_eq!(with("null"), None);
        assert_eq!(with("https://bare.example:9"), None);
        assert_eq!(with("https://bad.example"), Some(403));
        assert_eq!(with("not an origin"), Some(403));
        assert_eq!(check(&allowed, "/", &[("host", "x")]), None);
        let none = Allowed::new(&[], &[]);
        assert_eq!(
            check(&none, "/", &[("host", "x"), ("origin", "http://x")]),
            Some(403)
        );
    }

    #[test]
    fn an_exact_origin_port_may_be_the_schemes_default() {
        let allowed = Allowed::new(&[], &strings(&["https://site.example:443"]));
        let with = |o: &str| check(&allowed, "/", &[("host", "x"), ("origin", o)]);
        assert_eq!(with("https://site.example"), None);
        assert_eq!(with("http://site.example"), Some(403));
    }

    #[test]
    fn the_token_is_read_from_a_bearer_header_of_any_case() {
        let token = Token::new("s3cret");
        let request = |value: &str| {
            Request::builder()
                .header("authorization", value)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        for ok in ["Bearer s3cret", "bearer s3cret", "BEARER  s3cret "] {
            assert!(bearer(&request(ok), &token).is_none(), "{ok}");
        }
        for bad in ["Basic s3cret", "Bearer s3cre", "Bearer", "s3cret"] {
            let refused = bearer(&request(bad), &token).unwrap();
            assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "{bad}");
            assert!(refused.headers().contains_key(header::WWW_AUTHENTICATE));
        }
    }
}
