#!/usr/bin/env python3
"""moto_server with S3's conditional DeleteObjects: each <Object> of the request that carries an
<ETag> is deleted only while the key's current object has that ETag, as S3 evaluates If-Match per
key in a batch. A key whose ETag differs is a per-key <Error> with PreconditionFailed (a missing
one NoSuchKey) and stays; the others are deleted. moto 5.2.1 reads the element and ignores it,
so a test of lodge's batched delete against moto alone could not fail when the condition is
left out. Everything else is moto's own.

Importing this module installs the change (motosigned.py does, so every moto the tests start
has it); run as a script it is moto_server.

usage: motos3.py [moto_server arguments]
"""

import sys

import moto.server
import xmltodict
from moto.core.responses import ActionResult
from moto.s3.responses import S3Response

_delete_keys = S3Response._bucket_response_delete_keys


def _unquote(etag):
    return (etag or "").strip().strip('"')


def delete_keys(self, bucket_name, authenticated=True):
    if not authenticated:
        return _delete_keys(self, bucket_name, authenticated)
    body = xmltodict.parse(self.body, strip_whitespace=False)
    objects = body["Delete"].get("Object", [])
    if not isinstance(objects, list):
        objects = [objects]
    if not any("ETag" in o for o in objects):
        return _delete_keys(self, bucket_name, authenticated)
    deleted, errors = [], []
    for o in objects:
        key, version = o["Key"], o.get("VersionId")
        if "ETag" in o and not version:
            current = self.backend.get_object(bucket_name, key)
            if current is None:
                errors.append({"Key": key, "Code": "NoSuchKey", "Message": "The specified key does not exist."})
                continue
            if _unquote(current.etag) != _unquote(o["ETag"]):
                errors.append({"Key": key, "Code": "PreconditionFailed",
                               "Message": "At least one of the pre-conditions you specified did not hold"})
                continue
        _, headers = self.backend.delete_object(bucket_name, key, version_id=version)
        marker = (headers or {}).get("version-id") if not version else None
        deleted.append({"Key": key, "VersionId": version, "DeleteMarkerVersionId": marker,
                        "DeleteMarker": True if marker else None})
    self.data["Action"] = "DeleteObjects"
    return self.serialized(ActionResult({"Deleted": deleted, "Errors": errors}))


S3Response._bucket_response_delete_keys = delete_keys

if __name__ == "__main__":
    sys.argv[0] = "moto_server"
    sys.exit(moto.server.main())
