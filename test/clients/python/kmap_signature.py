"""Verifies Laneway Kmap transactions in Python.

Written from the section "The signed bytes" of docs/kmap.md and nothing
else: the key id, the payload's ten members, canonical JSON, the command in
proto3 JSON with proto field names, the Ed25519 signature and the chain of
previous digests.
"""

import datetime
import hashlib
import json

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf import json_format

SCHEMA = "laneway-kmap-transaction-v1"
ZERO_DIGEST = bytes(32)


def key_id(public_key: bytes) -> str:
    """Lowercase hex of the first 16 bytes of SHA-256 over the raw key."""
    return hashlib.sha256(public_key).digest()[:16].hex()


def raw_key_from_pem(pem: str) -> bytes:
    """The raw 32 bytes of a PEM SubjectPublicKeyInfo Ed25519 key."""
    key = serialization.load_pem_public_key(pem.encode("ascii"))
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _sorted_members(value):
    """Objects at every depth with members in ascending UTF-16 code unit order."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: k.encode("utf-16-be"))
        return {k: _sorted_members(value[k]) for k in keys}
    if isinstance(value, list):
        return [_sorted_members(v) for v in value]
    return value


def canonical_json(value) -> bytes:
    """Canonical JSON: sorted members, no whitespace, only the escapes the doc lists, UTF-8."""
    return json.dumps(_sorted_members(value), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def committed_at_text(timestamp) -> str:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ` in UTC, always three fraction digits."""
    if timestamp.nanos % 1_000_000 != 0:
        raise ValueError("committed_at is not a whole number of milliseconds")
    at = datetime.datetime.fromtimestamp(timestamp.seconds, tz=datetime.timezone.utc)
    return (
        f"{at.year:04d}-{at.month:02d}-{at.day:02d}T{at.hour:02d}:{at.minute:02d}:{at.second:02d}"
        f".{timestamp.nanos // 1_000_000:03d}Z"
    )


def command_value(command) -> dict:
    """The command in proto3 JSON with proto field names, defaults omitted."""
    return json_format.MessageToDict(command, preserving_proto_field_name=True)


def signed_bytes(transaction) -> bytes:
    """The payload rebuilt from a laneway.kmap.v1.Transaction's fields."""
    return canonical_json(
        {
            "command": command_value(transaction.command),
            "committed_at": committed_at_text(transaction.committed_at),
            "created_node_id": transaction.created_node_id,
            "id": transaction.id,
            "key_id": transaction.key_id,
            "previous_digest": transaction.previous_digest.hex(),
            "provenance": transaction.provenance,
            "schema": SCHEMA,
            "sequence": int(transaction.sequence),
            "touched_node_ids": list(transaction.touched_node_ids),
        }
    )


def signature_valid(public_key: bytes, signature: bytes, payload: bytes) -> bool:
    if len(signature) != 64:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, payload)
        return True
    except InvalidSignature:
        return False


def check_transaction(transaction, public_key: bytes) -> dict:
    """Each check of "Verifying one transaction"; valid when all hold."""
    touched = list(transaction.touched_node_ids)
    checks = {
        "key_id_matches": transaction.key_id == key_id(public_key),
        "rebuilt_equals_signed": signed_bytes(transaction) == transaction.signed_payload,
        "signature_valid": signature_valid(public_key, transaction.signature, transaction.signed_payload),
        "touched_sorted": touched == sorted(touched, key=lambda k: k.encode("utf-16-be")),
    }
    checks["valid"] = all(checks.values())
    return checks


def check_chain(transactions) -> dict:
    """The chain over a whole history listed in commit order."""
    problems = []
    previous = None
    for transaction in transactions:
        if previous is None:
            if transaction.sequence != 1:
                problems.append(f"history starts at sequence {transaction.sequence}, not 1")
            if transaction.previous_digest != ZERO_DIGEST:
                problems.append(f"transaction {transaction.id} is first but its previous digest is not zero")
        else:
            if transaction.sequence != previous.sequence + 1:
                problems.append(f"sequence {transaction.sequence} follows {previous.sequence}")
            if transaction.previous_digest != hashlib.sha256(previous.signed_payload).digest():
                problems.append(f"transaction {transaction.id} does not chain to {previous.id}")
        previous = transaction
    return {"valid": not problems, "problems": problems, "sequences": [int(t.sequence) for t in transactions]}
