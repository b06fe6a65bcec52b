# Schemathesis hooks for test/fuzz/schemathesis.test.ts (loaded with SCHEMATHESIS_HOOKS).
#
# Some rules of the API cannot be said by a JSON Schema: one parameter bounding another (since
# before until, the 31-day analytics window), what the tenant holds (credential ids, its vault
# prefix), what the stored resource already is (a PATCH is checked on the agent it leaves, a PUT
# on the credential it leaves), an opaque cursor, an EIP-55 checksum, an upstream host the SSRF
# guard admits. The document says each in a description; here every request Schemathesis
# generates as valid (positive mode) is made to respect them right before it is sent, so
# positive_data_acceptance stays on for every operation and still catches a schema-valid
# request the server refuses for any other reason. Only fields the schema already allows are
# rewritten, with values the schema also allows, so the case stays schema-valid (Schemathesis
# re-validates a case after before_call). Negative cases are never touched, except that no
# case may delete the seeded credentials the whole run relies on. filter_failure holds
# use_after_free to the agents' soft delete (a deleted agent reads back inactive).
#
# The seeded values come from the environment the test gives the run (FUZZ_* variables).
import json
import os
import re
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

from hypothesis.internal import lambda_sources

import schemathesis
from schemathesis.openapi.checks import EnsureResourceAvailability, UseAfterFree

# Hypothesis describes a lambda (for its reprs and its filter rewriting) by parsing the source of
# its module with `ast`. On CPython 3.11.7 that parse can fail with SystemError "AST constructor
# recursion depth mismatch" when the recursion limit changed meanwhile (Hypothesis raises it around
# a test run, in each of Schemathesis's worker threads; python/cpython#106905), which fails the
# run as a Runtime Error. A description that cannot be made is the one Hypothesis gives any lambda
# it cannot read: `lambda ...: <unknown>`.
_describe_lambda = lambda_sources._lambda_description


def _lambda_description_or_unknown(f, *args, **kwargs):
    try:
        return _describe_lambda(f, *args, **kwargs)
    except SystemError:
        return "lambda: <unknown>"


lambda_sources._lambda_description = _lambda_description_or_unknown

BASE_URL = os.environ["FUZZ_API_URL"].rstrip("/")
TOKEN = os.environ["GATEWAY_TOKEN"]
TENANT = os.environ["FUZZ_TENANT"]
UPSTREAM_URL = os.environ["FUZZ_UPSTREAM_URL"]
# An A2A agent's upstream serves an Agent Card, read on create and when upstream_url changes.
A2A_UPSTREAM_URL = os.environ["FUZZ_A2A_UPSTREAM_URL"]
CREDENTIAL = os.environ["FUZZ_CREDENTIAL"]
PEM_CREDENTIAL = os.environ["FUZZ_PEM_CREDENTIAL"]
PEM_BUNDLE = os.environ["FUZZ_PEM_BUNDLE"]
FACILITATOR_URL = os.environ["FUZZ_FACILITATOR_URL"]
# A real next_cursor of each paged list (path -> cursor): cursors are opaque.
CURSORS = json.loads(os.environ["FUZZ_CURSORS"])
# A well-formed credential id no tenant holds: where a seeded credential would be deleted.
ABSENT_CREDENTIAL = "cred_01900000-0000-7000-8000-000000000000"
PROXIED_AGENT = os.environ["FUZZ_PROXIED_AGENT"]
# An MCP agent of the tenant: what a virtual MCP server's members must be.
MCP_AGENT = os.environ["FUZZ_MCP_AGENT"]
ABSENT_AGENT = "agt_01900000-0000-7000-8000-000000000000"
# A valid description of a public agent: the document says the schemas in it are JSON Schemas
# (checked against the meta-schema), which the generated objects mostly are not.
PUBLIC_INTERFACE = {"input_schema": {"type": "object"}, "input_example": {}, "output_example": {}}

A2A_METHODS = ["SendMessage", "GetTask", "CancelTask", "SendStreamingMessage", "SubscribeToTask"]
MCP_VERSION = "2025-06-18"
MCP_VERSIONS = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}
MAX_WINDOW = timedelta(days=31)
HEADER_SAFE = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$")
HEX_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
DIGITS = re.compile(r"^[0-9]+$")


def _is_positive(case) -> bool:
    meta = case.meta
    return meta is not None and meta.generation.mode.is_positive


def _current(path: str):
    """The resource as the server has it now (None when it is not the tenant's)."""
    request = urllib.request.Request(f"{BASE_URL}{path}", headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)
    except urllib.error.HTTPError:
        return None


def _instant(value):
    """The instant a since/until names, in UTC; None when it is not one the server takes."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
        # The server takes years 0001 to 9999 once in UTC (docs/API.md "Conventions").
        return parsed.astimezone(timezone.utc) if parsed.tzinfo else None
    except (ValueError, OverflowError):
        return None


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _valid_instants(query: dict) -> None:
    """A since/until Python cannot read as an instant of years 0001-9999 in UTC is replaced by one."""
    for name in ("since", "until"):
        if name in query and _instant(query[name]) is None:
            query[name] = "2026-01-01T00:00:00Z"


def _ordered_window(query: dict) -> None:
    """since not after until (GET /v1/invocations, /v1/policy/decisions)."""
    _valid_instants(query)
    since, until = _instant(query.get("since")), _instant(query.get("until"))
    if since and until and since > until:
        query["since"], query["until"] = query["until"], query["since"]


def _analytics_window(query: dict) -> None:
    """since not after until (default now), at most 31 days apart."""
    _valid_instants(query)
    now = datetime.now(timezone.utc)
    since, until = _instant(query.get("since")), _instant(query.get("until"))
    end = until if until is not None else now
    if since and since <= end and end - since <= MAX_WINDOW:
        return
    if end.year > 1 or end.month > 1 or end.day > 1:
        query["since"] = _iso(end - timedelta(hours=1))
    else:
        query["since"] = _iso(end)


def _cursor(query: dict, path: str) -> None:
    if "cursor" in query:
        query["cursor"] = CURSORS[path]


def _agent_references(body: dict) -> None:
    """A public upstream the stack admits, a credential of the tenant, a valid pay_to checksum."""
    if body.get("upstream_url") is not None:
        body["upstream_url"] = A2A_UPSTREAM_URL if body.get("protocol") == "a2a" else UPSTREAM_URL
    if body.get("credential_ref") is not None:
        body["credential_ref"] = CREDENTIAL
    pricing = body.get("pricing")
    if isinstance(pricing, dict) and isinstance(pricing.get("pay_to"), str) and HEX_ADDRESS.match(pricing["pay_to"]):
        pricing["pay_to"] = pricing["pay_to"].lower()  # all lower case is always a valid address
    # pricing.methods names A2A methods (its description lists them): the generated keys become known ones.
    if isinstance(pricing, dict) and isinstance(pricing.get("methods"), dict):
        prices = list(pricing["methods"].values())
        pricing["methods"] = {method: price for method, price in zip(A2A_METHODS, prices)}
    # A channel-priced agent's min_deposit is at least every per-call price (its description): no
    # smaller than the largest of them (a positive decimal string, as the schema takes).
    if isinstance(pricing, dict) and isinstance(pricing.get("min_deposit"), str):
        prices = [pricing.get("amount")]
        for key in ("tools", "methods", "skills"):
            if isinstance(pricing.get(key), dict):
                prices.extend(pricing[key].values())
        floor = max((int(p) for p in prices if isinstance(p, str) and DIGITS.match(p)), default=0)
        if DIGITS.match(pricing["min_deposit"]) and int(pricing["min_deposit"]) < floor:
            pricing["min_deposit"] = str(floor)
    # A public agent needs a price and its tenant's settlement configuration (docs/API.md), which
    # the run's tenant does not have: stated in the field's description, not in the schema.
    if body.get("public") is True:
        body["public"] = False
    if isinstance(body.get("public_interface"), dict):
        body["public_interface"] = PUBLIC_INTERFACE


def _server_members(body: dict) -> None:
    # Members must be MCP agents of the tenant, their prefixes unique within the server: the
    # tenant's MCP agent under a prefix of its own for each (both allowed by the schema).
    members = body.get("members")
    if not isinstance(members, list):
        return
    for index, member in enumerate(members):
        if isinstance(member, dict):
            member["agent_id"] = MCP_AGENT
            member["prefix"] = f"m{index}"


def _budget(body: dict) -> None:
    """A webhook_url the SSRF guard admits (the test upstream takes the POST), and a soft mode: a
    budget the fuzzer makes must not refuse the run's own proxied calls (a hard one with a small
    limit would answer them 429, which is right but not what those operations are fuzzed for)."""
    alerts = body.get("alerts")
    if isinstance(alerts, dict) and "webhook_url" in alerts:
        alerts["webhook_url"] = UPSTREAM_URL
    if "mode" in body:
        body["mode"] = "soft"


def _agent_patch(agent_id: str, body: dict) -> None:
    """A PATCH is validated on the agent it leaves: complete the body so that agent is valid."""
    _agent_references(body)
    current = _current(f"/v1/agents/{agent_id}")
    if current is None:
        return
    merged = {**current, **body}
    # Explicit protocol fields, so the outcome does not hang on a concurrent change of the agent.
    body["protocol"] = merged["protocol"]
    # An A2A agent's card is read from its upstream (the A2A one); other agents keep the plain one.
    if merged.get("upstream_url") is not None:
        body["upstream_url"] = A2A_UPSTREAM_URL if merged["protocol"] == "a2a" else UPSTREAM_URL
    pricing = merged.get("pricing")
    if isinstance(pricing, dict) and merged["protocol"] != "a2a" and ("methods" in pricing or "skills" in pricing):
        if isinstance(body.get("pricing"), dict):
            body["pricing"].pop("methods", None)
            body["pricing"].pop("skills", None)
        else:
            body["pricing"] = None
    if merged["protocol"] == "mcp":
        body["mcp_transport"] = "streamable_http"
        if merged["mcp_protocol_version"] is not None and merged["mcp_protocol_version"] not in MCP_VERSIONS:
            body["mcp_protocol_version"] = MCP_VERSION
    else:
        body["mcp_transport"] = None
        pricing = merged.get("pricing")
        if isinstance(pricing, dict) and "tools" in pricing:
            if isinstance(body.get("pricing"), dict):
                del body["pricing"]["tools"]
            else:
                body["pricing"] = None
    # A tokens meter reads token usage only an http agent's answers carry.
    pricing = merged.get("pricing")
    meter = pricing.get("meter") if isinstance(pricing, dict) else None
    if merged["protocol"] != "http" and isinstance(meter, dict) and meter.get("kind") == "tokens":
        if isinstance(body.get("pricing"), dict):
            body["pricing"]["meter"] = {"kind": "header", "header": "X-Usage-Cost"}
        else:
            body["pricing"] = None
    if merged.get("rate_limit_burst") is not None and merged.get("rate_limit_rps") is None:
        body["rate_limit_rps"] = 1


def _credential_create(body: dict) -> None:
    if body.get("source") == "vault" and isinstance(body.get("vault_ref"), str):
        body["vault_ref"] = f"secret/data/tenants/{TENANT}/fuzz#token"


def _credential_update(credential_id: str, body: dict) -> None:
    """A PUT is checked on the credential it leaves: keep to its source, auth type and use."""
    current = _current(f"/v1/credentials/{credential_id}")
    if current is None:
        return
    if current["source"] == "managed":
        body.pop("vault_ref", None)
    else:
        body.pop("plaintext", None)
        if "vault_ref" in body:
            body["vault_ref"] = f"secret/data/tenants/{TENANT}/fuzz#token"
    if credential_id == PEM_CREDENTIAL:
        # The facilitator's credential keeps holding a client certificate and key.
        body.pop("auth_type", None)
        if "plaintext" in body:
            body["plaintext"] = PEM_BUNDLE
    auth_type = body.get("auth_type", current["auth_type"])
    if body.get("header_name") is not None and auth_type != "api_key":
        body["header_name"] = None
    if current["source"] == "managed" and auth_type != "none":
        plaintext = body.get("plaintext")
        changed = auth_type != current["auth_type"]
        if (plaintext is not None and not HEADER_SAFE.match(plaintext)) or (plaintext is None and changed):
            body["plaintext"] = "fuzz-secret"


def _keep_seeded_credentials(case) -> None:
    # The seeded credentials back the agents and the settlement configuration of the whole run.
    if case.path_parameters.get("id") in (CREDENTIAL, PEM_CREDENTIAL):
        case.path_parameters["id"] = ABSENT_CREDENTIAL


def _keep_proxied_agent(case) -> None:
    # The proxy operations' agent (reached through the listing's links in the stateful phase)
    # stays invocable for the whole run, and so does the MCP agent virtual servers are made of:
    # their changes go to an agent that does not exist.
    if case.path_parameters.get("id") in (PROXIED_AGENT, MCP_AGENT):
        case.path_parameters["id"] = ABSENT_AGENT


def _mcp_request(case, body: dict) -> None:
    # Every request but initialize names the session initialize opened (the document says so;
    # a schema cannot): one generated without a session header opens one.
    headers = case.headers if isinstance(case.headers, dict) else {}
    if any(name.lower() == "mcp-session-id" for name in headers):
        return
    body["method"] = "initialize"
    body["id"] = 1
    body["params"] = {
        "protocolVersion": MCP_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "schemathesis", "version": "1"},
    }


@schemathesis.hook
def before_call(context, case, kwargs):
    if (case.method.upper(), case.operation.path) == ("DELETE", "/v1/credentials/{id}"):
        _keep_seeded_credentials(case)
    if case.operation.path.startswith("/v1/agents/{id}") and case.method.upper() != "GET":
        _keep_proxied_agent(case)
    if not _is_positive(case):
        return
    route = (case.method.upper(), case.operation.path)
    query = case.query if isinstance(case.query, dict) else None
    body = case.body if isinstance(case.body, dict) else None
    if route == ("GET", "/v1/agents") and query is not None:
        _cursor(query, "/v1/agents")
    elif route == ("GET", "/v1/credentials") and query is not None:
        _cursor(query, "/v1/credentials")
    elif route == ("GET", "/v1/mcp-servers") and query is not None:
        _cursor(query, "/v1/mcp-servers")
    elif route in (("POST", "/v1/mcp-servers"), ("PATCH", "/v1/mcp-servers/{id}")) and body is not None:
        _server_members(body)
    elif route == ("POST", "/v1/mcp-servers/{id}/mcp") and body is not None:
        _mcp_request(case, body)
    elif route == ("GET", "/v1/budgets") and query is not None:
        _cursor(query, "/v1/budgets")
    elif route in (("POST", "/v1/budgets"), ("PATCH", "/v1/budgets/{id}")) and body is not None:
        _budget(body)
    elif route == ("GET", "/v1/invocations") and query is not None:
        _cursor(query, "/v1/invocations")
        _ordered_window(query)
    elif route == ("GET", "/v1/policy/decisions") and query is not None:
        _ordered_window(query)
    elif route in (("GET", "/v1/analytics"), ("GET", "/v1/analytics/callers")) and query is not None:
        _analytics_window(query)
    elif route == ("POST", "/v1/agents") and body is not None:
        _agent_references(body)
    elif route == ("PATCH", "/v1/agents/{id}") and body is not None:
        _agent_patch(case.path_parameters["id"], body)
    elif route == ("POST", "/v1/credentials") and body is not None:
        _credential_create(body)
    elif route == ("PUT", "/v1/credentials/{id}") and body is not None:
        _credential_update(case.path_parameters["id"], body)
    elif route == ("PUT", "/v1/settlement/config") and body is not None:
        if "facilitator_url" in body:
            body["facilitator_url"] = FACILITATOR_URL
        if "facilitator_credential_ref" in body:
            body["facilitator_credential_ref"] = PEM_CREDENTIAL


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """DELETE /v1/agents/{id} is a soft delete (the agent's status becomes inactive), so the
    agent stays readable: use_after_free holds it to that instead of a 404. Any other read after
    a delete, or an agent read back in another status, still fails the run. A 404 for an id
    before_call itself swapped for an absent one (to keep the seeded credentials and the proxied
    agent) is that swap's doing, not a created resource gone missing."""
    if isinstance(failure, EnsureResourceAvailability):
        return case.path_parameters.get("id") not in (ABSENT_CREDENTIAL, ABSENT_AGENT)
    if not isinstance(failure, UseAfterFree):
        return True
    if (case.method.upper(), case.operation.path) != ("GET", "/v1/agents/{id}"):
        return True
    try:
        return response.json().get("status") != "inactive"
    except ValueError:
        return True
