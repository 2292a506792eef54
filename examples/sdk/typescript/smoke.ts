/**
 * Calls svc through types generated from openapi/openapi.json by openapi-typescript and the
 * openapi-fetch client, so a path, parameter or field the document lost fails to compile.
 *
 *   npx openapi-typescript openapi/openapi.json -o examples/sdk/typescript/schema.d.ts
 *   npx tsc -p examples/sdk/typescript && node examples/sdk/typescript/out/smoke.js \
 *       http://127.0.0.1:8000 "$TOKEN" orders
 *
 * Registers nothing it did not name: it re-registers TABLE (an upsert that keeps every field)
 * and prints one JSON line of what each call returned, for a test or a person to read.
 */
import createClient from "openapi-fetch";
import type { paths } from "./schema";

const [base, token, table] = process.argv.slice(2);
const client = createClient<paths>({
  baseUrl: base,
  headers: { Authorization: `Bearer ${token}` },
});

/** The body of a call that must have succeeded. */
function ok<T>(what: string, r: { data?: T; error?: unknown; response: Response }): T {
  if (r.data === undefined) {
    throw new Error(`${what}: HTTP ${r.response.status} ${JSON.stringify(r.error)}`);
  }
  return r.data;
}

/** The bytes of a streamed result (every format is read as a stream of bytes). */
async function bytes(
  what: string,
  r: { data?: unknown; error?: unknown; response: Response },
): Promise<Uint8Array> {
  const stream = ok(what, r) as ReadableStream<Uint8Array>;
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

async function main(): Promise<void> {
  const health = ok("health", await client.GET("/api/health"));
  const catalog = ok("catalog", await client.GET("/api/v2/catalog"));
  const sample = ok(
    "sample",
    await client.GET("/api/v2/sample/{table_id}", {
      params: { path: { table_id: table }, query: { n: 3 } },
    }),
  );
  const text = new TextDecoder();
  const counted = await bytes(
    "query json",
    await client.POST("/api/query", {
      body: { sql: `SELECT count(*) AS n FROM ${table}`, limit: 10, format: "json" },
      parseAs: "stream",
    }),
  );
  const arrow = await bytes(
    "query arrow",
    await client.POST("/api/query", {
      body: { sql: `SELECT * FROM ${table}`, limit: 5, format: "arrow" },
      parseAs: "stream",
    }),
  );
  const scanned = await bytes(
    "scan",
    await client.POST("/api/v2/scan", {
      body: { table_id: table, limit: 4, format: "csv" },
      parseAs: "stream",
    }),
  );
  const registered = ok(
    "register",
    await client.POST("/api/admin/register-table", { body: { id: table } }),
  );

  console.log(
    JSON.stringify({
      health: health.status,
      catalog_ids: catalog.tables.map((t) => t.id),
      sample_rows: sample.rows.length,
      query_count: JSON.parse(text.decode(counted)).rows[0][0],
      // An Arrow IPC stream opens with the continuation marker.
      arrow_bytes: arrow.length,
      arrow_marker: Buffer.from(arrow.slice(0, 4)).toString("hex"),
      scan_csv_lines: text.decode(scanned).split("\n").length - 1,
      registered: registered.id,
      registered_has_data: registered.has_data,
    }),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
