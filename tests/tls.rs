//! TLS to the store: a private server on 127.0.0.1 with `ssl = on` and a certificate the
//! test makes (a CA of its own, and a server certificate for `localhost` and 127.0.0.1),
//! reached with each `sslmode`; a second CA nobody trusts; a server without TLS; a server
//! that takes only TLS, or only a client certificate, from TCP. A Unix socket never has
//! TLS, so every string here names TCP.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;

use crate::harness::{Done, Env, Run};
use crate::support::pg::{self, PrivateCluster};

/// A certificate authority the test makes: its certificate and the key that signs.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("a CA key");
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key).expect("a CA certificate"),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate signed by this CA for `names` (host names and addresses), its
    /// common name `cn`: the certificate's PEM and its key's.
    fn sign(&self, names: &[&str], cn: &str) -> (String, String) {
        let names: Vec<String> = names.iter().map(ToString::to_string).collect();
        let mut params = CertificateParams::new(names).expect("certificate parameters");
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().expect("a key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a signed certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// A private server on 127.0.0.1 with TLS on, its certificate signed by `ca` (which also
/// checks client certificates), and a folder of the client's files (`ca.crt`, and
/// `home/`, the `HOME` the runs get).
struct TlsServer {
    cluster: PrivateCluster,
    ca: Ca,
    files: TempDir,
}

/// The role that logs in with a client certificate alone (its common name).
const CERT_ROLE: &str = "fencepost_cert";

/// [`TlsServer`] with the rules `hba` (pg_hba.conf). With `tls` false the server keeps
/// `ssl = off`.
#[track_caller]
fn server(hba: &str, tls: bool) -> TlsServer {
    let cluster = PrivateCluster::start_tcp();
    let ca = Ca::new("fencepost test CA");
    if tls {
        let (cert, key) = ca.sign(&["localhost", "127.0.0.1"], "localhost");
        cluster.write_data_file("server.crt", &cert);
        cluster.write_data_file("server.key", &key);
        cluster.write_data_file("ca.crt", &ca.pem());
        cluster.configure(&[
            ("ssl_cert_file", "'server.crt'"),
            ("ssl_key_file", "'server.key'"),
            ("ssl_ca_file", "'ca.crt'"),
            ("ssl", "on"),
        ]);
    }
    pg::connect(&cluster.url())
        .batch_execute(&format!("CREATE ROLE {CERT_ROLE} LOGIN SUPERUSER"))
        .expect("create the certificate's role");
    cluster.set_hba(hba);
    // A reload that could not load the certificate keeps TLS off: the log says why.
    let ssl: String = pg::connect(&cluster.url())
        .query_one("SHOW ssl", &[])
        .expect("SHOW ssl")
        .get(0);
    let wanted = if tls { "on" } else { "off" };
    assert_eq!(
        ssl,
        wanted,
        "the server's ssl; its log: {}",
        std::fs::read_to_string(cluster.dir().join("log")).unwrap_or_default()
    );
    let files = tempfile::tempdir().expect("a folder for the client's files");
    std::fs::create_dir(files.path().join("home")).expect("a HOME folder");
    std::fs::write(files.path().join("ca.crt"), ca.pem()).expect("write ca.crt");
    TlsServer { cluster, ca, files }
}

/// The socket stays trusted (for the test's own setup); TCP takes TLS and plain text.
const EITHER: &str = "local all all trust\nhost all all 127.0.0.1/32 trust\n";
/// TCP takes only TLS; the certificate role only with a client certificate.
const TLS_ONLY: &str = "local all all trust\n\
                        hostssl all fencepost_cert 127.0.0.1/32 cert\n\
                        hostssl all all 127.0.0.1/32 trust\n";

impl TlsServer {
    /// A key=value string for the server on TCP, through `host` (at 127.0.0.1), with
    /// `extra` pairs.
    fn url(&self, host: &str, extra: &str) -> String {
        format!(
            "host={host} hostaddr=127.0.0.1 port={} user=postgres dbname=postgres {extra}",
            self.cluster.port()
        )
    }

    /// A file of the client's folder.
    fn file(&self, name: &str) -> PathBuf {
        self.files.path().join(name)
    }

    fn home(&self) -> PathBuf {
        self.file("home")
    }

    /// The trusted CA's file, as a string for a URL.
    fn ca_file(&self) -> String {
        self.file("ca.crt").display().to_string()
    }

    /// Writes `contents` to the client's file `name`, readable by this user alone.
    fn write(&self, name: &str, contents: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let path = self.file(name);
        std::fs::write(&path, contents).expect("write a client file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .expect("chmod 600 a client file");
        path.display().to_string()
    }
}

/// `fencepost --store URL ARGS` in a folder of its own with `HOME` at `home` and the
/// variables `vars`.
fn fp(env: &Env, home: &Path, url: &str, vars: &[(&str, &str)], args: &[&str]) -> Run {
    let mut all = vec!["--store", url];
    all.extend_from_slice(args);
    let run = env
        .fp(&all)
        .inside(env.root())
        .env("HOME", &home.display().to_string());
    vars.iter()
        .fold(run, |run, (name, value)| run.env(name, value))
}

/// A claim, a write and a read of `resource` through `url`: each exit 0, and the read
/// gives the bytes written.
#[track_caller]
fn round_trip(server: &TlsServer, url: &str, vars: &[(&str, &str)], resource: &str) {
    let env = Env::new();
    let home = server.home();
    fp(
        &env,
        &home,
        url,
        vars,
        &["claim", resource, "-o", "A", "-t", "60"],
    )
    .expect_stdout(0, "1");
    fp(
        &env,
        &home,
        url,
        vars,
        &["write", resource, "--epoch", "1", "-o", "A"],
    )
    .stdin(format!("through {url}\n"))
    .expect_stdout(0, "written");
    let read = fp(&env, &home, url, vars, &["cat", resource]).expect(0);
    assert_eq!(read.stdout, format!("through {url}\n"), "{url}");
}

/// A claim through `url` that must fail with exit `code`.
#[track_caller]
fn refused(server: &TlsServer, url: &str, vars: &[(&str, &str)], code: i32) -> Done {
    let env = Env::new();
    fp(
        &env,
        &server.home(),
        url,
        vars,
        &["claim", "no.md", "-o", "A", "-t", "60"],
    )
    .expect(code)
}

/// `verify-full` takes the server's certificate for the name connected to, from the CA
/// named by `sslrootcert`, by `PGSSLROOTCERT` (with `PGSSLMODE`), or found in
/// `~/.postgresql/root.crt`; `verify-ca`, `require` and `prefer` connect too. (Before
/// TLS, `verify-full` was exit 2, "invalid connection string".)
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn verify_full_takes_a_certificate_for_the_host_from_a_trusted_ca() {
    let server = server(TLS_ONLY, true);
    let ca = server.ca_file();
    for (i, mode) in ["verify-full", "verify-ca", "require", "prefer"]
        .iter()
        .enumerate()
    {
        let url = server.url("localhost", &format!("sslmode={mode} sslrootcert={ca}"));
        round_trip(&server, &url, &[], &format!("string{i}.md"));
    }
    let url = server.url("localhost", "");
    round_trip(
        &server,
        &url,
        &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", &ca)],
        "variables.md",
    );
    let url_form = format!(
        "postgresql://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={ca}",
        server.cluster.port()
    );
    round_trip(&server, &url_form, &[], "url.md");
    // The default root file, with nothing naming one.
    let dot = server.home().join(".postgresql");
    std::fs::create_dir(&dot).expect("~/.postgresql");
    std::fs::write(dot.join("root.crt"), server.ca.pem()).expect("~/.postgresql/root.crt");
    round_trip(&server, &url, &[("PGSSLMODE", "verify-full")], "default.md");
}

/// `verify-full` refuses a certificate for another name, saying which names it holds
/// and which was wanted; `verify-ca`, which checks the chain only, takes it. (Before:
/// exit 2, "invalid connection string".)
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn verify_full_refuses_a_certificate_for_another_name() {
    let server = server(TLS_ONLY, true);
    let ca = server.ca_file();
    let url = server.url(
        "wrong.example",
        &format!("sslmode=verify-full sslrootcert={ca}"),
    );
    let done = refused(&server, &url, &[], 1);
    assert!(
        done.stderr.contains(
            "the server's certificate is for localhost, 127.0.0.1, not wrong.example \
             (sslmode=verify-full)"
        ),
        "{}",
        done.stderr
    );
    let url = server.url(
        "wrong.example",
        &format!("sslmode=verify-ca sslrootcert={ca}"),
    );
    round_trip(&server, &url, &[], "chain-only.md");
}

/// A certificate from a CA that `sslrootcert` does not hold is refused by `verify-full`,
/// `verify-ca` and `require` with a root (which checks the chain, as libpq's does), the
/// message naming the file that does not trust it, and by `sslrootcert=system`;
/// `require` without a root takes it.
/// (Before: `verify-*` exit 2, and `require` "no TLS implementation configured".)
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_certificate_from_an_untrusted_ca_is_refused() {
    let server = server(TLS_ONLY, true);
    let other = server.write("other-ca.crt", &Ca::new("someone else's CA").pem());
    for mode in ["verify-full", "verify-ca", "require"] {
        let url = server.url("localhost", &format!("sslmode={mode} sslrootcert={other}"));
        let done = refused(&server, &url, &[], 1);
        assert!(
            done.stderr.contains(&format!(
                "the server's certificate is not trusted by sslrootcert={other} \
                 (sslmode={mode})"
            )),
            "{mode}: {}",
            done.stderr
        );
    }
    // The system's roots do not hold the test's CA either; a machine without any says so.
    let url = server.url("localhost", "sslmode=verify-full sslrootcert=system");
    let env = Env::new();
    let done = fp(
        &env,
        &server.home(),
        &url,
        &[],
        &["claim", "no.md", "-o", "A", "-t", "60"],
    )
    .output();
    match done.code {
        1 => assert!(
            done.stderr.contains(
                "the server's certificate is not trusted by the system's roots \
                 (sslrootcert=system)"
            ) && done.stderr.contains("hint: no CA of the system signed"),
            "{}",
            done.stderr
        ),
        2 => assert!(
            done.stderr.contains("the system has no root certificates"),
            "{}",
            done.stderr
        ),
        _ => panic!("sslrootcert=system: {}", done.stderr),
    }
    let url = server.url("localhost", "sslmode=require");
    round_trip(&server, &url, &[], "unchecked.md");
}

/// `require` against a server without TLS says the server lacks it, not that the
/// server may be down; `prefer` goes on in plain text there. (Before: "server does not
/// support TLS" with the hint "is the server up, ...?")
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn require_refuses_a_server_without_tls_saying_the_server_lacks_it() {
    let server = server(EITHER, false);
    let url = server.url("localhost", "sslmode=require");
    let done = refused(&server, &url, &[], 1);
    assert!(
        done.stderr
            .contains("the server does not offer TLS (sslmode=require)"),
        "{}",
        done.stderr
    );
    assert!(
        done.stderr.contains("ssl = off") && !done.stderr.contains("is the server up"),
        "{}",
        done.stderr
    );
    let done = refused(&server, &url, &[("PGSSLMODE", "disable")], 1);
    assert!(
        done.stderr.contains("does not offer TLS"),
        "the string wins: {}",
        done.stderr
    );
    round_trip(
        &server,
        &server.url("localhost", "sslmode=prefer"),
        &[],
        "plain.md",
    );
    round_trip(&server, &server.url("localhost", ""), &[], "default.md");
}

/// The default, `prefer`, uses TLS where the server offers it: a server that takes only
/// TLS from TCP takes it, and refuses `sslmode=disable` (and `PGSSLMODE=disable`), the
/// hint saying that the server wants TLS. (Before: `prefer` was always plain text, so the
/// server refused it: "no pg_hba.conf entry ... no encryption".)
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn prefer_uses_tls_where_the_server_offers_it() {
    let server = server(TLS_ONLY, true);
    round_trip(&server, &server.url("localhost", ""), &[], "prefer.md");
    for (url, vars) in [
        (server.url("localhost", "sslmode=disable"), vec![]),
        (server.url("localhost", ""), vec![("PGSSLMODE", "disable")]),
    ] {
        let done = refused(&server, &url, &vars, 1);
        assert!(done.stderr.contains("no encryption"), "{}", done.stderr);
        assert!(
            done.stderr
                .contains("the server takes only TLS connections from this host"),
            "{}",
            done.stderr
        );
    }
}

/// A client certificate (`sslcert`, `sslkey`, or `PGSSLCERT`, `PGSSLKEY`) logs in the
/// role the server checks it for; without one the server refuses, and so it does one
/// from a CA it does not trust. (Before: `sslcert` was "invalid connection string".)
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_client_certificate_logs_in_where_the_server_asks_for_one() {
    let server = server(TLS_ONLY, true);
    let ca = server.ca_file();
    let (cert, key) = server.ca.sign(&[], CERT_ROLE);
    let (cert, key) = (
        server.write("client.crt", &cert),
        server.write("client.key", &key),
    );
    let base = format!(
        "host=localhost hostaddr=127.0.0.1 port={} user={CERT_ROLE} dbname=postgres \
         sslmode=verify-full sslrootcert={ca}",
        server.cluster.port()
    );
    round_trip(
        &server,
        &format!("{base} sslcert={cert} sslkey={key}"),
        &[],
        "cert.md",
    );
    round_trip(
        &server,
        &base,
        &[("PGSSLCERT", &cert), ("PGSSLKEY", &key)],
        "cert-variables.md",
    );
    let done = refused(&server, &base, &[], 1);
    assert!(done.stderr.contains("certificate"), "{}", done.stderr);
    let stranger = Ca::new("someone else's CA");
    let (cert, key) = stranger.sign(&[], CERT_ROLE);
    let (cert, key) = (
        server.write("other.crt", &cert),
        server.write("other.key", &key),
    );
    let done = refused(
        &server,
        &format!("{base} sslcert={cert} sslkey={key}"),
        &[],
        1,
    );
    assert!(
        done.stderr.contains(&format!(
            "it refused this client's certificate (sslcert={cert})"
        )),
        "{}",
        done.stderr
    );
}

/// A store string, the variables it runs with, and what its refusal must say.
type Case<'a> = (String, Vec<(&'a str, &'a str)>, String);

/// Bad TLS input is exit 2 with one line naming what is wrong, before any connect (the
/// port has no server): an unknown `sslmode`, a root file that is missing or holds no
/// certificate, `verify-full` with no root anywhere, a certificate without its key, a
/// key that others may read. A Unix socket reads none of it. (Before: the driver's
/// "invalid connection string", or these went unread.)
#[test]
fn bad_tls_input_is_refused_before_connecting() {
    let files = tempfile::tempdir().expect("a folder");
    let home = files.path().join("home");
    std::fs::create_dir(&home).expect("HOME");
    let not_pem = files.path().join("not.pem");
    std::fs::write(&not_pem, "not a certificate\n").expect("write");
    let open_key = files.path().join("open.key");
    std::fs::write(&open_key, "-----BEGIN PRIVATE KEY-----\n").expect("write");
    let missing = files.path().join("missing.crt");
    let (not_pem, open_key, missing) = (
        not_pem.display().to_string(),
        open_key.display().to_string(),
        missing.display().to_string(),
    );
    let base = "host=127.0.0.1 port=1 user=u dbname=d";
    let cases: Vec<Case<'_>> = vec![
        (
            format!("{base} sslmode=verify-everything"),
            vec![],
            "sslmode=verify-everything: not an sslmode".to_string(),
        ),
        (
            base.to_string(),
            vec![("PGSSLMODE", "bogus")],
            "PGSSLMODE=bogus: not an sslmode".to_string(),
        ),
        (
            format!("{base} sslmode=verify-full sslrootcert={missing}"),
            vec![],
            format!("sslrootcert={missing}: no such file"),
        ),
        (
            format!("{base} sslmode=verify-ca"),
            vec![("PGSSLROOTCERT", &not_pem)],
            format!("PGSSLROOTCERT={not_pem}: holds no PEM certificate"),
        ),
        (
            format!("{base} sslmode=verify-full"),
            vec![],
            "sslmode=verify-full needs a root certificate".to_string(),
        ),
        (
            format!("{base} sslcert={not_pem}"),
            vec![],
            "sslcert without sslkey".to_string(),
        ),
        (
            format!("{base} sslcert={not_pem} sslkey={open_key}"),
            vec![],
            format!("sslcert={not_pem}: holds no PEM certificate"),
        ),
    ];
    for (url, vars, wanted) in cases {
        let env = Env::new();
        let done = fp(
            &env,
            &home,
            &url,
            &vars,
            &["claim", "d.md", "-o", "A", "-t", "60"],
        )
        .expect(2);
        assert!(done.stderr.contains(&wanted), "{url}: {}", done.stderr);
        assert!(env.files().is_empty(), "{url}: nothing is made");
    }
}

/// A client key that others may read is exit 2 (libpq's rule, mode 0600), and a Unix
/// socket reads no TLS file at all: a missing one is no error there, the connect is.
/// (Before: neither was read.)
#[test]
fn a_key_others_may_read_is_refused_and_a_socket_reads_no_tls_file() {
    let files = tempfile::tempdir().expect("a folder");
    let home = files.path().join("home");
    std::fs::create_dir(&home).expect("HOME");
    let open_key = files.path().join("open.key");
    std::fs::write(&open_key, "-----BEGIN PRIVATE KEY-----\n").expect("write");
    let open_key = open_key.display().to_string();
    let missing = files.path().join("missing.crt").display().to_string();
    let base = "host=127.0.0.1 port=1 user=u dbname=d";
    let ca = Ca::new("a CA");
    let (cert, _) = ca.sign(&["localhost"], "localhost");
    let cert_file = files.path().join("client.crt");
    std::fs::write(&cert_file, cert).expect("write");
    let url = format!("{base} sslcert={} sslkey={open_key}", cert_file.display());
    let env = Env::new();
    let done = fp(
        &env,
        &home,
        &url,
        &[],
        &["claim", "d.md", "-o", "A", "-t", "60"],
    )
    .expect(2);
    assert!(
        done.stderr
            .contains(&format!("sslkey={open_key}: others may read it")),
        "{}",
        done.stderr
    );
    // A socket has no TLS: the same missing file is not read, and the connect is what
    // fails (no server in that folder).
    let socket = format!(
        "host={} user=u dbname=d sslmode=verify-full sslrootcert={missing}",
        files.path().display()
    );
    let done = fp(
        &env,
        &home,
        &socket,
        &[],
        &["claim", "d.md", "-o", "A", "-t", "60"],
    )
    .expect(1);
    assert!(
        done.stderr.contains("cannot reach the store"),
        "{}",
        done.stderr
    );
}
