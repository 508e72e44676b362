#pragma once
// Set-up of the buckets and containers the store tests run in, and what they read behind a
// store's back (a blob's index tags): signed requests of the tests' own over the public
// signers (aws::sign_header, azure::authorization) and a curl transport, on the test servers'
// path-style endpoints (moto, s3rver, Azurite). lodge never makes these calls, so they live
// here, in lodge_testsupport, not in lodge_core.

#include <lodge/azure/client.hpp>
#include <lodge/error.hpp>
#include <lodge/s3/client.hpp>
#include <map>
#include <string>

namespace lodge::test {

// c.endpoint (a path-style endpoint), c.bucket, c.region, c.credentials.
Status create_bucket(const s3::ClientConfig &c);
Status set_versioning(const s3::ClientConfig &c, bool enabled);

// c.account (endpoint, name, key) and c.container. A missing container is deleted.
Status create_container(const azure::ClientConfig &c);
Status delete_container(const azure::ClientConfig &c);
// The blob's index tags (Get Blob Tags).
Result<std::map<std::string, std::string>> blob_tags(const azure::ClientConfig &c, const std::string &name);

} // namespace lodge::test
