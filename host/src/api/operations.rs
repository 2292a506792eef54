//! The OpenAPI operations, dispatched by method first, then by path.
//!
//! poem-openapi's service routes every request through three layers before the operation:
//! one that parses the query string into a list (whether or not the operation reads it),
//! the path table, and a per-path method switch; each is a future holding its own copy of
//! the request, and the table's entry is boxed again around the switch. [`Operations`]
//! keeps one path table per method, holding the operations themselves, and parses the
//! query only when there is one.
//!
//! What the switch decided is kept: a request whose method has no operation at its path
//! (a 405, a `HEAD` answered as a `GET`, a 404) falls through to the service itself, which
//! answers it as it always has.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use poem::endpoint::{BoxEndpoint, DynEndpoint};
use poem::http::Method;
use poem::{Endpoint, PathPattern, Request, Response, Route};
use poem_openapi::OpenApi;

/// The catch-all pattern of each method's table: what it matches is answered by the service
/// ([`Unmatched`]). A response carrying it matched no route of its own.
pub(super) const UNMATCHED: &str = "/*--svc-unmatched";

/// The operations of an [`OpenApi`], one path table per method.
pub(super) struct Operations {
    by_method: Vec<(Method, Route)>,
    /// The whole service: what a method's table does not have ([`Unmatched`]).
    service: Arc<BoxEndpoint<'static>>,
}

impl Operations {
    /// `apis`' operations; `service` is the same operations as poem-openapi serves them.
    pub(super) fn new(apis: impl OpenApi, service: Arc<BoxEndpoint<'static>>) -> Self {
        let mut table = HashMap::new();
        apis.add_routes(&mut table);
        let mut by_method: Vec<(Method, Route)> = Vec::new();
        for (path, methods) in table {
            for (method, operation) in methods {
                let at = match by_method.iter().position(|(m, _)| *m == method) {
                    Some(at) => at,
                    None => {
                        let unmatched = Unmatched(service.clone());
                        by_method.push((method, Route::new().at(UNMATCHED, unmatched)));
                        by_method.len() - 1
                    }
                };
                let routes = std::mem::take(&mut by_method[at].1);
                by_method[at].1 = routes.at(&path, operation);
            }
        }
        Self { by_method, service }
    }

    /// The answer to `req`, its future boxed once.
    pub(super) fn call(&self, mut req: Request) -> BoxFuture<'_, poem::Result<Response>> {
        // Operations with query parameters read them from here (poem-openapi's contract).
        let query = match req.uri().query() {
            None | Some("") => Vec::new(),
            Some(_) => req.params().unwrap_or_default(),
        };
        req.extensions_mut()
            .insert(poem_openapi::__private::UrlQuery(query));
        match self.by_method.iter().find(|(m, _)| m == req.method()) {
            Some((_, routes)) => Box::pin(routes.call(req)),
            None => DynEndpoint::call(&**self.service, req),
        }
    }
}

/// A path a method's table has no operation for: the service answers (a 404, a 405, or a
/// `HEAD` as a `GET`), as if the request had come to it first.
struct Unmatched(Arc<BoxEndpoint<'static>>);

impl Endpoint for Unmatched {
    type Output = Response;

    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        // The catch-all's pattern is no route: the service's table sets the real one.
        req.extensions_mut().remove::<PathPattern>();
        self.0.call(req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use poem::http::StatusCode;
    use poem_openapi::param::{Path, Query};
    use poem_openapi::payload::PlainText;
    use poem_openapi::OpenApiService;

    struct Api;

    #[poem_openapi::OpenApi]
    impl Api {
        #[oai(path = "/things/:id", method = "get")]
        async fn thing(&self, id: Path<String>, n: Query<Option<u32>>) -> PlainText<String> {
            PlainText(format!("thing {} n={:?}", id.0, n.0))
        }

        #[oai(path = "/things/special", method = "post")]
        async fn special(&self) -> PlainText<&'static str> {
            PlainText("special")
        }
    }

    fn operations() -> Operations {
        let service = OpenApiService::new(Api, "t", "1");
        Operations::new(Api, Arc::new(poem::IntoEndpoint::into_endpoint(service)))
    }

    async fn answer(
        ops: &Operations,
        method: Method,
        uri: &str,
    ) -> (StatusCode, Option<String>, String) {
        let req = Request::builder()
            .method(method)
            .uri(uri.parse().unwrap())
            .finish();
        let resp = match ops.call(req).await {
            Ok(resp) => resp,
            Err(e) => {
                let pattern = e.data::<PathPattern>().map(|p| p.0.to_string());
                let resp = e.into_response();
                return (resp.status(), pattern, String::new());
            }
        };
        let pattern = resp.data::<PathPattern>().map(|p| p.0.to_string());
        let status = resp.status();
        (
            status,
            pattern,
            resp.into_body().into_string().await.unwrap(),
        )
    }

    #[tokio::test]
    async fn operations_are_found_by_method_then_path_and_the_rest_answered_as_before() {
        let ops = operations();
        let (status, pattern, body) = answer(&ops, Method::GET, "/things/a?n=5").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "thing a n=Some(5)");
        // poem-openapi numbers path parameters in the patterns it routes by.
        assert_eq!(pattern.as_deref(), Some("/things/:param0"));
        // No query: the parameter is absent, not an error.
        let (_, _, body) = answer(&ops, Method::GET, "/things/a").await;
        assert_eq!(body, "thing a n=None");
        // A GET matches among the GET operations only.
        let (status, _, body) = answer(&ops, Method::GET, "/things/special").await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::OK, "thing special n=None")
        );
        let (status, _, body) = answer(&ops, Method::POST, "/things/special").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "special"));
        // What no table of the method holds is the service's to answer, under its pattern.
        let (status, pattern, _) = answer(&ops, Method::DELETE, "/things/a").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(pattern.as_deref(), Some("/things/:param0"));
        let (status, pattern, _) = answer(&ops, Method::POST, "/things/a").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(pattern.as_deref(), Some("/things/:param0"));
        let (status, _, body) = answer(&ops, Method::HEAD, "/things/a").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, ""));
        let (status, pattern, _) = answer(&ops, Method::GET, "/nothing").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(pattern.as_deref(), Some(UNMATCHED), "no route of its own");
    }
}
