//! TLS to the PostgreSQL store, with libpq's parameters: `sslmode` (`disable`, `prefer`,
//! `require`, `verify-ca`, `verify-full`), `sslrootcert` (a PEM file, or `system` for
//! the system's roots), `sslcert` and `sslkey` (a client certificate and its key), in the
//! store string or as `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY`.
//!
//! The driver takes only `disable`, `prefer` and `require`, and no files, so these are
//! taken out of the string before the driver reads it ([`take`]); the driver is then
//! asked for `disable`, `prefer` or `require` (a `verify-*` mode is `require` plus the
//! checks of the certificate verifier here). As in libpq:
//! - `prefer` (the default) asks for TLS and goes on in plain text only when the server
//!   answers that it has none; `require` and the `verify-*` modes refuse then;
//! - without a root certificate, `prefer` and `require` take any certificate the server
//!   shows (they guard against someone who reads the network, not one who answers for
//!   the server); with one (`sslrootcert`, or `~/.postgresql/root.crt` when it exists)
//!   they check the chain as `verify-ca` does;
//! - `verify-ca` checks that a root signed the server's certificate, `verify-full` also
//!   that it is for the host connected to; either without a root is bad input;
//! - a Unix socket never has TLS: a string whose servers are all sockets is connected in
//!   plain text whatever it asks.
//!
//! The crypto is rustls's with the `ring` provider; nothing here checks a signature or a
//! chain itself, it chooses which of rustls's checks run.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::conninfo;

/// The parameters read here, never handed to the driver.
const PARAMS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// The variables that give each of [`PARAMS`] when the string does not.
const VARIABLES: [(&str, &str); 4] = [
    ("sslmode", "PGSSLMODE"),
    ("sslrootcert", "PGSSLROOTCERT"),
    ("sslcert", "PGSSLCERT"),
    ("sslkey", "PGSSLKEY"),
];

/// How much TLS a connection asks for (`sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Option<SslMode> {
        Some(match text {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// Its name as `sslmode` spells it.
    #[must_use]
    pub(crate) fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// What the server's certificate is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Roots {
    /// Nothing: any certificate is taken (`prefer` and `require` without a root).
    Unchecked,
    /// The certificates of a PEM file; `true` when it is the default,
    /// `~/.postgresql/root.crt`, which no parameter named.
    File(PathBuf, bool),
    /// The system's roots (`sslrootcert=system`).
    System,
}

impl std::fmt::Display for Roots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Roots::Unchecked => f.write_str("no root certificate"),
            Roots::File(path, false) => write!(f, "sslrootcert={}", path.display()),
            Roots::File(path, true) => write!(f, "{} (the default sslrootcert)", path.display()),
            Roots::System => f.write_str("the system's roots (sslrootcert=system)"),
        }
    }
}

/// A store string's TLS: what it asked for, and what connects with it.
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) mode: SslMode,
    pub(crate) roots: Roots,
    /// The client certificate's file, when one is sent.
    pub(crate) cert: Option<PathBuf>,
    /// `None` when the connection is in plain text (`disable`, or only Unix sockets).
    pub(crate) connector: Option<MakeRustlsConnect>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("mode", &self.mode)
            .field("roots", &self.roots)
            .field("cert", &self.cert)
            .field("tls", &self.connector.is_some())
            .finish()
    }
}

impl Tls {
    /// The `sslmode` the driver is given: it knows no `verify-*` (the verifier does those
    /// checks), and a connection without a connector is plain text.
    #[must_use]
    pub(crate) fn driver_mode(&self) -> postgres::config::SslMode {
        match (&self.connector, self.mode) {
            (None, _) | (_, SslMode::Disable) => postgres::config::SslMode::Disable,
            (_, SslMode::Prefer) => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        }
    }
}

/// `text` without its TLS parameters (for the driver), and those parameters' values.
#[must_use]
pub(crate) fn take(text: &str) -> (String, Vec<(String, String)>) {
    conninfo::take_params(text, &PARAMS)
}

/// The TLS the parameters `taken` (from [`take`]) ask for, with the libpq variables
/// (`var` reads one) filling in what they leave out, an empty one saying nothing.
/// `sockets_only` when every server of the string is a Unix socket: then nothing is read
/// and the connection is plain. `home` is where `.postgresql/root.crt` is looked for.
///
/// # Errors
///
/// One line naming the parameter (or variable) and what is wrong with it: an unknown
/// `sslmode`, a file that cannot be read or holds no certificate or key, a `verify-*`
/// mode without a root, a key that others may read.
pub(crate) fn settings(
    taken: &[(String, String)],
    var: impl Fn(&str) -> Option<OsString>,
    sockets_only: bool,
    home: Option<&Path>,
) -> Result<Tls, String> {
    // Each parameter's value, with the name a message shows it under: the parameter's
    // own when the string gave it, else the variable's.
    let mut said: Vec<(&str, String, String)> = Vec::new();
    for (param, variable) in VARIABLES {
        if let Some((_, value)) = taken.iter().find(|(n, _)| n == param) {
            said.push((param, param.to_string(), value.clone()));
        } else if let Some(value) = var(variable).filter(|v| !v.is_empty()) {
            let value = value
                .into_string()
                .map_err(|_| format!("{variable} is not valid UTF-8"))?;
            said.push((param, variable.to_string(), value));
        }
    }
    let find = |param: &str| {
        said.iter()
            .find(|(p, _, _)| *p == param)
            .map(|(_, name, value)| (name.as_str(), value.as_str()))
    };
    let mode = match find("sslmode") {
        None => SslMode::Prefer,
        Some((name, value)) => SslMode::parse(value).ok_or_else(|| {
            let allow = if value == "allow" {
                " (allow, plain text first, is not supported)"
            } else {
                ""
            };
            format!(
                "{name}={value}: not an sslmode{allow}; take disable, prefer, require, \
                 verify-ca or verify-full"
            )
        })?,
    };
    let plain = Tls {
        mode,
        roots: Roots::Unchecked,
        cert: None,
        connector: None,
    };
    if mode == SslMode::Disable || sockets_only {
        return Ok(plain);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (roots, store) = roots(mode, find("sslrootcert"), home)?;
    let verifier = Arc::new(Verifier {
        roots: store.map(Arc::new),
        names: mode == SslMode::VerifyFull,
        algorithms: provider.signature_verification_algorithms,
    });
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let (config, cert) = client_auth(builder, find("sslcert"), find("sslkey"))?;
    Ok(Tls {
        mode,
        roots,
        cert,
        connector: Some(MakeRustlsConnect::new(config)),
    })
}

/// What checks the server's certificate: `rootcert` (the parameter's name as shown, and
/// its value), else `~/.postgresql/root.crt` under `home` when it exists; with neither,
/// nothing, which only `prefer` and `require` accept.
fn roots(
    mode: SslMode,
    rootcert: Option<(&str, &str)>,
    home: Option<&Path>,
) -> Result<(Roots, Option<RootCertStore>), String> {
    Ok(match rootcert {
        Some((_, "system")) => {
            if mode != SslMode::VerifyFull {
                return Err(format!(
                    "sslrootcert=system with sslmode={}: the system's roots vouch for \
                     any name a public CA signed, so only verify-full checks anything; \
                     ask for sslmode=verify-full",
                    mode.name()
                ));
            }
            (Roots::System, Some(system_roots()?))
        }
        Some((name, path)) => {
            let path = PathBuf::from(path);
            let store =
                root_file(&path).map_err(|why| format!("{name}={}: {why}", path.display()))?;
            (Roots::File(path, false), Some(store))
        }
        None => match home.map(|h| h.join(".postgresql/root.crt")) {
            Some(default) if default.exists() => {
                let store =
                    root_file(&default).map_err(|why| format!("{}: {why}", default.display()))?;
                (Roots::File(default, true), Some(store))
            }
            _ if mode.verifies() => {
                return Err(format!(
                    "sslmode={} needs a root certificate to check the server's against: \
                     name its file with sslrootcert=FILE (or sslrootcert=system), or put \
                     it in ~/.postgresql/root.crt",
                    mode.name()
                ));
            }
            _ => (Roots::Unchecked, None),
        },
    })
}

/// The client configuration `builder` finishes with the client certificate `cert` and
/// its key `key` (each the name as shown and the file), when both are given.
fn client_auth(
    builder: rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>,
    cert: Option<(&str, &str)>,
    key: Option<(&str, &str)>,
) -> Result<(ClientConfig, Option<PathBuf>), String> {
    Ok(match (cert, key) {
        (None, None) => (builder.with_no_client_auth(), None),
        (Some((name, _)), None) => {
            return Err(format!(
                "{name} without sslkey: name the file of the certificate's private key too"
            ));
        }
        (None, Some((name, _))) => {
            return Err(format!(
                "{name} without sslcert: name the file of the client certificate too"
            ));
        }
        (Some((cert_name, cert)), Some((key_name, key))) => {
            let cert = PathBuf::from(cert);
            let chain = certificates(&cert)
                .map_err(|why| format!("{cert_name}={}: {why}", cert.display()))?;
            let key_path = PathBuf::from(key);
            let key = private_key(&key_path)
                .map_err(|why| format!("{key_name}={}: {why}", key_path.display()))?;
            let config = builder.with_client_auth_cert(chain, key).map_err(|e| {
                format!(
                    "{cert_name}={} and {key_name}={}: {e}",
                    cert.display(),
                    key_path.display()
                )
            })?;
            (config, Some(cert))
        }
    })
}

/// Why a file could not be read, in a few words.
fn reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_string(),
        std::io::ErrorKind::PermissionDenied => "this user may not read it".to_string(),
        std::io::ErrorKind::IsADirectory => "a folder, not a file".to_string(),
        _ => e.to_string(),
    }
}

/// The certificates of the PEM file at `path`, at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let text = std::fs::read(path).map_err(|e| reason(&e))?;
    let found: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&text).collect();
    match found {
        Ok(found) if !found.is_empty() => Ok(found),
        Ok(_) => Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_string()),
        Err(e) => Err(format!("not a PEM certificate file: {e}")),
    }
}

/// The root certificates of the PEM file at `path`.
fn root_file(path: &Path) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path)? {
        store
            .add(cert)
            .map_err(|e| format!("a certificate in it cannot be a root: {e}"))?;
    }
    Ok(store)
}

/// The system's root certificates (the files OpenSSL's configuration would read).
fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(found.certs);
    if store.is_empty() {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none found".to_string(), ToString::to_string);
        return Err(format!(
            "sslrootcert=system: the system has no root certificates fencepost can read \
             ({why}); install them (ca-certificates) or name a file"
        ));
    }
    Ok(store)
}

/// The private key of the PEM file at `path`, which its group and others may not read
/// (libpq's rule: mode 0600 or less, or 0640 or less when root owns it).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| reason(&e))?;
    let open = if meta.uid() == 0 {
        meta.mode() & 0o037
    } else {
        meta.mode() & 0o077
    };
    if open != 0 {
        return Err(format!(
            "others may read it (mode {:04o}): chmod 600 it",
            meta.mode() & 0o7777
        ));
    }
    let text = std::fs::read(path).map_err(|e| reason(&e))?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            "holds no PEM private key (-----BEGIN PRIVATE KEY-----)".to_string()
        }
        e => format!("not a PEM private key file: {e}"),
    })
}

/// Checks the server's certificate as the mode asks: nothing without roots, the chain up
/// to one of `roots`, and with `names` also that it is for the host connected to. The
/// handshake's own signature (that the server holds the certificate's key) is always
/// checked.
#[derive(Debug)]
struct Verifier {
    roots: Option<Arc<RootCertStore>>,
    names: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
            if self.names {
                rustls::client::verify_server_name(&cert, server_name)?;
            }
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Why a connect failed, when TLS is why: the end of the message (after "cannot reach
/// the store URL: ") and its hint, saying whose side lacks what. `None` for any other
/// failure.
#[must_use]
pub(crate) fn failure(tls: &Tls, e: &postgres::Error) -> Option<(String, String)> {
    use std::error::Error as _;
    let mode = tls.mode.name();
    let mut source = e.source();
    while let Some(s) = source {
        if s.to_string() == "server does not support TLS" {
            return Some((
                format!("the server does not offer TLS (sslmode={mode})"),
                "the server runs with ssl = off: turn it on there (ssl_cert_file, \
                 ssl_key_file), or ask for sslmode=prefer or disable if plain text may \
                 cross this network; nothing was changed"
                    .to_string(),
            ));
        }
        let rustls_error = s.downcast_ref::<rustls::Error>().or_else(|| {
            s.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(r) = rustls_error {
            return Some(tls_error(tls, r));
        }
        source = s.source();
    }
    None
}

/// The message and hint for a TLS handshake that failed with `e`.
fn tls_error(tls: &Tls, e: &rustls::Error) -> (String, String) {
    let unchanged = "nothing was changed";
    let roots = &tls.roots;
    let mode = tls.mode.name();
    match e {
        rustls::Error::InvalidCertificate(why) => match why {
            CertificateError::UnknownIssuer => (
                format!("the server's certificate is not trusted by {roots} (sslmode={mode})"),
                match roots {
                    Roots::System => format!(
                        "no CA of the system signed the server's certificate: name the file \
                         of the CA that did with sslrootcert=FILE; {unchanged}"
                    ),
                    _ => format!(
                        "that file must hold the certificate of the CA that signed the \
                         server's (or of one above it); {unchanged}"
                    ),
                },
            ),
            CertificateError::NotValidForNameContext {
                expected,
                presented,
            } => (
                format!(
                    "the server's certificate is for {}, not {} (sslmode={mode})",
                    if presented.is_empty() {
                        "no host name".to_string()
                    } else {
                        presented
                            .iter()
                            .map(|n| plain_name(n))
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                    expected.to_str()
                ),
                format!(
                    "connect by a name the certificate holds, or give the server a \
                     certificate for {}; {unchanged}",
                    expected.to_str()
                ),
            ),
            CertificateError::NotValidForName => (
                format!(
                    "the server's certificate is not for the host connected to (sslmode={mode})"
                ),
                format!("connect by a name the certificate holds; {unchanged}"),
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => (
                "the server's certificate has expired".to_string(),
                format!("the server needs a new certificate; {unchanged}"),
            ),
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => (
                "the server's certificate is not valid yet (is this host's clock right?)"
                    .to_string(),
                unchanged.to_string(),
            ),
            other => (
                format!("the server's certificate is refused: {other:?}"),
                unchanged.to_string(),
            ),
        },
        rustls::Error::AlertReceived(alert) => {
            let ours = match &tls.cert {
                Some(cert) => format!("this client's certificate (sslcert={})", cert.display()),
                None => "this client, which sent no certificate (sslcert)".to_string(),
            };
            (
                format!("the server ended the TLS handshake ({alert:?}): it refused {ours}"),
                format!(
                    "the server's ssl_ca_file must hold the CA that signed the client's \
                     certificate; {unchanged}"
                ),
            )
        }
        other => (
            format!("TLS with the server failed: {other}"),
            unchanged.to_string(),
        ),
    }
}

/// A name of a certificate as people write it: rustls lists them as `DnsName("a.b")`
/// and `IpAddress(127.0.0.1)`; any other kind is kept as it is.
fn plain_name(listed: &str) -> String {
    listed
        .strip_prefix("DnsName(\"")
        .and_then(|n| n.strip_suffix("\")"))
        .or_else(|| {
            listed
                .strip_prefix("IpAddress(")
                .and_then(|n| n.strip_suffix(')'))
        })
        .unwrap_or(listed)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::{Roots, SslMode, settings, take};
    use std::ffi::OsString;

    /// The TLS of `text` (on TCP) with the variables `vars`, and no HOME.
    fn read(text: &str, vars: &[(&str, &str)]) -> Result<(SslMode, Roots, bool), String> {
        let (_, taken) = take(text);
        let var = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        };
        settings(&taken, var, false, None).map(|t| (t.mode, t.roots, t.connector.is_some()))
    }

    #[test]
    fn the_string_wins_over_the_tls_variables_and_an_empty_one_says_nothing() {
        let host = "host=db.example";
        assert_eq!(
            read(host, &[]),
            Ok((SslMode::Prefer, Roots::Unchecked, true))
        );
        assert_eq!(
            read(host, &[("PGSSLMODE", "require")]),
            Ok((SslMode::Require, Roots::Unchecked, true))
        );
        assert_eq!(
            read(
                &format!("{host} sslmode=disable"),
                &[("PGSSLMODE", "require")]
            ),
            Ok((SslMode::Disable, Roots::Unchecked, false))
        );
        assert_eq!(
            read(host, &[("PGSSLMODE", ""), ("PGSSLROOTCERT", "")]),
            Ok((SslMode::Prefer, Roots::Unchecked, true))
        );
        // The string's own sslrootcert wins over a variable naming a missing file.
        let err = read(
            &format!("{host} sslrootcert=/nonexistent/a.crt"),
            &[("PGSSLROOTCERT", "/nonexistent/b.crt")],
        )
        .expect_err("a missing root file");
        assert_eq!(err, "sslrootcert=/nonexistent/a.crt: no such file");
        let err = read(host, &[("PGSSLROOTCERT", "/nonexistent/b.crt")]).expect_err("missing");
        assert_eq!(err, "PGSSLROOTCERT=/nonexistent/b.crt: no such file");
        let err = read(host, &[("PGSSLCERT", "/nonexistent/c.crt")]).expect_err("no key");
        assert!(err.starts_with("PGSSLCERT without sslkey"), "{err}");
    }

    #[test]
    fn an_unknown_sslmode_and_a_verify_mode_without_a_root_are_named() {
        let err = read("host=h", &[("PGSSLMODE", "allow")]).expect_err("allow");
        assert!(
            err.starts_with("PGSSLMODE=allow: not an sslmode (allow"),
            "{err}"
        );
        let err = read("host=h sslmode=verify-ca", &[]).expect_err("no root");
        assert!(
            err.starts_with("sslmode=verify-ca needs a root certificate"),
            "{err}"
        );
        let err = read("host=h sslmode=require sslrootcert=system", &[]).expect_err("weak");
        assert!(
            err.starts_with("sslrootcert=system with sslmode=require"),
            "{err}"
        );
    }

    #[test]
    fn a_socket_reads_no_tls_file_and_connects_in_plain_text() {
        let (_, taken) = take("host=/run/postgresql sslmode=verify-full sslrootcert=/nonexistent");
        let tls = settings(&taken, |_| None, true, None).expect("nothing is read");
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert!(tls.connector.is_none());
        assert_eq!(tls.driver_mode(), postgres::config::SslMode::Disable);
    }
}
