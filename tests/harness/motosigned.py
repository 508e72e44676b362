#!/usr/bin/env python3
"""moto_server checking SigV4 signatures against the query string as the client sent it.

moto (5.2.1, with INITIAL_NO_AUTH_ACTION_COUNT) recomputes a request's signature from
werkzeug's request.url, whose query is percent-decoded: `prefix=lodge%2F.lodge%2F` becomes
`prefix=lodge/.lodge/`, so every correctly signed request with such a parameter is refused
with SignatureDoesNotMatch. This runs the same server with one change: the signature is
checked against the raw QUERY_STRING. The verification itself (botocore's SigV4) is moto's.

usage: motosigned.py [moto_server arguments]   (INITIAL_NO_AUTH_ACTION_COUNT in the environment)
"""

import sys

from moto.core.authorization import ActionAuthenticatorMixin
from moto.core.responses import BaseResponse
from moto.server import main

_setup_class = BaseResponse.setup_class
_authenticate = ActionAuthenticatorMixin._authenticate_and_authorize_action


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


BaseResponse.setup_class = setup_class
ActionAuthenticatorMixin._authenticate_and_authorize_action = authenticate

if __name__ == "__main__":
    sys.argv[0] = "moto_server"
    sys.exit(main())
