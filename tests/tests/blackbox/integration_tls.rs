//! TLS to a source database, against the PostgreSQL on this machine (which serves TLS with
//! Debian's self-signed "snakeoil" certificate): the session itself reports whether it is
//! encrypted (`pg_stat_ssl`, read through a `source_query`), `require` encrypts, `disable`
//! does not, `verify_full` refuses a certificate no trusted authority signed and names the
//! connection, and accepts it once `tls_ca_file` names it and the URL names the host the
//! certificate was made for.

use serde_json::json;

use crate::discovery::register;
use crate::integration::sync_now;
use crate::operations::query_rows;
use crate::support::{exec_store, fresh_postgres_url, Backend, Server};

/// Whether the session running the query is encrypted, as the server sees it.
const ENCRYPTED: &str = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";

#[test]
fn tls_modes_encrypt_verify_and_refuse_by_connection() {
    let Some(source) = fresh_postgres_url() else {
        return;
    };
    // The server's certificate, which is its own authority.
    let mut certificate = String::new();
    crate::support::run_async(async {
        use sqlx::Connection as _;
        let mut conn = sqlx::PgConnection::connect(&source).await.unwrap();
        let (on, file): (String, String) =
            sqlx::query_as("SELECT current_setting('ssl'), current_setting('ssl_cert_file')")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!(
            on, "on",
            "this test needs the PostgreSQL server to offer TLS"
        );
        certificate = file;
    });
    exec_store(&source, &["CREATE TABLE t (id int4)"]);
    let connections = [
        ("plain", "disable", None),
        ("sealed", "require", None),
        ("strict", "verify_full", None),
        ("pinned", "verify_full", Some(certificate.as_str())),
    ];
    // Debian's certificate names "localhost", so the pinned connection must too.
    let by_name = source.replacen("@127.0.0.1:", "@localhost:", 1);
    let mut env: Vec<(String, String)> = Vec::new();
    for (name, tls, ca) in connections {
        let upper = name.to_ascii_uppercase();
        let url = if name == "pinned" { &by_name } else { &source };
        env.push((format!("SVC_INTEGRATION_{upper}_URL"), url.clone()));
        env.push((format!("SVC_INTEGRATION_{upper}_TLS"), tls.to_owned()));
        if let Some(ca) = ca {
            env.push((
                format!("SVC_INTEGRATION_{upper}_TLS_CA_FILE"),
                ca.to_owned(),
            ));
        }
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let s = Server::start_with(Backend::Sqlite, &env);
    let admin = s.admin_token();
    for (name, ..) in connections {
        register(
            &s,
            &admin,
            json!({"id": format!("{name}_session"), "source_type": "integration",
                   "bucket": name, "source_query": ENCRYPTED, "query_mode": "materialized"}),
        );
    }
    let encrypted = |name: &str| {
        let (state, _) = sync_now(&s, &admin, &format!("{name}_session"), false);
        assert_eq!(state["status"], "ok", "{name}: {state}");
        query_rows(&s, &admin, &format!("SELECT ssl FROM {name}_session"))[0]["ssl"].clone()
    };
    assert_eq!(encrypted("plain"), json!(false));
    assert_eq!(encrypted("sealed"), json!(true));
    assert_eq!(encrypted("pinned"), json!(true));

    let (state, _) = sync_now(&s, &admin, "strict_session", false);
    let error = state["last_error"].as_str().unwrap_or_default();
    assert_eq!(state["status"], "error", "{state}");
    assert!(
        error.contains("Connection 'strict'") && error.to_ascii_lowercase().contains("certificate"),
        "{state}"
    );
}
