//! [`ClientSecurity`]: what a client of a Sluice server presents — TLS settings
//! (then it dials `https://`) and a bearer token, which [`Bearer`] adds to every
//! request. Dispatcher clients, workers dialling the dispatcher, readers dialling
//! workers, and dispatchers dialling their Raft peers all use it.
//!
//! [`Bearer`] is also where every call picks up the caller's trace context (W3C
//! `traceparent`, `sluice_telemetry::propagation`), since every outgoing call of
//! Sluice already passes through it; with trace export off that costs one atomic
//! load.

use tonic::metadata::{Ascii, MetadataKey, MetadataValue};
use tonic::transport::{ClientTlsConfig, Endpoint};

use crate::error::SecurityError;
use crate::tls::TlsSettings;
use crate::tokens::Secret;

/// Adds `authorization: Bearer SECRET` to requests (nothing without a secret), and
/// the current span's trace context when traces are exported.
#[derive(Clone, Default)]
pub struct Bearer {
    value: Option<MetadataValue<Ascii>>,
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.value.is_some() { "Bearer(…)" } else { "Bearer(none)" })
    }
}

impl Bearer {
    pub fn new(secret: Option<&Secret>) -> Bearer {
        let value = secret.map(|s| {
            let mut v: MetadataValue<Ascii> = format!("Bearer {}", s.expose())
                .parse()
                .expect("a Secret is visible ASCII, a valid header value");
            v.set_sensitive(true);
            v
        });
        Bearer { value }
    }

    /// Adds the header to a plain HTTP request (a hand-written gRPC call).
    pub fn apply<B>(&self, request: &mut http::Request<B>) {
        if let Some(v) = &self.value {
            let mut value =
                http::HeaderValue::from_bytes(v.as_encoded_bytes()).expect("checked when built");
            value.set_sensitive(true);
            request.headers_mut().insert(http::header::AUTHORIZATION, value);
        }
        sluice_telemetry::propagation::inject_headers(request.headers_mut());
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.value {
            request.metadata_mut().insert("authorization", v.clone());
        }
        let metadata = request.metadata_mut();
        sluice_telemetry::propagation::inject(|key, value| {
            if let (Ok(k), Ok(v)) = (MetadataKey::from_bytes(key.as_bytes()), value.parse()) {
                metadata.insert(k, v);
            }
        });
        Ok(request)
    }
}

/// TLS and token of one client.
#[derive(Clone, Debug, Default)]
pub struct ClientSecurity {
    tls: Option<ClientTlsConfig>,
    bearer: Bearer,
}

impl ClientSecurity {
    /// Plain text, no token: the loopback default.
    pub fn none() -> ClientSecurity {
        ClientSecurity::default()
    }

    /// `tls` (its CA, and its certificate if any) and the token to present.
    pub fn new(tls: Option<&TlsSettings>, token: Option<&Secret>) -> Result<Self, SecurityError> {
        crate::install_crypto_provider();
        let tls = tls.map(TlsSettings::client_config).transpose()?;
        Ok(ClientSecurity { tls, bearer: Bearer::new(token) })
    }

    /// Whether connections use TLS.
    pub fn uses_tls(&self) -> bool {
        self.tls.is_some()
    }

    pub fn bearer(&self) -> &Bearer {
        &self.bearer
    }

    /// The URL to dial for `address`: `https://` with TLS, `http://` without.
    /// `address` is `HOST:PORT` ([`crate::ServerAddress`]), optionally with the
    /// scheme that matches this client's TLS setting, or tf.data's `grpc://`. A
    /// scheme that contradicts it is refused, never followed: an `http://`
    /// address must not make a TLS client send its token in clear (issue 31), and
    /// an `https://` one cannot be dialled without a CA to verify it.
    pub fn url(&self, address: &str) -> Result<String, SecurityError> {
        let tls = self.uses_tls();
        // tf.data's protocol prefix (Python's `DispatchServer.target` is
        // `grpc://HOST:PORT`) names no transport: the settings choose it. Only a
        // client dialling takes it; a worker's advertised address never has it.
        let address = address.strip_prefix("grpc://").unwrap_or(address);
        let address = crate::address::ServerAddress::parse_for(address, tls)?;
        Ok(format!("{}://{address}", if tls { "https" } else { "http" }))
    }

    /// `endpoint` with this side's TLS applied (if any).
    pub fn apply(&self, endpoint: Endpoint) -> Result<Endpoint, SecurityError> {
        match &self.tls {
            Some(tls) => endpoint
                .tls_config(tls.clone())
                .map_err(|e| SecurityError::Tls { what: "client", reason: e.to_string() }),
            None => Ok(endpoint),
        }
    }
}

#[cfg(test)]
mod tests {
    use tonic::service::Interceptor;

    use super::*;

    #[test]
    fn the_bearer_header_is_added_and_marked_sensitive() {
        let secret = Secret::parse("ssssssssssssssssssss").unwrap();
        let mut b = Bearer::new(Some(&secret));
        let req = b.call(tonic::Request::new(())).unwrap();
        let v = req.metadata().get("authorization").unwrap();
        assert_eq!(v.to_str().unwrap(), "Bearer ssssssssssssssssssss");
        assert!(v.is_sensitive());
        assert!(!format!("{b:?}").contains("ssss"));
        let mut http_req = http::Request::new(());
        b.apply(&mut http_req);
        assert!(http_req.headers()[http::header::AUTHORIZATION].is_sensitive());
    }

    #[test]
    fn without_tls_the_url_is_http_and_with_tls_https() {
        let plain = ClientSecurity::none();
        assert_eq!(plain.url("127.0.0.1:1").unwrap(), "http://127.0.0.1:1");
        assert_eq!(plain.url("http://127.0.0.1:1/").unwrap(), "http://127.0.0.1:1");
        let tls = TlsSettings::from_pem(None, Some(b"-----BEGIN CERTIFICATE-----\n".to_vec()));
        let s = ClientSecurity::new(Some(&tls), None).unwrap();
        assert_eq!(s.url("127.0.0.1:1").unwrap(), "https://127.0.0.1:1");
        assert_eq!(s.url("HTTPS://[::1]:2").unwrap(), "https://[::1]:2");
    }

    #[test]
    fn a_scheme_that_contradicts_the_tls_setting_is_refused_never_followed() {
        let tls = TlsSettings::from_pem(None, Some(b"-----BEGIN CERTIFICATE-----\n".to_vec()));
        let s = ClientSecurity::new(Some(&tls), None).unwrap();
        let e = s.url("http://127.0.0.1:1").unwrap_err().to_string();
        assert!(e.contains("plain-text") && e.contains("TLS is in use"), "{e}");
        let e = ClientSecurity::none().url("https://127.0.0.1:1").unwrap_err().to_string();
        assert!(e.contains("--tls-ca"), "{e}");
        let e = s.url("foo://127.0.0.1:1").unwrap_err().to_string();
        assert!(e.contains("unknown scheme `foo://`"), "{e}");
        // tf.data's `grpc://` names no transport: the settings choose it.
        assert_eq!(s.url("grpc://127.0.0.1:1").unwrap(), "https://127.0.0.1:1");
        assert_eq!(ClientSecurity::none().url("grpc://127.0.0.1:1").unwrap(), "http://127.0.0.1:1");
        let e = s.url("https://127.0.0.1:99999").unwrap_err().to_string();
        assert!(e.contains("port 99999"), "{e}");
        let e = s.url("not an address").unwrap_err().to_string();
        assert!(e.contains("HOST:PORT"), "{e}");
    }
}
