//! The OpenAPI document: served, browsable, and checked in.

use crate::support::Server;

#[test]
fn checked_in_document_matches_the_server() {
    let s = Server::start();
    let generated = s.cli_ok(&["openapi"]);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../openapi/openapi.json");
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in.trim() == generated.trim(),
        "openapi/openapi.json is stale; regenerate it with: cargo run -p svc-host --bin svc-server -- openapi > openapi/openapi.json"
    );
    let served = s
        .http
        .get(s.url("/api/openapi.json"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let served: serde_json::Value = serde_json::from_str(&served).unwrap();
    let generated: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert_eq!(served, generated);
    for path in [
        "/api/me",
        "/auth/token",
        "/api/admin/register-table",
        "/api/admin/registry/{id}",
        "/api/health",
    ] {
        assert!(
            generated["paths"].get(path).is_some(),
            "{path} missing from the document"
        );
    }
    let docs = s.http.get(s.url("/api/docs")).send().unwrap();
    assert_eq!(docs.status().as_u16(), 200);
    assert!(docs.text().unwrap().to_lowercase().contains("swagger"));
}
