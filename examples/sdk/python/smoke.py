"""Calls svc through a client generated from openapi/openapi.json by openapi-python-client.

    openapi-python-client generate --path openapi/openapi.json --meta none --output-path svc_client
    PYTHONPATH=. python examples/sdk/python/smoke.py http://127.0.0.1:8000 "$TOKEN" orders

Registers nothing it did not name: it re-registers TABLE (an upsert that keeps every field)
and prints one JSON line of what each call returned, for a test or a person to read.
"""

import json
import sys

from svc_client import AuthenticatedClient, Client
from svc_client.api.discovery import get_catalog, get_sample
from svc_client.api.health import get_health
from svc_client.api.query import query, scan
from svc_client.api.registry import register_table
from svc_client.models import Format, QueryRequest, RegisterTable, ScanRequest
from svc_client.types import File

base, token, table = sys.argv[1], sys.argv[2], sys.argv[3]
anonymous = Client(base_url=base)
client = AuthenticatedClient(base_url=base, token=token)


def payload(result):
    """The bytes of a streamed result (every format comes back as bytes)."""
    assert isinstance(result, File), f"expected bytes, got {result!r}"
    return result.payload.read()


health = get_health.sync(client=anonymous)
catalog = get_catalog.sync(client=client)
sample = get_sample.sync(table, client=client, n=3)
rows_json = json.loads(
    payload(query.sync(client=client, body=QueryRequest(sql=f"SELECT count(*) AS n FROM {table}", format_=Format.JSON)))
)
arrow = payload(query.sync(client=client, body=QueryRequest(sql=f"SELECT * FROM {table}", limit=5, format_=Format.ARROW)))
scanned = payload(scan.sync(client=client, body=ScanRequest(table_id=table, limit=4, format_=Format.CSV)))
registered = register_table.sync(client=client, body=RegisterTable(id=table))

print(json.dumps({
    "health": health.status,
    "catalog_ids": [t.id for t in catalog.tables],
    "sample_rows": len(sample.rows),
    "query_count": rows_json["rows"][0][0],
    # An Arrow IPC stream opens with the continuation marker.
    "arrow_bytes": len(arrow),
    "arrow_marker": arrow[:4].hex(),
    "scan_csv_lines": scanned.decode().count("\n"),
    "registered": registered.id,
    "registered_has_data": registered.has_data,
}))
