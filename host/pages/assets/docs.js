// svc API docs: starts Swagger UI on the server's own OpenAPI document.
window.ui = SwaggerUIBundle({
  url: "/api/openapi.json",
  dom_id: "#ui",
  deepLinking: true,
  filter: true,
});
