"""A Python gRPC client of Laneway, generated from proto/ as docs/clients.md says.

Run with /usr/bin/python3 and PYTHONPATH holding the generated modules and
this folder:

    scenario.py --target 127.0.0.1:7600 [--doc-example example.json]

The tokens come from the environment (LANEWAY_ATLAS_TOKEN, the project
token of `atlas`; LANEWAY_ADMIN_TOKEN, the operator token) and are never
printed. Each step's outcome goes into one JSON summary on stdout; a step that
raises records its error and the others still run.
"""

import argparse
import copy
import hashlib
import json
import os
import sys

import grpc
from google.protobuf import json_format

from google.rpc import status_pb2
from buf.validate import validate_pb2
from laneway.errors.v1 import errors_pb2
from laneway.kmap.v1 import command_pb2
from laneway.kmap.v1 import kmap_command_service_pb2 as commands_pb2
from laneway.kmap.v1 import kmap_command_service_pb2_grpc as commands_grpc
from laneway.kmap.v1 import kmap_read_service_pb2 as read_pb2
from laneway.kmap.v1 import kmap_read_service_pb2_grpc as read_grpc
from laneway.lane.v1 import lane_service_pb2
from laneway.lane.v1 import lane_service_pb2_grpc
from laneway_grpc.health.v1 import health_pb2
from laneway_grpc.health.v1 import health_pb2_grpc

import kmap_signature

# A generous bound so that a broken server fails the run instead of hanging it.
DEADLINE_S = 60


def bearer(token):
    return (("authorization", f"Bearer {token}"),)


def new_id():
    return os.urandom(16).hex()


def step(summary, name, run):
    try:
        summary[name] = run()
    except Exception as error:  # the summary says which step failed and why
        summary[name] = {"error": f"{type(error).__name__}: {error}"}


def decode_status(error):
    """The google.rpc.Status in the grpc-status-details-bin trailer, details unpacked."""
    trailers = dict(error.trailing_metadata() or ())
    raw = trailers.get("grpc-status-details-bin")
    out = {"code": error.code().name, "message": error.details(), "has_status_details": raw is not None}
    if raw is None:
        return out
    status = status_pb2.Status.FromString(raw)
    out["status_code"] = status.code
    out["status_code_matches"] = status.code == error.code().value[0]
    out["status_message_matches"] = status.message == error.details()
    out["detail_types"] = [any_.type_url for any_ in status.details]
    for any_ in status.details:
        if any_.Is(errors_pb2.ErrorDetail.DESCRIPTOR):
            detail = errors_pb2.ErrorDetail()
            any_.Unpack(detail)
            out["reason"] = detail.reason
            out["domain"] = detail.domain
        elif any_.Is(validate_pb2.Violations.DESCRIPTOR):
            violations = validate_pb2.Violations()
            any_.Unpack(violations)
            out["violations"] = [
                {"field": ".".join(e.field_name for e in v.field.elements), "rule_id": v.rule_id}
                for v in violations.violations
            ]
    return out


def expect_error(call):
    try:
        call()
    except grpc.RpcError as error:
        return decode_status(error)
    return {"code": "OK"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True, help="host:port of Laneway (gRPC over h2c)")
    parser.add_argument("--doc-example", help="the worked example of docs/kmap.md, as JSON")
    args = parser.parse_args()
    atlas = os.environ["LANEWAY_ATLAS_TOKEN"]
    admin = os.environ["LANEWAY_ADMIN_TOKEN"]

    summary = {}
    channel = grpc.insecure_channel(args.target, options=[("grpc.enable_http_proxy", 0)])
    health = health_pb2_grpc.HealthStub(channel)
    lanes = lane_service_pb2_grpc.LaneServiceStub(channel)
    commands = commands_grpc.KmapCommandServiceStub(channel)
    read = read_grpc.KmapReadServiceStub(channel)

    def check_health():
        out = {}
        for service in ["", "laneway.kmap.v1.KmapCommandService"]:
            response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=DEADLINE_S)
            out[service or "(server)"] = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        return out

    step(summary, "health", check_health)

    def registry():
        response = lanes.GetRegistry(lane_service_pb2.GetRegistryRequest(), metadata=bearer(atlas), timeout=DEADLINE_S)
        return {
            "project": response.project,
            "namespace": response.namespace,
            "lanes": [{"lane": l.lane, "owner": l.owner, "publish": l.publish, "subscribe": l.subscribe} for l in response.lanes],
        }

    step(summary, "registry", registry)

    def submit_and_watch(command):
        """SubmitCommand, then WatchCommands from its Queued event until a terminal state."""
        idempotency_id = new_id()
        submitted = commands.SubmitCommand(
            commands_pb2.SubmitCommandRequest(idempotency_id=idempotency_id, command=command),
            metadata=bearer(admin),
            timeout=DEADLINE_S,
        )
        out = {
            "idempotency_id": idempotency_id,
            "submitted_state": command_pb2.CommandState.Name(submitted.record.state),
            "events": [],
        }
        stream = commands.WatchCommands(
            commands_pb2.WatchCommandsRequest(after_position=submitted.position - 1, idempotency_id=idempotency_id),
            metadata=bearer(admin),
            timeout=DEADLINE_S,
        )
        for change in stream:
            out["events"].append(commands_pb2.CommandEventKind.Name(change.kind))
            state = change.record.state
            if state in (command_pb2.COMMAND_STATE_COMMITTED, command_pb2.COMMAND_STATE_FAILED):
                out["state"] = command_pb2.CommandState.Name(state)
                out["transaction_id"] = change.record.transaction_id
                out["created_node_id"] = change.record.created_node_id
                out["error"] = change.record.error.message
                break
        stream.cancel()
        return out

    applied = []

    def kmap_commands():
        topic = submit_and_watch(command_pb2.Command(create_node=command_pb2.CreateNode(kind="topic", title="Rivers")))
        applied.append(topic)
        # Text that exercises every rule of canonical JSON: quotes, a backslash,
        # control characters, HTML characters, non-ASCII (an en dash, U+2028,
        # an emoji outside the BMP), an empty map value, a parent id.
        river = submit_and_watch(
            command_pb2.Command(
                create_node=command_pb2.CreateNode(
                    kind="river",
                    title='Rhine \u2013 "Rhein" \\ <&> \u2028 \U0001F30A',
                    body="Source: Lake Toma\n\ttab \x01 \x1f \x7f /",
                    attributes={"region": "alps", "basin": "north-sea", "a_first": "\u00fc", "empty": ""},
                    parent_id=topic["created_node_id"],
                )
            )
        )
        applied.append(river)
        # proto3 optional set to "" (explicit presence), a map, a list out of order.
        update = submit_and_watch(
            command_pb2.Command(
                update_node=command_pb2.UpdateNode(
                    node_id=river["created_node_id"],
                    body="",
                    set_attributes={"flow": "north"},
                    remove_attributes=["region", "a_first"],
                )
            )
        )
        applied.append(update)
        # Two touched nodes.
        link = submit_and_watch(
            command_pb2.Command(
                link_nodes=command_pb2.LinkNodes(from_id=river["created_node_id"], to_id=topic["created_node_id"], link_type="cites")
            )
        )
        applied.append(link)
        return applied

    step(summary, "commands", kmap_commands)

    step(
        summary,
        "unauthenticated",
        lambda: expect_error(
            lambda: lanes.GetRegistry(
                lane_service_pb2.GetRegistryRequest(), metadata=bearer("not-a-known-token"), timeout=DEADLINE_S
            )
        ),
    )

    step(
        summary,
        "unauthenticated_missing",
        lambda: expect_error(lambda: lanes.GetRegistry(lane_service_pb2.GetRegistryRequest(), timeout=DEADLINE_S)),
    )

    # Methods and services the server does not have: a trailers-only answer,
    # which grpcio must read as UNIMPLEMENTED with its details.
    def unknown_call(path):
        return channel.unary_unary(
            path,
            request_serializer=lane_service_pb2.GetRegistryRequest.SerializeToString,
            response_deserializer=lane_service_pb2.GetRegistryResponse.FromString,
        )

    step(
        summary,
        "unimplemented",
        lambda: {
            "method_without_token": expect_error(
                lambda: unknown_call("/laneway.lane.v1.LaneService/NoSuchMethod")(
                    lane_service_pb2.GetRegistryRequest(), timeout=DEADLINE_S
                )
            ),
            "method_with_token": expect_error(
                lambda: unknown_call("/laneway.lane.v1.LaneService/NoSuchMethod")(
                    lane_service_pb2.GetRegistryRequest(), metadata=bearer(atlas), timeout=DEADLINE_S
                )
            ),
            "service": expect_error(
                lambda: unknown_call("/laneway.nosuch.v1.NoSuchService/Get")(
                    lane_service_pb2.GetRegistryRequest(), metadata=bearer(atlas), timeout=DEADLINE_S
                )
            ),
        },
    )

    # A body the server refuses before the first message reaches the
    # service: bytes that are no HealthCheckRequest.
    step(
        summary,
        "malformed_body",
        lambda: expect_error(
            lambda: channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=lambda raw: raw,
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )(b"\xff\xff\xff\xff\x0f", timeout=DEADLINE_S)
        ),
    )

    step(
        summary,
        "invalid",
        lambda: expect_error(
            lambda: commands.SubmitCommand(
                commands_pb2.SubmitCommandRequest(
                    idempotency_id=new_id(),
                    command=command_pb2.Command(delete_node=command_pb2.DeleteNode(node_id="pending:rivers")),
                ),
                metadata=bearer(admin),
                timeout=DEADLINE_S,
            )
        ),
    )

    key_holder = {}

    def signing_key():
        key = read.GetSigningKey(read_pb2.GetSigningKeyRequest(), metadata=bearer(admin), timeout=DEADLINE_S)
        key_holder["raw"] = key.public_key
        return {
            "algorithm": key.algorithm,
            "public_key_length": len(key.public_key),
            "key_id_matches_public_key": key.key_id == kmap_signature.key_id(key.public_key),
            "pem_matches_public_key": kmap_signature.raw_key_from_pem(key.public_key_pem) == key.public_key,
        }

    step(summary, "signing_key", signing_key)

    def verify_applied():
        public_key = key_holder["raw"]
        out = []
        for record in applied:
            transaction = read.GetTransaction(
                read_pb2.GetTransactionRequest(transaction_id=record["transaction_id"]),
                metadata=bearer(admin),
                timeout=DEADLINE_S,
            ).transaction
            checks = kmap_signature.check_transaction(transaction, public_key)
            checks["provenance_matches"] = transaction.provenance == record["idempotency_id"]
            checks["created_node_matches"] = transaction.created_node_id == record["created_node_id"]
            checks["touched"] = len(transaction.touched_node_ids)
            checks["signed_payload"] = transaction.signed_payload.decode("utf-8")

            # A changed field no longer rebuilds the signed bytes; a changed
            # signature or payload byte no longer verifies.
            changed = copy.deepcopy(transaction)
            changed.provenance = "0" * 32 if transaction.provenance != "0" * 32 else "1" * 32
            bad_signature = bytearray(transaction.signature)
            bad_signature[0] ^= 1
            bad_payload = bytearray(transaction.signed_payload)
            bad_payload[-2] ^= 1
            checks["tampered_rejected"] = {
                "field": not kmap_signature.check_transaction(changed, public_key)["valid"],
                "signature": not kmap_signature.signature_valid(public_key, bytes(bad_signature), transaction.signed_payload),
                "payload": not kmap_signature.signature_valid(public_key, transaction.signature, bytes(bad_payload)),
            }
            out.append(checks)
        return out

    step(summary, "verify", verify_applied)

    def chain():
        transactions = []
        page_token = ""
        while True:
            page = read.ListTransactions(
                read_pb2.ListTransactionsRequest(page_size=2, page_token=page_token),
                metadata=bearer(admin),
                timeout=DEADLINE_S,
            )
            transactions.extend(page.transactions)
            page_token = page.next_page_token
            if not page_token:
                break
        out = kmap_signature.check_chain(transactions)
        out["all_valid"] = all(kmap_signature.check_transaction(t, key_holder["raw"])["valid"] for t in transactions)
        # Dropping a transaction from the middle breaks the chain.
        out["gap_detected"] = len(transactions) < 3 or not kmap_signature.check_chain(transactions[:1] + transactions[2:])["valid"]
        return out

    step(summary, "chain", chain)

    if args.doc_example:

        def doc_example():
            with open(args.doc_example, encoding="utf-8") as f:
                example = json.load(f)
            key = json_format.ParseDict(example["key"], read_pb2.GetSigningKeyResponse())
            transaction = json_format.ParseDict(example["transaction"], read_pb2.GetTransactionResponse()).transaction
            rebuilt = kmap_signature.signed_bytes(transaction)
            transaction.signed_payload = rebuilt
            checks = kmap_signature.check_transaction(transaction, key.public_key)
            checks["rebuilt_equals_doc_text"] = rebuilt == example["payload"].encode("utf-8")
            checks["previous_digest_matches_doc_text"] = (
                transaction.previous_digest == hashlib.sha256(example["previous_payload"].encode("utf-8")).digest()
            )
            checks["key_id_matches_public_key"] = key.key_id == kmap_signature.key_id(key.public_key)
            checks["pem_matches_public_key"] = kmap_signature.raw_key_from_pem(key.public_key_pem) == key.public_key
            return checks

        step(summary, "doc_example", doc_example)

    channel.close()
    json.dump(summary, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
