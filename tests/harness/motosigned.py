#!/usr/bin/env python3
"""moto_server checking SigV4 signatures: header signatures against the query string as the
client sent it, and presigned (query-signed) URLs for real.

Header signatures. moto (5.2.1, with INITIAL_NO_AUTH_ACTION_COUNT) recomputes a request's
signature from werkzeug's request.url, whose query is percent-decoded:
`prefix=lodge%2F.lodge%2F` becomes `prefix=lodge/.lodge/`, so every correctly signed request
with such a parameter is refused with SignatureDoesNotMatch. This runs the same server with
one change: the signature is checked against the raw QUERY_STRING. The verification itself
(botocore's SigV4) is moto's.

Query signatures. moto cannot check a presigned URL (it answers 500 to every one when it
checks signatures, and ignores the signature when it does not), so a request carrying
X-Amz-Signature in its query is checked here, in front of moto, as S3 checks it (the AWS
SigV4 query authentication, written from the spec): the signature recomputed over the
canonical request (method, path, every query parameter but the signature, the signed
headers' values, UNSIGNED-PAYLOAD) with the key's secret; X-Amz-Date and X-Amz-Expires
against the current time; every header named in X-Amz-SignedHeaders present, no x-amz-*
header sent unsigned, and the body exactly as long as its Content-Length. A refusal is a
403 with S3's error XML and never reaches moto; so is a SigV2 query signature, which is not
checked here. An accepted request goes on to moto as an ordinary one: the X-Amz-* query
parameters removed and the same request signed again in its headers with the same key (moto
checks that signature itself where it checks signatures), so the object lands in moto as a
PUT its owner made. What the body holds is
moto's to check, and moto does not check an x-amz-checksum-sha256 header (AWS S3 would):
this server is about the signature, its expiry and the headers it pins.

The secret of a key id comes from LODGE_PRESIGN_KEYS ("id:secret,id:secret"), else from
moto's IAM (a key made with iam create-access-key in this server).

usage: motosigned.py [moto_server arguments]
       (INITIAL_NO_AUTH_ACTION_COUNT, LODGE_PRESIGN_KEYS in the environment)
"""

import hashlib
import hmac
import io
import os
import sys
import time
import urllib.parse
from datetime import datetime, timezone

import moto.server
import motos3  # noqa: F401  (DeleteObjects evaluates each key's ETag, as S3 does)
from moto.core.authorization import ActionAuthenticatorMixin
from moto.core.responses import BaseResponse

_setup_class = BaseResponse.setup_class
_authenticate = ActionAuthenticatorMixin._authenticate_and_authorize_action

MAX_EXPIRES = 7 * 24 * 3600
CLOCK_SKEW = 15 * 60  # how far in the future an X-Amz-Date may be, as S3 allows
UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")


def setup_class(self, request, full_url, headers, *args, **kwargs):
    _setup_class(self, request, full_url, headers, *args, **kwargs)
    raw = getattr(request, "environ", {}).get("QUERY_STRING", "")
    self._signed_uri = full_url.split("?", 1)[0] + ("?" + raw if raw else "")


def authenticate(self, iam_request_cls, resource="*"):
    signed = getattr(self, "_signed_uri", None)
    if signed is None:
        return _authenticate(self, iam_request_cls, resource)
    uri, self.uri = self.uri, signed
    try:
        return _authenticate(self, iam_request_cls, resource)
    finally:
        self.uri = uri


# --- SigV4 query authentication ---

def aws_encode(text, keep_slash=False):
    """SigV4's URI encoding: every byte but A-Z a-z 0-9 - _ . ~ (and '/' in a path) as %XX,
    hex digits upper case."""
    out = []
    for b in text.encode("utf-8"):
        if b in UNRESERVED or (keep_slash and b == ord("/")):
            out.append(chr(b))
        else:
            out.append("%%%02X" % b)
    return "".join(out)


def query_pairs(raw_query):
    """The query's parameters as (name, value), percent-decoded, in the order sent."""
    pairs = []
    for part in raw_query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        pairs.append((urllib.parse.unquote(name), urllib.parse.unquote(value)))
    return pairs


def request_headers(environ):
    """The request's headers, names lower case (CGI names turned back into HTTP ones)."""
    headers = {}
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            headers[key[5:].replace("_", "-").lower()] = value
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").lower()] = environ[key]
    return headers


def canonical_value(value):
    return " ".join(value.strip().split())


def signing_key(secret, day, region, service):
    key = ("AWS4" + secret).encode("utf-8")
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
    return key


class Refused(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def check_query_signature(method, raw_path, raw_query, headers, secret_of, now):
    """Refused(code, message) unless the presigned request is one its signer signed and
    still valid at `now` (seconds since the epoch). `secret_of(key_id)` is the secret or None."""
    pairs = query_pairs(raw_query)
    params = {}
    for name, value in pairs:
        if name.startswith("X-Amz-") and name in params:
            raise Refused("AuthorizationQueryParametersError", f"{name} given twice")
        params.setdefault(name, value)
    need = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders",
            "X-Amz-Signature")
    missing = [n for n in need if n not in params]
    if missing:
        raise Refused("AuthorizationQueryParametersError", "missing " + ", ".join(missing))
    if params["X-Amz-Algorithm"] != "AWS4-HMAC-SHA256":
        raise Refused("AuthorizationQueryParametersError", "X-Amz-Algorithm must be AWS4-HMAC-SHA256")
    scope = params["X-Amz-Credential"].split("/")
    if len(scope) != 5 or scope[3] != "s3" or scope[4] != "aws4_request":
        raise Refused("AuthorizationQueryParametersError", "X-Amz-Credential is not KEY/DAY/REGION/s3/aws4_request")
    key_id, day, region = scope[0], scope[1], scope[2]
    stamp = params["X-Amz-Date"]
    try:
        signed_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise Refused("AuthorizationQueryParametersError", "X-Amz-Date is not YYYYMMDDTHHMMSSZ") from None
    if day != stamp[:8]:
        raise Refused("AuthorizationQueryParametersError", "the credential's day is not X-Amz-Date's")
    try:
        expires = int(params["X-Amz-Expires"])
    except ValueError:
        raise Refused("AuthorizationQueryParametersError", "X-Amz-Expires is not a number") from None
    if not 1 <= expires <= MAX_EXPIRES:
        raise Refused("AuthorizationQueryParametersError", "X-Amz-Expires must be 1 to 604800")
    if now > signed_at + expires:
        raise Refused("AccessDenied", "Request has expired")
    if signed_at > now + CLOCK_SKEW:
        raise Refused("AccessDenied", "Request is not valid yet")
    secret = secret_of(key_id)
    if secret is None:
        raise Refused("InvalidAccessKeyId", f"no such access key: {key_id}")
    signed_names = params["X-Amz-SignedHeaders"].split(";")
    if signed_names != sorted(set(signed_names)) or "host" not in signed_names:
        raise Refused("AuthorizationQueryParametersError", "X-Amz-SignedHeaders must be sorted and name host")
    absent = [n for n in signed_names if n not in headers]
    if absent:
        raise Refused("SignatureDoesNotMatch", "signed headers not sent: " + ", ".join(absent))
    unsigned = sorted(n for n in headers if n.startswith("x-amz-") and n not in signed_names)
    if unsigned:
        raise Refused("AccessDenied", "There were headers present in the request which were not signed: " +
                      ", ".join(unsigned))
    canonical = canonical_request(method, raw_path, [p for p in pairs if p[0] != "X-Amz-Signature"], headers,
                                  signed_names)
    expected = signature(secret, stamp, f"{day}/{region}/s3/aws4_request", canonical)
    if not hmac.compare_digest(expected, params["X-Amz-Signature"].lower()):
        raise Refused("SignatureDoesNotMatch",
                      "The request signature we calculated does not match the signature you provided")
    return key_id, secret, region


def canonical_request(method, raw_path, pairs, headers, signed_names):
    """SigV4's canonical request of an S3 request whose payload is not signed."""
    return "\n".join([
        method,
        aws_encode(urllib.parse.unquote(raw_path), keep_slash=True),
        "&".join(f"{aws_encode(n)}={aws_encode(v)}" for n, v in sorted(pairs)),
        "".join(f"{n}:{canonical_value(headers[n])}\n" for n in signed_names),
        ";".join(signed_names),
        "UNSIGNED-PAYLOAD",
    ])


def signature(secret, stamp, scope, canonical):
    """The hex signature of a canonical request made at `stamp` (YYYYMMDDTHHMMSSZ) in `scope`
    (DAY/REGION/SERVICE/aws4_request)."""
    day, region, service, _ = scope.split("/")
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope,
                         hashlib.sha256(canonical.encode("utf-8")).hexdigest()])
    return hmac.new(signing_key(secret, day, region, service), to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


def sign_headers(environ, raw_path, pairs, headers, signed_names, key_id, secret, region, now):
    """Makes `environ` an ordinary header-signed request (Authorization, X-Amz-Date,
    X-Amz-Content-SHA256: UNSIGNED-PAYLOAD) over the same headers and the query `pairs`."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    headers = dict(headers, **{"x-amz-date": stamp, "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    names = sorted(set(signed_names) | {"x-amz-date", "x-amz-content-sha256"})
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    sig = signature(secret, stamp, scope, canonical_request(environ["REQUEST_METHOD"], raw_path, pairs, headers,
                                                            names))
    environ["HTTP_X_AMZ_DATE"] = stamp
    environ["HTTP_X_AMZ_CONTENT_SHA256"] = "UNSIGNED-PAYLOAD"
    environ["HTTP_AUTHORIZATION"] = (f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, "
                                     f"SignedHeaders={';'.join(names)}, Signature={sig}")


def secret_from_moto(key_id):
    """The secret moto's IAM holds for an access key it made, or None."""
    try:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.iam.access_control import IAMUserAccessKey
        return IAMUserAccessKey(account_id=DEFAULT_ACCOUNT_ID, partition="aws", access_key_id=key_id,
                                headers={}).create_credentials().secret_key
    except Exception:  # noqa: BLE001 - any failure of the lookup: not a key of this server
        return None


def known_secrets():
    out = {}
    for entry in os.environ.get("LODGE_PRESIGN_KEYS", "").split(","):
        if ":" in entry:
            key_id, secret = entry.split(":", 1)
            out[key_id] = secret
    return out


class PresignedCheck:
    """WSGI middleware in front of moto's application: checks query-signed requests and
    hands the accepted ones on as ordinary requests; everything else goes on untouched."""

    def __init__(self, app):
        self.app = app
        self.keys = known_secrets()
        self.debug = False

    def secret_of(self, key_id):
        return self.keys.get(key_id) or secret_from_moto(key_id)

    def __call__(self, environ, start_response):
        raw_query = environ.get("QUERY_STRING", "")
        names = {p.partition("=")[0] for p in raw_query.split("&")}
        if "X-Amz-Signature" not in names:
            if "Signature" in names and "AWSAccessKeyId" in names:
                return refuse(start_response, Refused("AccessDenied", "SigV2 query signatures are not checked here"))
            return self.app(environ, start_response)
        raw_path = environ.get("RAW_URI", environ.get("REQUEST_URI", "")).split("?", 1)[0]
        headers = request_headers(environ)
        # The body first (so a refusal never leaves the client sending into a closed socket),
        # exactly as long as Content-Length says.
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        try:
            if len(body) != length:
                raise Refused("IncompleteBody", f"the body has {len(body)} bytes, Content-Length says {length}")
            now = time.time()
            key_id, secret, region = check_query_signature(environ["REQUEST_METHOD"], raw_path, raw_query,
                                                           headers, self.secret_of, now)
        except Refused as e:
            return refuse(start_response, e)
        # On to moto as the same request signed in its headers: moto treats it as the
        # authenticated request it is (and checks that signature itself where it checks them).
        kept = [p for p in raw_query.split("&") if p and not p.startswith("X-Amz-")]
        signed_names = dict(query_pairs(raw_query))["X-Amz-SignedHeaders"].split(";")
        environ = dict(environ)
        environ["QUERY_STRING"] = "&".join(kept)
        for name in ("RAW_URI", "REQUEST_URI"):
            if name in environ:
                environ[name] = raw_path + ("?" + environ["QUERY_STRING"] if kept else "")
        environ["wsgi.input"] = io.BytesIO(body)
        sign_headers(environ, raw_path, query_pairs(environ["QUERY_STRING"]), headers, signed_names, key_id,
                     secret, region, now)
        return self.app(environ, start_response)


def refuse(start_response, e):
    status = "400 Bad Request" if e.code in ("IncompleteBody", "AuthorizationQueryParametersError") \
        else "403 Forbidden"
    xml = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{}</Code><Message>{}</Message></Error>'
           .format(e.code, e.message.replace("&", "&amp;").replace("<", "&lt;"))).encode()
    start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(xml)))])
    return [xml]


_dispatcher = moto.server.DomainDispatcherApplication


def dispatcher(create_app):
    return PresignedCheck(_dispatcher(create_app))


BaseResponse.setup_class = setup_class
ActionAuthenticatorMixin._authenticate_and_authorize_action = authenticate
moto.server.DomainDispatcherApplication = dispatcher

if __name__ == "__main__":
    sys.argv[0] = "moto_server"
    sys.exit(moto.server.main())
