"""``magnetar tokens``: keys and JWTs, as ``pulsar tokens`` makes them.

``create-secret-key`` writes a raw HS256 key (``--base64`` prints it instead);
``create-key-pair`` writes DER private and public keys (RS256 or ES256); ``create`` signs a
token for ``--subject ROLE`` with ``--secret-key`` or ``--private-key`` (``file:///PATH``,
``data:;base64,...`` or a path), optionally expiring (``--expiry-time 1h``).
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path
from typing import Any

from magnetar.core.errors import MagnetarError


def add_tokens(commands: Any) -> None:
    tokens = commands.add_parser("tokens", help="create token keys and tokens (pulsar tokens)")
    actions = tokens.add_subparsers(dest="tokens_action", metavar="ACTION", required=True)
    secret = actions.add_parser("create-secret-key", help="a new HS256 secret key")
    secret.add_argument("--output", "-o", help="file to write the raw key to")
    secret.add_argument("--base64", "-b", action="store_true", help="print it base64-encoded")
    secret.set_defaults(handler=_create_secret_key)
    pair = actions.add_parser("create-key-pair", help="a new RS256 / ES256 key pair (DER)")
    pair.add_argument("--output-private-key", required=True, help="file for the private key")
    pair.add_argument("--output-public-key", required=True, help="file for the public key")
    pair.add_argument("--signature-algorithm", "-a", default="RS256", choices=("RS256", "ES256"))
    pair.set_defaults(handler=_create_key_pair)
    create = actions.add_parser("create", help="a token for a role")
    create.add_argument("--subject", "-s", required=True, help="the role the token names")
    keys = create.add_mutually_exclusive_group(required=True)
    keys.add_argument("--secret-key", help="HS256 key: file:///PATH, data:;base64,... or PATH")
    keys.add_argument("--private-key", help="RS256/ES256 private key, same forms")
    create.add_argument(
        "--expiry-time", "--expiry", "-e", help="valid for: 30s, 15m, 12h, 7d, 1y (default never)"
    )
    create.add_argument("--signature-algorithm", "-a", choices=("RS256", "ES256"))
    create.set_defaults(handler=_create)


def _create_secret_key(args: argparse.Namespace) -> int:
    from magnetar.core.tokens import secret_key

    key = secret_key()
    if args.output:
        _write(Path(args.output), key)
    if args.base64 or not args.output:
        print(base64.b64encode(key).decode())
    return 0


def _create_key_pair(args: argparse.Namespace) -> int:
    from magnetar.core.tokens import key_pair

    private, public = key_pair(args.signature_algorithm)
    _write(Path(args.output_private_key), private)
    _write(Path(args.output_public_key), public)
    return 0


def _create(args: argparse.Namespace) -> int:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from magnetar.core.tokens import create_token, parse_expiry, read_key

    expires = parse_expiry(args.expiry_time) if args.expiry_time else None
    if args.secret_key:
        key = read_key("secret_key", args.secret_key)
        print(create_token(args.subject, key, expires_in=expires))
        return 0
    key = read_key("private_key", args.private_key)
    algorithm = args.signature_algorithm
    if algorithm is None:  # the key's kind decides, as pulsar tokens does
        loaded = (
            serialization.load_pem_private_key(key, None)
            if key.lstrip().startswith(b"-----")
            else serialization.load_der_private_key(key, None)
        )
        algorithm = "ES256" if isinstance(loaded, ec.EllipticCurvePrivateKey) else "RS256"
    print(create_token(args.subject, key, algorithm=algorithm, expires_in=expires))
    return 0


def _write(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
        path.chmod(0o600)
    except OSError as e:
        raise MagnetarError(f"cannot write {path}: {e.strerror}") from None
    print(f"wrote {path}", file=sys.stderr)
