"""DSSE: the PAE of the spec's own example, and signatures that openssl checks both ways."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from pinguard.errors import EnvelopeError
from pinguard.signing import dsse
from pinguard.signing.keys import key_id, load_private_key, load_public_key
from tests.attest.conftest import Keys
from tests.infra.tools import require_tool


def test_pae_matches_the_specs_example() -> None:
    """PAE("http://example.com/HelloWorld", "hello world") as the DSSE protocol spells it."""
    assert (
        dsse.pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_counts_bytes_not_characters() -> None:
    """Lengths are UTF-8 byte counts: 'é' is two bytes."""
    assert dsse.pae("t", "é".encode()) == b"DSSEv1 1 t 2 " + "é".encode()


def test_openssl_verifies_pinguards_signature_over_the_pae(keys: Keys, tmp_path: Path) -> None:
    """The sig is a DER ECDSA/SHA-256 signature over the PAE: openssl dgst -verify accepts it."""
    envelope = dsse.sign(b'{"hello":"world"}', load_private_key(keys.private))
    doc = json.loads(envelope.to_json())
    assert doc["payloadType"] == "application/vnd.in-toto+json"
    assert base64.b64decode(doc["payload"]) == b'{"hello":"world"}'
    (tmp_path / "pae").write_bytes(
        b"DSSEv1 28 application/vnd.in-toto+json 17 " + b'{"hello":"world"}'
    )
    (tmp_path / "sig").write_bytes(base64.b64decode(doc["signatures"][0]["sig"]))
    proc = subprocess.run(
        [
            require_tool("openssl"),
            "dgst",
            "-sha256",
            "-verify",
            str(keys.public),
            "-signature",
            str(tmp_path / "sig"),
            str(tmp_path / "pae"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Verified OK" in proc.stdout


def test_pinguard_verifies_an_openssl_signature(keys: Keys, tmp_path: Path) -> None:
    """An envelope whose sig openssl made over the PAE verifies; its payload comes back."""
    payload = b'{"_type":"x"}'
    pae = tmp_path / "pae"
    pae.write_bytes(dsse.pae(dsse.IN_TOTO_PAYLOAD_TYPE, payload))
    sig = subprocess.run(
        [require_tool("openssl"), "dgst", "-sha256", "-sign", str(keys.private), str(pae)],
        capture_output=True,
        check=True,
    ).stdout
    text = json.dumps(
        {
            "payload": base64.b64encode(payload).decode(),
            "payloadType": dsse.IN_TOTO_PAYLOAD_TYPE,
            "signatures": [{"keyid": "", "sig": base64.b64encode(sig).decode()}],
        }
    )
    assert dsse.verify(dsse.parse(text.encode()), load_public_key(keys.public)) == payload


def test_key_id_is_the_sha256_of_the_der_public_key(keys: Keys) -> None:
    """keyid = sha256(DER SubjectPublicKeyInfo), here computed by openssl."""
    der = subprocess.run(
        [require_tool("openssl"), "pkey", "-pubin", "-in", str(keys.public), "-outform", "DER"],
        capture_output=True,
        check=True,
    ).stdout
    digest = subprocess.run(
        [require_tool("openssl"), "dgst", "-sha256", "-r"],
        input=der,
        capture_output=True,
        check=True,
    ).stdout.split()[0]
    assert key_id(load_public_key(keys.public)) == digest.decode()
    envelope = dsse.sign(b"x", load_private_key(keys.private))
    assert envelope.signatures[0].keyid == digest.decode()


def _tamper(envelope: dsse.Envelope) -> dsse.Envelope:
    return dsse.Envelope(
        envelope.payload_type, envelope.payload.replace(b"pass", b"PASS"), envelope.signatures
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_tamper, "no signature verifies"),
        (lambda e: dsse.Envelope("text/plain", e.payload, e.signatures), "no signature verifies"),
        (lambda e: dsse.Envelope(e.payload_type, e.payload, ()), "unsigned"),
    ],
    ids=["changed-payload", "changed-payload-type", "no-signatures"],
)
def test_changed_envelopes_do_not_verify(keys: Keys, change: object, message: str) -> None:
    """A changed payload or type (both under the PAE) or no signature at all fails."""
    envelope = dsse.sign(b'{"verdict":"pass"}', load_private_key(keys.private))
    assert callable(change)
    with pytest.raises(EnvelopeError, match=message):
        dsse.verify(change(envelope), load_public_key(keys.public))


def test_another_key_does_not_verify(keys: Keys) -> None:
    """A signature by one key is not accepted with another P-256 key."""
    envelope = dsse.sign(b"{}", load_private_key(keys.other_private))
    with pytest.raises(EnvelopeError, match="signed by another key"):
        dsse.verify(envelope, load_public_key(keys.public))


def test_urlsafe_base64_is_accepted(keys: Keys) -> None:
    """The spec lets signers use URL-safe base64; a reader must accept it."""
    envelope = dsse.sign(b"\xfb\xff payload", load_private_key(keys.private))
    doc = json.loads(envelope.to_json())
    doc["payload"] = base64.urlsafe_b64encode(envelope.payload).decode().rstrip("=")
    parsed = dsse.parse(json.dumps(doc).encode())
    assert dsse.verify(parsed, load_public_key(keys.public)) == b"\xfb\xff payload"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"payload":"e30=","signatures":[]}', "no string payloadType"),
        (b'{"payload":"%%%","payloadType":"t","signatures":[]}', "not valid base64"),
        (b'{"payload":"e30=","payloadType":"t","signatures":{}}', "signatures is not a list"),
        (b'{"payload":"e30=","payloadType":"t","signatures":[{"sig":5}]}', "not a base64 string"),
        (b'{"payload":"e30=","payloadType":"t","signatures":["x"]}', "is not an object"),
    ],
)
def test_malformed_envelopes_say_what_is_wrong(data: bytes, message: str) -> None:
    """Each malformed envelope raises EnvelopeError naming the bad part."""
    with pytest.raises(EnvelopeError, match=message):
        dsse.parse(data)


def test_envelope_json_is_canonical(keys: Keys) -> None:
    """Sorted keys, no spaces, one final newline; the same payload gives the same payload field."""
    key = load_private_key(keys.private)
    one, two = dsse.sign(b"abc", key).to_json(), dsse.sign(b"abc", key).to_json()
    assert one.endswith("}\n")
    assert " " not in one
    assert list(json.loads(one)) == ["payload", "payloadType", "signatures"]
    assert json.loads(one)["payload"] == json.loads(two)["payload"] == "YWJj"
